"""The lineage of a 5.x POP group on a hand-built store: its v1 retry topic's records are the
group's RETRY hops (the import's retry_topics), its checkpoints and acks are no hops, and
whether it consumed a record comes from its checkpoints and acks (the import's pop_evidence),
not from its committed offsets; a record whose last checkpoint is not acked is IN_FLIGHT until
that checkpoint's revive time passes the store's snapshot (runs.sim_end_ts), RETRYING after.

The rows copy the shapes a real 5.3.3 broker wrote (docs/rocketmq-5x.md "POP consumption:
confirmed"): a failed delivery writes a new checkpoint of the offset (popTime = now, invisible time
= the client's delay) and acks the old checkpoint; the revive service writes the retry record.
"""

from __future__ import annotations

import pytest

from assets.lineage import build_message_hops, build_message_lineage
from broker_core.export.schema import (
    COMMITLOG,
    CONSUME_ATTEMPTS,
    CONSUMER_OFFSETS,
    POP_EVIDENCE,
    PRODUCED,
    RETRY_TOPICS,
    RUNS,
)
from tests.assets.test_lineage import chain, frame, ms, offset, rec, ts

RUN = "rpop"
GROUP, TOPIC = "pg", "PopTopic"
RETRY = "%RETRY%pg_PopTopic"
DLQ = "%DLQ%pg"
WHEEL = "rmq_sys_wheel_timer"
REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"


def evidence(phys, at, kind, topic, start, offsets, pop_at, invisible=None, stage="revive"):
    return {"run_id": RUN, "broker": "broker-a", "phys_offset": phys, "store_ts": ts(at), "stage": stage,
            "kind": kind, "group": GROUP, "topic": topic, "queue_id": 0, "start_offset": start,
            "offsets": offsets, "pop_ts": ts(pop_at), "invisible_ms": invisible,
            "revive_ts": None if invisible is None else ts(pop_at + invisible), "broker_name": "broker-a"}


def pop_retry(phys, at, uniq, queue_offset, reconsume, first_pop):
    row = rec(phys, RETRY, at, uniq=uniq, queue_offset=queue_offset, reconsume=reconsume, run=RUN)
    row["properties"]["1ST_POP_TIME"] = str(first_pop)
    return row


def proxy_dlq(phys, at, uniq, retry_phys, reconsume, first_pop):
    """The 5.x gRPC proxy's send-back of a POP retry record to the DLQ (docs/rocketmq-5x.md "gRPC
    consumer through the proxy: confirmed"): RETRY_TOPIC is the POP retry topic, ORIGIN_MESSAGE_ID
    the retry record's offset msgId, reconsume times one more than the retry record's."""
    row = rec(phys, DLQ, at, uniq=uniq, retry_topic=RETRY, origin=f"0A00000100002A9F{retry_phys:016X}",
              reconsume=reconsume, run=RUN)
    row["properties"].update({"1ST_POP_TIME": str(first_pop), "DELAY": "0", "WAIT": "false"})
    return row


# U20, U21, U23 are PopTopic[0] offsets 0, 1, 2, popped together at 1000 (invisible 5000).
# U20 fails: a checkpoint of offset 0 at 1100 for 2000 ms and an ack of the first checkpoint; the
#   revive service writes its retry at 4000; popped at 5000 and acked.
# U21 fails the same way at 1200 and its retry is not written yet.
# U23 succeeds: offset 2 of the first checkpoint is acked.
# U24 (PopTopic[0] offset 3, a gRPC consumer's group with maxAttempts 3) is never acked: the revive
#   service writes three retries (%RETRY%pg_PopTopic offsets 1, 2, 3); the proxy pops the third,
#   sends it to the DLQ and acks that pop.
# U25 and U26 (offsets 4, 5) are popped together by a gRPC push consumer's receive at 14000 with the
#   proxy's auto-renew invisible time (60000: its checkpoint and acks wait in the timer); both fail
#   (docs/rocketmq-5x.md "gRPC PushConsumer and the group retry policies: confirmed"). U25's change
#   of invisible time is 10000 ms and its retry is not written yet; U26's is 1000 ms, a checkpoint
#   stored straight into the revive topic (no timer copy), revived at 17110 (retry offset 4),
#   popped by the next receive at 18000 and acked.
# U28, U29 (offsets 6, 7) are popped together at 18000 (invisible 5000, revive 23000). U28 is still
#   in its listener at the snapshot; U29 failed at 18100: a checkpoint of offset 7 for 2000 ms
#   (revive 20100) and an ack of the first one for offset 7. Both are invisible at the snapshot.
# U30 (offset 8) failed its first pop (14000) at 14100 (revive 16100); its retry was written at 17000
#   (%RETRY%pg_PopTopic offset 5) and popped at 18200 (revive 23200), not acked yet: in flight.
# The store's snapshot is its last record, that pop's checkpoint at 18200 (SNAPSHOT_MS): U21's
#   revive time (3200) passed without a retry record (the revive is pending), U25's and U28-U30's
#   are ahead.
# U31 and U32 (PopTopic[0] offsets 9 and 10) were popped with no checkpoint record (a broker with
#   the POP KV service, docs/rocketmq-5x.md): U31 was still in flight when the broker stopped (a
#   row of kvStore/, read as a checkpoint of stage kv that nobody acked; revive 20000, after the
#   snapshot); U32 was acked, which leaves nothing but the committed offset.
SNAPSHOT_MS = 18200
COMMITLOG_ROWS = [
    rec(0, TOPIC, 100, uniq="U20", queue_offset=0, run=RUN),
    rec(100, TOPIC, 110, uniq="U21", queue_offset=1, run=RUN),
    rec(200, TOPIC, 120, uniq="U23", queue_offset=2, run=RUN),
    # The checkpoints and acks as records: in the timer topic first, then in the revive topic.
    rec(300, WHEEL, 1000, uniq=f"{TOPIC}@0@0@{GROUP}@1000@broker-a@ck", real_topic=REVIVE, run=RUN),
    rec(400, WHEEL, 1100, uniq=f"{TOPIC}@0@0@{GROUP}@1100@broker-a@ck", real_topic=REVIVE, run=RUN),
    rec(500, REVIVE, 2200, uniq=f"{TOPIC}@0@0@{GROUP}@1100@broker-a@ck", real_topic=REVIVE, run=RUN),
    pop_retry(600, 4000, "U20", 0, 1, 1100),
    rec(700, WHEEL, 5000, uniq=f"{RETRY}@0@0@{GROUP}@5000@broker-a@ck", real_topic=REVIVE, run=RUN),
    rec(800, TOPIC, 130, uniq="U24", queue_offset=3, run=RUN),
    pop_retry(900, 6000, "U24", 1, 1, 1000),
    pop_retry(1000, 9000, "U24", 2, 2, 1000),
    pop_retry(1100, 12000, "U24", 3, 3, 1000),
    rec(1200, WHEEL, 13000, uniq=f"{RETRY}@0@3@{GROUP}@13000@broker-a@ck", real_topic=REVIVE, run=RUN),
    proxy_dlq(1300, 13030, "U24", 1100, 4, 1000),
    rec(1400, WHEEL, 13040, uniq=f"{RETRY}@0@3@{GROUP}@13000@broker-a@ack", real_topic=REVIVE, run=RUN),
    rec(1500, TOPIC, 140, uniq="U25", queue_offset=4, run=RUN),
    rec(1600, TOPIC, 150, uniq="U26", queue_offset=5, run=RUN),
    rec(1700, WHEEL, 14000, uniq=f"{TOPIC}@0@4@{GROUP}@14000@broker-a@ck", real_topic=REVIVE, run=RUN),
    rec(1800, REVIVE, 14110, uniq=f"{TOPIC}@0@5@{GROUP}@14110@broker-a@ck", run=RUN),
    pop_retry(1900, 17110, "U26", 4, 1, 14110),
    rec(2100, TOPIC, 160, uniq="U28", queue_offset=6, run=RUN),
    rec(2110, TOPIC, 170, uniq="U29", queue_offset=7, run=RUN),
    rec(2120, TOPIC, 180, uniq="U30", queue_offset=8, run=RUN),
    rec(2130, WHEEL, 18000, uniq=f"{TOPIC}@0@6@{GROUP}@18000@broker-a@ck", real_topic=REVIVE, run=RUN),
    pop_retry(2200, 17000, "U30", 5, 1, 14100),
    rec(2210, WHEEL, SNAPSHOT_MS, uniq=f"{RETRY}@0@5@{GROUP}@18200@broker-a@ck", real_topic=REVIVE, run=RUN),
    rec(2300, TOPIC, 14000, uniq="U31", queue_offset=9, run=RUN),
    rec(2310, TOPIC, 14010, uniq="U32", queue_offset=10, run=RUN),
]
EVIDENCE = [
    evidence(300, 1000, "ck", TOPIC, 0, [0, 1, 2], 1000, 5000, stage="timer"),
    evidence(400, 1100, "ck", TOPIC, 0, [0], 1100, 2000, stage="timer"),
    evidence(410, 1101, "ack", TOPIC, 0, [0], 1000, stage="timer"),
    evidence(420, 1200, "ck", TOPIC, 1, [1], 1200, 2000, stage="timer"),
    evidence(430, 1201, "ack", TOPIC, 0, [1], 1000, stage="timer"),
    evidence(440, 1300, "ack", TOPIC, 0, [2], 1000, stage="timer"),
    evidence(500, 2200, "ck", TOPIC, 0, [0], 1100, 2000),  # the same checkpoint, in the revive topic
    evidence(700, 5000, "ck", RETRY, 0, [0], 5000, 5000, stage="timer"),
    evidence(710, 5010, "ack", RETRY, 0, [0], 5000, stage="timer"),
    evidence(1200, 13000, "ck", RETRY, 3, [3], 13000, 3000, stage="timer"),
    evidence(1400, 13040, "ack", RETRY, 3, [3], 13000, stage="timer"),
    evidence(1700, 14000, "ck", TOPIC, 4, [4, 5], 14000, 60000, stage="timer"),
    evidence(1710, 14100, "ck", TOPIC, 4, [4], 14100, 10000, stage="timer"),
    evidence(1720, 14101, "ack", TOPIC, 4, [4], 14000, stage="timer"),
    evidence(1800, 14110, "ck", TOPIC, 5, [5], 14110, 1000),  # revive topic only
    evidence(1810, 14111, "ack", TOPIC, 4, [5], 14000, stage="timer"),
    evidence(2000, 18000, "ck", RETRY, 4, [4], 18000, 60000, stage="timer"),
    evidence(2010, 18010, "ack", RETRY, 4, [4], 18000, stage="timer"),
    evidence(2130, 18000, "ck", TOPIC, 6, [6, 7], 18000, 5000, stage="timer"),
    evidence(2140, 18100, "ck", TOPIC, 7, [7], 18100, 2000, stage="timer"),
    evidence(2150, 18101, "ack", TOPIC, 6, [7], 18000, stage="timer"),
    evidence(2160, 14000, "ck", TOPIC, 8, [8], 14000, 5000, stage="timer"),
    evidence(2170, 14100, "ck", TOPIC, 8, [8], 14100, 2000, stage="timer"),
    evidence(2180, 14101, "ack", TOPIC, 8, [8], 14000, stage="timer"),
    evidence(2190, 15100, "ck", TOPIC, 8, [8], 14100, 2000),  # the same checkpoint, in the revive topic
    evidence(2210, 18200, "ck", RETRY, 5, [5], 18200, 5000, stage="timer"),
    {**evidence(None, 15000, "ck", TOPIC, 9, [9], 15000, 5000, stage="kv"), "store_ts": None, "broker_name": None},
]
# The import's runs row: sim_end_ts is the store time of the broker's last record.
RUNS_ROWS = [{"run_id": RUN, "source": "import", "first_offset": 0, "broker": "broker-a",
              "sim_start_ts": ts(100), "sim_end_ts": ts(SNAPSHOT_MS), "msg_id_hosts": ["0A00000100002A9F"]}]
OWNERS = [
    {"run_id": RUN, "broker": "broker-a", "retry_topic": RETRY, "group": GROUP, "origin_topic": TOPIC,
     "resolution": "checkpoint"},
]
# A POP group's offset moves past a record when it is popped: every record here is below it.
OFFSETS = [offset(GROUP, TOPIC, 0, 11, 18000, run=RUN), offset(GROUP, RETRY, 0, 6, 18200, run=RUN)]
# Every message's state with the import's tables, and its invisible_until (ms): U21 revive
# pending; U25 (a gRPC push consumer's change of invisible time), U28-U30 and U31 (a KV row) in
# flight; U32 (popped with no checkpoint) consumed by the committed offset.
STATES = {"U20": ("CONSUMED", None), "U21": ("RETRYING", 3200), "U23": ("CONSUMED", None), "U24": ("DLQ", None),
          "U25": ("IN_FLIGHT", 24100), "U26": ("CONSUMED", None),
          "U28": ("IN_FLIGHT", 23000), "U29": ("IN_FLIGHT", 20100), "U30": ("IN_FLIGHT", 23200),
          "U31": ("IN_FLIGHT", 20000), "U32": ("CONSUMED", None)}


def build(spark, owners, pop_rows, offsets=OFFSETS, runs=RUNS_ROWS):
    cl = frame(spark, COMMITLOG_ROWS, COMMITLOG)
    hops = build_message_hops(cl, frame(spark, owners, RETRY_TOPICS))
    lineage = build_message_lineage(hops, cl, frame(spark, [], CONSUME_ATTEMPTS),
                                    frame(spark, offsets, CONSUMER_OFFSETS), frame(spark, [], PRODUCED),
                                    runs_df=frame(spark, runs, RUNS),
                                    pop_evidence_df=frame(spark, pop_rows, POP_EVIDENCE))
    return ({(r.message_key, r.group, r.hop_index): r for r in hops.collect()},
            {(r.message_key, r.group): r for r in lineage.collect()})


@pytest.fixture(scope="module")
def built(spark):
    return build(spark, OWNERS, EVIDENCE)


def test_a_pop_v1_retry_topic_is_a_retry_hop_of_the_group_retry_topics_names(built):
    """%RETRY%pg_PopTopic is group pg's retry topic (retry_topics): its record is pg's RETRY hop."""
    hops, lineage = built
    assert chain(hops, "U20", GROUP) == [(0, "PUBLISH", TOPIC), (1, "RETRY", RETRY)]
    assert hops[("U20", GROUP, 1)].reconsume_times == 1
    row = lineage[("U20", GROUP)]
    assert (row.origin_topic, row.hops, row.retries, row.path) == (TOPIC, 2, 1, f"{TOPIC} > {RETRY}")


def test_checkpoints_and_acks_are_no_hops(built):
    """The POP checkpoints and acks, in the timer and in the revive topic, are in no hop row."""
    hops, _lineage = built
    assert {r.phys_offset for r in hops.values()} == {0, 100, 200, 600, 800, 900, 1000, 1100, 1300, 1500, 1600,
                                                      1900, 2100, 2110, 2120, 2200, 2300, 2310}


def test_a_pop_record_is_consumed_when_its_last_checkpoint_was_acked(built):
    """An acked retry record and an acked first delivery are CONSUMED; a record whose first
    checkpoint was acked only to hand it to a new checkpoint that is not acked, whose revive time
    passed before the snapshot with no retry record yet, is RETRYING, though the committed offset
    is past it; an in-flight pop of the KV service is judged by its row as by a checkpoint; a
    popped record with no checkpoint at all is judged by the committed offset (CONSUMED)."""
    _hops, lineage = built
    assert {k: r.final_state for k, r in lineage.items()} == {(k, GROUP): s for k, (s, _) in STATES.items()}


def test_a_grpc_push_consumers_failure_is_read_by_its_change_of_invisible_time(built):
    """A push consumer's receive checkpoint (the proxy's 60 s) acked by the change of invisible
    time leaves the record to the new checkpoint: unacked, the record is IN_FLIGHT until that
    checkpoint's revive time; a 1 s checkpoint in the revive topic alone (no timer copy) counts the same, and the
    retry record it led to, popped and acked, is a CONSUMED RETRY hop of the group."""
    hops, lineage = built
    assert chain(hops, "U25", GROUP) == [(0, "PUBLISH", TOPIC)]
    assert (lineage[("U25", GROUP)].final_state, lineage[("U25", GROUP)].retries) == ("IN_FLIGHT", 0)
    assert chain(hops, "U26", GROUP) == [(0, "PUBLISH", TOPIC), (1, "RETRY", RETRY)]
    assert (lineage[("U26", GROUP)].final_state, lineage[("U26", GROUP)].retries) == ("CONSUMED", 1)


def test_a_pop_record_still_invisible_at_the_snapshot_is_in_flight_until_its_revive_time(built):
    """A record whose last checkpoint is not acked and whose revive time is after the store's
    snapshot is IN_FLIGHT with invisible_until that revive time: popped and not yet answered, after
    a change of invisible time (the new checkpoint's), and a popped retry record; invisible_until
    is the passed revive time of a RETRYING record whose revive is pending, and null otherwise."""
    _hops, lineage = built
    assert {k: (r.final_state, ms(r.invisible_until)) for k, r in lineage.items()} == {
        (k, GROUP): state for k, state in STATES.items()}
    row = lineage[("U30", GROUP)]
    assert (row.retries, row.path, row.final_topic) == (1, f"{TOPIC} > {RETRY}", RETRY)


def test_without_a_snapshot_time_no_record_is_in_flight(spark):
    """Without a runs row for the broker (no snapshot time) an unacked POP record is RETRYING, as
    before: the store cannot say its revive time is still ahead."""
    _hops, lineage = build(spark, OWNERS, EVIDENCE, runs=[])
    assert {k: (r.final_state, ms(r.invisible_until)) for k, r in lineage.items()} == {
        (k, GROUP): ("RETRYING" if s == "IN_FLIGHT" else s, until) for k, (s, until) in STATES.items()}


def test_the_proxys_dlq_of_a_pop_message_is_dlq_of_the_group_and_origin_topic(built):
    """The gRPC proxy's DLQ record (RETRY_TOPIC = the POP retry topic, ORIGIN_MESSAGE_ID = the last
    retry record's msgId) ends the group's chain of POP retries: DLQ of pg, origin topic PopTopic
    (not the retry topic), origin msgId the published record's."""
    hops, lineage = built
    assert chain(hops, "U24", GROUP) == [(0, "PUBLISH", TOPIC)] + [(i, "RETRY", RETRY) for i in (1, 2, 3)] + [
        (4, "DLQ", DLQ)]
    row = lineage[("U24", GROUP)]
    assert (row.final_state, row.retries, row.origin_topic, row.origin_msg_id, row.final_topic) == (
        "DLQ", 3, TOPIC, "M0800", DLQ)


def test_a_retry_topic_property_names_its_origin_topic():
    """RETRY_TOPIC gives the origin topic: itself after a push send-back; the topic of a POP retry
    topic of the record's group (v1 and v2); nothing for another group's or a push %RETRY% name."""
    from broker_core.names import origin_of_retry_topic_property as origin

    assert origin("OrderTopic", "g") == "OrderTopic"
    assert origin("%RETRY%g_Order_Topic", "g") == "Order_Topic"
    assert origin("%RETRY%g_a_T", "g_a") == "T"
    assert origin("%RETRY%g+T", "g") == "T"
    assert origin("%RETRY%g_T", "h") is None
    assert origin("%RETRY%g", "g") is None
    assert origin("%RETRY%g_T", None) is None
    assert origin("", "g") is None and origin(None, "g") is None


def test_without_the_import_tables_the_old_readings_stay(spark):
    """Without retry_topics the v1 name's whole rest is the group; without pop_evidence the
    committed offsets decide (every record below the offset is CONSUMED)."""
    hops, lineage = build(spark, [], [])
    assert chain(hops, "U20", "pg_PopTopic") == [(0, "PUBLISH", TOPIC), (1, "RETRY", RETRY)]
    assert lineage[("U21", GROUP)].final_state == "CONSUMED"


def test_without_committed_offsets_the_checkpoints_name_the_pop_group(spark):
    """A store with its consumer offsets in RocksDB (storeType=defaultRocksDB: no
    consumerOffset.json) has no committed offset of the group: its checkpoints of PopTopic make it
    a subscriber, so U23 (popped and acked at once, never retried) is the group's and CONSUMED;
    U32, popped with no checkpoint, has nothing left to say it was consumed: UNCONSUMED."""
    _hops, lineage = build(spark, OWNERS, EVIDENCE, offsets=[])
    assert {k: r.final_state for k, r in lineage.items()} == {
        (k, GROUP): "UNCONSUMED" if k == "U32" else s for k, (s, _) in STATES.items()}
