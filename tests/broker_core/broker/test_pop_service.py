"""The 5.x broker's POP service writes the records a real 5.3.3 broker wrote (docs/rocketmq-5x.md
"POP consumption: confirmed"): checkpoints and acks through the timer topic into the revive topic,
changes of invisible time, and the revive into %RETRY%<group>_<topic>."""

from __future__ import annotations

import json

import pytest

from broker_core.broker.pop import PopService
from broker_core.broker.send import SendRequest
from broker_core.names import pop_retry_topic
from broker_core.store.pop import decode_pop_body, pop_stage

CLIENT_HOST = "10.0.0.9:50000"
REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"
WHEEL = "rmq_sys_wheel_timer"
BROKER_HOST = "10.0.0.1:10911"


def _publish(broker, sim, n=2, topic="PopTopic", queue_id=1):
    broker.create_topic(topic, 2)
    for i in range(n):
        props = {"TAGS": "t", "KEYS": f"pop-{i}", "WAIT": "true", "UNIQ_KEY": f"UK-{i}"}
        resp = broker.send_message(SendRequest(topic, queue_id, f"body {i}".encode(), props, born_ts=sim.now(),
                                               born_host=CLIENT_HOST))
        assert resp.ok, resp


def _records(broker, topic, queue_id=0):
    return broker.store.get_messages(topic, queue_id, 0, 1000)


def _all_revive(broker):
    return [r for q in range(8) for r in _records(broker, REVIVE, q)]


def test_a_pop_writes_one_checkpoint_through_the_timer_then_the_revive_topic(make_broker):
    """A pop of two records writes a ck record in rmq_sys_wheel_timer[0] (TAGS ck, the UNIQ_KEY
    shape, TIMER_DELIVER_MS = pop + invisible - 1000, REAL_TOPIC the revive topic) whose body is
    the checkpoint's fastjson in the real key order; the wheel puts it into the revive topic."""
    broker, sim, _ = make_broker(semantics="5.x")
    _publish(broker, sim)
    pt = sim.now()
    popped = broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    assert [p.record.queue_offset for p in popped] == [0, 1]
    assert broker.offsets.query("pop-group", "PopTopic", 1) == 2  # the offset moves when popped
    (timer,) = _records(broker, WHEEL)
    assert timer.properties["TAGS"] == "ck"
    assert timer.properties["UNIQ_KEY"] == f"PopTopic@1@0@pop-group@{pt}@broker-a@ck"
    assert timer.properties["TIMER_DELIVER_MS"] == str(pt + 5000 - 1000)
    assert timer.properties["TIMER_OUT_MS"] == str((pt + 4000) // 1000 * 1000 - (1000 if pt % 1000 == 0 else 0))
    assert (timer.properties["REAL_TOPIC"], timer.properties["REAL_QID"]) == (REVIVE, "0")
    assert timer.born_host == timer.store_host == BROKER_HOST
    assert timer.body == (b'{"bm":0,"bn":"broker-a","c":"pop-group","d":[0,1],"it":5000,"n":2,"pt":%d,"q":1,'
                          b'"reviveTime":%d,"ro":0,"so":0,"t":"PopTopic"}' % (pt, pt + 5000))
    assert pop_stage(timer.topic, timer.properties.get("REAL_TOPIC")) == "timer"
    ck = decode_pop_body("ck", timer.body, "here")
    assert (ck.group, ck.topic, ck.queue_id, ck.offsets, ck.invisible_ms, ck.revive_ts_ms) == (
        "pop-group", "PopTopic", 1, (0, 1), 5000, pt + 5000)
    assert _all_revive(broker) == []
    sim.run(until_ms=pt + 5000 + 200)
    (revived,) = _records(broker, REVIVE, 0)
    assert revived.body == timer.body and revived.properties["UNIQ_KEY"] == timer.properties["UNIQ_KEY"]
    assert "TIMER_ENQUEUE_MS" in revived.properties and "TIMER_DEQUEUE_MS" in revived.properties


def test_an_ack_goes_through_the_timer_until_the_checkpoints_revive_time_and_stops_the_revive(make_broker):
    """An ack of offset 1: TAGS ack, UNIQ_KEY with the acked offset and the checkpoint's pop time,
    TIMER_DELIVER_MS = pop + invisible, body {ao,bn,c,pt,q,so,t}; only the unacked offset 0 is
    revived."""
    broker, sim, _ = make_broker(semantics="5.x")
    _publish(broker, sim)
    pt = sim.now()
    popped = broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    sim.run(until_ms=pt + 100)
    broker.pop.ack(popped[1].checkpoint, 1)
    ack = _records(broker, WHEEL)[1]
    assert ack.properties["TAGS"] == "ack"
    assert ack.properties["UNIQ_KEY"] == f"PopTopic@1@1@pop-group@{pt}@broker-a@ack"
    assert ack.properties["TIMER_DELIVER_MS"] == str(pt + 5000)
    assert ack.body == b'{"ao":1,"bn":"broker-a","c":"pop-group","pt":%d,"q":1,"so":0,"t":"PopTopic"}' % pt
    decoded = decode_pop_body("ack", ack.body, "here")
    assert (decoded.offsets, decoded.pop_ts_ms, decoded.start_offset) == ((1,), pt, 0)
    sim.run(until_ms=pt + 5000 + 3000)
    assert sorted(r.properties["TAGS"] for r in _all_revive(broker)) == ["ack", "ck"]
    retries = _records(broker, pop_retry_topic("pop-group", "PopTopic"))
    assert [r.properties["UNIQ_KEY"] for r in retries] == ["UK-0"]


def test_a_revived_message_is_a_retry_record_with_the_brokers_host_and_first_pop_time(make_broker):
    """The revive: %RETRY%<group>_<topic>[0], 2 to 3 s after the revive time, the message's
    properties plus 1ST_POP_TIME, reconsume times + 1, born host = store host = the broker, no
    RETRY_TOPIC / ORIGIN_MESSAGE_ID / DELAY / REAL_TOPIC; a 1-queue topic in topics.json."""
    broker, sim, _ = make_broker(semantics="5.x")
    _publish(broker, sim, n=1)
    pt = sim.now()
    broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    retry_topic = "%RETRY%pop-group_PopTopic"
    sim.run(until_ms=pt + 5000 + 1999)
    assert _records(broker, retry_topic) == []
    sim.run(until_ms=pt + 5000 + 3000)
    (retry,) = _records(broker, retry_topic)
    original = _records(broker, "PopTopic", 1)[0]
    assert retry.properties["1ST_POP_TIME"] == str(pt)
    assert {k: v for k, v in retry.properties.items() if k != "1ST_POP_TIME"} == dict(original.properties)
    for absent in ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DELAY", "REAL_TOPIC", "RECONSUME_TIME"):
        assert absent not in retry.properties
    assert retry.reconsume_times == original.reconsume_times + 1 == 1
    assert retry.born_host == retry.store_host == BROKER_HOST != original.born_host
    assert retry.born_ts == original.born_ts and retry.body == original.body
    assert broker.topics.get(retry_topic).read_queue_nums == 1


def test_a_change_of_invisible_time_is_a_new_one_offset_checkpoint_then_an_ack_of_the_old(make_broker):
    """A failure: a checkpoint of the failed offset alone (so = the offset, d [0], n 1, pt = now,
    it = the delay), then an ack of the original checkpoint; the retry's 1ST_POP_TIME is the new
    checkpoint's pop time and is kept on the next retry, whose reconsume times is 2."""
    broker, sim, _ = make_broker(semantics="5.x")
    _publish(broker, sim)
    pt = sim.now()
    popped = broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    broker.pop.ack(popped[0].checkpoint, 0)
    sim.run(until_ms=pt + 134)
    changed_at = sim.now()
    new = broker.pop.change_invisible_time(popped[1].checkpoint, 1, 2000)
    ck2, ack = _records(broker, WHEEL)[2:4]
    assert ck2.properties["UNIQ_KEY"] == f"PopTopic@1@1@pop-group@{changed_at}@broker-a@ck"
    body = json.loads(ck2.body)
    assert (body["so"], body["d"], body["n"], body["pt"], body["it"]) == (1, [0], 1, changed_at, 2000)
    assert ck2.properties["TIMER_DELIVER_MS"] == str(changed_at + 2000 - 1000)
    assert ack.properties["UNIQ_KEY"] == f"PopTopic@1@1@pop-group@{pt}@broker-a@ack"
    assert (json.loads(ack.body)["ao"], json.loads(ack.body)["pt"]) == (1, pt)
    sim.run(until_ms=changed_at + 2000 + 3000)
    retry_topic = pop_retry_topic("pop-group", "PopTopic")
    (retry,) = _records(broker, retry_topic)
    assert retry.properties["UNIQ_KEY"] == "UK-1" and retry.properties["1ST_POP_TIME"] == str(new.pop_ts_ms)
    # The retry is popped from the retry topic and fails again: its retry keeps 1ST_POP_TIME.
    again = broker.pop.pop("pop-group", retry_topic, 0, 4, 5000)
    assert [p.record.queue_offset for p in again] == [0]
    broker.pop.change_invisible_time(again[0].checkpoint, 0, 2000)
    sim.run(until_ms=sim.now() + 2000 + 3000)
    second = _records(broker, retry_topic)[1]
    assert (second.reconsume_times, second.properties["1ST_POP_TIME"]) == (2, str(new.pop_ts_ms))
    assert broker.store.max_offset("%DLQ%pop-group", 0) == 0


def test_an_empty_pop_writes_nothing_and_revive_queues_follow_the_pop_count(make_broker):
    """A pop with nothing new writes no checkpoint but counts for the revive queue (ckMessageNumber)."""
    broker, sim, _ = make_broker(semantics="5.x")
    _publish(broker, sim, n=1)
    assert broker.pop.pop("pop-group", "PopTopic", 0, 4, 5000) == []
    (p,) = broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    assert p.checkpoint.revive_qid == 1
    assert _records(broker, WHEEL)[0].properties["REAL_QID"] == "1"


def test_a_4_9_broker_has_no_pop_service(make_broker):
    """RocketMQ 4.9.4 has no POP: the broker has no service and one cannot be built on it."""
    broker, _, _ = make_broker()
    assert broker.pop is None
    with pytest.raises(AssertionError):
        PopService(broker)


def test_the_same_seed_writes_the_same_pop_records(make_broker):
    """The revive latency comes from the broker's seeded stream: two brokers, same seed, same bytes."""
    stores = []
    for name in ("one", "two"):
        broker, sim, _ = make_broker(name, semantics="5.x")
        _publish(broker, sim, n=3)
        popped = broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
        broker.pop.change_invisible_time(popped[2].checkpoint, 2, 2000)
        sim.run(until_ms=sim.now() + 10_000)
        retry = _records(broker, pop_retry_topic("pop-group", "PopTopic"))
        stores.append([(r.store_ts, r.properties.get("UNIQ_KEY"), r.body) for r in retry + _all_revive(broker)])
    assert stores[0] == stores[1] and len(stores[0]) > 3


def test_an_ack_after_the_revive_time_goes_straight_to_the_revive_topic(make_broker):
    """A client that acks after its checkpoint's revive time: the ack's deliver time is past, so
    the timer hook stores it in the revive topic at once (no timer copy); the retry was written."""
    broker, sim, _ = make_broker(semantics="5.x")
    _publish(broker, sim, n=1)
    pt = sim.now()
    (p,) = broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    sim.run(until_ms=pt + 9000)
    broker.pop.ack(p.checkpoint, 0)
    assert [r.properties["TAGS"] for r in _records(broker, WHEEL)] == ["ck"]
    assert sorted(r.properties["TAGS"] for r in _all_revive(broker)) == ["ack", "ck"]
    assert len(_records(broker, pop_retry_topic("pop-group", "PopTopic"))) == 1


@pytest.mark.parametrize(("semantics", "expected"), [
    ("5.x", ["TRACE_ON", "MSG_REGION", "KEYS", "UNIQ_KEY", "CLUSTER", "1ST_POP_TIME", "WAIT", "TAGS"]),
    ("5.4", ["ORIGIN_GROUP", "TRACE_ON", "MSG_REGION", "KEYS", "UNIQ_KEY", "CLUSTER", "1ST_POP_TIME", "WAIT",
             "TAGS"]),
])
def test_a_revived_records_properties_are_in_the_order_a_real_broker_wrote(make_broker, semantics, expected):
    """reviveRetry builds the retry's properties in a new default HashMap (setTags, then putAll of
    the popped record's, then 1ST_POP_TIME, then on 5.4+ ORIGIN_GROUP), so their order is not the
    popped record's. The orders below are what real 5.3.3 and 5.5.1 brokers wrote for their
    clients' message with these properties (`retry-audit conformance --scenario
    scenarios/conformance-pop.yaml`); the model once kept the popped record's order."""
    broker, sim, _ = make_broker(semantics=semantics)
    broker.create_topic("PopTopic", 2)
    props = {"MSG_REGION": "DefaultRegion", "UNIQ_KEY": "0A0001014C8C3709DA29000000960003",
             "CLUSTER": "DefaultCluster", "TAGS": "pop", "KEYS": "p0-3", "WAIT": "true", "TRACE_ON": "true"}
    assert broker.send_message(SendRequest("PopTopic", 1, b"body", props, born_ts=sim.now(),
                                           born_host=CLIENT_HOST)).ok
    pt = sim.now()
    broker.pop.pop("pop-group", "PopTopic", 1, 4, 5000)
    sim.run(until_ms=pt + 5000 + 3000)
    (retry,) = _records(broker, "%RETRY%pop-group_PopTopic")
    assert list(retry.properties) == expected
    assert retry.properties.get("ORIGIN_GROUP") == ("pop-group" if semantics == "5.4" else None)
