"""CONSUMER_SEND_MSG_BACK (§5.2, 4.9.4): retry levels, the DLQ, stable pointers, status mapping."""

from __future__ import annotations

import pytest

from broker_core.broker import codes
from broker_core.broker.send import SendRequest
from broker_core.constants import SCHEDULE_TOPIC
from broker_core.errors import StoreStateError
from broker_core.names import dlq_topic, retry_topic

GROUP = "order-service"
RETRY = retry_topic(GROUP)
DLQ = dlq_topic(GROUP)
DAY_MS = 24 * 3_600_000


def rows_of(rows: list[tuple[str, dict]], table: str) -> list[dict]:
    return [row for t, row in rows if t == table]


def _publish(broker, sim, topic="OrderTopic", key="order-1"):
    broker.create_topic(topic, 4)
    resp = broker.send_message(SendRequest(
        topic, 2, b"order body", {"TAGS": "TagA", "KEYS": key, "WAIT": "true", "UNIQ_KEY": "UK-" + key},
        born_ts=sim.now(), born_host="192.168.0.10:50000"))
    assert resp.ok, resp
    return resp


def _retry_record_after(broker, sim, before: int):
    """Run until a new record lands in the retry queue; return it."""
    sim.run(stop=lambda: broker.store.max_offset(RETRY, 0) > before)
    return broker.pull_message(GROUP, RETRY, 0, before, 1).records[0]


def test_send_back_with_max_reconsume_times_header(make_broker):
    """{maxReconsumeTimes=3, delayLevel=4, offset} -> SUCCESS, parked at level 4 for %RETRY%group."""
    broker, sim, _ = make_broker()
    sent = _publish(broker, sim)
    resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 4, max_reconsume_times=3)
    assert resp.code == codes.SUCCESS
    assert (resp.topic, resp.queue_id) == (SCHEDULE_TOPIC, 3)
    stored = broker.store.look_message_by_offset(resp.phys_offset)
    assert stored.properties["REAL_TOPIC"] == RETRY and stored.properties["DELAY"] == "4"
    assert stored.reconsume_times == 1
    assert broker.topic_queue_count(RETRY) == 1


@pytest.mark.parametrize("status, code", [
    ("PUT_OK", 0), ("FLUSH_DISK_TIMEOUT", 10), ("MESSAGE_ILLEGAL", 13),
    ("CREATE_MAPEDFILE_FAILED", 1), ("FLUSH_SLAVE_TIMEOUT", 12), ("OS_PAGECACHE_BUSY", 1),
    ("PROPERTIES_SIZE_EXCEEDED", 13), ("SERVICE_NOT_AVAILABLE", 14), ("SLAVE_NOT_AVAILABLE", 11),
    ("UNKNOWN_ERROR", 1)])
def test_put_status_maps_to_response_code(status, code):
    """A store put status maps to SendMessageProcessorTest's response code."""
    assert codes.put_status_response(status)[0] == code


def test_send_back_failure_is_system_error_named_by_status(make_broker):
    """A failed send-back put answers SYSTEM_ERROR with the put status as the remark."""
    broker, sim, _ = make_broker()
    sent = _publish(broker, sim)
    broker.put_failure_probability = 1.0
    resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 0)
    assert (resp.code, resp.remark) == (codes.SYSTEM_ERROR, "OS_PAGECACHE_BUSY")
    assert broker.store.max_offset(SCHEDULE_TOPIC, 2) == 0


def test_seventeen_failures_walk_every_level_then_the_dlq(make_broker):
    """Under the default max, send-backs walk levels 3..18 with their delays, then land in %DLQ% with DELAY=0."""
    broker, sim, rows = make_broker()
    sent = _publish(broker, sim)
    phys = sent.phys_offset
    first = broker.store.look_message_by_offset(phys)
    seen_levels, hop_delays = [], []
    for attempt in range(17):
        before = broker.store.max_offset(RETRY, 0)
        sent_at = sim.now()
        resp = broker.consumer_send_msg_back(phys, GROUP, 0)
        assert resp.ok, resp
        if attempt == 16:
            assert (resp.topic, resp.queue_id) == (DLQ, 0)
            break
        assert resp.topic == SCHEDULE_TOPIC
        record = _retry_record_after(broker, sim, before)
        seen_levels.append(int(record.properties["DELAY"]))
        hop_delays.append(record.store_ts - sent_at)
        assert record.reconsume_times == attempt + 1
        # The pointers a lineage needs never change over the hops.
        assert record.properties["RETRY_TOPIC"] == "OrderTopic"
        assert record.properties["ORIGIN_MESSAGE_ID"] == first.msg_id
        assert record.properties["UNIQ_KEY"] == first.uniq_key
        phys = record.phys_offset
    assert seen_levels == list(range(3, 19))
    for level, delay in zip(seen_levels, hop_delays, strict=True):
        # A level is polled every 100 ms (DELAY_FOR_A_WHILE), so a delivery is at most that late.
        assert broker.levels_ms[level - 1] <= delay < broker.levels_ms[level - 1] + 100
    dead = broker.pull_message(GROUP, DLQ, 0, 0, 32).records
    assert len(dead) == 1
    assert dead[0].properties["DELAY"] == "0" and dead[0].reconsume_times == 17
    assert dead[0].properties["ORIGIN_MESSAGE_ID"] == first.msg_id
    # 4.9.4 leaves the stale REAL_* of the last retry hop on the DLQ copy.
    assert dead[0].properties["REAL_TOPIC"] == RETRY
    assert len(rows_of(rows, "schedule_deliveries")) == 16
    assert broker.topic_queue_count(DLQ) == 1 and broker.topics.get(DLQ).perm == 6


def test_negative_delay_level_goes_straight_to_the_dlq(make_broker):
    """delayLevel < 0 sends the message to %DLQ%group at once, whatever its reconsume times."""
    broker, sim, _ = make_broker()
    sent = _publish(broker, sim)
    resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, -1)
    assert resp.ok and resp.topic == DLQ
    assert broker.store.look_message_by_offset(resp.phys_offset).reconsume_times == 1


def test_zero_retry_queues_drop_the_message(make_broker):
    """retryQueueNums <= 0 answers SUCCESS and stores nothing."""
    broker, sim, _ = make_broker()
    sent = _publish(broker, sim)
    group = broker.subscription_group(GROUP)
    group.retry_queue_nums = 0
    broker.groups.update(group)
    end = broker.store.max_phys_offset
    resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 0)
    assert resp.code == codes.SUCCESS and resp.msg_id is None
    assert broker.store.max_phys_offset == end


def test_unknown_offset_is_a_system_error(make_broker):
    """An offset where no message is stored answers SYSTEM_ERROR "look message by offset failed"."""
    broker, sim, _ = make_broker()
    _publish(broker, sim)
    resp = broker.consumer_send_msg_back(10**9, GROUP, 0)
    assert resp.code == codes.SYSTEM_ERROR and resp.remark.startswith("look message by offset failed")


def test_retry_queue_is_drawn_from_the_seeded_stream(make_broker):
    """With several retry queues the queue id is random but in range and the same for the same seed."""
    picks = []
    for name in ("one", "two"):
        broker, sim, _ = make_broker(name)
        group = broker.subscription_group(GROUP)
        group.retry_queue_nums = 4
        broker.groups.update(group)
        sent = _publish(broker, sim)
        ids = []
        for _ in range(12):
            resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 1)
            record = broker.store.look_message_by_offset(resp.phys_offset)
            ids.append(int(record.properties["REAL_QID"]))
        picks.append(ids)
        assert broker.topic_queue_count(RETRY) == 4
    assert picks[0] == picks[1]
    assert set(picks[0]) <= {0, 1, 2, 3} and len(set(picks[0])) > 1


def test_no_subscription_group_without_auto_create(make_broker):
    """With auto-creation off, an unknown group answers SUBSCRIPTION_GROUP_NOT_EXIST."""
    broker, sim, _ = make_broker(auto_create_subscription_group=False)
    sent = _publish(broker, sim)
    resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 0)
    assert resp.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST


def test_send_back_on_a_stopped_broker(make_broker):
    """A broker that is down refuses the request (a connection error), then serves it after restart."""
    broker, sim, _ = make_broker(flush="sync")
    sent = _publish(broker, sim)
    broker.crash()
    with pytest.raises(StoreStateError):
        broker.consumer_send_msg_back(sent.phys_offset, GROUP, 0)
    broker.start()
    assert broker.consumer_send_msg_back(sent.phys_offset, GROUP, 0).ok
    sim.run(until_ms=sim.now() + DAY_MS)
    assert broker.store.max_offset(RETRY, 0) == 1


def test_async_flush_crash_loses_only_the_unflushed_tail(make_broker):
    """With async flush a message survives a crash once the 10 s thorough flush ran, not before."""
    broker, sim, _ = make_broker()
    _publish(broker, sim, key="flushed")
    sim.run(until_ms=sim.now() + 10_500)
    _publish(broker, sim, key="unflushed")
    broker.crash()
    broker.start()
    kept = [r.properties["KEYS"] for r in broker.pull_message(GROUP, "OrderTopic", 2, 0, 32).records]
    assert kept == ["flushed"]
