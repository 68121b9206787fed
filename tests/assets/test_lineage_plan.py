"""How run_lineage's Spark plan moves the commit log: one range shuffle of the records, no more.

The lineage's SQL says nothing of partitions; ``assets.lineage`` range-partitions the classified
records once by (run_id, message_key) and every window and aggregation after that must run inside
those partitions. A rule rewritten so that Spark needs a second full shuffle of the records would
still give the right rows, only slower: this test reads the physical plans of the frames
``run_lineage`` writes and counts the shuffles (Exchange nodes) that read the commit log.

What the plans hold, on a simulated run (no inner batches):

* ``chained`` (kept between the two writes): the range shuffle of the records by (run_id,
  message_key); a hash shuffle by (run_id, fallback_key) of the records without a UNIQ_KEY only
  (old clients: the window that finds a sibling's ORIGIN_MESSAGE_ID); the retry-topic owners and
  delay levels aggregated from their own small tables and broadcast.
* ``message_hops``: the global sort's range shuffle of the kept hops (Spark does not carry a kept
  frame's range partitioning into a later sort; it did not before the lineage was SQL either).
* ``lineage_rows``: reads the kept hops, not the commit log, for the chains; the commit log is read
  again only for two distinct key sets, each aggregated before its shuffle (the subscriptions a
  record's RETRY_TOPIC gives, then grouped by topic; the UNIQ_KEYs a LOST message is looked for
  in); the chain rows are shuffled for the ACKED and POP evidence joins; every small table is
  broadcast.
* ``message_lineage``: one range shuffle of the kept lineage rows (the global sort).
"""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.lineage_plan import full_record_shuffles, lineage_plans
from broker_core.export.schema import RAW_TABLES
from broker_core.sim.run import simulate
from tests.conftest import SCENARIOS


@pytest.fixture(scope="module")
def plans(spark, tmp_path_factory):
    """Each frame's (commit-log shuffles, every shuffle), read before the frame is kept, as
    run_lineage builds and keeps them."""
    run_dir = tmp_path_factory.mktemp("plan") / "small"
    simulate(SCENARIOS / "small.yaml", run_dir)
    return lineage_plans(spark, run_dir)


@pytest.fixture(scope="module")
def imported_plans(spark, tmp_path_factory):
    """The plans of a run shaped like an import: no deliveries and no producer log (their
    tables' files hold no rows)."""
    run_dir = tmp_path_factory.mktemp("plan") / "no-deliveries"
    simulate(SCENARIOS / "small.yaml", run_dir)
    for name in ("consume_attempts", "produced"):
        table = run_dir / "parquet" / name
        shutil.rmtree(table)
        table.mkdir()
        pq.write_table(pa.Table.from_pylist([], schema=RAW_TABLES[name]), table / "part-0.parquet")
    return lineage_plans(spark, run_dir)


def test_the_records_are_shuffled_once_in_full(plans):
    """One full-size shuffle of the records (range, by run_id and message_key); the only other
    shuffle of records without an aggregate before it is that of the records without a UNIQ_KEY."""
    full = full_record_shuffles(plans)
    assert sorted(full) == [("hashpartitioning", ("run_id", "fallback_key")),
                            ("rangepartitioning", ("run_id", "message_key"))], plans


def test_the_hops_are_written_from_the_kept_hops(plans):
    """The written hops read the kept hops, not the commit log: their global sort is the one
    shuffle, by range of the sort key."""
    assert plans["message_hops"] == ([], [("rangepartitioning", ("run_id", "message_key", "hop_index", "group"))]), \
        plans["message_hops"]


def test_the_lineage_reads_the_commit_log_only_for_aggregated_keys(plans):
    """The lineage rows read the kept hops for the chains; the commit log only for three key sets,
    each aggregated before it is shuffled: the subscriptions its records' RETRY_TOPIC give (and
    their groups per topic), the UNIQ_KEYs a LOST message is looked for in, and the msgIds of the
    records an import restored below their broker's first offset (``--tiered``)."""
    shuffles, _ = plans["lineage_rows"]
    assert all(aggregated for _, aggregated in shuffles), shuffles
    assert {partitioning for partitioning, _ in shuffles} == {
        ("hashpartitioning", ("run_id", "group", "topic")), ("hashpartitioning", ("run_id", "topic")),
        ("hashpartitioning", ("run_id", "uniq_key")), ("hashpartitioning", ("run_id", "msg_id"))}, shuffles


def test_the_lineage_is_sorted_with_one_range_shuffle(plans):
    """The global sort of the kept lineage rows is the written lineage's one shuffle."""
    assert plans["message_lineage"][1] == [("rangepartitioning", ("run_id", "message_key", "group"))], \
        plans["message_lineage"]


def test_a_table_without_rows_takes_its_joins_out_of_the_plan(plans, imported_plans):
    """Without deliveries (an imported store) the chain rows are not shuffled for the ACKED join,
    and without a producer log the commit log's UNIQ_KEYs are not read for LOST: the empty tables
    are planned as empty and their joins leave the plan. Both are in the plan of the simulated run."""
    acked = ("hashpartitioning", ("run_id", "group", "c_phys", "c_key"))
    lost_keys = ("hashpartitioning", ("run_id", "uniq_key"))
    simulated, imported = plans["lineage_rows"][1], imported_plans["lineage_rows"][1]
    assert acked in simulated and lost_keys in simulated, simulated
    assert acked not in imported and lost_keys not in imported, imported
