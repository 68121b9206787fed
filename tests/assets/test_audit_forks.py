"""A forked chain in the warehouse, on a hand-built imported run whose answers are worked out by hand:
the lineage (built by DuckDB, which runs the same SQL as Spark), the audit tables, the check on a
chain's depth, resend-plan and trace.

UF's broker was killed while the message waited in the schedule: the restarted schedule put its
first retry again (R1', no SCHEDULE record waiting for it), that copy failed and was sent back
(S2b), and its second sequence ran into the DLQ beside the first: two DLQ records.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from assets import checks as c
from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.parquet import write_rows
from orchestration.cmd_pipeline import format_trace, resend_plan_rows, trace_messages
from tests.assets.test_lineage import SCHED, rec

RUN = "forked"
GROUP, RETRY, DLQ = "Gf", "%RETRY%Gf", "%DLQ%Gf"
GROUP_HOPS = dict(uniq="UF", origin="M0100", real_topic=RETRY, retry_topic="Basket", run=RUN)
# (phys, topic, store ms, delay level, reconsume times), in store order.
JOURNEY = [(110, SCHED, 10, 3, 1), (120, RETRY, 1010, 3, 1), (130, SCHED, 1100, 4, 2), (140, RETRY, 2100, 4, 2),
           (150, DLQ, 2200, 0, 3), (160, RETRY, 5000, 3, 1), (170, SCHED, 5100, 4, 2), (180, RETRY, 6100, 4, 2),
           (190, DLQ, 6200, 0, 3)]
DELAYS_MS = [1000] * 4
# UO's orderly group retried it locally and its client sent it to %RETRY% at the maximum twice (it was
# handed out twice): two DLQ records carrying the client's local count, 3, and no retry.
ORDERLY = "Go"
ORDERLY_DLQ = [rec(phys, f"%DLQ%{ORDERLY}", at, uniq="UO", origin="M0200", real_topic=f"%RETRY%{ORDERLY}",
                   retry_topic="Basket", reconsume=3, reconsume_time=3, run=RUN)
               for phys, at in ((210, 900), (220, 1900))]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("forks")
    run = tmp / "run"
    commitlog = [rec(100, "Basket", 0, uniq="UF", run=RUN)] + [
        rec(phys, topic, at, delay=level, reconsume=times, queue_id=level - 1 if topic == SCHED else 0,
            **GROUP_HOPS) for phys, topic, at, level, times in JOURNEY] + [
        rec(200, "Basket", 0, uniq="UO", run=RUN), *ORDERLY_DLQ]
    for r in commitlog:
        r["msg_id"] = f"M{r['phys_offset']:04d}"
    write_rows(run / "parquet", "commitlog", commitlog)
    write_rows(run / "parquet", "runs", [{"run_id": RUN, "source": "import", "broker": "broker-a", "first_offset": 0,
                                          "msg_id_hosts": ["0A00000100002A9F"], "delay_levels_ms": DELAYS_MS,
                                          "sim_end_ts": commitlog[-1]["store_ts"] + timedelta(seconds=1)}])
    run_lineage_duckdb(run)
    db = tmp / "warehouse.duckdb"
    build_warehouse([run], db)
    con = open_read_only(db)
    yield con
    con.close()


def test_the_lineage_counts_the_copies_and_the_depth(warehouse):
    """Ten records, four of them copies (a RETRY at count 1, a SCHEDULE and a RETRY at count 2, a
    DLQ); two retries deep; the first copy, R1' at hop 6, is a re-put with no SCHEDULE waiting."""
    assert warehouse.execute(
        'SELECT hops, retries, forks, fork_hop_index, fork_broker, fork_cause, final_state FROM message_lineage '
        "WHERE \"group\" = ? AND message_key = 'UF'", [GROUP]).fetchall() == [(10, 2, 4, 6, "broker-a", "BROKER_RESTART", "DLQ")]


def test_an_orderly_chain_forked_at_its_dlq_has_no_retries(warehouse):
    """Two DLQ records of one orderly message: one copy, a second send of a message handed out
    twice, and still no retry (its DLQ records carry the client's local count, not retries)."""
    assert warehouse.execute(
        "SELECT hops, retries, forks, fork_hop_index, fork_cause FROM message_lineage "
        "WHERE \"group\" = ? AND message_key = 'UO'",
        [ORDERLY]).fetchall() == [(3, 0, 1, 2, "DUPLICATE_DELIVERY")]


def test_the_dlq_lists_the_message_once_with_its_copies(warehouse):
    """One dlq_messages row for two DLQ records: the first by store order is the one to resend."""
    assert warehouse.execute("SELECT message_key, dlq_copies, dlq_phys_offset, retries, forks FROM dlq_messages "
                             "ORDER BY 1").fetchall() == [("UF", 2, 150, 2, 4), ("UO", 2, 210, 0, 1)]
    plan = resend_plan_rows(warehouse, GROUP, None)
    assert [(r["message_key"], r["dlq_msg_id"], r["dlq_copies"]) for r in plan] == [("UF", "M0150", 2)]


def test_the_funnel_counts_the_message_once_per_attempt(warehouse):
    """UF reaches attempts 0, 1 and 2 once each (not once per copy), the DLQ after the second retry;
    UO, not consumed by this group, attempt 0."""
    assert warehouse.execute('SELECT attempt, reached, to_dlq FROM retry_funnel WHERE "group" = ? ORDER BY 1',
                             [GROUP]).fetchall() == [(0, 2, 0), (1, 1, 0), (2, 1, 1)]


def test_accounting_puts_the_copies_down_to_the_restart(warehouse):
    """The forked message was delivered more than once: its copies are duplicate deliveries, which
    the restart explains; whether one was consumed twice a store cannot say."""
    assert warehouse.execute(
        "SELECT duplicated, exactly_once, forked_messages, duplicate_deliveries, duplicate_deliveries_at_restart "
        'FROM delivery_accounting WHERE "group" = ?', [GROUP]).fetchall() == [(None, None, 1, 4, 4)]


def test_a_forked_chain_within_its_maximum_passes_the_depth_check(warehouse):
    """Two DLQ copies at the group's maximum (2, read from them) and a chain two retries deep."""
    outcome = c.run_check(warehouse, c.CHECKS_BY_NAME[c.RETRIES_WITHIN_MAX], RUN)
    assert outcome.passed and outcome.judged == 1, outcome.metadata()


def test_trace_draws_the_fork_as_a_branch_from_its_first_copy(warehouse):
    """The chain's hops before the first copy are drawn plain, the copy and every hop after it on a
    branch, under a line saying how many copies there are, where the first is and why."""
    text = format_trace(trace_messages(warehouse, "UF"))
    lines = text.splitlines()
    assert any("forked: 4 extra copies, the first at hop #6 on broker-a (a broker restart" in line for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("  +- fork"))
    hops = [line for line in lines[start + 1:] if line.startswith(" |")]
    assert [line.split()[1] for line in hops] == ["6", "7", "8", "9"]
    assert lines[start - 1].split()[0] == "5"
