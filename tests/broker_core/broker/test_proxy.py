"""The 5.x proxy's dead-lettering of a popped retry writes the DLQ record a real 5.3.3 broker and
proxy wrote (docs/rocketmq-5x.md "gRPC consumer through the proxy: confirmed"), then acks it."""

from __future__ import annotations

import json

from broker_core.broker import proxy
from broker_core.broker.send import SendRequest
from broker_core.names import dlq_topic, pop_retry_topic

CLIENT_HOST = "10.0.0.9:50000"
BROKER_HOST = "10.0.0.1:10911"
WHEEL = "rmq_sys_wheel_timer"
GROUP = "grpc-group"
TOPIC = "GrpcTopic"


def _records(broker, topic, queue_id=0):
    return broker.store.get_messages(topic, queue_id, 0, 1000)


def _retry_popped(broker, sim):
    """One message, popped and not acked, revived once, then its retry popped: (popped, its time)."""
    broker.create_topic(TOPIC, 1)
    props = {"TAGS": "t", "KEYS": "grpc-3", "WAIT": "true", "UNIQ_KEY": "UK-3"}
    assert broker.send_message(SendRequest(TOPIC, 0, b"body", props, born_ts=sim.now(), born_host=CLIENT_HOST)).ok
    pt = sim.now()
    broker.pop.pop(GROUP, TOPIC, 0, 16, 5000)
    sim.run(until_ms=pt + 5000 + 3000)
    (popped,) = broker.pop.pop(GROUP, pop_retry_topic(GROUP, TOPIC), 0, 16, 5000)
    return popped, pt


def test_the_proxys_filter_is_reconsume_times_at_retry_max_times_plus_one():
    """maxAttempts is retryMaxTimes + 1, and a record at or past it goes to the DLQ."""

    class Rec:
        def __init__(self, reconsume_times):
            self.reconsume_times = reconsume_times

    assert proxy.max_attempts(2) == 3
    assert [proxy.goes_to_dlq(Rec(rt), 2) for rt in (0, 1, 2, 3, 4)] == [False, False, False, True, True]
    assert proxy.goes_to_dlq(Rec(1), 0)


def test_the_dlq_record_has_the_properties_the_real_proxy_left(make_broker):
    """%DLQ%<group>[0]: reconsume times + 1, RETRY_TOPIC = the POP retry topic, ORIGIN_MESSAGE_ID =
    the retry record's offset msgId, UNIQ_KEY/KEYS/TAGS/1ST_POP_TIME kept, DELAY=0, WAIT=false, born
    host the retry's (the broker); no REAL_TOPIC, MAX_RECONSUME_TIMES or RECONSUME_TIME; a 1-queue,
    perm 6 topic."""
    broker, sim, _ = make_broker(semantics="5.x")
    popped, pt = _retry_popped(broker, sim)
    retry = popped.record
    assert retry.reconsume_times == 1
    assert proxy.forward_to_dlq(broker, popped, GROUP)
    (dlq,) = _records(broker, dlq_topic(GROUP))
    assert dlq.reconsume_times == retry.reconsume_times + 1 == 2
    assert dlq.properties["RETRY_TOPIC"] == pop_retry_topic(GROUP, TOPIC) == retry.topic
    assert dlq.properties["ORIGIN_MESSAGE_ID"] == retry.msg_id
    for kept in ("UNIQ_KEY", "KEYS", "TAGS", "1ST_POP_TIME"):
        assert dlq.properties[kept] == retry.properties[kept], kept
    assert retry.properties["1ST_POP_TIME"] == str(pt)
    assert (dlq.properties["DELAY"], dlq.properties["WAIT"]) == ("0", "false")
    for absent in ("REAL_TOPIC", "REAL_QID", "MAX_RECONSUME_TIMES", "RECONSUME_TIME"):
        assert absent not in dlq.properties, absent
    assert dlq.born_host == retry.born_host == BROKER_HOST == dlq.store_host
    assert dlq.born_ts == retry.born_ts and dlq.body == retry.body
    cfg = broker.topics.get(dlq_topic(GROUP))
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (1, 1, 6)


def test_the_proxy_acks_the_dead_lettered_records_checkpoint_after_the_dlq_record(make_broker):
    """After the DLQ record, an ack of that offset of the retry's checkpoint (timer first, deliver
    time = its pop + invisible time); the revive service then writes no further retry."""
    broker, sim, _ = make_broker(semantics="5.x")
    popped, _ = _retry_popped(broker, sim)
    ck = popped.checkpoint
    assert proxy.forward_to_dlq(broker, popped, GROUP)
    (dlq,) = _records(broker, dlq_topic(GROUP))
    ack = _records(broker, WHEEL)[-1]
    assert ack.properties["TAGS"] == "ack" and ack.phys_offset > dlq.phys_offset
    assert ack.properties["TIMER_DELIVER_MS"] == str(ck.revive_ts_ms)
    assert json.loads(ack.body)["t"] == pop_retry_topic(GROUP, TOPIC)
    assert ck.acked == {popped.record.queue_offset}
    sim.run(until_ms=ck.revive_ts_ms + 5000)
    assert len(_records(broker, pop_retry_topic(GROUP, TOPIC))) == 1
