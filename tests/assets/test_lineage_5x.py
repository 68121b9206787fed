"""The lineage rules for what a RocketMQ 5.x store adds, on hand-built commit logs: timer messages
(TIMER hops, rolls, the DELIVER to the real topic), the broker's bookkeeping records (no hops) and
POP retry topics.

The rows copy the shapes a real 5.3.3 broker wrote (docs/rocketmq-5x.md); every expected hop and
lineage row is written out by hand from the rules in docs/lineage.md.
"""

from __future__ import annotations

import pytest

from broker_core.names import is_bookkeeping_record, pop_retry_v2_group
from tests.assets.test_lineage import chain, lineage_of, ms, offset, rec

RUN = "r5"
WHEEL = "rmq_sys_wheel_timer"
REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"


def with_props(row: dict, **props: str) -> dict:
    row["properties"].update(props)
    return row


# U10: a timer message 15 s ahead with a 5 s roll window: stored in the wheel, rolled twice, then
# put to TimerTopic (no DELAY; REAL_TOPIC, REAL_QID and TIMER_DEQUEUE_MS kept), and consumed.
TIMER_ROLLED = [
    with_props(rec(0, WHEEL, 0, uniq="U10", real_topic="TimerTopic", run=RUN),
               TIMER_DELAY_SEC="15", TIMER_OUT_MS="15000"),
    with_props(rec(100, WHEEL, 6000, uniq="U10", real_topic="TimerTopic", queue_offset=1, run=RUN),
               TIMER_DELAY_SEC="15", TIMER_OUT_MS="15000", TIMER_ENQUEUE_MS="0", TIMER_ROLL_TIMES="1",
               TIMER_DEQUEUE_MS="6000"),
    with_props(rec(200, WHEEL, 12000, uniq="U10", real_topic="TimerTopic", queue_offset=2, run=RUN),
               TIMER_DELAY_SEC="15", TIMER_OUT_MS="15000", TIMER_ENQUEUE_MS="6000", TIMER_ROLL_TIMES="2",
               TIMER_DEQUEUE_MS="12000"),
    with_props(rec(300, "TimerTopic", 15020, uniq="U10", real_topic="TimerTopic", run=RUN),
               TIMER_DELAY_SEC="15", TIMER_OUT_MS="15000", TIMER_ENQUEUE_MS="12000", TIMER_ROLL_TIMES="2",
               TIMER_DEQUEUE_MS="15020"),
]
# U11: a timer message still in the wheel at the end of the log.
TIMER_WAITING = [
    with_props(rec(400, WHEEL, 20000, uniq="U11", real_topic="TimerTopic", queue_offset=3, run=RUN),
               TIMER_DELAY_SEC="60", TIMER_OUT_MS="80000"),
]
# U13: a deliver time in the past: the broker stores it straight in TimerTopic, TIMER_DELIVER_MS kept.
TIMER_PAST = [
    with_props(rec(500, "TimerTopic", 20500, uniq="U13", queue_offset=1, run=RUN), TIMER_DELIVER_MS="19500"),
]
# The broker's own records: a POP checkpoint waiting in the wheel, its put to the revive topic,
# and a record of a broker group's retry topic.
BOOKKEEPING = [
    rec(600, WHEEL, 21000, uniq="PopTopic@0@0@pg@21000@broker-a@ck", real_topic=REVIVE, queue_offset=4, run=RUN),
    with_props(rec(700, REVIVE, 40000, uniq="PopTopic@0@0@pg@21000@broker-a@ck", real_topic=REVIVE, run=RUN),
               TIMER_DEQUEUE_MS="40000"),
    rec(800, "%RETRY%CID_RMQ_SYS_REVIVE_GROUP", 41000, uniq="U99", run=RUN),
]
# U12: a POP consumer's retry through a v2 retry topic: %RETRY%pg+PopTopic belongs to group pg.
POP_V2 = [
    rec(900, "PopTopic", 50000, uniq="U12", run=RUN),
    with_props(rec(1000, "%RETRY%pg+PopTopic", 80000, uniq="U12", reconsume=1, run=RUN), **{"1ST_POP_TIME": "50100"}),
]
# U14: a timer message recalled while in the wheel (5.3.2+ recallMessage): its first record, then
# the recall record a real 5.3.3 broker wrote (same UNIQ_KEY, TIMER_DEL_UNIQKEY, tag _RECALL_TAG_).
# U15: the same, but a roll of the original was stored after the recall record.
RECALLED = [
    with_props(rec(1100, WHEEL, 60000, uniq="U14", real_topic="TimerTopic", queue_offset=5, run=RUN),
               TIMER_DELAY_SEC="4", TIMER_OUT_MS="64000"),
    with_props(rec(1200, WHEEL, 60010, uniq="U14", real_topic="TimerTopic", queue_offset=6, run=RUN),
               TIMER_DEL_UNIQKEY="TimerTopic+U14", TIMER_DELIVER_MS="64001", TIMER_OUT_MS="64000",
               TAGS="_RECALL_TAG_", PGROUP="p"),
    with_props(rec(1300, WHEEL, 61000, uniq="U15", real_topic="TimerTopic", queue_offset=7, run=RUN),
               TIMER_DELAY_SEC="20", TIMER_OUT_MS="81000"),
    with_props(rec(1400, WHEEL, 61010, uniq="U15", real_topic="TimerTopic", queue_offset=8, run=RUN),
               TIMER_DEL_UNIQKEY="TimerTopic+U15", TIMER_DELIVER_MS="81001", TIMER_OUT_MS="81000",
               TAGS="_RECALL_TAG_", PGROUP="p"),
    with_props(rec(1500, WHEEL, 66000, uniq="U15", real_topic="TimerTopic", queue_offset=9, run=RUN),
               TIMER_DELAY_SEC="20", TIMER_OUT_MS="81000", TIMER_ENQUEUE_MS="61000", TIMER_ROLL_TIMES="1",
               TIMER_DEQUEUE_MS="66000"),
]
# U16, U17: inner batches (one record each, INNER_NUM messages from its queue offset) in a BatchCQ
# topic; batch-g's committed offset 4 passes U16's three offsets (0-2) but not the last of U17's (3-4).
INNER_BATCHES = [
    with_props(rec(1600, "BatchTopic", 70000, uniq="U16", run=RUN), INNER_NUM="3", INNER_BASE="0"),
    with_props(rec(1700, "BatchTopic", 70100, uniq="U17", queue_offset=3, run=RUN), INNER_NUM="2",
               INNER_BASE="3"),
]
FORMS_OFFSETS = [offset("batch-g", "BatchTopic", 0, 4, 80000, run=RUN)]


def inner_message(batch: dict, index: int, uniq: str, **props: str) -> dict:
    """An inner_messages row of ``batch`` (a commitlog row), as the import unwraps one."""
    return {"run_id": batch["run_id"], "broker": batch["broker"], "phys_offset": batch["phys_offset"],
            "inner_index": index, "topic": batch["topic"], "queue_id": batch["queue_id"],
            "queue_offset": batch["queue_offset"] + index, "uniq_key": uniq, "tags": None, "keys": None, "flag": 0,
            "body_size": 3, "body_crc": 1000 + index, "born_ts": batch["born_ts"], "store_ts": batch["store_ts"],
            "properties": {"UNIQ_KEY": uniq, "WAIT": "true", **props}}


# U18: an inner batch the import unwrapped: its record (queue 1, offsets 0-2) stands for I18-0 ..
# I18-2, each a message of its own at the record's offset; batch-g's committed offset 2 on queue 1
# passes I18-0 and I18-1, not I18-2. U16 and U17 above have no inner_messages rows (a body that did
# not decode): they stay one message each.
UNWRAPPED_BATCH = with_props(rec(1800, "BatchTopic", 70200, uniq="U18", queue_id=1, run=RUN), INNER_NUM="3",
                             INNER_BASE="0")
UNWRAPPED_BATCH["sys_flag"] = 0xC0
INNER_MESSAGES = [inner_message(UNWRAPPED_BATCH, i, f"I18-{i}") for i in range(3)]
INNER_OFFSETS = [offset("batch-g", "BatchTopic", 1, 2, 80000, run=RUN)]
OFFSETS = [
    offset("timer-group", "TimerTopic", 0, 2, 30000, run=RUN),
    offset("pg", "PopTopic", 0, 1, 90000, run=RUN),
    offset("pg", "%RETRY%pg+PopTopic", 0, 1, 90000, run=RUN),
    offset("CID_RMQ_SYS_REVIVE_GROUP", REVIVE, 0, 1, 90000, run=RUN),
]


@pytest.fixture(scope="module")
def built(spark):
    return lineage_of(spark, TIMER_ROLLED + TIMER_WAITING + TIMER_PAST + BOOKKEEPING + POP_V2, (), OFFSETS)[RUN]


def test_a_rolled_timer_message_is_timer_hops_then_one_deliver(built):
    """A timer message's records in rmq_sys_wheel_timer (the first and each roll) are shared TIMER
    hops and its put to the real topic is a DELIVER, in store order."""
    hops, lineage = built
    assert chain(hops, "U10", "timer-group") == [
        (0, "TIMER", WHEEL), (1, "TIMER", WHEEL), (2, "TIMER", WHEEL), (3, "DELIVER", "TimerTopic")]
    assert {g for (k, g, _i) in hops if k == "U10"} == {None}
    assert [hops[("U10", None, i)].dwell_ms for i in range(4)] == [6000, 6000, 3020, None]
    assert [hops[("U10", None, i)].delay_level for i in range(4)] == [0, 0, 0, 0]
    row = lineage[("U10", "timer-group")]
    assert (row.origin_topic, row.origin_msg_id, row.hops, row.retries, row.path, row.final_topic,
            row.final_state, row.truncated) == (
        "TimerTopic", "M0000", 4, 0,
        "rmq_sys_wheel_timer > rmq_sys_wheel_timer > rmq_sys_wheel_timer > TimerTopic",
        "TimerTopic", "CONSUMED", False)
    assert (ms(row.first_store_ts), ms(row.last_store_ts), row.total_delay_ms) == (0, 15020, 15020)


def test_a_timer_message_still_in_the_wheel_is_retrying_with_its_real_topic_as_origin(built):
    """A timer message whose only record is in the wheel is one TIMER hop; its origin topic is its
    REAL_TOPIC and its chain waits (RETRYING, as a delayed publish waiting in the schedule)."""
    hops, lineage = built
    assert chain(hops, "U11", "timer-group") == [(0, "TIMER", WHEEL)]
    row = lineage[("U11", "timer-group")]
    assert (row.origin_topic, row.hops, row.path, row.final_topic, row.final_state, row.truncated) == (
        "TimerTopic", 1, "rmq_sys_wheel_timer", "rmq_sys_wheel_timer", "RETRYING", False)


def test_a_timer_message_due_in_the_past_is_a_plain_publish(built):
    """A deliver time already past is stored straight in the real topic: one PUBLISH hop, though
    it carries TIMER_DELIVER_MS."""
    hops, lineage = built
    assert chain(hops, "U13", "timer-group") == [(0, "PUBLISH", "TimerTopic")]
    assert lineage[("U13", "timer-group")].final_state == "CONSUMED"  # committed offset 2 > queue offset 1


def test_bookkeeping_records_are_no_hops_and_no_lineage(built):
    """POP checkpoints in the wheel and the revive topic, and a broker group's retry records, are
    in no hop row; the broker group's committed offset gives no lineage row."""
    hops, lineage = built
    phys = {r.phys_offset for r in hops.values()}
    assert phys == {0, 100, 200, 300, 400, 500, 900, 1000}
    assert not [k for k in lineage if k[1] == "CID_RMQ_SYS_REVIVE_GROUP" or k[0] == "U99"]
    assert sorted(lineage) == [("U10", "timer-group"), ("U11", "timer-group"), ("U12", "pg"),
                               ("U13", "timer-group")]


def test_a_pop_v2_retry_topic_belongs_to_the_group_before_the_plus(built):
    """%RETRY%pg+PopTopic is a RETRY hop of group pg (a 5.x POP retry topic, v2 name)."""
    hops, lineage = built
    assert chain(hops, "U12", "pg") == [(0, "PUBLISH", "PopTopic"), (1, "RETRY", "%RETRY%pg+PopTopic")]
    assert hops[("U12", "pg", 1)].reconsume_times == 1
    row = lineage[("U12", "pg")]
    assert (row.origin_topic, row.hops, row.retries, row.path, row.final_state) == (
        "PopTopic", 2, 1, "PopTopic > %RETRY%pg+PopTopic", "CONSUMED")


@pytest.fixture(scope="module")
def built_forms(spark):
    return lineage_of(spark, RECALLED + INNER_BATCHES + [UNWRAPPED_BATCH], (), OFFSETS + FORMS_OFFSETS + INNER_OFFSETS,
                      inner=INNER_MESSAGES)[RUN]


def test_a_recalled_timer_message_is_recalled_not_retrying(built_forms):
    """A timer message whose chain ends in the wheel and holds a recall record (TIMER_DEL_UNIQKEY)
    is RECALLED, also when a roll of the original was stored after the recall."""
    hops, lineage = built_forms
    assert chain(hops, "U14", "timer-group") == [(0, "TIMER", WHEEL), (1, "TIMER", WHEEL)]
    row = lineage[("U14", "timer-group")]
    assert (row.origin_topic, row.hops, row.final_topic, row.final_state) == (
        "TimerTopic", 2, WHEEL, "RECALLED")
    assert chain(hops, "U15", "timer-group") == [(0, "TIMER", WHEEL), (1, "TIMER", WHEEL), (2, "TIMER", WHEEL)]
    assert lineage[("U15", "timer-group")].final_state == "RECALLED"


def test_an_inner_batch_is_consumed_once_offsets_pass_its_last_message(built_forms):
    """An inner-batch record is one PUBLISH hop; it is CONSUMED only when the committed offset
    passes its last inner queue offset (queue offset + INNER_NUM - 1)."""
    hops, lineage = built_forms
    assert chain(hops, "U16", "batch-g") == [(0, "PUBLISH", "BatchTopic")]
    assert lineage[("U16", "batch-g")].final_state == "CONSUMED"  # offsets 0-2 < 4
    assert lineage[("U17", "batch-g")].final_state == "UNCONSUMED"  # offset 4 not yet consumed


def test_an_unwrapped_inner_batch_is_its_messages_each_consumed_by_its_own_offset(built_forms):
    """An inner batch with inner_messages rows is no message itself: each inner message is a
    PUBLISH hop of its own UNIQ_KEY at the batch record's offset, CONSUMED once the committed
    offset passes its own queue offset."""
    hops, lineage = built_forms
    assert not [k for k in hops if k[0] == "U18"] and not [k for k in lineage if k[0] == "U18"]
    for i in range(3):
        assert chain(hops, f"I18-{i}", "batch-g") == [(0, "PUBLISH", "BatchTopic")]
        hop = hops[(f"I18-{i}", None, 0)]
        assert (hop.broker, hop.phys_offset, hop.msg_id, hop.queue_id, ms(hop.store_ts)) == (
            "broker-a", 1800, "M1800", 1, 70200)
        row = lineage[(f"I18-{i}", "batch-g")]
        assert (row.origin_topic, row.origin_msg_id, row.hops, row.path, row.truncated) == (
            "BatchTopic", "M1800", 1, "BatchTopic", False)
    assert [lineage[(f"I18-{i}", "batch-g")].final_state for i in range(3)] == [
        "CONSUMED", "CONSUMED", "UNCONSUMED"]  # committed offset 2 passes offsets 0 and 1


def test_names_tell_bookkeeping_and_pop_v2_groups():
    """The Python rule the SQL and Spark columns restate."""
    assert is_bookkeeping_record(WHEEL, "TimerTopic") is False
    assert is_bookkeeping_record(WHEEL, REVIVE) is True
    assert is_bookkeeping_record(WHEEL, None) is True
    assert is_bookkeeping_record(REVIVE, REVIVE) is True
    assert is_bookkeeping_record("%RETRY%CID_RMQ_SYS_REVIVE_GROUP", None) is True
    assert is_bookkeeping_record("%RETRY%g", None) is False
    assert is_bookkeeping_record("SCHEDULE_TOPIC_XXXX", "%RETRY%g") is False
    # Transactions: an op record is evidence; a half copy and a discarded copy are hops.
    assert is_bookkeeping_record("RMQ_SYS_TRANS_OP_HALF_TOPIC", None) is True
    assert is_bookkeeping_record("RMQ_SYS_TRANS_HALF_TOPIC", "TxTopic") is False
    assert is_bookkeeping_record("TRANS_CHECK_MAX_TIME_TOPIC", "TxTopic") is False
    assert pop_retry_v2_group("%RETRY%pg+PopTopic") == "pg"
    assert pop_retry_v2_group("%RETRY%pg_PopTopic") is None
    assert pop_retry_v2_group("%DLQ%pg+x") is None
