"""A consumer crash redelivers exactly what was committed in memory after the broker last heard."""

from collections import Counter

from broker_core.client.behavior import Behavior

SEND_INTERVAL_MS = 100
MESSAGES = 300
CRASH_AT_MS = 17_302  # 2 ms into the consume of the message sent at 17.3 s
RESTART_AT_MS = 20_000
SETTLE_MS = 60_000


def _run_crash(rig, **settings):
    rig.broker.create_topic("C", 1)
    g = rig.group(subscribe=("C",), behavior=Behavior(consume_time_ms=5), **settings)
    p = rig.producer()
    start = rig.sim.now()
    for i in range(MESSAGES):
        rig.sim.at(start + i * SEND_INTERVAL_MS, p.send, "C", b"m%d" % i)
    seen = {}

    def crash():
        c = g.consumer("G-c0")
        seen["broker"] = rig.broker.query_consumer_offset("G", "C", 0)
        seen["memory"] = c.offset_store.read_memory(("C", 0))
        g.crash_consumer("G-c0")

    rig.sim.at(start + CRASH_AT_MS, crash)
    rig.sim.at(start + RESTART_AT_MS, g.restart_consumer, "G-c0")
    rig.run_for(MESSAGES * SEND_INTERVAL_MS + SETTLE_MS)
    rows = rig.recorder.attempts(group="G")
    acked = Counter(r["uniq_key"] for r in rows if r["outcome"] == "ACKED")
    offset_of = {r["uniq_key"]: r["queue_offset"] for r in rows}
    return g, start, seen, rows, acked, offset_of


def test_crash_redelivers_the_unpersisted_window(rig):
    """With offsets reaching the broker only every 5 s, the duplicates are the acks since the last persist."""
    g, start, seen, rows, acked, offset_of = _run_crash(rig, commit_offset_on_pull=False)
    assert len(acked) == MESSAGES and g.idle()
    duplicates = {k for k, n in acked.items() if n > 1}
    # The 5 s window: persists at 10 s and 15 s after start, the crash at 17.302 s.
    last_persist = start + 10_000 + 5000  # the persist task: first after 10 s, then every 5 s
    window = {r["uniq_key"] for r in rows
              if r["outcome"] == "ACKED" and last_persist < r["end_ts"] <= start + CRASH_AT_MS}
    assert duplicates == window
    assert len(duplicates) == (CRASH_AT_MS - (last_persist - start)) // SEND_INTERVAL_MS
    assert {offset_of[k] for k in duplicates} == set(range(seen["broker"], seen["memory"]))
    lost = [r for r in rows if r["outcome"] == "LOST_IN_CRASH"]
    assert len(lost) == 1 and lost[0]["end_ts"] == start + CRASH_AT_MS
    assert acked[lost[0]["uniq_key"]] == 1  # redelivered after the restart, acked once


def test_crash_duplicates_match_the_broker_offset_with_pull_commits(rig):
    """With offsets also carried on pulls, the duplicates are the offsets from the broker's to memory's."""
    g, _start, seen, _rows, acked, offset_of = _run_crash(rig)
    assert len(acked) == MESSAGES and g.idle()
    duplicates = {k for k, n in acked.items() if n > 1}
    assert {offset_of[k] for k in duplicates} == set(range(seen["broker"], seen["memory"]))
    assert seen["memory"] - seen["broker"] <= 1  # each pull carried the latest commit
