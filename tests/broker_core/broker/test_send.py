"""SEND_MESSAGE (asyncSendMessage 4.9.4): checks and remarks, stored properties, handleRetryAndDLQ."""

from __future__ import annotations

from broker_core.broker import codes
from broker_core.broker.send import SendRequest, client_wire_properties
from broker_core.constants import SCHEDULE_TOPIC
from broker_core.names import dlq_topic, retry_topic

GROUP = "pay-service"
HOUR_MS = 3_600_000


def _req(topic="T", queue_id=0, **props):
    base = {"TAGS": "TagA", "KEYS": "k1", "WAIT": "true", "UNIQ_KEY": "UK1"}
    base.update(props)
    return SendRequest(topic, queue_id, b"body", base, born_ts=1, born_host="192.168.0.10:50000")


def test_stored_properties_add_cluster_and_drop_wait(make_broker):
    """The stored string gains CLUSTER and loses WAIT, in Java HashMap order (as the fixture shows)."""
    broker, _sim, _ = make_broker()
    broker.create_topic("T", 1)
    resp = broker.send_message(_req())
    assert resp.ok and (resp.topic, resp.queue_id, resp.queue_offset) == ("T", 0, 0)
    record = broker.store.look_message_by_offset(resp.phys_offset)
    assert list(record.properties.items()) == [
        ("KEYS", "k1"), ("UNIQ_KEY", "UK1"), ("CLUSTER", "DefaultCluster"), ("TAGS", "TagA")]
    assert resp.msg_id == record.msg_id


def test_client_wire_order_is_java_hash_map_order():
    """A client map built TAGS, KEYS, WAIT, UNIQ_KEY goes on the wire in HashMap order."""
    wire = client_wire_properties({"TAGS": "A", "KEYS": "k", "WAIT": "true", "UNIQ_KEY": "U"})
    assert [p.split("\x01")[0] for p in wire.split("\x02")] == ["KEYS", "UNIQ_KEY", "WAIT", "TAGS"]


def test_delayed_send_keeps_wait_in_the_schedule_copy(make_broker):
    """A DELAY send is parked in SCHEDULE_TOPIC_XXXX and its string keeps WAIT=true (re-serialized map)."""
    broker, _sim, _ = make_broker()
    broker.create_topic("T", 4)
    resp = broker.send_message(_req(queue_id=3, DELAY="2"))
    assert (resp.topic, resp.queue_id) == (SCHEDULE_TOPIC, 1)
    props = broker.store.look_message_by_offset(resp.phys_offset).properties
    assert props["WAIT"] == "true" and props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "3"


def test_invalid_topic_names_are_system_errors(make_broker):
    """Blank, illegal and too-long topic names answer SYSTEM_ERROR with RocketMQ's remarks."""
    broker, _sim, _ = make_broker()
    blank = broker.send_message(_req(topic=" "))
    assert (blank.code, blank.remark) == (codes.SYSTEM_ERROR, "The specified topic is blank.")
    illegal = broker.send_message(_req(topic="TOPIC&*^"))
    assert illegal.code == codes.SYSTEM_ERROR and "contains illegal characters" in illegal.remark
    long = broker.send_message(_req(topic="t" * 128))
    assert long.code == codes.SYSTEM_ERROR and "longer than topic max length" in long.remark
    assert broker.store.max_phys_offset == 0


def test_not_allowed_send_topics_are_forbidden(make_broker):
    """Sending to SCHEDULE_TOPIC_XXXX (and the other system-only topics) answers NO_PERMISSION."""
    broker, _sim, _ = make_broker()
    resp = broker.send_message(_req(topic=SCHEDULE_TOPIC))
    assert (resp.code, resp.remark) == (codes.NO_PERMISSION,
                                        f"Sending message to topic[{SCHEDULE_TOPIC}] is forbidden.")


def test_topic_auto_creation(make_broker):
    """A new topic is created from TBW102 with the client's 4 queues; without auto-create it does not exist."""
    broker, _sim, _ = make_broker()
    assert broker.send_message(_req(topic="NewTopic")).ok
    assert broker.topic_queue_count("NewTopic") == 4
    strict, _sim2, _ = make_broker("strict", auto_create_topic=False)
    resp = strict.send_message(_req(topic="NewTopic"))
    assert resp.code == codes.TOPIC_NOT_EXIST
    # A %RETRY% topic is still created, with one queue.
    assert strict.send_message(_req(topic=retry_topic(GROUP))).ok
    assert strict.topic_queue_count(retry_topic(GROUP)) == 1


def test_queue_id_out_of_range(make_broker):
    """A queue id >= max(read, write) queues answers SYSTEM_ERROR; a negative one picks a queue."""
    broker, _sim, _ = make_broker()
    broker.create_topic("T", 2)
    resp = broker.send_message(_req(queue_id=2))
    assert resp.code == codes.SYSTEM_ERROR and resp.remark.startswith("request queueId[2] is illegal")
    picked = broker.send_message(_req(queue_id=-1))
    assert picked.ok and picked.queue_id in (0, 1)


def test_put_failure_knob(make_broker):
    """With put_failure_probability 1 every send fails with SYSTEM_ERROR and nothing is stored."""
    broker, _sim, _ = make_broker()
    broker.create_topic("T", 1)
    broker.put_failure_probability = 1.0
    resp = broker.send_message(_req())
    assert resp.code == codes.SYSTEM_ERROR and resp.msg_id is None
    assert broker.store.max_phys_offset == 0


def test_retry_topic_send_below_max_stays_in_retry(make_broker):
    """A client send to %RETRY%group with reconsumeTimes < max is stored there with its reconsume times."""
    broker, _sim, _ = make_broker()
    req = _req(topic=retry_topic(GROUP), RETRY_TOPIC="PayTopic")
    req.reconsume_times, req.max_reconsume_times = 2, 16
    resp = broker.send_message(req)
    assert resp.ok and resp.topic == retry_topic(GROUP)
    assert broker.store.look_message_by_offset(resp.phys_offset).reconsume_times == 2


def test_retry_topic_send_at_max_goes_to_dlq_through_the_schedule(make_broker):
    """4.9.4: reconsumeTimes >= max diverts to %DLQ%group, but a client DELAY parks it in the schedule first."""
    broker, sim, rows = make_broker()
    req = _req(topic=retry_topic(GROUP), DELAY="3", RETRY_TOPIC="PayTopic")
    req.reconsume_times, req.max_reconsume_times = 16, 16
    resp = broker.send_message(req)
    assert resp.ok and resp.topic == SCHEDULE_TOPIC
    parked = broker.store.look_message_by_offset(resp.phys_offset)
    assert parked.properties["REAL_TOPIC"] == dlq_topic(GROUP) and parked.properties["DELAY"] == "3"
    sim.run(until_ms=sim.now() + HOUR_MS)
    dead = broker.pull_message(GROUP, dlq_topic(GROUP), 0, 0, 32)
    assert dead.status == "FOUND" and dead.records[0].reconsume_times == 16
    assert [t for t, _ in rows].count("schedule_deliveries") == 1


def test_pull_statuses(make_broker):
    """Pull answers NO_NEW_MSG at the end, FOUND inside, OFFSET_ILLEGAL beyond the end."""
    broker, _sim, _ = make_broker()
    broker.create_topic("T", 1)
    for _ in range(3):
        broker.send_message(_req())
    found = broker.pull_message("g", "T", 0, 1, 32)
    assert found.status == "FOUND" and found.next_begin_offset == 3 and len(found.records) == 2
    assert [r.queue_offset for r in found.records] == [1, 2]
    assert broker.pull_message("g", "T", 0, 3, 32).status == "NO_NEW_MSG"
    beyond = broker.pull_message("g", "T", 0, 9, 32)
    assert beyond.status == "OFFSET_ILLEGAL" and beyond.next_begin_offset == 0
    assert broker.pull_message("g", "Empty", 0, 0, 32).status == "NO_NEW_MSG"


def test_message_arrival_listeners(make_broker):
    """on_message_arrival callbacks hear every stored message with its stored topic and queue."""
    broker, sim, _ = make_broker()
    broker.create_topic("T", 1)
    heard = []
    broker.on_message_arrival(lambda topic, queue_id: heard.append((topic, queue_id)))
    broker.send_message(_req())
    broker.send_message(_req(DELAY="1"))
    sim.run(until_ms=sim.now() + 5000)
    assert heard == [("T", 0), (SCHEDULE_TOPIC, 0), ("T", 0)]


def test_oversized_body_is_message_illegal(make_broker):
    """A body over maxMessageSize (4 MiB) is refused by the store and answered MESSAGE_ILLEGAL (13)."""
    broker, _sim, _ = make_broker(commitlog_file_size_bytes=16 * 1024 * 1024)
    broker.create_topic("T", 1)
    req = _req()
    req.body = b"x" * (4 * 1024 * 1024 + 1)
    resp = broker.send_message(req)
    assert resp.code == codes.MESSAGE_ILLEGAL and resp.msg_id is None
    assert broker.store.max_phys_offset == 0
