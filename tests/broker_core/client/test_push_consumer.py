"""Push consumer: acks, send-back and its fallbacks, local retries, broadcasting, DLQ, timeouts."""

from itertools import pairwise

import pytest

from broker_core.client.behavior import Behavior
from broker_core.client.push_consumer import LONG_POLL_SUSPEND_MS

BODY = b"payload"
SETTLE_MS = 30_000  # enough virtual time for pulls, consumes and offset persists to settle
LEVEL_3_DELAY_MS = 10_000  # the first retry's delay (level 3 = 10 s)


def _by_key(rows, key):
    return sorted((r for r in rows if r["uniq_key"] == key), key=lambda r: r["start_ts"])


def test_every_message_is_acked_once(rig):
    """A healthy group consumes every message exactly once and commits each queue to its end."""
    g = rig.group(consumers=2)
    p = rig.producer()
    keys = [p.send("T", BODY) for _ in range(40)]
    rig.run_for(SETTLE_MS)
    rows = rig.recorder.attempts(group="G")
    assert sorted(r["uniq_key"] for r in rows) == sorted(keys)
    assert {r["outcome"] for r in rows} == {"ACKED"} and {r["status"] for r in rows} == {"CONSUME_SUCCESS"}
    assert g.idle()
    for q in range(4):
        assert rig.broker.query_consumer_offset("G", "T", q) == len(rig.records("T", q))


def test_idle_consumer_does_not_busy_poll(rig):
    """With nothing to read a consumer's pulls are held by the broker: one pull per queue per 15 s."""
    g = rig.group(consumers=1)
    rig.run_for(LONG_POLL_SUSPEND_MS * 4)
    events_per_minute = rig.sim.events_run
    queues = len(g.consumers[0].assigned())  # 4 + the retry queue
    # Pulls (1 + 4 per queue), persist ticks (11), rebalance ticks (3): far below a busy loop.
    assert events_per_minute < queues * 6 + 20


def test_failure_is_sent_back_and_redelivered_from_the_retry_topic(rig):
    """RECONSUME_LATER sends the message back; it returns 10 s later via %RETRY%G with reconsume 1."""
    g = rig.group(behavior=Behavior(fail_probability=1.0))
    key = rig.producer().send("T", BODY)
    rig.run_for(LEVEL_3_DELAY_MS - 2000)  # the first attempt failed, the copy is still delayed
    g.behavior.fail_probability = 0.0
    rig.run_for(SETTLE_MS)
    rows = _by_key(rig.recorder.attempts(group="G"), key)
    assert [(r["queue_topic"], r["topic"], r["reconsume_times"], r["outcome"]) for r in rows] == [
        ("T", "T", 0, "SENT_BACK"), ("%RETRY%G", "T", 1, "ACKED")]
    assert rows[1]["start_ts"] - rows[0]["end_ts"] >= LEVEL_3_DELAY_MS
    assert g.idle()


@pytest.mark.parametrize("semantics", ["4.9", "5.x", "5.4"])
def test_send_back_failure_falls_back_to_the_client_send(rig, semantics):
    """When CONSUMER_SEND_MSG_BACK fails the client itself sends the copy to %RETRY%G; up to 5.3
    it carries no ORIGIN_MESSAGE_ID, from 5.4 the message's msgId (its UNIQ_KEY)."""
    g = rig.group(behavior=Behavior(fail_probability=1.0))
    g.send_back_failure_probability = 1.0
    key = rig.producer().send("T", BODY)
    rig.run_for(1000)
    g.behavior.fail_probability = 0.0
    rig.run_for(SETTLE_MS)
    rows = _by_key(rig.recorder.attempts(group="G"), key)
    assert [(r["reconsume_times"], r["outcome"]) for r in rows] == [
        (0, "SENT_BACK_BY_CLIENT"), (1, "ACKED")]
    retry = [r for r in rig.records("%RETRY%G") if r.uniq_key == key]
    assert len(retry) == 1
    props = retry[0].properties
    assert props["RETRY_TOPIC"] == "T" and props["RECONSUME_TIME"] == "1"
    assert props["MAX_RECONSUME_TIMES"] == "16"  # RocketMQ's default maxReconsumeTimes
    # The 4.9.4 to 5.3 client replaces the copy's properties after setting ORIGIN_MESSAGE_ID, so a
    # first client-side send-back has none: what real 4.9.4 and 5.3.3 clients and brokers wrote
    # (scenarios/conformance.yaml); a 5.5.0 client's copy carried it.
    assert props.get("ORIGIN_MESSAGE_ID") == (key if semantics == "5.4" else None)
    assert retry[0].reconsume_times == 1


def test_both_send_backs_failing_retry_locally_after_5s(rig):
    """Send-back and fallback both failing: LOCAL_RETRY, re-run 5 s later with reconsume_times + 1."""
    g = rig.group(behavior=Behavior(fail_probability=1.0))
    g.send_back_failure_probability = 1.0
    g.fallback_failure_probability = 1.0
    key = rig.producer().send("T", BODY)
    rig.run_for(5000 * 2 + 1000)
    rows = _by_key(rig.recorder.attempts(group="G"), key)
    assert [(r["reconsume_times"], r["outcome"], r["queue_topic"]) for r in rows] == [
        (0, "LOCAL_RETRY", "T"), (1, "LOCAL_RETRY", "T"), (2, "LOCAL_RETRY", "T")]
    assert rows[1]["start_ts"] - rows[0]["end_ts"] == 5000  # submitConsumeRequestLater: 5 s
    assert not g.idle()  # the message still holds its queue's offset
    g.behavior.fail_probability = 0.0
    rig.run_for(SETTLE_MS)
    assert _by_key(rig.recorder.attempts(group="G"), key)[-1]["outcome"] == "ACKED"
    assert rig.records("%RETRY%G") == []
    assert g.idle()


def test_broadcasting_drops_failures(rig):
    """Broadcasting: every consumer gets every message once, and a failure is dropped, not retried."""
    g = rig.group(model="BROADCASTING", consumers=2, behavior=Behavior(fail_probability=1.0))
    keys = [rig.producer().send("T", BODY) for _ in range(6)]
    rig.run_for(SETTLE_MS)
    rows = rig.recorder.attempts(group="G")
    assert sorted((r["consumer_id"], r["uniq_key"]) for r in rows) == sorted(
        (c, k) for c in ("G-c0", "G-c1") for k in keys)
    assert {r["outcome"] for r in rows} == {"DROPPED"}
    assert {r["model"] for r in rows} == {"BROADCASTING"}
    assert rig.broker.topic_queue_count("%RETRY%G") == 0
    assert g.idle()


def test_always_failing_message_goes_through_16_retries_to_the_dlq(rig):
    """A message that always fails is delivered 17 times (reconsume 0..16), then lands in %DLQ%G."""
    g = rig.group(behavior=Behavior(fail_probability=1.0))
    key = rig.producer().send("T", BODY)
    rig.run_for(5 * 3600_000)
    rows = _by_key(rig.recorder.attempts(group="G"), key)
    assert [r["reconsume_times"] for r in rows] == list(range(17))
    assert {r["outcome"] for r in rows} == {"SENT_BACK"}
    assert [r["queue_topic"] for r in rows] == ["T"] + ["%RETRY%G"] * 16
    dlq = rig.records("%DLQ%G")
    assert [r.uniq_key for r in dlq] == [key] and dlq[0].reconsume_times == 17
    # Each retry waits its level (3 + reconsume times): 10 s for the first, 2 h for the last.
    gaps = [b["start_ts"] - a["end_ts"] for a, b in pairwise(rows)]
    assert gaps[0] >= 10_000 and gaps[-1] >= 7_200_000
    assert g.idle()


def test_consume_timeout_sends_the_message_back_and_frees_the_offset(rig):
    """A hung delivery is sent back at level 3 by cleanExpiredMsg (EXPIRED) and its offset moves on."""
    timeout = 60_000
    g = rig.group(behavior=Behavior(hang_probability=1.0), consume_timeout_ms=timeout)
    p = rig.producer()
    key = p.send("T", BODY)
    rig.run_for(1000)
    g.behavior.hang_probability = 0.0
    rig.run_for(4 * timeout)
    rows = _by_key(rig.recorder.attempts(group="G"), key)
    assert rows[0]["outcome"] == "EXPIRED" and rows[0]["end_ts"] - rows[0]["start_ts"] > 2 * timeout
    assert [(r["queue_topic"], r["reconsume_times"], r["outcome"]) for r in rows[1:]] == [
        ("%RETRY%G", 1, "ACKED")]
    assert g.idle()


def test_thread_pool_bounds_concurrent_deliveries(rig):
    """At most consume_thread_max deliveries of one consumer overlap in time."""
    rig.group(behavior=Behavior(consume_time_ms=100), consume_thread_max=3)
    p = rig.producer()
    for _ in range(20):
        p.send("T", BODY)
    rig.run_for(SETTLE_MS)
    rows = rig.recorder.attempts(group="G")
    assert len(rows) == 20
    points = sorted([(r["start_ts"], 1) for r in rows] + [(r["end_ts"], -1) for r in rows])
    running = peak = 0
    for _, step in points:
        running += step
        peak = max(peak, running)
    assert peak == 3


def test_offset_beyond_the_queue_end_is_corrected_after_10s(rig):
    """A committed offset past the queue's end (a lost tail) is reset to the broker's suggestion 10 s later."""
    p = rig.producer()
    keys = [p.send_properties("T", BODY, {"UNIQ_KEY": f"K{i}"}) for i in range(3)]
    queue = keys[0].queue_id
    rig.broker.update_consumer_offset("G", "T", queue, 50)
    start = rig.sim.now()
    g = rig.group()
    rig.run_for(SETTLE_MS + 20_000)
    rows = rig.recorder.attempts(group="G", queue_id=queue)
    assert len(rows) == 1 and rows[0]["start_ts"] >= start + 10_000
    restores = [r["offset"] for r in rig.recorder.rows["consumer_offsets"]
                if r["event"] == "RESTORE" and r["topic"] == "T" and r["queue_id"] == queue]
    assert restores == [50, 0]
    assert rig.broker.query_consumer_offset("G", "T", queue) == 1
    assert g.idle()


def test_clean_removal_hands_over_without_duplicate_acks(rig):
    """remove_consumer persists offsets first, so the next owner acks nothing twice."""
    g = rig.group(consumers=2, commit_offset_on_pull=False, behavior=Behavior(consume_time_ms=50))
    p = rig.producer()
    start = rig.sim.now()
    for i in range(200):
        rig.sim.at(start + i * 20, p.send, "T", BODY)
    rig.sim.at(start + 2_013, g.remove_consumer, "G-c1")
    rig.run_for(4_000 + SETTLE_MS)
    rows = rig.recorder.attempts(group="G")
    acked = [r["uniq_key"] for r in rows if r["outcome"] == "ACKED"]
    assert len(acked) == 200 and len(set(acked)) == 200
    # The leaver's running deliveries end DROPPED (results discarded) and are redone by G-c0.
    dropped = [r["uniq_key"] for r in rows if r["outcome"] == "DROPPED"]
    assert dropped and {r["consumer_id"] for r in rows if r["outcome"] == "DROPPED"} == {"G-c1"}
    assert [c.consumer_id for c in g.consumers] == ["G-c0"]
    assert g.consumers[0].assigned() == [("%RETRY%G", 0)] + [("T", q) for q in range(4)]
    assert g.idle()


def test_exception_and_null_are_failures_with_their_own_status(rig):
    """An exception or a null return is recorded as such and handled like RECONSUME_LATER."""
    g = rig.group(behavior=Behavior(exception_probability=1.0))
    k1 = rig.producer().send("T", BODY)
    rig.run_for(1000)
    g.behavior.exception_probability = 0.0
    g.behavior.return_null_probability = 1.0
    rig.run_for(LEVEL_3_DELAY_MS + 2000)
    g.behavior.return_null_probability = 0.0
    rig.run_for(SETTLE_MS)
    rows = _by_key(rig.recorder.attempts(group="G"), k1)
    assert [(r["status"], r["outcome"]) for r in rows] == [
        ("EXCEPTION", "SENT_BACK"), ("RETURN_NULL", "SENT_BACK"), ("CONSUME_SUCCESS", "ACKED")]


def test_a_timeout_pass_sends_back_at_most_16_messages(rig):
    """cleanExpiredMsg looks at no more than 16 heads per pass: of 20 hung messages 16 expire at once."""
    timeout = 60_000
    rig.broker.create_topic("H", 1)
    g = rig.group(subscribe=("H",), behavior=Behavior(hang_probability=1.0),
                  consume_timeout_ms=timeout)
    p = rig.producer()
    keys = [p.send("H", BODY) for _ in range(20)]
    rig.run_for(1000)
    g.behavior.hang_probability = 0.0
    rig.run_for(4 * timeout)
    first = [_by_key(rig.recorder.attempts(group="G"), k)[0] for k in keys]
    assert [r["outcome"] for r in first] == ["EXPIRED"] * 16 + ["ACKED"] * 4  # heads in offset order
    retried = rig.recorder.attempts(group="G", queue_topic="%RETRY%G")
    assert sorted(r["uniq_key"] for r in retried) == sorted(keys[:16])
    assert g.idle()


def test_pull_stops_at_the_queue_threshold(rig):
    """A consumer caches no more than pull_threshold_for_queue plus one pull batch per queue."""
    rig.broker.create_topic("F", 1)
    g = rig.group(subscribe=("F",), behavior=Behavior(consume_time_ms=100), consume_thread_max=1,
                  pull_threshold_for_queue=50)
    p = rig.producer()
    for _ in range(300):
        p.send("F", BODY)
    cached = []
    for _ in range(20):
        rig.run_for(500)
        cached.append(g.consumers[0].pqs[("F", 0)].msg_count)
    assert max(cached) <= 50 + 32 and max(cached) > 50
    rig.run_for(SETTLE_MS + 10_000)
    assert len(rig.recorder.attempts(group="G")) == 300 and g.idle()


def test_a_dlq_request_sends_the_message_to_the_dlq_at_once(rig):
    """A listener's setDelayLevelWhenNextConsume(-1) sends the message back at level -1: the broker
    stores it in %DLQ%G with the delivery's reconsume times + 1 and DELAY=0, on a first delivery or
    after retries, well below the max."""
    g = rig.group(behavior=Behavior(dlq_probability=1.0), max_reconsume_times=5)
    first = rig.producer().send("T", BODY)
    rig.run_for(1000)
    g.behavior.dlq_probability, g.behavior.fail_probability = 0.0, 1.0
    later = rig.producer().send("T", BODY)
    rig.run_for(LEVEL_3_DELAY_MS - 2000)  # failed once; its copy is still delayed
    g.behavior.dlq_probability, g.behavior.fail_probability = 1.0, 0.0
    rig.run_for(SETTLE_MS)
    rows = rig.recorder.attempts(group="G")
    assert [(r["reconsume_times"], r["status"], r["outcome"]) for r in _by_key(rows, first)] == [
        (0, "DLQ_REQUESTED", "SENT_BACK")]
    assert [(r["queue_topic"], r["reconsume_times"], r["status"], r["outcome"]) for r in _by_key(rows, later)] == [
        ("T", 0, "RECONSUME_LATER", "SENT_BACK"), ("%RETRY%G", 1, "DLQ_REQUESTED", "SENT_BACK")]
    dlq = {r.uniq_key: r for r in rig.records("%DLQ%G")}
    assert sorted(dlq) == sorted([first, later])
    assert (dlq[first].reconsume_times, dlq[later].reconsume_times) == (1, 2)
    assert {r.properties["DELAY"] for r in dlq.values()} == {"0"}
    assert not any("MAX_RECONSUME_TIMES" in r.properties or "RECONSUME_TIME" in r.properties
                   for r in dlq.values())
    assert [r.uniq_key for r in rig.records("%RETRY%G")] == [later]
    assert g.idle()


def test_a_dlq_request_whose_send_back_fails_becomes_a_plain_retry(rig):
    """The client's own send after a refused send-back asks for level 3 + reconsume times, not the
    DLQ: the message comes back from %RETRY%G."""
    g = rig.group(behavior=Behavior(dlq_probability=1.0))
    g.send_back_failure_probability = 1.0
    key = rig.producer().send("T", BODY)
    rig.run_for(1000)
    g.behavior.dlq_probability = 0.0
    g.send_back_failure_probability = 0.0
    rig.run_for(SETTLE_MS)
    rows = _by_key(rig.recorder.attempts(group="G"), key)
    assert [(r["queue_topic"], r["status"], r["outcome"]) for r in rows] == [
        ("T", "DLQ_REQUESTED", "SENT_BACK_BY_CLIENT"), ("%RETRY%G", "CONSUME_SUCCESS", "ACKED")]
    assert rig.records("%DLQ%G") == []
    assert [r.properties["DELAY"] for r in rig.records("%RETRY%G")] == ["3"]
