"""The shuffles in the Spark lineage's physical plans: how often the commit log is moved.

The lineage's SQL says nothing of partitions; ``assets.lineage`` range-partitions the classified
records once by (run_id, message_key) and every window and aggregation after that runs inside
those partitions. A rule rewritten so that Spark needs a second full shuffle of the records would
still give the right rows, only slower: :func:`lineage_plans` reads the plans of the frames
``run_lineage`` writes, and :func:`full_record_shuffles` counts the shuffles (Exchange nodes) that
move commit-log rows with no aggregate before them. ``tests/assets/test_lineage_plan.py`` pins
them; ``bench/lineage_scale.py`` states the count beside its timings.

The plans are Spark's planned ones (adaptive execution may drop a shuffle at run time, never add
one of the records).
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from assets import lineage as L

__all__ = ["FRAMES", "commitlog_shuffles", "exchanges", "full_record_shuffles", "lineage_plans"]

AGGREGATES = ("HashAggregate", "SortAggregate", "ObjectHashAggregate")
METADATA_STRING_KEY = "spark.sql.maxMetadataStringLength"
# The frames run_lineage builds, in order: the kept chained hops, the two written tables, and the
# kept lineage rows between them.
FRAMES = ("chained", "message_hops", "lineage_rows", "message_lineage")

Partitioning = tuple[str, tuple[str, ...]]


def _physical(df: DataFrame):
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    return plan


def _children(node) -> list:
    kids = node.children()
    return [kids.apply(i) for i in range(kids.size())]


def _reads_commitlog(node, aggregated: bool = False) -> tuple[bool, bool]:
    """(whether the subtree scans the commit log's Parquet, whether an aggregate stands between)
    for the nearest such scan; a kept frame (InMemoryTableScan) is a leaf."""
    if node.nodeName().startswith("Scan "):
        return ("/parquet/commitlog" in node.simpleString(10_000), aggregated)
    if node.nodeName() == "BroadcastExchange":
        return (False, aggregated)  # a small table sent whole to every task, not a shuffle of it
    aggregated = aggregated or node.nodeName() in AGGREGATES
    found = [r for r in (_reads_commitlog(c, aggregated) for c in _children(node)) if r[0]]
    return found[0] if found else (False, aggregated)


def _partitioning(node) -> Partitioning:
    """An Exchange's partitioning: its kind and the names of its keys."""
    text = node.simpleString(400)[len("Exchange "):]
    kind, keys = text.split("(", 1)
    return kind, tuple(re.findall(r"(\w+)#\d+", keys.split(")", 1)[0]))


def _exchanges(df: DataFrame) -> list:
    out = []

    def walk(node):
        if node.nodeName() == "Exchange":
            out.append(node)
        for child in _children(node):
            walk(child)
    walk(_physical(df))
    return out


def commitlog_shuffles(df: DataFrame) -> list[tuple[Partitioning, bool]]:
    """(the Exchange's partitioning, aggregated before it) for every shuffle of commit-log rows."""
    out = []
    for node in _exchanges(df):
        reads, aggregated = _reads_commitlog(_children(node)[0])
        if reads:
            out.append((_partitioning(node), aggregated))
    return out


def exchanges(df: DataFrame) -> list[Partitioning]:
    """The partitioning of every shuffle of the plan (broadcasts are BroadcastExchange)."""
    return [_partitioning(node) for node in _exchanges(df)]


def lineage_plans(spark: SparkSession, run_dir: str | Path) -> dict[str, tuple[list, list[Partitioning]]]:
    """Per frame of ``FRAMES``, (its commit-log shuffles, every shuffle), each read before the
    frame is kept, as run_lineage builds and keeps them. Nothing runs but the plans of the small
    tables' broadcasts; the frames are released after."""
    # A scan's plan text names its files only up to spark.sql.maxMetadataStringLength (100 by
    # default): a long directory path would cut off the "/parquet/commitlog" by which a scan of
    # the commit log is told.
    before = spark.conf.get(METADATA_STRING_KEY)
    spark.conf.set(METADATA_STRING_KEY, "100000")
    kept = []
    try:
        tables = L.read_run_tables(spark, run_dir)
        records = L._records(tables["commitlog"], tables.get("inner_messages"))
        chained = L._chained_hops(records, tables["retry_topics"], tables["runs"])
        seen = {"chained": (commitlog_shuffles(chained), exchanges(chained))}
        kept.append(chained.persist())
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
        spark.conf.set(METADATA_STRING_KEY, before)


def full_record_shuffles(plans: dict[str, tuple[list, list[Partitioning]]]) -> list[Partitioning]:
    """The shuffles of commit-log rows with no aggregate before them, over all frames: the range
    shuffle of the records, and the hash shuffle of the records without a UNIQ_KEY (empty on a
    store of clients that set one)."""
    return [p for frame in FRAMES for p, aggregated in plans[frame][0] if not aggregated]
