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

import re

import pytest

from assets import lineage as L
from broker_core.sim.run import simulate
from tests.conftest import SCENARIOS

AGGREGATES = ("HashAggregate", "SortAggregate", "ObjectHashAggregate")
METADATA_STRING_KEY = "spark.sql.maxMetadataStringLength"


def _physical(df):
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    return plan


def _children(node):
    kids = node.children()
    return [kids.apply(i) for i in range(kids.size())]


def _reads_commitlog(node, aggregated=False):
    """(whether the subtree scans the commit log's Parquet, whether an aggregate stands between)
    for the nearest such scan; a kept frame (InMemoryTableScan) is a leaf."""
    if node.nodeName().startswith("Scan "):
        return ("/parquet/commitlog" in node.simpleString(10_000), aggregated)
    if node.nodeName() == "BroadcastExchange":
        return (False, aggregated)  # a small table sent whole to every task, not a shuffle of it
    aggregated = aggregated or node.nodeName() in AGGREGATES
    found = [r for r in (_reads_commitlog(c, aggregated) for c in _children(node)) if r[0]]
    return found[0] if found else (False, aggregated)


def _partitioning(node) -> tuple[str, tuple[str, ...]]:
    """An Exchange's partitioning: its kind and the names of its keys."""
    text = node.simpleString(400)[len("Exchange "):]
    kind, keys = text.split("(", 1)
    return kind, tuple(re.findall(r"(\w+)#\d+", keys.split(")", 1)[0]))


def _exchanges(df) -> list:
    out = []

    def walk(node):
        if node.nodeName() == "Exchange":
            out.append(node)
        for child in _children(node):
            walk(child)
    walk(_physical(df))
    return out


def commitlog_shuffles(df) -> list[tuple[tuple[str, tuple[str, ...]], bool]]:
    """(the Exchange's partitioning, aggregated before it) for every shuffle of commit-log rows."""
    out = []
    for node in _exchanges(df):
        reads, aggregated = _reads_commitlog(_children(node)[0])
        if reads:
            out.append((_partitioning(node), aggregated))
    return out


def exchanges(df) -> list[tuple[str, tuple[str, ...]]]:
    """The partitioning of every shuffle of the plan (broadcasts are BroadcastExchange)."""
    return [_partitioning(node) for node in _exchanges(df)]


@pytest.fixture(scope="module")
def plans(spark, tmp_path_factory):
    """Each frame's (commit-log shuffles, every shuffle), read before the frame is kept, as
    run_lineage builds and keeps them."""
    run_dir = tmp_path_factory.mktemp("plan") / "small"
    simulate(SCENARIOS / "small.yaml", run_dir)
    # A scan's plan text names its files only up to spark.sql.maxMetadataStringLength (100 by
    # default): a temporary directory's path (longer in a pytest-xdist worker) would cut off the
    # "/parquet/commitlog" by which a scan of the commit log is told.
    before = spark.conf.get(METADATA_STRING_KEY)
    spark.conf.set(METADATA_STRING_KEY, "100000")
    try:
        yield _plans(spark, run_dir)
    finally:
        spark.conf.set(METADATA_STRING_KEY, before)


def _plans(spark, run_dir):
    tables = L.read_run_tables(spark, run_dir)
    records = L._records(tables["commitlog"], tables.get("inner_messages"))
    chained = L._chained_hops(records, tables["retry_topics"], tables["runs"])
    seen = {"chained": (commitlog_shuffles(chained), exchanges(chained))}
    kept = [chained.persist()]
    try:
        hops = L._step(spark, "message_hops", {"chained": chained})
        seen["message_hops"] = (commitlog_shuffles(hops), exchanges(hops))
        rows = L._lineage_rows(chained, records, tables)
        seen["lineage_rows"] = (commitlog_shuffles(rows), exchanges(rows))
        kept.append(rows.persist())
        lineage = L._step(spark, "message_lineage", {"lineage_rows": rows})
        seen["message_lineage"] = (commitlog_shuffles(lineage), exchanges(lineage))
        return seen
    finally:
        for df in kept:
            df.unpersist()


def test_the_records_are_shuffled_once_in_full(plans):
    """One full-size shuffle of the records (range, by run_id and message_key); the only other
    shuffle of records without an aggregate before it is that of the records without a UNIQ_KEY."""
    shuffles, _ = plans["chained"]
    full = [p for p, aggregated in shuffles if not aggregated]
    assert sorted(full) == [("hashpartitioning", ("run_id", "fallback_key")),
                            ("rangepartitioning", ("run_id", "message_key"))], shuffles


def test_the_hops_are_written_from_the_kept_hops(plans):
    """The written hops read the kept hops, not the commit log: their global sort is the one
    shuffle, by range of the sort key."""
    assert plans["message_hops"] == ([], [("rangepartitioning", ("run_id", "message_key", "hop_index", "group"))]), \
        plans["message_hops"]


def test_the_lineage_reads_the_commit_log_only_for_aggregated_keys(plans):
    """The lineage rows read the kept hops for the chains; the commit log only for three key sets,
    each aggregated before it is shuffled: the subscriptions its records' RETRY_TOPIC give (and
    their groups per topic), the UNIQ_KEYs a LOST message is looked for in, and the msgIds of the
    records below a broker's first offset (a tiered store's, restored_records)."""
    shuffles, _ = plans["lineage_rows"]
    assert all(aggregated for _, aggregated in shuffles), shuffles
    assert {partitioning for partitioning, _ in shuffles} == {
        ("hashpartitioning", ("run_id", "group", "topic")), ("hashpartitioning", ("run_id", "topic")),
        ("hashpartitioning", ("run_id", "uniq_key")), ("hashpartitioning", ("run_id", "msg_id"))}, shuffles


def test_the_lineage_is_sorted_with_one_range_shuffle(plans):
    """The global sort of the kept lineage rows is the written lineage's one shuffle."""
    assert plans["message_lineage"][1] == [("rangepartitioning", ("run_id", "message_key", "group"))], \
        plans["message_lineage"]
