"""The lineage of every message's topic rewrites, built with Spark: message_hops and message_lineage.

RocketMQ rewrites a failed or delayed message from topic to topic and each hop is a new commit-log
record; the lineage puts the records of one message back in order. Its rules are SQL files,
``assets/sql/lineage/`` (``assets.lineage_sql``; ``docs/lineage.md`` has the rules in words and
which file holds each). This module runs them with Spark: each step is ``spark.sql`` over temp
views of the step's inputs, and between the steps it does what only Spark needs, which the SQL
cannot say for both engines:

* the classified records are range-partitioned once by (run_id, message_key): every window and
  the per-chain aggregation after that run inside those partitions, and the hops are written
  with a sort within each partition;
* the chained hops are kept (memory, then local disk) between the two writes, and the lineage
  rows before their global sort;
* the small tables (retry-topic owners, delay levels, retention cuts, subscriptions, committed
  offsets, snapshots) are broadcast: the steps' ``/*+ BROADCAST(...) */`` hints, a comment to
  DuckDB.

``assets.lineage_duckdb`` runs the same files on DuckDB. Nothing here runs Python on executors.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from assets.lineage_engine import commitlog_parquet_bytes, is_uri
from assets.lineage_sql import (
    HOPS_ORDER,
    INPUT_TABLES,
    LINEAGE_DIR,
    LINEAGE_ORDER,
    MESSAGE_PARTITION,
    PER_RUN_STEPS,
    RECORD_COLUMNS,
    SPARK,
    lineage_sql,
)
from assets.spark import SHUFFLE_PARTITIONS_KEY, shuffle_partitions_for
from broker_core.errors import BadInputError
from broker_core.export.parquet import COMPRESSION, atomic_dir
from broker_core.export.schema import (
    LINEAGE_TABLES,
    MESSAGE_HOPS,
    MESSAGE_LINEAGE,
    RAW_TABLES,
    RETRY_TOPICS,
    RUNS,
)

__all__ = ["HOPS_ORDER", "INPUT_TABLES", "LINEAGE_DIR", "LINEAGE_ORDER", "RECORD_COLUMNS", "build_message_hops",
           "build_message_lineage", "classify_hops", "commitlog_parquet_bytes", "conform", "is_uri",
           "read_run_tables", "run_lineage", "unwrap_inner_batches"]

Progress = Callable[[str], None]


# --- schemas -----------------------------------------------------------------------------------

def spark_type(arrow_type: pa.DataType) -> T.DataType:
    """The Spark type a data-contract column maps to (only the types the contract uses)."""
    if pa.types.is_string(arrow_type):
        return T.StringType()
    if pa.types.is_int32(arrow_type):
        return T.IntegerType()
    if pa.types.is_int64(arrow_type):
        return T.LongType()
    if pa.types.is_float64(arrow_type):
        return T.DoubleType()
    if pa.types.is_boolean(arrow_type):
        return T.BooleanType()
    if pa.types.is_timestamp(arrow_type):
        return T.TimestampType()
    if pa.types.is_map(arrow_type):
        return T.MapType(spark_type(arrow_type.key_type), spark_type(arrow_type.item_type), True)
    if pa.types.is_list(arrow_type):
        return T.ArrayType(spark_type(arrow_type.value_type), True)
    raise AssertionError(f"no Spark type for contract type {arrow_type}")


def spark_schema(schema: pa.Schema) -> T.StructType:
    """A data-contract pyarrow schema as a Spark StructType (every column nullable)."""
    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])


def conform(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """Select exactly the contract's columns, in order and type, all nullable; absent columns
    become nulls."""
    present = set(df.columns)
    # As SQL text, one call into the JVM: a Column object per column costs a few calls each (the
    # commit log's 28 casts took 60-80 ms as Column objects, 5 ms as text).
    cols = [f"CAST({f'`{f.name}`' if f.name in present else 'NULL'} AS "
            f"{spark_type(f.type).simpleString()}) AS `{f.name}`" for f in schema]
    # Spark writes a column it proves non-null (row_number, a literal) as a Parquet "required"
    # field, which readers then see as `not null` - not the contract's type. A union with an empty
    # frame of the nullable schema makes every output column nullable; it costs no data movement.
    # The empty frame has no partitions (a frame made from an empty list has one per core, each
    # one more task in every stage that reads the union).
    return df.selectExpr(*cols).unionByName(_empty(df.sparkSession, schema))


def _empty(spark: SparkSession, schema: pa.Schema) -> DataFrame:
    """An empty frame of a contract schema, with no partitions."""
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), spark_schema(schema))


def _no_rows(spark: SparkSession, schema: pa.Schema) -> DataFrame:
    """An input table with no rows, as a frame Spark's optimizer knows is empty (a LIMIT 0 is
    planned as an empty local relation): a join with it, and a union branch reading it, leave the
    plan before anything runs. An imported store has no deliveries or producer log, a 4.x store no
    POP checkpoints: their lineage then shuffles no chain rows for the ACKED or POP joins and
    reads no commit-log keys for LOST. (Not for ``conform``'s union, which must stay in the plan.)"""
    return _empty(spark, schema).limit(0)


# --- the steps ---------------------------------------------------------------------------------

# Spark looks for a kept (persisted) frame's data in a query's plan, but not inside the
# definition of a CTE (WITH name AS ...), where every step reads its inputs: a step reading the
# kept hops there would compute them again from the commit log. The legacy CTE policy substitutes
# each CTE into the query as it is analysed, so the kept data is found. The steps never nest a
# WITH inside a WITH, the one thing the policy also changes (which of two same-named CTEs wins).
_CTE_POLICY_KEY = "spark.sql.legacy.ctePrecedencePolicy"
_CTE_POLICY_SUBSTITUTE = "LEGACY"


def _step(spark: SparkSession, step: str, views: dict[str, DataFrame]) -> DataFrame:
    """Lineage step ``step`` (``assets/sql/lineage/<step>.sql``) over ``views``, each frame
    registered as a temp view of its name. The query is analysed here, so the frame it returns
    keeps reading these frames when a view of the same name is replaced later."""
    for name, frame in views.items():
        frame.createOrReplaceTempView(name)
    before = spark.conf.get(_CTE_POLICY_KEY, None)
    spark.conf.set(_CTE_POLICY_KEY, _CTE_POLICY_SUBSTITUTE)
    try:
        return spark.sql(lineage_sql(step, SPARK))
    finally:
        if before is None:
            spark.conf.unset(_CTE_POLICY_KEY)
        else:
            spark.conf.set(_CTE_POLICY_KEY, before)


def _records(commitlog_df: DataFrame, inner_messages_df: DataFrame | None) -> DataFrame:
    """The commit log's ``RECORD_COLUMNS`` as the consumers see them (``records.sql``); without
    inner messages the commit log as it is, so the records are not joined with an empty table."""
    if inner_messages_df is None:
        return commitlog_df.select(*RECORD_COLUMNS)
    return unwrap_inner_batches(commitlog_df, inner_messages_df)


def unwrap_inner_batches(commitlog_df: DataFrame, inner_messages_df: DataFrame) -> DataFrame:
    """The commit log's ``RECORD_COLUMNS`` as the consumers see the records: each inner-batch
    record with ``inner_messages`` rows replaced by its messages (``records.sql``), several to one
    (broker, phys_offset)."""
    return _step(commitlog_df.sparkSession, "records",
                 {"commitlog": commitlog_df, "inner_messages": inner_messages_df})


def classify_hops(commitlog_df: DataFrame, retry_topics_df: DataFrame | None = None) -> DataFrame:
    """The commit-log records that are message hops (no bookkeeping record is), with
    ``message_key``, ``hop_kind`` and ``group`` (null on shared hops) (``classified.sql``).

    ``retry_topics_df`` (an import's ``retry_topics``) gives the group of a %RETRY% topic whose
    name does not say where the group ends (a 5.x POP retry topic %RETRY%<group>_<topic>); a
    topic it does not resolve keeps the name's reading."""
    spark = commitlog_df.sparkSession
    if retry_topics_df is None:
        retry_topics_df = _no_rows(spark, RETRY_TOPICS)
    return _step(spark, "classified", {"records": commitlog_df.select(*RECORD_COLUMNS),
                                       "retry_topics": retry_topics_df})


def _chained_hops(records: DataFrame, retry_topics_df: DataFrame | None, runs_df: DataFrame | None) -> DataFrame:
    """Classified records numbered along their chains (``chained.sql``), range-partitioned by
    (run_id, message_key).

    This is the lineage's one shuffle of the records: every window here and in the lineage
    partitions by (run_id, message_key[, ...]), which the range partitioning satisfies, and a
    write sorted by (run_id, message_key, ...) needs only a sort within each partition. Besides
    the message_hops columns the rows keep the record facts the lineage reads."""
    spark = records.sparkSession
    classified = classify_hops(records, retry_topics_df).repartitionByRange(*MESSAGE_PARTITION)
    return _step(spark, "chained", {"classified": classified,
                                    "runs": runs_df if runs_df is not None else _no_rows(spark, RUNS)})


def build_message_hops(commitlog_df: DataFrame, retry_topics_df: DataFrame | None = None,
                       runs_df: DataFrame | None = None, inner_messages_df: DataFrame | None = None) -> DataFrame:
    """message_hops: one row per commit-log record of a journey, numbered along its chain, in
    its written order (``chained.sql``, ``message_hops.sql``).

    ``runs_df`` gives each broker's delay levels, which tell a SCHEDULE record's delivery from a
    copy. With ``inner_messages_df`` an unwrapped inner batch is a hop per message."""
    chained = _chained_hops(_records(commitlog_df, inner_messages_df), retry_topics_df, runs_df)
    return conform(_step(commitlog_df.sparkSession, "message_hops", {"chained": chained}), MESSAGE_HOPS)


def build_message_lineage(hops_df: DataFrame, commitlog_df: DataFrame,
                          consume_attempts_df: DataFrame, consumer_offsets_df: DataFrame,
                          produced_df: DataFrame, runs_df: DataFrame | None = None,
                          pop_evidence_df: DataFrame | None = None,
                          inner_messages_df: DataFrame | None = None,
                          transaction_ops_df: DataFrame | None = None) -> DataFrame:
    """message_lineage: one row per (message, subscribing group) with its path and final state,
    and the LOST messages (``lineage_rows.sql``), unsorted.

    ``hops_df`` is a message_hops table; the record facts it lacks (UNIQ_KEY, queue offset,
    RETRY_TOPIC, REAL_TOPIC, ORIGIN_MESSAGE_ID, what the properties say) are joined back from the
    classified commit log (``hops_with_facts.sql``). ``run_lineage`` skips that join: its hops
    still carry those facts. ``runs_df`` gives each broker's ``first_offset`` and snapshot time;
    without it no commit log is taken to start past 0 and no POP record is IN_FLIGHT.
    ``pop_evidence_df`` decides whether a POP group consumed a record it popped.
    ``inner_messages_df`` must be the one ``hops_df`` was built with. ``transaction_ops_df``
    (the decoded op records) tells a rolled-back transactional message from an undecided one."""
    spark = hops_df.sparkSession
    records = _records(commitlog_df, inner_messages_df)
    hops = _step(spark, "hops_with_facts", {"message_hops": hops_df, "classified": classify_hops(records)})
    tables = {"consume_attempts": consume_attempts_df, "consumer_offsets": consumer_offsets_df,
              "produced": produced_df,
              "runs": runs_df if runs_df is not None else _no_rows(spark, RUNS),
              "pop_evidence": (pop_evidence_df if pop_evidence_df is not None
                               else _no_rows(spark, RAW_TABLES["pop_evidence"])),
              "transaction_ops": (transaction_ops_df if transaction_ops_df is not None
                                  else _no_rows(spark, RAW_TABLES["transaction_ops"]))}
    return _lineage_rows(hops, records, tables)


def _lineage_rows(chained: DataFrame, records: DataFrame, tables: dict[str, DataFrame]) -> DataFrame:
    """The message_lineage rows (``lineage_rows.sql``) in contract shape, unsorted."""
    spark = chained.sparkSession
    views = {"chained": chained, "records": records,
             **{name: tables[name] for name in ("consume_attempts", "consumer_offsets", "produced", "runs",
                                                "pop_evidence", "transaction_ops")}}
    for step in PER_RUN_STEPS:
        views[step] = _step(spark, step, views)
    return conform(_step(spark, "lineage_rows", views), MESSAGE_LINEAGE)


# --- run directories ---------------------------------------------------------------------------

class _HadoopFiles:
    """File operations on a URI through the session's Hadoop file system (HDFS, object stores)."""

    def __init__(self, spark: SparkSession, uri: str):
        context = spark.sparkContext
        self._path = context._jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(uri).getFileSystem(context._jsc.hadoopConfiguration())

    def has_parquet(self, uri: str) -> bool:
        path = self._path(uri)
        if not self._fs.exists(path) or not self._fs.getFileStatus(path).isDirectory():
            return False
        return any(status.getPath().getName().endswith(".parquet")
                   for status in self._fs.listStatus(path))

    def delete(self, uri: str) -> None:
        self._fs.delete(self._path(uri), True)

    def replace(self, tmp: str, final: str) -> None:
        # Object stores have no atomic directory rename: the old lineage is removed first, so a
        # reader may briefly see none, but never a mix of two runs' files.
        self.delete(final)
        if not self._fs.rename(self._path(tmp), self._path(final)):
            raise BadInputError(f"could not rename {tmp} to {final}", where=final)


def _has_parquet(spark: SparkSession, location: str) -> bool:
    if is_uri(location):
        return _HadoopFiles(spark, location).has_parquet(location)
    path = Path(location)
    return path.is_dir() and any(path.glob("*.parquet"))


def _has_rows(spark: SparkSession, location: str) -> bool:
    """A table directory with Parquet files holding rows (a local one's counted from the footers;
    a URI's taken to have rows when it has files)."""
    if is_uri(location):
        return _has_parquet(spark, location)
    return _has_parquet(spark, location) and any(
        pq.ParquetFile(part).metadata.num_rows for part in Path(location).glob("*.parquet"))


def read_run_tables(spark: SparkSession, run_dir: str | Path) -> dict[str, DataFrame]:
    """The input tables of a run directory as DataFrames in contract shape (empty if absent or
    without rows, as a frame Spark plans as empty; ``inner_messages`` only when it has rows).

    ``run_dir`` is a local path or a URI Spark can read (``hdfs://``, ``s3a://``...).
    """
    parquet = f"{str(run_dir).rstrip('/')}/parquet"
    if not (is_uri(run_dir) or (Path(parquet) / "commitlog").is_dir()):
        raise BadInputError("no parquet/commitlog table: not a run directory",
                            where=str(run_dir), hint="run `retry-audit simulate` or `import-store` first")
    tables = {}
    for name in INPUT_TABLES:
        location = f"{parquet}/{name}"
        schema = RAW_TABLES[name]
        if name == "inner_messages" and not _has_rows(spark, location):
            # Nothing to unwrap (a simulation, a 4.x store, a 5.x store without inner batches, an
            # import older than the table): left out, so the records are not joined with it.
            continue
        if not is_uri(run_dir) and not _has_rows(spark, location):
            # Absent, or files without rows: a frame the optimizer knows is empty.
            tables[name] = _no_rows(spark, schema)
        elif _has_parquet(spark, location):
            # The runs parts of a run's brokers may come from imports of different versions.
            reader = spark.read.option("mergeSchema", "true") if name == "runs" else spark.read
            tables[name] = conform(reader.parquet(location), schema)
        elif name == "commitlog" and is_uri(run_dir):
            raise BadInputError("no parquet/commitlog table: not a run directory", where=str(run_dir))
        else:
            tables[name] = _empty(spark, schema)
    return tables


def _write(df: DataFrame, location: str) -> int:
    """Write ``df``, already in its final row order, as Parquet; return its row count."""
    # Snappy, as the raw tables are written (broker_core.export.parquet.COMPRESSION), whatever
    # codec a cluster's spark.sql.parquet.compression.codec names.
    df.write.mode("error").option("compression", COMPRESSION).parquet(location)
    if is_uri(location):
        # Row counts from the Parquet footers: no data is read again.
        return df.sparkSession.read.parquet(location).count()
    # Hadoop's local checksum files are noise beside Parquet's own checksums.
    for marker in Path(location).glob(".*.crc"):
        marker.unlink()
    # The footers read here rather than by two Spark jobs (list the files, then count).
    return sum(pq.ParquetFile(part).metadata.num_rows for part in Path(location).glob("*.parquet"))


def _build_into(spark: SparkSession, tables: dict[str, DataFrame], out: str,
                say: Progress) -> dict[str, int]:
    """Write both lineage tables under the directory ``out``; return their row counts.

    Rows are globally sorted, so the part files' content does not depend on where Spark ran.
    """
    counts: dict[str, int] = {}
    records = _records(tables["commitlog"], tables.get("inner_messages"))
    # Both tables are built from the same chained hops: kept after the first write (spilling to
    # local disk when memory is short) so the second does not read and shuffle the records again.
    chained = _chained_hops(records, tables["retry_topics"], tables["runs"]).persist(StorageLevel.MEMORY_AND_DISK)
    kept = [chained]
    try:
        # Sorted before conform(): the hops are range-partitioned by (run_id, message_key), so
        # this is a sort within each partition; conform's union would hide that partitioning.
        hops = conform(_step(spark, "message_hops", {"chained": chained}), MESSAGE_HOPS)
        counts["message_hops"] = _write(hops, f"{out}/message_hops")
        say(f"lineage: message_hops {counts['message_hops']} rows")
        # Kept before the global sort too: the sort samples its input to pick the partition
        # ranges, and the joins that make the rows would otherwise run once per sampling pass.
        rows = _lineage_rows(chained, records, tables).persist(StorageLevel.MEMORY_AND_DISK)
        kept.append(rows)
        lineage = _step(spark, "message_lineage", {"lineage_rows": rows})
        counts["message_lineage"] = _write(lineage, f"{out}/message_lineage")
        say(f"lineage: message_lineage {counts['message_lineage']} rows")
    finally:
        for frame in kept:
            frame.unpersist()
    assert set(counts) == set(LINEAGE_TABLES), counts
    return counts


def run_lineage(run_dir: str | Path, spark: SparkSession,
                progress: Progress | None = None) -> dict[str, int]:
    """Build RUN_DIR/lineage/{message_hops,message_lineage}/ from RUN_DIR/parquet/; return row counts.

    The lineage directory is replaced whole: it is written beside its final place and renamed in,
    so a reader sees the previous lineage or the new one, never half of one. ``run_dir`` is a local
    path or, for a cluster, a URI every worker can reach (``hdfs://...``, ``s3a://...``).
    """
    say = progress or (lambda _message: None)
    tables = read_run_tables(spark, run_dir)
    say(f"lineage: reading {str(run_dir).rstrip('/')}/parquet")
    if not is_uri(run_dir):
        partitions = shuffle_partitions_for(commitlog_parquet_bytes(run_dir))
        before = spark.conf.get(SHUFFLE_PARTITIONS_KEY)
        try:
            if partitions is not None:
                spark.conf.set(SHUFFLE_PARTITIONS_KEY, str(partitions))
            with atomic_dir(Path(run_dir) / LINEAGE_DIR) as tmp:
                return _build_into(spark, tables, str(tmp), say)
        finally:
            spark.conf.set(SHUFFLE_PARTITIONS_KEY, before)
    base = str(run_dir).rstrip("/")
    final, tmp = f"{base}/{LINEAGE_DIR}", f"{base}/.{LINEAGE_DIR}.tmp-{os.getpid()}"
    files = _HadoopFiles(spark, base)
    files.delete(tmp)
    try:
        counts = _build_into(spark, tables, tmp, say)
    except BaseException:
        files.delete(tmp)
        raise
    files.replace(tmp, final)
    return counts
