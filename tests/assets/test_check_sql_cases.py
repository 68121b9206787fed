"""Each check's SQL on small hand-written tables: which rows it reports, exactly.

Every test builds, in an in-memory DuckDB, only the columns its check reads, and asserts the
violation rows (run_id, message_key, group, detail) the check returns: none on a passing input,
and one input for each kind of violation the check can report.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from datetime import UTC, datetime, timedelta

import duckdb
import pytest

from assets import checks as c
from broker_core.constants import ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED, RETRY_MAX_TIMES_DEFAULT

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "r"
HOST = "0A00000100002A9F"  # the store host part of an offset msgId: 10.0.0.1:10911

# The columns each check reads, per table (in the warehouse's types).
HOPS = 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hop_kind VARCHAR, hop_index INTEGER, ' \
       'store_ts TIMESTAMPTZ, broker VARCHAR, phys_offset BIGINT, delay_level INTEGER, reconsume_times INTEGER'
RUNS = "run_id VARCHAR, broker VARCHAR, first_offset BIGINT, msg_id_hosts VARCHAR[]"
TX_HOPS = 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hop_kind VARCHAR, broker VARCHAR, phys_offset BIGINT'
TX_COMMITLOG = ("run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, uniq_key VARCHAR, topic VARCHAR, sys_flag INTEGER, "
                "prepared_tx_offset BIGINT")
COLUMNS: dict[str, dict[str, str]] = {
    c.HOP_GRAMMAR: {
        "faults": "run_id VARCHAR, kind VARCHAR",
        "runs": RUNS + ", source VARCHAR",
        "message_hops": HOPS,
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, origin_msg_id VARCHAR, uniq_key VARCHAR, "
                     "properties MAP(VARCHAR, VARCHAR), sys_flag INTEGER, prepared_tx_offset BIGINT, msg_id VARCHAR",
        "message_lineage": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, final_state VARCHAR, '
                           'truncated BOOLEAN',
        "consume_attempts": 'run_id VARCHAR, "group" VARCHAR, uniq_key VARCHAR, queue_topic VARCHAR, '
                            'queue_id INTEGER, queue_offset BIGINT, consumer_id VARCHAR, outcome VARCHAR',
    },
    c.NO_UNEXPLAINED_LOSS: {
        "produced": "run_id VARCHAR, uniq_key VARCHAR, topic VARCHAR, send_ts TIMESTAMPTZ, status VARCHAR",
        "commitlog": "run_id VARCHAR, uniq_key VARCHAR",
        "faults": "run_id VARCHAR, ts TIMESTAMPTZ, kind VARCHAR, detail VARCHAR",
        "run_manifest": "run_id VARCHAR, flush VARCHAR",
    },
    c.DLQ_AFTER_MAX_RETRIES: {
        "message_hops": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hop_kind VARCHAR, '
                        'broker VARCHAR, phys_offset BIGINT, hop_index INTEGER, reconsume_times INTEGER',
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, reconsume_times INTEGER, "
                     "max_reconsume_times INTEGER, properties MAP(VARCHAR, VARCHAR), uniq_key VARCHAR, topic VARCHAR",
        "run_groups": 'run_id VARCHAR, "group" VARCHAR, max_reconsume_times INTEGER, mode VARCHAR',
        "runs": "run_id VARCHAR, source VARCHAR",
        "consume_attempts": 'run_id VARCHAR, "group" VARCHAR, uniq_key VARCHAR, status VARCHAR',
        "message_lineage": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, truncated BOOLEAN',
    },
    c.RETRIES_WITHIN_MAX: {
        "message_hops": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hop_kind VARCHAR, '
                        'broker VARCHAR, phys_offset BIGINT, hop_index INTEGER, reconsume_times INTEGER',
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, reconsume_times INTEGER, "
                     "max_reconsume_times INTEGER, properties MAP(VARCHAR, VARCHAR), uniq_key VARCHAR, topic VARCHAR",
        "run_groups": 'run_id VARCHAR, "group" VARCHAR, max_reconsume_times INTEGER, mode VARCHAR',
        "runs": "run_id VARCHAR, source VARCHAR",
        "consume_attempts": 'run_id VARCHAR, "group" VARCHAR, uniq_key VARCHAR, status VARCHAR',
        "message_lineage": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, truncated BOOLEAN, '
                           'final_state VARCHAR, retries INTEGER, forks INTEGER',
    },
    c.NO_EARLY_DELIVERY: {
        "schedule_deliveries": "run_id VARCHAR, uniq_key VARCHAR, delay_level INTEGER, lateness_ms BIGINT, "
                               "delivered_msg_id VARCHAR, delivered_ts TIMESTAMPTZ, due_ts TIMESTAMPTZ",
        "message_hops": "run_id VARCHAR, message_key VARCHAR, hop_kind VARCHAR, broker VARCHAR, phys_offset BIGINT, "
                        'msg_id VARCHAR, delay_level INTEGER, "group" VARCHAR, hop_index INTEGER, topic VARCHAR, '
                        "store_ts TIMESTAMPTZ, reconsume_times INTEGER",
        "schedule_units": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, due_ts TIMESTAMPTZ",
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, store_ts TIMESTAMPTZ, "
                     "properties MAP(VARCHAR, VARCHAR), topic VARCHAR, queue_id INTEGER, queue_offset BIGINT",
        "retry_topics": 'run_id VARCHAR, broker VARCHAR, retry_topic VARCHAR, "group" VARCHAR, origin_topic VARCHAR',
        "pop_evidence": 'run_id VARCHAR, broker VARCHAR, kind VARCHAR, "group" VARCHAR, topic VARCHAR, '
                        "queue_id INTEGER, offsets BIGINT[], revive_ts TIMESTAMPTZ",
    },
    c.ORIGIN_STABLE: {
        "runs": RUNS,
        "message_hops": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hop_kind VARCHAR, '
                        'broker VARCHAR, phys_offset BIGINT',
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, msg_id VARCHAR, uniq_key VARCHAR, "
                     "origin_msg_id VARCHAR, retry_topic VARCHAR",
        "message_lineage": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, final_state VARCHAR',
    },
    c.LINEAGE_MATCHES_COMMITLOG: {
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, uniq_key VARCHAR, topic VARCHAR, "
                     "real_topic VARCHAR",
        "message_hops": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, broker VARCHAR, phys_offset BIGINT',
        "message_lineage": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hops INTEGER',
        "inner_messages": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, uniq_key VARCHAR, topic VARCHAR",
    },
    c.DUPLICATE_RATE: {
        "delivery_accounting": 'run_id VARCHAR, "group" VARCHAR, duplicated BIGINT, enqueue_success BIGINT',
    },
    c.LATENESS_P99: {
        "delay_accuracy": "run_id VARCHAR, delay_level INTEGER, lateness_p99_ms BIGINT, deliveries BIGINT",
    },
    c.TX_CHECK_MAX: {
        "message_hops": TX_HOPS,
        "commitlog": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, properties MAP(VARCHAR, VARCHAR)",
        "message_lineage": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, transaction_state VARCHAR',
        "run_manifest": "run_id VARCHAR, transaction_check_max INTEGER",
    },
    c.TX_COMMIT_HALF: {
        "commitlog": TX_COMMITLOG,
        "message_hops": TX_HOPS,
        "runs": RUNS,
    },
    c.TX_OP_HALF: {
        "transaction_ops": "run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, queue_id INTEGER, "
                           "half_queue_offsets BIGINT[]",
        "commitlog": "run_id VARCHAR, broker VARCHAR, topic VARCHAR, queue_id INTEGER, queue_offset BIGINT",
        "runs": RUNS,
    },
    c.TX_COMMITTED_ONCE: {
        "commitlog": TX_COMMITLOG,
        "message_hops": TX_HOPS,
    },
    c.TRACE_SEND_OK_STORED: {
        "client_trace": 'run_id VARCHAR, trace_type VARCHAR, msg_id VARCHAR, "group" VARCHAR, store_host VARCHAR, '
                        "offset_msg_id VARCHAR, ts TIMESTAMPTZ, cost_ms INTEGER, success BOOLEAN",
        "runs": "run_id VARCHAR, broker VARCHAR, first_offset BIGINT, sim_end_ts TIMESTAMPTZ, msg_id_hosts VARCHAR[]",
        "commitlog": "run_id VARCHAR, broker VARCHAR, msg_id VARCHAR, uniq_key VARCHAR",
    },
    c.TRACE_FAILED_CONSUME_RETRIED: {
        "client_trace": 'run_id VARCHAR, trace_type VARCHAR, request_id VARCHAR, msg_id VARCHAR, "group" VARCHAR, '
                        "retry_times INTEGER, ts TIMESTAMPTZ, cost_ms INTEGER, success BOOLEAN, consume_return VARCHAR",
        "runs": "run_id VARCHAR, broker VARCHAR, sim_end_ts TIMESTAMPTZ",
        "message_hops": 'run_id VARCHAR, message_key VARCHAR, "group" VARCHAR, hop_kind VARCHAR, reconsume_times INTEGER',
    },
    c.TRACE_DECISION_STORED: {
        "client_trace": 'run_id VARCHAR, trace_type VARCHAR, msg_id VARCHAR, "group" VARCHAR, transaction_state VARCHAR, '
                        "from_transaction_check BOOLEAN, ts TIMESTAMPTZ",
        "message_hops": "run_id VARCHAR, message_key VARCHAR, hop_kind VARCHAR, broker VARCHAR",
        "runs": "run_id VARCHAR, broker VARCHAR, sim_end_ts TIMESTAMPTZ",
        "message_lineage": "run_id VARCHAR, message_key VARCHAR, transaction_state VARCHAR",
    },
}


def _loaded(check: str, tables: dict[str, list[tuple]]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding the tables ``check`` reads, with ``tables``' rows (the rest empty)."""
    unknown = set(tables) - set(COLUMNS[check])
    assert not unknown, f"{check} does not read {unknown}"
    con = duckdb.connect()
    for table, columns in COLUMNS[check].items():
        con.execute(f"CREATE TABLE {table} ({columns})")
        rows = tables.get(table, [])
        if rows:
            # A row gives the table's first columns; the rest are NULL.
            names = [d[0] for d in con.execute(f"SELECT * FROM {table} LIMIT 0").description][:len(rows[0])]
            marks = ", ".join("?" * len(rows[0]))
            quoted = ", ".join(f'"{n}"' for n in names)
            con.executemany(f"INSERT INTO {table} ({quoted}) VALUES ({marks})", rows)
    return con


def _staged(con: duckdb.DuckDBPyConnection, check: str):
    """The check's staged tables (``checks.staged_inputs``) where its SQL reads them: the tables
    here hold only the columns a check reads, which the staging of a check that reads none lacks."""
    sql = c.CHECKS_BY_NAME[check].sql + c.CHECKS_BY_NAME[check].evidence
    return c.staged_inputs(con) if any(t in sql for t in c.STAGED_INPUTS) else contextlib.nullcontext(con)


def violations(check: str, tables: dict[str, list[tuple]]) -> list[tuple]:
    """The rows ``check`` reports on ``tables`` (the tables it reads that are not given are empty)."""
    con = _loaded(check, tables)
    try:
        with _staged(con, check):
            return sorted(con.execute(f'SELECT run_id, message_key, "group", detail FROM '
                                      f'({c.CHECKS_BY_NAME[check].sql})').fetchall(), key=repr)
    finally:
        con.close()


def judged(check: str, tables: dict[str, list[tuple]]) -> int:
    """How many things ``check``'s evidence query says it judged on ``tables``."""
    con = _loaded(check, tables)
    try:
        with _staged(con, check):
            return int(con.execute(f"SELECT coalesce(sum(judged), 0) FROM ({c.CHECKS_BY_NAME[check].evidence})")
                       .fetchone()[0])
    finally:
        con.close()


def ts(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def msg_id(offset: int) -> str:
    return f"{HOST}{offset:016X}"


def merged(*parts: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    tables: dict[str, list[tuple]] = {}
    for part in parts:
        for table, rows in part.items():
            tables.setdefault(table, []).extend(rows)
    return tables


# --- hop_grammar_valid ---------------------------------------------------------------------------

KINDS = {"P": "PUBLISH", "S": "SCHEDULE", "T": "TIMER", "D": "DELIVER", "R": "RETRY", "Q": "DLQ"}
_offsets = itertools.count(1000, 100)


def reconsumes(letters: str) -> list[int]:
    """The reconsume times of a branch's hops sent back one after another: a SCHEDULE and the
    RETRY it is delivered as carry k, the next send-back k + 1 (k from 1)."""
    times, k = [], 1
    for letter in letters:
        times.append(k)
        k += letter == "R"
    return times


def journey(key: str, shared: str, branches: tuple[tuple, ...] = (), *, run: str = RUN,
            group: str = "g", first_index: int = 0, final_state: str = "CONSUMED", truncated: bool = False,
            lineage_rows: int = 1, pop: bool = False) -> dict[str, list[tuple]]:
    """A message's hops as letters (P PUBLISH, S SCHEDULE, T TIMER, D DELIVER, R RETRY, Q DLQ): its shared
    hops, then each branch of ``group`` (origin, letters[, reconsume times of each hop]), numbered
    from ``first_index`` in that order; the group's records carry their branch's ORIGIN_MESSAGE_ID.
    A SCHEDULE hop has delay level 2 + its reconsume times, the others none. ``pop``: the group's
    RETRY records carry 1ST_POP_TIME (a 5.x POP revive wrote them)."""
    hops, records = [], []
    steps = [(None, None, letter, 0) for letter in shared]
    for origin, letters, *times in branches:
        steps += [(group, origin, letter, k)
                  for letter, k in zip(letters, times[0] if times else reconsumes(letters), strict=True)]
    for i, (hop_group, origin, letter, k) in enumerate(steps):
        offset = next(_offsets)
        level = 2 + k if letter == "S" else 0
        hops.append((run, key, hop_group, KINDS[letter], first_index + i, ts(i), "broker-a", offset, level, k))
        pop_retry = pop and hop_group is not None and letter == "R"
        records.append((run, "broker-a", offset, origin, key, {"1ST_POP_TIME": "1000"} if pop_retry else {}))
    lineage = [(run, key, group, final_state, truncated)] * lineage_rows
    return {"message_hops": hops, "commitlog": records, "message_lineage": lineage}


def crashed(run: str) -> dict[str, list[tuple]]:
    return {"faults": [(run, "broker_crash")]}


def cut(run: str, first_offset: int) -> dict[str, list[tuple]]:
    """A run whose broker's commit log starts at ``first_offset`` (retention deleted the rest)."""
    return {"runs": [(run, "broker-a", first_offset, [HOST], "simulation")]}


def imported(run: str) -> dict[str, list[tuple]]:
    """A run imported from a store (its commit log from offset 0)."""
    return {"runs": [(run, "broker-a", 0, [HOST], "import")]}


def test_hop_grammar_passes_every_journey_a_message_may_take():
    """Consumed, retried to the DLQ, a delayed publish, a retried send stored twice, a DLQ through
    the schedule, two branches, interleaved retries after a crash, a chain cut by retention."""
    tables = merged(
        journey("consumed", "P"),
        journey("dlq", "P", (("O1", "SRSRQ"),), final_state="DLQ"),
        journey("delayed", "SD"),
        journey("sent-twice", "PP"),
        journey("dlq-via-schedule", "P", (("O2", "SRSQ"),), final_state="DLQ"),
        journey("two-branches", "P", (("O3", "SR"), ("O4", "SRS")), final_state="RETRYING"),
        journey("waiting", "P", (("O5", "S"),), final_state="RETRYING"),
        crashed("crash"),
        journey("re-put", "SDD", run="crash"),
        # Sent back twice from one record: two copies of reconsume times 1 interleave.
        journey("interleaved", "P", (("O6", "SSRR", [1, 1, 1, 1]),), run="crash"),
        # A restarted broker re-put its schedule record: the RETRY repeats.
        journey("re-put-retry", "P", (("O9", "SRR", [1, 1, 1]),), run="crash"),
        imported("import"),
        journey("interleaved-import", "P", (("O10", "SSRR", [1, 1, 1, 1]),), run="import"),
        cut("cut", 5000),
        journey("head-gone", "", (("O7", "SR"),), run="cut", truncated=True),
        journey("lone-deliver", "D", run="cut", truncated=True),
        # Its branch's first SCHEDULE is gone: the origin names a record below the first offset.
        journey("restored", "P", ((msg_id(4000), "RSR"),), run="cut", final_state="RETRYING", truncated=True),
    )
    assert violations(c.HOP_GRAMMAR, tables) == []


def test_hop_grammar_passes_timer_messages():
    """A 5.x timer message: TIMER, its rolls (more TIMERs), then one DELIVER; TIMERs alone while it
    waits or once it was recalled; a second DELIVER after a crash; then a group's retries as for any
    message."""
    tables = merged(
        journey("timer", "TD"),
        journey("rolled", "TTTD"),
        journey("waiting", "TT", final_state="RETRYING"),
        # Recalled in the wheel: its recall record is one more TIMER, a roll may follow it.
        journey("recalled", "TT", final_state="RECALLED"),
        journey("recalled-rolled", "TTT", final_state="RECALLED"),
        journey("timer-retried", "TD", (("O1", "SRSRQ"),), final_state="DLQ"),
        crashed("crash"),
        journey("timer-re-put", "TDD", run="crash"),
    )
    assert violations(c.HOP_GRAMMAR, tables) == []


def test_hop_grammar_passes_pop_retries_and_only_those_without_schedule():
    """A 5.x POP group's retries (RETRY records with 1ST_POP_TIME, no ORIGIN_MESSAGE_ID) need no
    SCHEDULE before them; RETRY records without it still do. A POP record still invisible at the
    snapshot (IN_FLIGHT) is the PUBLISH alone or after its retries."""
    tables = merged(
        journey("pop", "P", (("", "RRR"),), pop=True),
        journey("pop-once", "P", (("", "R"),), pop=True, final_state="RETRYING"),
        journey("pop-in-flight", "P", final_state="IN_FLIGHT"),
        journey("pop-retry-in-flight", "P", (("", "RR"),), pop=True, final_state="IN_FLIGHT"),
        journey("push", "P", (("O1", "RR"),)),
    )
    found = violations(c.HOP_GRAMMAR, tables)
    assert [(run, key, group) for run, key, group, _why in found] == [(RUN, "push", "g")], found


def test_hop_grammar_reports_timer_hops_out_of_order():
    """A DELIVER before a TIMER, two DELIVERs without a crash, a TIMER mixed with a PUBLISH or a
    SCHEDULE: none is a timer message's journey."""
    tables = merged(journey("m1", "TDT"), journey("m2", "TDD"), journey("m3", "PT"), journey("m4", "TSD"))
    assert violations(c.HOP_GRAMMAR, tables) == [
        (RUN, "m1", None, "shared hops TIMER > DELIVER > TIMER are not PUBLISH, SCHEDULE -> DELIVER, "
                          "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
        (RUN, "m2", None, "shared hops TIMER > DELIVER > DELIVER are not PUBLISH, SCHEDULE -> DELIVER, "
                          "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
        (RUN, "m3", None, "shared hops PUBLISH > TIMER are not PUBLISH, SCHEDULE -> DELIVER, "
        "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
        (RUN, "m4", None, "shared hops TIMER > SCHEDULE > DELIVER are not PUBLISH, SCHEDULE -> DELIVER, "
                          "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
    ]


def test_hop_grammar_reports_shared_hops_out_of_order():
    """Shared hops are PUBLISHes, or one SCHEDULE then a DELIVER (more DELIVERs only after a crash)."""
    tables = merged(journey("m1", "PD"), journey("m2", "SDD"), journey("m3", "DS"))
    assert violations(c.HOP_GRAMMAR, tables) == [
        (RUN, "m1", None, "shared hops PUBLISH > DELIVER are not PUBLISH, SCHEDULE -> DELIVER, "
        "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
        (RUN, "m2", None, "shared hops SCHEDULE > DELIVER > DELIVER are not PUBLISH, SCHEDULE -> DELIVER, "
        "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
        (RUN, "m3", None, "shared hops DELIVER > SCHEDULE are not PUBLISH, SCHEDULE -> DELIVER, "
        "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"),
    ]


def test_hop_grammar_reports_a_branch_out_of_order():
    """A branch reads (SCHEDULE -> RETRY)* -> (SCHEDULE | SCHEDULE? -> DLQ)?."""
    tables = merged(journey("m1", "P", (("O1", "RS"),)), journey("m2", "P", (("", "SRQS"),)))
    assert violations(c.HOP_GRAMMAR, tables) == [
        (RUN, "m1", "g", "branch O1: RETRY > SCHEDULE is not (SCHEDULE -> RETRY)* -> DLQ?"),
        (RUN, "m2", "g", "branch (no ORIGIN_MESSAGE_ID): SCHEDULE > RETRY > DLQ > SCHEDULE "
                         "is not (SCHEDULE -> RETRY)* -> DLQ?"),
    ]


def test_hop_grammar_allows_interleaving_only_after_a_crash_or_a_redelivery():
    """Two sends-back from one record interleave (after a crash, in an imported store, or where the
    group got the record twice); a RETRY still needs a SCHEDULE before it, a repeated RETRY is
    forgiven only where a broker may have re-put it, and a later SCHEDULE needs the RETRY it was
    sent back from, unless its DLQ follows it (a send past the max: an orderly client's, from any
    record it retried locally)."""
    redelivered = [(RUN, "g", "twice", "OrderTopic", 0, 7, "c1", "SENT_BACK")] * 2
    double = ("SSRR", [1, 1, 1, 1])
    tables = merged(
        journey("once", "P", (("O1", *double),)),
        journey("twice", "P", (("O2", *double),)),
        journey("re-put-retry", "P", (("O4", "SRR", [1, 1, 1]),)),
        {"consume_attempts": redelivered},
        crashed("crash"),
        journey("retry-first", "P", (("O3", "SRR"),), run="crash"),
        journey("orphan-send", "P", (("O5", "SSRR", [1, 2, 1, 2]),), run="crash"),
        # An orderly group (max 2) sent its retry back past the max, then the message's own record,
        # handed to it again after a broker crash lost the committed offset: two sends past the max
        # from records of reconsume times 0 (what a real 4.9.4 run of make conformance stored).
        journey("orderly-twice", "P", (("O6", "SRSQSQ", [0, 0, 3, 3, 3, 3]),), run="crash",
                final_state="DLQ"),
        # A send past the max still needs its DLQ after it to need no RETRY of k - 1.
        journey("orphan-no-dlq", "P", (("O7", "SRSQS", [1, 1, 3, 3, 3]),), run="crash", final_state="DLQ"),
        # A client's own send that lost its count (RETRY_COUNT_LOST) stores the retry at count 0,
        # from a record of any count, and the counts start again from it: the branch's first
        # SCHEDULE, at count 1, needs no RETRY of count 0 (a real 4.9.4 run, broker-a killed at
        # 1.5 s: S1 R1 S0 R0 S1 R1 S2 R2 in one branch, here with a re-put RETRY and its copies).
        journey("count-reset", "P", (("O8", "SRSRRSSRSRR", [1, 1, 0, 0, 0, 1, 1, 1, 2, 1, 2]),), run="crash"),
        # After a reset, a SCHEDULE still needs the RETRY it was sent back from.
        journey("count-reset-orphan", "P", (("O9", "SRSRSSRR", [1, 1, 0, 0, 3, 1, 1, 3]),), run="crash"),
    )
    interleaving = " nor an interleaving of such sequences"
    assert violations(c.HOP_GRAMMAR, tables) == [
        ("crash", "count-reset-orphan", "g",
         "branch O9: SCHEDULE > RETRY > SCHEDULE > RETRY > SCHEDULE > SCHEDULE > RETRY > RETRY "
         "is not (SCHEDULE -> RETRY)* -> DLQ?" + interleaving),
        ("crash", "orphan-no-dlq", "g",
         "branch O7: SCHEDULE > RETRY > SCHEDULE > DLQ > SCHEDULE is not (SCHEDULE -> RETRY)* -> DLQ?"
         + interleaving),
        ("crash", "orphan-send", "g",
         "branch O5: SCHEDULE > SCHEDULE > RETRY > RETRY is not (SCHEDULE -> RETRY)* -> DLQ?" + interleaving),
        ("crash", "retry-first", "g",
         "branch O3: SCHEDULE > RETRY > RETRY is not (SCHEDULE -> RETRY)* -> DLQ?" + interleaving),
        (RUN, "once", "g", "branch O1: SCHEDULE > SCHEDULE > RETRY > RETRY is not (SCHEDULE -> RETRY)* -> DLQ?"),
        (RUN, "re-put-retry", "g", "branch O4: SCHEDULE > RETRY > RETRY is not (SCHEDULE -> RETRY)* -> DLQ?"),
    ]


def test_hop_grammar_reports_group_hops_without_shared_hops():
    """Outside a run cut by retention, a group's hops follow the message's real record."""
    assert violations(c.HOP_GRAMMAR, journey("m1", "", (("O1", "SR"),))) == [
        (RUN, "m1", "g", "group hops without a real record before them"),
    ]


def test_hop_grammar_reports_a_truncated_flag_the_hops_contradict():
    """truncated is set exactly where the chain's first hops are missing from a cut commit log."""
    tables = merged(
        journey("whole", "P", truncated=True),
        cut("cut", 5000),
        journey("head-gone", "", (("O1", "SR"),), run="cut"),
    )
    assert violations(c.HOP_GRAMMAR, tables) == [
        ("cut", "head-gone", "g", "not truncated, but its first hops are before the commit log's first offset"),
        (RUN, "whole", "g", "truncated, but its first hop is in the commit log"),
    ]


def placed(key: str, hops: str, offsets: list[int], *, run: str, truncated: bool,
           final_state: str = "CONSUMED") -> dict[str, list[tuple]]:
    """A message whose first hop is a PUBLISH and the rest group g's one branch (its
    ORIGIN_MESSAGE_ID the PUBLISH's msgId), each hop at the given physical offset on broker-a."""
    tables = journey(key, hops[0], ((msg_id(offsets[0]), hops[1:]),), run=run, truncated=truncated,
                     final_state=final_state)
    times = reconsumes(hops[1:])
    tables["message_hops"] = [(*h[:7], offset, 2 + times[i - 1] if h[3] == "SCHEDULE" else 0, h[9])
                              for i, (h, offset) in enumerate(zip(tables["message_hops"], offsets, strict=True))]
    tables["commitlog"] = [(*r[:2], offset, *r[3:], None, None, msg_id(offset))
                           for r, offset in zip(tables["commitlog"], offsets, strict=True)]
    return tables


def test_hop_grammar_puts_back_schedule_hops_only_where_retention_deleted_them():
    """In a log that starts at 5000 (a tiered store's import brought back records below it): a
    RETRY below the first offset lost its SCHEDULE to retention (the chain must be truncated); a
    RETRY whose SCHEDULE would sit in the kept log is reported; a message whose first record came
    back and whose other hops are all kept is whole (not truncated)."""
    tables = merged(
        cut("tier", 5000),
        placed("gap", "PRSRQ", [1000, 2000, 6000, 7000, 8000], run="tier", truncated=True, final_state="DLQ"),
        placed("first-retry-gap", "PR", [1100, 2100], run="tier", truncated=True),
        placed("whole-again", "PSR", [1200, 6200, 7200], run="tier", truncated=False),
        placed("kept-place", "PR", [6300, 7300], run="tier", truncated=False),
        placed("kept-middle", "PSRRQ", [1400, 6400, 7400, 8400, 9400], run="tier", truncated=False,
               final_state="DLQ"),
    )
    got = violations(c.HOP_GRAMMAR, tables)
    assert [(key, detail.split(": ", 1)[1] if ": " in detail else detail) for _run, key, _g, detail in got] == [
        ("kept-middle", "SCHEDULE > RETRY > RETRY > DLQ is not (SCHEDULE -> RETRY)* -> DLQ?"),
        ("kept-place", "RETRY is not (SCHEDULE -> RETRY)* -> DLQ?"),
    ], got


def test_hop_grammar_reports_hop_indexes_that_do_not_run_from_zero():
    """A chain's hop_index runs 0..n-1 over its hops; a chain listed twice counts them twice."""
    tables = merged(
        journey("late-start", "P", (("O1", "SR"),), first_index=1),
        journey("listed-twice", "P", lineage_rows=2),
        {"message_lineage": [(RUN, "hopless", "g", "UNCONSUMED", False)]},
    )
    assert violations(c.HOP_GRAMMAR, tables) == [
        (RUN, "hopless", "g", "no hops"),
        (RUN, "late-start", "g", "hop_index runs 1..3 over 3 hops"),
        (RUN, "listed-twice", "g", "hop_index runs 0..0 over 2 hops"),
    ]


@pytest.mark.parametrize("crash", [False, True])
def test_hop_grammar_judges_shared_hops_as_the_documented_expressions(crash):
    """Shared hops pass exactly when they match ^(P+|SD?)$, or ^(P+|SD*)$ in a crashed run (the
    query counts them instead; docs/warehouse.md states the expressions)."""
    expression = re.compile(r"^(P+|SD*)$" if crash else r"^(P+|SD?)$")
    shapes = ["".join(s) for n in range(1, 5) for s in itertools.product("PSD", repeat=n)]
    tables = merged(*(journey(shape, shape) for shape in shapes), crashed(RUN) if crash else {})
    reported = {key for _, key, _, _ in violations(c.HOP_GRAMMAR, tables)}
    assert reported == {shape for shape in shapes if not expression.match(shape)}
    assert len(reported) > len(shapes) // 2, "the check reported too few shapes to be judging them"


def test_hop_grammar_skips_lost_chains():
    """A LOST chain has no hops to judge."""
    assert violations(c.HOP_GRAMMAR, journey("lost", "", final_state="LOST")) == []


# --- nothing_lost_unexplained --------------------------------------------------------------------

def loss_tables(*, faults=(), flush="async", status="SEND_OK"):
    """One message sent at 10 s to OrderTopic, with no commit-log record."""
    return {"produced": [(RUN, "u1", "OrderTopic", ts(10), status), (RUN, "u2", "OrderTopic", ts(11), "SEND_OK")],
            "commitlog": [(RUN, "u2")],
            "faults": [(RUN, ts(t), kind, detail) for t, kind, detail in faults],
            "run_manifest": [(RUN, flush)]}


LOST_U1 = (RUN, "u1", None, "SEND_OK to OrderTopic at 2026-01-01T00:00:10.000 has no commit-log record "
                            "and no broker_crash under async flush after it")


@pytest.mark.parametrize("faults", [[(20, "broker_crash", "kill -9")], [(10, "torn_write", None)]])
def test_loss_is_explained_by_a_crash_after_the_send_under_async_flush(faults):
    """A kill -9 at or after the send, under async flush, may lose the message."""
    assert violations(c.NO_UNEXPLAINED_LOSS, loss_tables(faults=faults)) == []


def test_a_message_never_acknowledged_is_not_lost():
    """Only SEND_OK messages must be in the commit log."""
    assert violations(c.NO_UNEXPLAINED_LOSS, loss_tables(status="FLUSH_DISK_TIMEOUT")) == []


@pytest.mark.parametrize("case", ["no fault", "crash before the send", "sync flush", "skipped crash",
                                  "other fault"])
def test_loss_without_a_crash_that_explains_it_is_reported(case):
    """Nothing else explains a SEND_OK message missing from the commit log."""
    tables = {
        "no fault": loss_tables(),
        "crash before the send": loss_tables(faults=[(9, "broker_crash", None)]),
        "sync flush": loss_tables(faults=[(20, "broker_crash", None)], flush="sync"),
        "skipped crash": loss_tables(faults=[(20, "broker_crash", "skipped: broker already down")]),
        "other fault": loss_tables(faults=[(20, "consumer_crash", None)]),
    }[case]
    assert violations(c.NO_UNEXPLAINED_LOSS, tables) == [LOST_U1]


def test_loss_without_a_manifest_counts_as_async_and_names_what_is_missing():
    """An unknown flush mode is async; an unknown topic or send time reads '?'."""
    tables = loss_tables(faults=[(20, "broker_crash", None)])
    tables["run_manifest"] = []
    tables["produced"].append((RUN, "u3", None, None, "SEND_OK"))
    assert violations(c.NO_UNEXPLAINED_LOSS, tables) == [
        (RUN, "u3", None, "SEND_OK to ? at ? has no commit-log record and no broker_crash under async flush after it"),
    ]


# --- dlq_only_after_max_retries ------------------------------------------------------------------

def dlq(key: str, *, group="g", reconsume_times: int, max_reconsume_times: int | None = -1,
        properties: dict | None = None, retries: int = 0, run: str = RUN,
        delivered: bool = True) -> dict[str, list[tuple]]:
    """A message's chain: its PUBLISH, ``retries`` RETRY hops (reconsume times 1, 2, ...) and its
    DLQ record with its counts and properties. ``delivered`` False leaves out every delivery the
    DLQ record could have been sent back from (the PUBLISH and the retries)."""
    offset = next(_offsets)
    hops = []
    if delivered:
        hops.append((run, key, None, "PUBLISH", "broker-a", offset + 1, 0, 0))
        hops += [(run, key, group, "RETRY", "broker-a", offset + 2 + i, 1 + i, 1 + i) for i in range(retries)]
    hops.append((run, key, group, "DLQ", "broker-a", offset, retries + 1, reconsume_times))
    return {"message_hops": hops,
            "commitlog": [(run, "broker-a", offset, reconsume_times, max_reconsume_times, properties or {}, key)]}


def groups(*rows) -> dict[str, list[tuple]]:
    return {"run_groups": [(RUN, *row) for row in rows]}


SIMULATION = {"runs": [(RUN, "simulation")]}


def requested(key: str, group: str = "g") -> dict[str, list[tuple]]:
    """A simulated delivery of ``key`` that the listener answered with DLQ_REQUESTED."""
    return {"consume_attempts": [(RUN, group, key, "DLQ_REQUESTED")]}


def test_dlq_passes_at_the_maximum():
    """A DLQ record whose reconsume count reached its maximum, read from each place it may be."""
    tables = merged(
        SIMULATION,
        groups(("g", -1, "CONCURRENTLY"), ("small", 2, "CONCURRENTLY")),
        # The default maximum, the group's configured one, the record's own.
        dlq("default", reconsume_times=RETRY_MAX_TIMES_DEFAULT + 1, retries=RETRY_MAX_TIMES_DEFAULT),
        dlq("configured", group="small", reconsume_times=3, retries=2),
        dlq("own", reconsume_times=4, max_reconsume_times=3, retries=3),
        # A client's send to %RETRY%: the count is the RECONSUME_TIME property.
        dlq("client-send", group="small", reconsume_times=2, properties={"RECONSUME_TIME": "2"}),
    )
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == []


def test_dlq_a_consumer_asked_for_is_explained():
    """A send-back before the maximum (delay level -1): in a simulation the listener's
    DLQ_REQUESTED says so; in an imported store the delivery it was sent back from is enough
    (the store cannot tell -1 from a client with a lower maximum of its own)."""
    sim = merged(SIMULATION, groups(("g", 3, "CONCURRENTLY")),
                 dlq("first", reconsume_times=1), requested("first"),
                 dlq("second", reconsume_times=2, retries=1), requested("second"))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, sim) == []
    imported = merged(dlq("first", reconsume_times=1), dlq("at-max", reconsume_times=4, retries=3))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, imported) == []


def test_dlq_before_the_maximum_that_nobody_asked_for_is_reported():
    """A simulation knows every listener verdict: a send-back before the maximum needs one."""
    tables = merged(SIMULATION, groups(("g", -1, "CONCURRENTLY")), dlq("early", reconsume_times=5, retries=4),
                    requested("early", group="other"))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == [
        (RUN, "early", "g", f"in the DLQ after 4 reconsumes (4 retry hops); the maximum is {RETRY_MAX_TIMES_DEFAULT}, "
                            "and no delivery the listener answered with DLQ_REQUESTED"),
    ]


def test_dlq_of_an_orderly_group_with_the_default_maximum_is_reported():
    """-1 configured means unlimited when consuming orderly: no count reaches it."""
    tables = merged(SIMULATION, groups(("g", -1, "orderly")), dlq("o1", reconsume_times=17, retries=16))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == [
        (RUN, "o1", "g", f"in the DLQ after 16 reconsumes (16 retry hops); the maximum is "
                         f"{ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED}, and no delivery the listener answered with "
                         "DLQ_REQUESTED"),
    ]


def test_dlq_of_a_client_send_below_its_maximum_is_reported():
    """A client's own send to %RETRY% (RECONSUME_TIME equal to the binary count) is diverted only at
    its maximum: below it nothing explains the DLQ, in a store or a simulation."""
    tables = merged(dlq("m1", reconsume_times=2, max_reconsume_times=5, properties={"RECONSUME_TIME": "2"},
                        retries=1))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == [
        (RUN, "m1", "g", "in the DLQ after 2 reconsumes (1 retry hops); the maximum is 5, "
                         "and a client's send to %RETRY% below its maximum"),
    ]


def test_dlq_explained_carries_each_dlq_records_properties_whatever_its_topic():
    """dlq_messages takes the DLQ records' maps from dlq_explained, which reads those in %DLQ% topics
    by a scan filtered on topic and any other a DLQ hop names by a join: both come back whole."""
    in_dlq = dlq("m1", reconsume_times=2, properties={"RECONSUME_TIME": "2", "KEYS": "a"}, retries=1)
    in_dlq["commitlog"] = [(*r, "%DLQ%g") for r in in_dlq["commitlog"]]
    elsewhere = dlq("m2", reconsume_times=1, properties={"KEYS": "b"})
    elsewhere["commitlog"] = [(*r, None) for r in elsewhere["commitlog"]]  # no topic: not a %DLQ% one
    con = _loaded(c.DLQ_AFTER_MAX_RETRIES, merged(in_dlq, elsewhere))
    try:
        with c.staged_inputs(con):
            rows = con.execute(f"SELECT message_key, properties FROM ({c.sql_fragment('dlq_explained')}) "
                               "ORDER BY message_key").fetchall()
    finally:
        con.close()
    assert rows == [("m1", {"RECONSUME_TIME": "2", "KEYS": "a"}), ("m2", {"KEYS": "b"})]


def test_dlq_before_the_records_own_maximum_with_no_delivery_is_reported():
    """The record's MAX_RECONSUME_TIMES wins over the group's configuration; a stale, smaller
    RECONSUME_TIME does not lower the count; with no delivery at count - 1 no send-back explains it."""
    tables = merged(groups(("g", 1, "CONCURRENTLY")),
                    dlq("m1", reconsume_times=3, max_reconsume_times=5, properties={"RECONSUME_TIME": "1"}))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == [
        (RUN, "m1", "g", "in the DLQ after 2 reconsumes (0 retry hops); the maximum is 5, "
                         "and no delivery at reconsume 2 in its chain that a send-back could come from"),
    ]


def test_dlq_at_the_maximum_with_no_delivery_to_send_back_is_reported():
    """The maximum is reached only by a send-back of a delivery: a DLQ record whose chain holds no
    record at its count - 1 came from no delivery of that chain."""
    tables = merged(groups(("g", 2, "CONCURRENTLY")), dlq("orphan", reconsume_times=3, delivered=False),
                    dlq("ok", reconsume_times=3, retries=2))
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == [
        (RUN, "orphan", "g", "in the DLQ after 2 reconsumes (0 retry hops); the maximum is 2, "
                             "and no delivery at reconsume 2 in its chain that a send-back could come from"),
    ]


def test_dlq_whose_deliveries_retention_removed_is_not_reported():
    """A truncated chain lost the delivery it was sent back from with the deleted files."""
    tables = merged(dlq("gone", reconsume_times=3, max_reconsume_times=5, delivered=False),
                    {"message_lineage": [(RUN, "gone", "g", True)]})
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == []
    tables["message_lineage"] = [(RUN, "gone", "g", False)]
    assert len(violations(c.DLQ_AFTER_MAX_RETRIES, tables)) == 1


def test_dlq_without_a_configuration_is_judged_by_the_groups_other_records():
    """An imported store: the maximum the group's records carry, else the largest count among its DLQ records."""
    tables = merged(
        dlq("carried-max", reconsume_times=3, max_reconsume_times=None, delivered=False),
        {"message_hops": [(RUN, "other", "g", "RETRY", "broker-b", 1, 1, 1)],
         "commitlog": [(RUN, "broker-b", 1, 1, 4, {}, "other")]},
        dlq("full", group="import", reconsume_times=7, max_reconsume_times=None, retries=6),
        dlq("short", group="import", reconsume_times=3, max_reconsume_times=None, delivered=False),
    )
    assert violations(c.DLQ_AFTER_MAX_RETRIES, tables) == [
        (RUN, "carried-max", "g", "in the DLQ after 2 reconsumes (0 retry hops); the maximum is 4, "
                                  "and no delivery at reconsume 2 in its chain that a send-back could come from"),
        (RUN, "short", "import", "in the DLQ after 2 reconsumes (0 retry hops); the maximum is 6, "
                                 "and no delivery at reconsume 2 in its chain that a send-back could come from"),
    ]


# --- no_delivery_before_due_time -----------------------------------------------------------------

def delivery(key, lateness_ms, *, due=10.0, delivered=None, msg="M1"):
    delivered = due + lateness_ms / 1000 if delivered is None else delivered
    return (RUN, key, 3, lateness_ms, msg, ts(delivered), ts(due))


def test_deliveries_at_or_after_their_due_time_pass():
    """lateness_ms >= 0 and delivered_ts >= due_ts."""
    rows = [delivery("on-time", 0), delivery("late", 250)]
    assert violations(c.NO_EARLY_DELIVERY, {"schedule_deliveries": rows}) == []


def test_an_early_delivery_is_reported_by_either_measure():
    """A negative lateness, or a delivery time before the due time (whatever lateness says)."""
    rows = [delivery("early", -5), delivery("clock", 0, delivered=9.0), delivery("no-id", -1, msg=None)]
    assert violations(c.NO_EARLY_DELIVERY, {"schedule_deliveries": rows}) == [
        (RUN, "clock", None, "level 3 delivered 0 ms before its due time (msgId M1)"),
        (RUN, "early", None, "level 3 delivered 5 ms before its due time (msgId M1)"),
        (RUN, "no-id", None, "level 3 delivered 1 ms before its due time (msgId ?)"),
    ]


def store_hop(key, kind, offset, at, *, group="g", level=3, reconsume=1):
    """A message_hops row of an imported store (no schedule_deliveries) at ``at`` seconds."""
    return (RUN, key, kind, "b", offset, f"M{offset}", level, group, offset, "T", ts(at), reconsume)


def test_a_store_delivery_at_or_after_its_schedule_records_due_time_passes():
    """An import: each re-put record against the due time of its SCHEDULE record's queue unit; a
    copy a restart put again after the first delivery is not early; no unit, no judgement."""
    tables = {"message_hops": [store_hop("on-time", "SCHEDULE", 1, 0), store_hop("on-time", "RETRY", 2, 10),
                               store_hop("copy", "SCHEDULE", 3, 0), store_hop("copy", "RETRY", 4, 10),
                               store_hop("copy", "RETRY", 5, 12),
                               store_hop("no-unit", "SCHEDULE", 6, 0), store_hop("no-unit", "RETRY", 7, 1),
                               store_hop("shared", "SCHEDULE", 8, 0, group=None, reconsume=0),
                               store_hop("shared", "DELIVER", 9, 10, group=None, reconsume=0)],
              "schedule_units": [(RUN, "b", 1, ts(10)), (RUN, "b", 3, ts(10)), (RUN, "b", 8, ts(10))]}
    assert violations(c.NO_EARLY_DELIVERY, tables) == []


def test_a_store_delivery_before_its_schedule_records_due_time_is_reported():
    """A RETRY or DELIVER stored before the unit's due time of every SCHEDULE record it can come from."""
    tables = {"message_hops": [store_hop("early", "SCHEDULE", 1, 0), store_hop("early", "RETRY", 2, 9.5),
                               store_hop("shared", "SCHEDULE", 8, 0, group=None, reconsume=0),
                               store_hop("shared", "DELIVER", 9, 4, group=None, reconsume=0)],
              "schedule_units": [(RUN, "b", 1, ts(10)), (RUN, "b", 8, ts(10))]}
    assert violations(c.NO_EARLY_DELIVERY, tables) == [
        (RUN, "early", "g", "level 3 delivered 500 ms before its SCHEDULE record's due time in the schedule "
                            "queue (msgId M2)"),
        (RUN, "shared", None, "level 3 delivered 6000 ms before its SCHEDULE record's due time in the schedule "
                              "queue (msgId M9)"),
    ]
    # A simulated run is judged by its schedule_deliveries instead (each delivery once).
    tables["schedule_deliveries"] = [delivery("other", 0)]
    assert violations(c.NO_EARLY_DELIVERY, tables) == []


def test_a_timer_delivered_at_or_after_its_due_time_passes():
    """A timer's DELIVER stored at its TIMER_OUT_MS or later passes; a schedule DELIVER (delay level
    3) and a PUBLISH are not judged by TIMER_OUT_MS."""
    due = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch ms
    at = datetime.fromtimestamp(due / 1000, UTC)
    tables = {"message_hops": [(RUN, "t1", "DELIVER", "b", 1, "M1", 0), (RUN, "t2", "DELIVER", "b", 2, "M2", 0),
                               (RUN, "s1", "DELIVER", "b", 3, "M3", 3), (RUN, "p1", "PUBLISH", "b", 4, "M4", 0)],
              "commitlog": [(RUN, "b", 1, at, {"TIMER_OUT_MS": str(due)}),
                            (RUN, "b", 2, at + timedelta(seconds=1), {"TIMER_OUT_MS": str(due)}),
                            (RUN, "b", 3, at, {"TIMER_OUT_MS": str(due + 5000)}),
                            (RUN, "b", 4, at, {"TIMER_DELIVER_MS": str(due + 5000)})]}
    assert violations(c.NO_EARLY_DELIVERY, tables) == []


def test_a_timer_delivered_before_its_due_time_is_reported():
    """A timer's DELIVER stored before its TIMER_OUT_MS is an early delivery."""
    due = 1_767_225_600_000
    at = datetime.fromtimestamp(due / 1000, UTC)
    tables = {"message_hops": [(RUN, "t1", "DELIVER", "b", 1, "M1", 0)],
              "commitlog": [(RUN, "b", 1, at - timedelta(milliseconds=250), {"TIMER_OUT_MS": str(due)})]}
    assert violations(c.NO_EARLY_DELIVERY, tables) == [
        (RUN, "t1", None, "timer delivered 250 ms before its due time TIMER_OUT_MS (msgId M1)"),
    ]


def pop_chain(retry_at: float, revives: list[float]) -> dict[str, list[tuple]]:
    """A message published to T (queue 0, offset 7) and popped by g, whose checkpoints of that
    record revive at ``revives`` (seconds), and its POP retry in %RETRY%g_T stored at ``retry_at``;
    an ack and another group's checkpoint of the same record, which the check does not read as g's."""
    retry = "%RETRY%g_T"
    return {
        "message_hops": [(RUN, "m", "PUBLISH", "b", 1, "M1", 0, None, 0, "T", ts(0), 0),
                         (RUN, "m", "RETRY", "b", 2, "M2", 0, "g", 1, retry, ts(retry_at), 1)],
        "commitlog": [(RUN, "b", 1, ts(0), {}, "T", 0, 7), (RUN, "b", 2, ts(retry_at), {}, retry, 0, 0)],
        "retry_topics": [(RUN, "b", retry, "g", "T"), (RUN, "b", "%RETRY%push", "push", None)],
        "pop_evidence": [(RUN, "b", "ck", "g", "T", 0, [5, 6, 7], ts(r)) for r in revives]
                        + [(RUN, "b", "ack", "g", "T", 0, [7], None), (RUN, "b", "ck", "h", "T", 0, [7], ts(99))],
    }


def test_a_pop_retry_at_or_after_its_revive_time_passes():
    """A POP retry stored at the revive time of a checkpoint of the record before it, or after it
    (the earliest of the pop's and the change of invisible time's counts), passes; so does one
    whose previous record has no checkpoint stored (the POP KV service)."""
    assert violations(c.NO_EARLY_DELIVERY, pop_chain(5.0, [5.0, 8.0])) == []
    assert violations(c.NO_EARLY_DELIVERY, pop_chain(7.5, [5.0, 8.0])) == []
    assert violations(c.NO_EARLY_DELIVERY, pop_chain(1.0, [])) == []


def test_a_pop_retry_before_every_revive_time_is_reported():
    """A POP retry stored before the revive time of every checkpoint of its previous record was
    written early; another group's checkpoint does not excuse it."""
    assert violations(c.NO_EARLY_DELIVERY, pop_chain(4.75, [5.0, 8.0])) == [
        (RUN, "m", "g", "POP retry stored 250 ms before the revive time of its previous record's checkpoints "
                        "(msgId M2)"),
    ]


def forked_pop_chain(second_at: float, revive_first: float | None, revive_fork: float) -> dict[str, list[tuple]]:
    """A POP chain a broker crash forked: the message's record (offset 7 of T) and two POP retries at
    count 1 (its pop's ack was lost, so it was popped and revived twice: offsets 0 and 1 of the
    retry topic), each popped, with checkpoints reviving at ``revive_first`` (none stored: None)
    and ``revive_fork``; then the count-2 retry revived from one of them, stored at ``second_at``."""
    retry = "%RETRY%g_T"
    tables = pop_chain(2.0, [1.0])
    tables["message_hops"] += [(RUN, "m", "RETRY", "b", 3, "M3", 0, "g", 2, retry, ts(4.0), 1),
                               (RUN, "m", "RETRY", "b", 4, "M4", 0, "g", 3, retry, ts(second_at), 2)]
    tables["commitlog"] += [(RUN, "b", 3, ts(4.0), {}, retry, 0, 1), (RUN, "b", 4, ts(second_at), {}, retry, 0, 2)]
    tables["pop_evidence"] += ([(RUN, "b", "ck", "g", retry, 0, [0], ts(revive_first))] if revive_first is not None else []) \
        + [(RUN, "b", "ck", "g", retry, 0, [1], ts(revive_fork))]
    return tables


def test_a_pop_retry_of_a_forked_chain_is_judged_by_every_record_it_can_come_from():
    """After a crash the same record is popped and revived twice (two retries at count 1, a RocketMQ
    5.3.3 broker-a@3s-12s outage's store): the count-2 retry comes from either of them, so it is
    early only before every one's revive time, not before the one just before it in hop order; and
    where one of them has no checkpoint stored it is not judged."""
    # After the first count-1 retry's revive time, before its fork's: in time.
    assert violations(c.NO_EARLY_DELIVERY, forked_pop_chain(6.0, 5.5, 9.0)) == []
    # Before both: early.
    assert violations(c.NO_EARLY_DELIVERY, forked_pop_chain(5.0, 5.5, 9.0)) == [
        (RUN, "m", "g", "POP retry stored 500 ms before the revive time of its previous record's checkpoints "
                        "(msgId M4)"),
    ]
    # One possible source without a checkpoint: not judged.
    assert violations(c.NO_EARLY_DELIVERY, forked_pop_chain(5.0, None, 9.0)) == []


def test_a_push_retry_is_not_judged_by_pop_checkpoints():
    """A RETRY hop in a push group's %RETRY% topic (no origin topic) is no POP retry."""
    tables = pop_chain(1.0, [5.0])
    tables["retry_topics"] = [(RUN, "b", "%RETRY%g_T", "g", None)]
    assert violations(c.NO_EARLY_DELIVERY, tables) == []


# --- origin_and_retry_topic_stable ---------------------------------------------------------------

def chain(key: str, records: list[tuple[str | None, str, int, str | None, str | None]],
          groups_: tuple[str, ...] = ("g",), *, run: str = RUN) -> dict[str, list[tuple]]:
    """A message's records as (group or None for shared, hop kind, offset, ORIGIN_MESSAGE_ID,
    RETRY_TOPIC), its UNIQ_KEY ``key``, and one lineage row per group."""
    hops = [(run, key, group, kind, "broker-a", offset) for group, kind, offset, _, _ in records]
    log = [(run, "broker-a", offset, msg_id(offset), key, origin, topic) for _, _, offset, origin, topic in records]
    return {"message_hops": hops, "commitlog": log,
            "message_lineage": [(run, key, g, "CONSUMED") for g in groups_]}


def retried(key: str, publish: int, origin: str | None, topic: str = "OrderTopic", group: str = "g"):
    """PUBLISH at ``publish``, then SCHEDULE and RETRY records of ``group`` carrying ``origin``."""
    return [(None, "PUBLISH", publish, None, None),
            (group, "SCHEDULE", publish + 1, origin, topic),
            (group, "RETRY", publish + 2, origin, topic)]


def test_origin_and_retry_topic_pass_when_stable():
    """ORIGIN_MESSAGE_ID names the PUBLISH record, or is the UNIQ_KEY (a client's fallback send), or
    names a record retention deleted; RETRY_TOPIC is one value."""
    tables = merged(
        chain("m1", retried("m1", 100, msg_id(100))),
        chain("m2", retried("m2", 200, "m2")),
        {"runs": [("cut", "broker-a", 5000, [HOST])]},
        chain("m3", retried("m3", 5100, msg_id(4000)), run="cut"),
    )
    assert violations(c.ORIGIN_STABLE, tables) == []


def test_a_retry_topic_that_changes_is_reported_in_its_chains():
    """In a group's hops it fails that group's chain; in the shared hops, every chain."""
    group_change = retried("m1", 100, msg_id(100)) + [("g", "SCHEDULE", 103, msg_id(100), "OtherTopic")]
    shared_change = [(None, "PUBLISH", 200, None, "A"), (None, "PUBLISH", 201, None, "B")]
    tables = merged(chain("m1", group_change, ("g", "h")), chain("m2", shared_change, ("g", "h")))
    assert violations(c.ORIGIN_STABLE, tables) == [
        (RUN, "m1", "g", "RETRY_TOPIC changes along the chain: OrderTopic,OtherTopic"),
        (RUN, "m2", "g", "RETRY_TOPIC changes along the chain: A,B"),
        (RUN, "m2", "h", "RETRY_TOPIC changes along the chain: A,B"),
    ]


def test_an_origin_that_names_another_message_is_reported():
    """An ORIGIN_MESSAGE_ID must name the message itself; one above a cut's first offset is no excuse."""
    tables = merged(
        chain("m1", retried("m1", 100, msg_id(999))),
        {"runs": [("cut", "broker-a", 5000, [HOST])]},
        chain("m2", retried("m2", 5100, msg_id(6000)), run="cut"),
    )
    assert violations(c.ORIGIN_STABLE, tables) == [
        ("cut", "m2", "g", f"ORIGIN_MESSAGE_ID {msg_id(6000)} is neither the UNIQ_KEY nor a real record of the message"),
        (RUN, "m1", "g", f"ORIGIN_MESSAGE_ID {msg_id(999)} is neither the UNIQ_KEY nor a real record of the message"),
    ]


# --- lineage_matches_commitlog -------------------------------------------------------------------

def test_lineage_that_matches_the_commit_log_passes():
    """One hop row per record, and each chain's hop count is its shared plus its group's hops."""
    tables = {"commitlog": [(RUN, "b", 1, "m1", "T", None), (RUN, "b", 2, "m1", "%RETRY%g", None)],
              "message_hops": [(RUN, "m1", None, "b", 1), (RUN, "m1", "g", "b", 2)],
              "message_lineage": [(RUN, "m1", "g", 2), (RUN, "m1", "h", 1)]}
    assert violations(c.LINEAGE_MATCHES_COMMITLOG, tables) == []


def test_lineage_that_does_not_match_the_commit_log_is_reported():
    """A record in no hop row or in two, a hop row without a record, a lineage count that is off."""
    tables = {"commitlog": [(RUN, "b", 1, "m1", "T", None), (RUN, "b", 2, "m2", "T", None), (RUN, "b", 3, "m3", "T", None),
                            (RUN, None, 4, "m4", "T", None)],
              "message_hops": [(RUN, "m1", None, "b", 1), (RUN, "m2", None, "b", 2), (RUN, "m2", "g", "b", 2),
                               (RUN, "m5", None, "b", 5), (RUN, "m4", None, None, 4)],
              "message_lineage": [(RUN, "m1", "g", 3)]}
    assert violations(c.LINEAGE_MATCHES_COMMITLOG, tables) == [
        (RUN, "m1", "g", "lineage says 3 hops, message_hops holds 1"),
        (RUN, "m2", None, "commit-log record at b@2 is in 2 hop rows"),
        (RUN, "m3", None, "commit-log record at b@3 (T) is in no hop row"),
        (RUN, "m4", None, "commit-log record at ?@4 (T) is in no hop row"),
        (RUN, "m4", None, "hop row at ?@4 has no commit-log record"),
        (RUN, "m5", None, "hop row at b@5 has no commit-log record"),
    ]


def test_bookkeeping_records_are_in_no_hop_row():
    """5.x bookkeeping records (the revive topic, a POP checkpoint waiting in the timer, a broker
    group's retry) and transaction op records need no hop row and may have none; a message's timer record needs one."""
    tables = {"commitlog": [(RUN, "b", 1, "ck1", "rmq_sys_REVIVE_LOG_DefaultCluster", "rmq_sys_REVIVE_LOG_DefaultCluster"),
                            (RUN, "b", 2, "ck1", "rmq_sys_wheel_timer", "rmq_sys_REVIVE_LOG_DefaultCluster"),
                            (RUN, "b", 3, "u1", "%RETRY%CID_RMQ_SYS_REVIVE_GROUP", None),
                            (RUN, "b", 4, "m1", "rmq_sys_wheel_timer", "T"),
                            (RUN, "b", 5, "m1", "T", "T"),
                            (RUN, "b", 6, None, "RMQ_SYS_TRANS_OP_HALF_TOPIC", None)],
              "message_hops": [(RUN, "m1", None, "b", 5), (RUN, "ck1", None, "b", 1)],
              "message_lineage": [(RUN, "m1", "g", 1)]}
    assert violations(c.LINEAGE_MATCHES_COMMITLOG, tables) == [
        (RUN, "ck1", None, "bookkeeping record at b@1 is a hop row"),
        (RUN, "ck1", None, "hop row at b@1 has no commit-log record"),
        (RUN, "m1", None, "commit-log record at b@4 (rmq_sys_wheel_timer) is in no hop row"),
    ]


def test_an_unwrapped_inner_batch_is_a_hop_row_per_message():
    """A 5.x inner batch with inner_messages rows: one hop row per message at the batch's offset,
    each naming a message's UNIQ_KEY; the batch record's own key needs none. A batch the import
    did not unwrap is one record, as any other."""
    tables = {"commitlog": [(RUN, "b", 1, "batch", "BatchTopic", None), (RUN, "b", 2, "whole", "BatchTopic", None)],
              "inner_messages": [(RUN, "b", 1, "i0", "BatchTopic"), (RUN, "b", 1, "i1", "BatchTopic")],
              "message_hops": [(RUN, "i0", None, "b", 1), (RUN, "i1", None, "b", 1), (RUN, "whole", None, "b", 2)],
              "message_lineage": [(RUN, "i0", "g", 1), (RUN, "i1", "g", 1), (RUN, "whole", "g", 1)]}
    assert violations(c.LINEAGE_MATCHES_COMMITLOG, tables) == []


def test_an_unwrapped_inner_batch_without_its_messages_hops_is_reported():
    """The batch record as one hop instead of its messages, a message in no hop row, and a batch
    whose messages are more than its hop rows are reported."""
    tables = {"commitlog": [(RUN, "b", 1, "batch", "BatchTopic", None), (RUN, "b", 2, "batch2", "BatchTopic", None)],
              "inner_messages": [(RUN, "b", 1, "i0", "BatchTopic"), (RUN, "b", 1, "i1", "BatchTopic"),
                                 (RUN, "b", 2, "j0", "BatchTopic"), (RUN, "b", 2, "j1", "BatchTopic")],
              "message_hops": [(RUN, "batch", None, "b", 1), (RUN, "j0", None, "b", 2), (RUN, "j1", None, "b", 2),
                               (RUN, "j1", "g", "b", 2)],
              "message_lineage": [(RUN, "batch", "g", 1)]}
    assert violations(c.LINEAGE_MATCHES_COMMITLOG, tables) == [
        (RUN, "i0", None, "inner message i0 of the batch at b@1 (BatchTopic) is in no hop row"),
        (RUN, "i1", None, "inner message i1 of the batch at b@1 (BatchTopic) is in no hop row"),
        (RUN, None, None, "inner batch at b@1 holds 2 messages, 1 hop rows are at its offset"),
        (RUN, None, None, "inner batch at b@2 holds 2 messages, 3 hop rows are at its offset"),
    ]


# --- the drifts ----------------------------------------------------------------------------------

def test_duplicate_rate_at_or_below_the_maximum_passes():
    """Up to 1 % of a group's messages may be consumed twice; a group with no messages has no rate."""
    rows = [(RUN, "g", 1, 100), (RUN, "h", 0, 0), (RUN, "import", None, 10)]
    assert violations(c.DUPLICATE_RATE, {"delivery_accounting": rows}) == []


def test_duplicate_rate_above_the_maximum_is_reported():
    """More than 1 % duplicated is reported with the share."""
    rows = [(RUN, "g", 3, 200)]
    assert violations(c.DUPLICATE_RATE, {"delivery_accounting": rows}) == [
        (RUN, None, "g", "3 of 200 messages consumed more than once (1.5 % > 1 %)"),
    ]


def test_lateness_p99_at_or_below_the_maximum_passes():
    """A p99 lateness of 1 000 ms is still in bounds."""
    rows = [(RUN, 3, c.LATENESS_P99_MS_MAX, 10), (RUN, 4, 0, 1)]
    assert violations(c.LATENESS_P99, {"delay_accuracy": rows}) == []


def test_lateness_p99_above_the_maximum_is_reported():
    """A stalled delay level shows as a p99 lateness above 1 000 ms."""
    rows = [(RUN, 3, 1500, 10)]
    assert violations(c.LATENESS_P99, {"delay_accuracy": rows}) == [
        (RUN, None, None, "delay level 3: p99 lateness 1500 ms > 1000 ms over 10 deliveries"),
    ]


# --- retries_within_group_maximum ----------------------------------------------------------------

def retry_chain(key: str, counts: list[int], *, group: str = "g", retries: int | None = None, forks: int = 0,
            state: str = "RETRYING") -> dict[str, list[tuple]]:
    """A chain: its PUBLISH, a RETRY record per reconsume count in ``counts`` (copies repeat a
    count), and its lineage row with ``retries`` (default: the deepest count) and ``forks``."""
    offset = next(_offsets)
    hops = [(RUN, key, None, "PUBLISH", "broker-a", offset, 0, 0)]
    records = []
    for i, count in enumerate(counts, start=1):
        hops.append((RUN, key, group, "RETRY", "broker-a", offset + i, i, count))
        records.append((RUN, "broker-a", offset + i, count, None, {}, key))
    depth = max(counts, default=0) if retries is None else retries
    return {"message_hops": hops, "commitlog": records,
            "message_lineage": [(RUN, key, group, False, state, depth, forks)]}


def test_retries_within_the_maximum_pass_also_when_the_chain_forked():
    """A chain up to its group's maximum passes, however many copies its forks added: the
    default maximum, a configured one, an orderly group's unlimited one."""
    tables = merged(
        groups(("small", 2, "CONCURRENTLY"), ("orderly", -1, "ORDERLY")),
        retry_chain("plain", [1, 2, 3]),
        retry_chain("forked", [*range(1, 8), *[n for n in range(7, RETRY_MAX_TIMES_DEFAULT + 1) for _ in range(3)]],
                forks=2 * (RETRY_MAX_TIMES_DEFAULT - 6), state="DLQ"),
        retry_chain("configured", [1, 2], group="small"),
        retry_chain("orderly", [40], group="orderly"),
    )
    assert violations(c.RETRIES_WITHIN_MAX, tables) == []


def test_a_chain_deeper_than_its_maximum_is_reported():
    """A RETRY record past the group's maximum, or a lineage whose retries counted a forked
    chain's copies, is reported with the depth and the maximum."""
    tables = merged(
        groups(("small", 2, "CONCURRENTLY")),
        retry_chain("past-default", [*range(1, RETRY_MAX_TIMES_DEFAULT + 2)]),
        retry_chain("past-configured", [1, 2, 3], group="small"),
        retry_chain("copies-counted", [1, 1, 2, 2], group="small", retries=4, forks=2),
    )
    found = violations(c.RETRIES_WITHIN_MAX, tables)
    assert [(key, group) for _run, key, group, _detail in found] == [
        ("copies-counted", "small"), ("past-configured", "small"), ("past-default", "g")]
    details = {key: detail for _run, key, _group, detail in found}
    assert details["past-default"].startswith(f"{RETRY_MAX_TIMES_DEFAULT + 1} retries deep")
    assert details["past-default"].endswith(f"the group's maximum is {RETRY_MAX_TIMES_DEFAULT}")
    assert "lineage retries 4, deepest RETRY record at reconsume 2, 2 forked copies" in details["copies-counted"]


# --- transactions ----------------------------------------------------------------------------------

HALF, DISCARD = "RMQ_SYS_TRANS_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"
COMMIT = 8  # sysFlag TRANSACTION_COMMIT_TYPE


def checked(times: int | None) -> dict[str, str]:
    return {} if times is None else {"TRANSACTION_CHECK_TIMES": str(times)}


def test_a_transaction_checked_past_the_maximum_without_a_decision_is_reported():
    """Past the broker's maximum (its discards' count) a message neither committed nor rolled back
    is reported; one decided, or checked up to the maximum, is not."""
    hops = [(RUN, "d", None, "DISCARD", "b", 1), (RUN, "m1", None, "HALF", "b", 2), (RUN, "m1", None, "HALF", "b", 3),
            (RUN, "m2", None, "HALF", "b", 4), (RUN, "m3", None, "HALF", "b", 5), (RUN, "m4", None, "HALF", "b", 6)]
    commitlog = [(RUN, "b", 1, checked(3)), (RUN, "b", 2, checked(None)), (RUN, "b", 3, checked(4)),
                 (RUN, "b", 4, checked(3)), (RUN, "b", 5, checked(5)), (RUN, "b", 6, checked(9))]
    lineage = [(RUN, "d", "g", "DISCARDED"), (RUN, "m1", "g", "UNDECIDED"), (RUN, "m2", "g", "UNDECIDED"),
               (RUN, "m3", "g", "COMMITTED"), (RUN, "m4", "g", "DISCARDED")]
    assert violations(c.TX_CHECK_MAX, {"message_hops": hops, "commitlog": commitlog, "message_lineage": lineage}) == [
        (RUN, "m1", None, "checked 4 times on b, past the maximum of 3 checks (its discarded copies' count), "
                          "and undecided: no commit and no op record decided it"),
        (RUN, "m4", None, "checked 9 times on b, past the maximum of 3 checks (its discarded copies' count), "
                          "and discarded: no commit and no op record decided it"),
    ]


def test_without_evidence_of_the_maximum_a_transaction_is_not_judged_by_the_default():
    """A broker that discarded nothing may be configured above RocketMQ's default of 15: a half
    checked 16 times there is not judged (not applicable), unless the run's manifest states the
    maximum, which then judges it both ways."""
    hops = [(RUN, "m5", None, "HALF", "c", 7), (RUN, "m6", None, "HALF", "c", 8)]
    commitlog = [(RUN, "c", 7, checked(16)), (RUN, "c", 8, checked(20))]
    lineage = [(RUN, "m5", "g", "UNDECIDED"), (RUN, "m6", "g", "UNDECIDED")]
    tables = {"message_hops": hops, "commitlog": commitlog, "message_lineage": lineage}
    assert violations(c.TX_CHECK_MAX, tables) == []
    assert judged(c.TX_CHECK_MAX, tables) == 0
    stated = {**tables, "run_manifest": [(RUN, 20)]}
    assert violations(c.TX_CHECK_MAX, stated) == []
    assert judged(c.TX_CHECK_MAX, stated) == 2
    stated["run_manifest"] = [(RUN, 15)]
    assert [detail for *_, detail in violations(c.TX_CHECK_MAX, stated)] == [
        "checked 16 times on c, past the maximum of 15 checks (the run's manifest: the broker discarded "
        "nothing), and undecided: no commit and no op record decided it",
        "checked 20 times on c, past the maximum of 15 checks (the run's manifest: the broker discarded "
        "nothing), and undecided: no commit and no op record decided it"]


def test_a_commit_whose_back_pointer_names_no_half_copy_of_it_is_reported():
    """A commit names a half copy of its own message on its broker; another record, no record, or
    another message's half is reported, unless the offset is below the broker's first offset."""
    commitlog = [(RUN, "b", 100, "m1", HALF, 0, 0), (RUN, "b", 200, "m1", "T", COMMIT, 100),
                 (RUN, "b", 300, "m2", HALF, 0, 0), (RUN, "b", 400, "m2", "T", COMMIT, 200),
                 (RUN, "b", 500, "m3", "T", COMMIT, 350), (RUN, "b", 600, "m4", "T", COMMIT, 100),
                 (RUN, "c", 700, "m5", "T", COMMIT, 10), (RUN, "b", 800, "m6", "T", 0, 0)]
    hops = [(RUN, k, None, "PUBLISH", b, p) for _, b, p, k, t, f, _ in commitlog if t == "T"]
    runs = [(RUN, "b", 0, []), (RUN, "c", 50, [])]
    assert violations(c.TX_COMMIT_HALF, {"commitlog": commitlog, "message_hops": hops, "runs": runs}) == [
        (RUN, "m2", None, "commit at b@400 points at offset 200, a T record of m1, not a half copy of it"),
        (RUN, "m3", None, "commit at b@500 points at offset 350, where the commit log holds no record, "
                          "not a half copy of it"),
        (RUN, "m4", None, f"commit at b@600 points at offset 100, a {HALF} record of m1, not a half copy of it"),
    ]


def test_an_op_record_deciding_a_half_the_store_never_had_is_reported():
    """Every half queue offset an op record decided is a half record of its queue on its broker,
    unless retention explains it (a cut log, below its first half left)."""
    ops = [(RUN, "b", 900, 0, [0, 1, 7]), (RUN, "c", 950, 0, [0, 4])]
    commitlog = [(RUN, "b", HALF, 0, 0), (RUN, "b", HALF, 0, 1), (RUN, "b", "T", 0, 7), (RUN, "c", HALF, 0, 3),
                 (RUN, "c", HALF, 0, 5)]
    runs = [(RUN, "b", 0, []), (RUN, "c", 4096, [])]
    assert violations(c.TX_OP_HALF, {"transaction_ops": ops, "commitlog": commitlog, "runs": runs}) == [
        (RUN, None, None, "op record at b@900 decided half queue offset 7 of queue 0, which the store never had"),
        (RUN, None, None, "op record at c@950 decided half queue offset 4 of queue 0, which the store never had"),
    ]


def test_a_message_committed_twice_is_reported():
    """Two commit records of one message are reported with both; one commit is not."""
    commitlog = [(RUN, "b", 200, "m1", "T", COMMIT, 100), (RUN, "b", 400, "m1", "T", COMMIT, 300),
                 (RUN, "b", 500, "m2", "T", COMMIT, 350), (RUN, "b", 600, "m3", "T", 0, 0)]
    hops = [(RUN, k, None, "PUBLISH", b, p) for _, b, p, k, *_ in commitlog]
    assert violations(c.TX_COMMITTED_ONCE, {"commitlog": commitlog, "message_hops": hops}) == [
        (RUN, "m1", None, "committed 2 times: b@200 (copy at 100), b@400 (copy at 300)"),
    ]


# --- the clients' message trace --------------------------------------------------------------------

def pub(key: str, offset_msg: str | None, at: float, success: bool = True) -> tuple:
    return (RUN, "Pub", key, "pg", "127.0.0.1:10911", offset_msg, ts(at), 3, success)


def test_a_traced_send_ok_whose_record_is_missing_is_reported():
    """A SEND_OK the trace holds names a record of the store; one with no record there, or another
    message's, is reported. Not judged: a failed send, a send to a broker not in the run, one past
    the broker's last record, one below its first offset, a batch's list of ids."""
    runs = [(RUN, "b", 0x200, ts(100), [HOST])]
    commitlog = [(RUN, "b", msg_id(0x300), "m1"), (RUN, "b", msg_id(0x400), "other")]
    trace = [pub("m1", msg_id(0x300), 1), pub("gone", msg_id(0x500), 2), pub("swapped", msg_id(0x400), 3),
             pub("failed", msg_id(0x600), 4, success=False), pub("elsewhere", "0A0000FF00002A9F" + "0" * 13 + "700", 5),
             pub("late", msg_id(0x800), 100), pub("retained", msg_id(0x100), 6),
             pub("batch", msg_id(0x900) + "," + msg_id(0x980), 7)]
    tables = {"client_trace": trace, "runs": runs, "commitlog": commitlog}
    found = violations(c.TRACE_SEND_OK_STORED, tables)
    assert [(key, detail.split(", but ")[1]) for _run, key, _group, detail in found] == [
        ("gone", "broker b holds no record at that offset"), ("swapped", "the record there is other")]
    assert found[0][3].startswith(f"sent SEND_OK by pg to 127.0.0.1:10911 at 2026-01-01 00:00:02.000 as {msg_id(0x500)}")
    assert judged(c.TRACE_SEND_OK_STORED, tables) == 3
    assert judged(c.TRACE_SEND_OK_STORED, {"runs": runs, "commitlog": commitlog}) == 0


def sub(kind: str, request: str, key: str, at: float, *, retry: int = 0, success: bool | None = None,
        group: str | None = "g") -> tuple:
    if kind == "SubBefore":
        return (RUN, kind, request, key, group, retry, ts(at), None, None, None)
    return (RUN, kind, request, key, None, None, ts(at), 2, success, "SUCCESS" if success else "FAILED")


def test_a_traced_failed_consume_with_no_retry_is_reported():
    """A failure the trace holds is followed by a RETRY or DLQ hop of the message for its group past
    its reconsume times, or by the client consuming it again; else it is reported. A success, or a
    failure after the run's first broker stopped recording, is not judged."""
    trace = [sub("SubBefore", "q1", "retried", 1, retry=0), sub("SubAfter", "q1", "retried", 1.01, success=False),
             sub("SubBefore", "q2", "local", 2, retry=0), sub("SubAfter", "q2", "local", 2.01, success=False),
             sub("SubBefore", "q3", "local", 3, retry=1), sub("SubAfter", "q3", "local", 3.01, success=True),
             sub("SubBefore", "q4", "dropped", 4, retry=1), sub("SubAfter", "q4", "dropped", 4.01, success=False),
             sub("SubBefore", "q5", "stale", 5, retry=2), sub("SubAfter", "q5", "stale", 5.01, success=False),
             sub("SubBefore", "q6", "late", 60), sub("SubAfter", "q6", "late", 60.01, success=False)]
    hops = [(RUN, "retried", "g", "RETRY", 1), (RUN, "stale", "g", "RETRY", 2), (RUN, "stale", "other", "DLQ", 3)]
    runs = [(RUN, "a", ts(50)), (RUN, "b", ts(70))]
    tables = {"client_trace": trace, "message_hops": hops, "runs": runs}
    found = violations(c.TRACE_FAILED_CONSUME_RETRIED, tables)
    assert [(key, group) for _run, key, group, _detail in found] == [("dropped", "g"), ("stale", "g")]
    assert found[0][3] == ("failed (FAILED) at reconsume 1 at 2026-01-01 00:00:04.000: no RETRY or DLQ hop of it for "
                           "the group past reconsume 1, and the client never consumed it again")
    assert judged(c.TRACE_FAILED_CONSUME_RETRIED, tables) == 4
    assert judged(c.TRACE_FAILED_CONSUME_RETRIED, {"message_hops": hops, "runs": runs}) == 0


def end_tx(key: str, state: str, at: float, from_check: bool = False) -> tuple:
    return (RUN, "EndTransaction", key, "pg", state, from_check, ts(at))


def test_a_traced_transaction_decision_the_store_does_not_show_is_reported():
    """A commit or rollback the producer's trace holds is the outcome the store shows; UNKNOW, a
    message with no half in the run, or a decision after its broker's last record is not judged."""
    trace = [end_tx("c", "COMMIT_MESSAGE", 1), end_tx("r", "ROLLBACK_MESSAGE", 2, True),
             end_tx("lost", "ROLLBACK_MESSAGE", 3), end_tx("u", "UNKNOW", 4), end_tx("u", "COMMIT_MESSAGE", 6, True),
             end_tx("nohalf", "COMMIT_MESSAGE", 5), end_tx("late", "COMMIT_MESSAGE", 90)]
    hops = [(RUN, k, "HALF", "b") for k in ("c", "r", "lost", "u", "late")]
    lineage = [(RUN, "c", "COMMITTED"), (RUN, "r", "ROLLED_BACK"), (RUN, "lost", "DISCARDED"), (RUN, "u", "UNDECIDED"),
               (RUN, "late", "UNDECIDED")]
    tables = {"client_trace": trace, "message_hops": hops, "runs": [(RUN, "b", ts(80))], "message_lineage": lineage}
    found = violations(c.TRACE_DECISION_STORED, tables)
    assert found == [
        (RUN, "lost", None, "its producer pg answered ROLLBACK_MESSAGE at once at 2026-01-01 00:00:03.000, but the "
                            "store shows it discarded on b"),
        (RUN, "u", None, "its producer pg answered COMMIT_MESSAGE to a check at 2026-01-01 00:00:06.000, but the "
                         "store shows it undecided on b")]
    assert judged(c.TRACE_DECISION_STORED, tables) == 4
