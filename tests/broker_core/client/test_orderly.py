"""Orderly consumption: a failing message suspends its queue for 1 s, then goes to the DLQ at the max."""

from itertools import pairwise

from broker_core.client.behavior import Behavior

CONSUME_MS = 5
SETTLE_MS = 30_000
DLQ_WAIT_MS = 3 * 60_000  # a 4.9.4 client DLQ send keeps DELAY (level 5 = 1 min) first


def _orderly_group(rig, **settings):
    rig.broker.create_topic("O", 1)
    return rig.group(subscribe=("O",), mode="orderly",
                     behavior=Behavior(consume_time_ms=CONSUME_MS, fail_probability=1.0), **settings)


def test_failure_suspends_the_queue_and_keeps_order(rig):
    """A failing head is retried locally every second (reconsume + 1) while later messages wait."""
    g = _orderly_group(rig)
    p = rig.producer()
    keys = [p.send("O", b"o%d" % i) for i in range(3)]
    rig.run_for(3 * (1000 + CONSUME_MS) + 500)
    rows = rig.recorder.attempts(group="G")
    assert [(r["uniq_key"], r["reconsume_times"], r["outcome"]) for r in rows] == [
        (keys[0], n, "LOCAL_RETRY") for n in range(4)]
    gaps = [b["start_ts"] - a["end_ts"] for a, b in pairwise(rows)]
    assert gaps == [1000] * 3  # suspendCurrentQueueTimeMillis: 1 s
    assert g.consumer("G-c0").offset_store.read_memory(("O", 0)) in (-1, 0)  # nothing committed
    g.behavior.fail_probability = 0.0
    rig.run_for(SETTLE_MS)
    acked = [r["uniq_key"] for r in rig.recorder.attempts(group="G", outcome="ACKED")]
    assert acked == keys  # in queue order
    assert rig.records("%RETRY%G") == [] and g.idle()


def test_orderly_sends_to_the_dlq_at_a_small_max(rig):
    """At max_reconsume_times=2 the third failure sends the message to %RETRY%G, which the broker diverts to %DLQ%G."""
    g = _orderly_group(rig, max_reconsume_times=2)
    p = rig.producer()
    keys = [p.send("O", b"o%d" % i) for i in range(2)]
    rig.run_for(DLQ_WAIT_MS)
    rows = rig.recorder.attempts(group="G")
    first = [(r["reconsume_times"], r["outcome"]) for r in rows if r["uniq_key"] == keys[0]]
    assert first == [(0, "LOCAL_RETRY"), (1, "LOCAL_RETRY"), (2, "SENT_BACK_BY_CLIENT")]
    second = [(r["reconsume_times"], r["outcome"]) for r in rows if r["uniq_key"] == keys[1]]
    assert second == first  # the next message only started after the first left the queue
    assert min(r["start_ts"] for r in rows if r["uniq_key"] == keys[1]) >= \
        max(r["end_ts"] for r in rows if r["uniq_key"] == keys[0])
    dlq = rig.records("%DLQ%G")
    assert [r.uniq_key for r in dlq] == keys
    assert dlq[0].properties["RETRY_TOPIC"] == "O" and dlq[0].properties["RECONSUME_TIME"] == "2"
    assert rig.records("%RETRY%G") == []
    assert rig.broker.query_consumer_offset("G", "O", 0) == 2 and g.idle()


def test_an_orderly_send_back_carries_no_consume_start_time(rig):
    """An orderly client does not stamp CONSUME_START_TIME, so its DLQ record has none (a concurrent one's send-back does): as real 4.9.4 clients write it."""
    _orderly_group(rig, max_reconsume_times=0)
    key = rig.producer().send("O", b"o0")
    rig.run_for(DLQ_WAIT_MS)
    dlq = rig.records("%DLQ%G")
    assert [r.uniq_key for r in dlq] == [key]
    assert "CONSUME_START_TIME" not in dlq[0].properties
    assert dlq[0].properties["MAX_RECONSUME_TIMES"] == "0"


def test_an_orderly_send_back_names_the_message_as_its_origin(rig):
    """The orderly client sets ORIGIN_MESSAGE_ID after copying the message's properties, so its
    first send-back carries the message's own msgId (the UNIQ_KEY), unlike the concurrent
    fallback, which drops it: what a real 4.9.4 orderly consumer's DLQ records carry
    (make conformance, seq-service)."""
    _orderly_group(rig, max_reconsume_times=0)
    key = rig.producer().send("O", b"o0")
    rig.run_for(DLQ_WAIT_MS)
    dlq = rig.records("%DLQ%G")
    assert [r.uniq_key for r in dlq] == [key]
    assert dlq[0].properties["ORIGIN_MESSAGE_ID"] == key
