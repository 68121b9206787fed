"""The lineage of every message's topic rewrites, built with Spark: message_hops and message_lineage.

RocketMQ rewrites a failed or delayed message from topic to topic and each hop is a new commit-log
record; this module puts the records of one message back in order. The rules (``docs/lineage.md``
holds the full text) in short:

* **message_key** = UNIQ_KEY; for a record without one, its ORIGIN_MESSAGE_ID; for the original
  record of such a message (which carries no ORIGIN_MESSAGE_ID itself), the ORIGIN_MESSAGE_ID its
  later hops carry, found through the fields the broker copies on every hop (born host, born
  timestamp, body CRC); else the fallback ``born_host|born_ts_ms|body_crc``.
* **hop_kind** by topic: SCHEDULE_TOPIC_XXXX -> SCHEDULE, %RETRY%g -> RETRY, %DLQ%g -> DLQ; any
  other topic -> DELIVER when the record was re-put from the schedule (REAL_TOPIC equals its own
  topic and it carries DELAY), else PUBLISH. A SCHEDULE hop belongs to the group of its REAL_TOPIC
  when that is a %RETRY%/%DLQ% topic; PUBLISH and the SCHEDULE/DELIVER hops of a delayed publish
  are shared by every subscriber group (group null). 5.x: a message's record in
  rmq_sys_wheel_timer (the first one and every roll) -> TIMER, and the timer's put to the real
  topic (REAL_TOPIC equals its own topic and it carries TIMER_DEQUEUE_MS) -> DELIVER; the broker's
  bookkeeping records (other rmq_sys_* topics, POP checkpoints waiting in the timer, retries of
  CID_RMQ_SYS_* groups) are no hops at all. %RETRY%g+T (5.x POP retry, v2) belongs to g.
* **final_state** per (message, group): DLQ, RETRYING, CONSUMED, UNCONSUMED, RECALLED (5.x: a timer
  whose chain ends in the wheel with a recall record, TIMER_DEL_UNIQKEY), IN_FLIGHT (5.x: the
  chain ends at a record a POP group popped under a checkpoint that is not acked, whose revive
  time, ``invisible_until``, is after the broker's snapshot ``runs.sim_end_ts``), or LOST for a
  message the producer saw accepted that never reached the commit log.
* **inner batches** (5.x): a batch record the import unwrapped (``inner_messages``) is replaced by
  its messages, as the consumer's client replaces it: each one a record of its own UNIQ_KEY and
  queue offset at the batch's commit-log offset (:func:`unwrap_inner_batches`). A batch record
  whose body did not decode stays one message keyed by the batch's UNIQ_KEY (the client then
  delivers it whole), consumed once the offsets pass its last inner one (INNER_NUM).
* **truncated**: the chain's first hops were deleted by retention before an import: the message
  has no shared hop left, or its first one is a DELIVER, or one of its records names as
  ORIGIN_MESSAGE_ID a record below the ``runs.first_offset`` of the broker that record was on (the
  broker whose records' msgIds start with the same store host; the record's own broker when none
  does). Such a chain's retries come from the reconsume counts its surviving records carry.
* **brokers**: a run may hold several brokers' commit logs. A record is (broker, phys_offset); a
  message's hops on every broker of the run form one journey (joined by message_key), in store
  time order (ties: broker, then physical offset). Consumer offsets are per broker and queue.

Everything is built from Spark's built-in column functions and window functions: Python UDFs
would move every row through a Python worker, which is the slow path on any cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets.spark import SHUFFLE_PARTITIONS_KEY, shuffle_partitions_for
from broker_core.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    POP_RETRY_V1_SEPARATOR,
    POP_RETRY_V2_SEPARATOR,
    PROP_INNER_NUM,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DEQUEUE_MS,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_GROUP_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
)
from broker_core.errors import BadInputError
from broker_core.export.parquet import COMPRESSION, atomic_dir
from broker_core.export.schema import LINEAGE_TABLES, MESSAGE_HOPS, MESSAGE_LINEAGE, RAW_TABLES, RUNS
from broker_core.message import (
    MSG_ID_OFFSET_HEX_CHARS,
    OFFSET_MSG_ID_REGEX,
    PROP_DELAY,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
)

Progress = Callable[[str], None]

PATH_SEPARATOR = " > "
KEY_FIELD_SEPARATOR = "|"
DELAY_PROPERTY = "DELAY"  # MessageConst.PROPERTY_DELAY_TIME_LEVEL
CONSUMABLE_KINDS = ("PUBLISH", "DELIVER", "RETRY")  # hops a consumer group actually pulls
ACKED = "ACKED"
SEND_OK = "SEND_OK"
# Tables the lineage reads; a run without one of the optional ones (an import has no
# consume_attempts rows, an old run may lack `produced`) gets an empty table of the contract type.
# `runs` gives each imported broker's first_offset (where retention left its commit log starting).
# `retry_topics` (an import's) names the owner of a %RETRY% topic the name alone cannot
# (%RETRY%<group>_<topic>, 5.x POP v1); `pop_evidence` (an import's) holds the POP checkpoints and
# acks that say whether a POP group acknowledged a record. `inner_messages` (an import's) holds the
# messages of 5.x inner-batch records, which stand in for those records.
INPUT_TABLES = ("commitlog", "consume_attempts", "consumer_offsets", "produced", "runs", "retry_topics",
                "pop_evidence", "inner_messages")
LINEAGE_DIR = "lineage"
# The order of a message's records along its chain: store time; on a tie the broker, then the
# physical offset (one broker's records at one millisecond are in log order).
RECORD_ORDER = ("store_ts", "broker", "phys_offset")
# Row order of the written tables.
HOPS_ORDER = ("run_id", "message_key", "hop_index", "group")
LINEAGE_ORDER = ("run_id", "message_key", "group")
# The commit-log columns the lineage reads; the others (body facts, tags, hosts) are never decoded.
RECORD_COLUMNS = ("run_id", "broker", "phys_offset", "topic", "queue_id", "queue_offset", "msg_id", "uniq_key",
                  "origin_msg_id", "real_topic", "retry_topic", "delay_level", "reconsume_times",
                  "store_ts", "born_ts", "born_host", "body_crc", "properties")


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


# --- inner batches -----------------------------------------------------------------------------

_RECORD_KEY = ("run_id", "broker", "phys_offset")
# What an inner message takes from its batch record rather than from its own entry in the body:
# the consumer's client copies the record's hosts, times, reconsume times and commit-log offset
# (MessageDecoder.decodeMessage); the offset msgId names the record.
_FROM_BATCH_RECORD = ("msg_id", "born_host", "reconsume_times")


def unwrap_inner_batches(commitlog_df: DataFrame, inner_messages_df: DataFrame) -> DataFrame:
    """The commit log's ``RECORD_COLUMNS`` as the consumers see the records: each inner-batch
    record with ``inner_messages`` rows is replaced by its messages (its own UNIQ_KEY, queue
    offset, properties and body CRC; the ORIGIN_MESSAGE_ID, REAL_TOPIC, RETRY_TOPIC and DELAY
    columns read from its own properties, as the import reads a record's), the rest kept as they
    are. Every column name stays a record's, so everything after this sees an inner message as a
    record at its batch's (broker, phys_offset), several to one offset."""
    plain, inner = _split_inner_batches(commitlog_df, inner_messages_df)
    return plain.unionByName(inner)


def _split_inner_batches(commitlog_df: DataFrame, inner_messages_df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(the records that are no unwrapped batch, the inner messages as records): both in
    ``RECORD_COLUMNS``."""
    records = commitlog_df.select(*RECORD_COLUMNS)
    batches = inner_messages_df.select(*_RECORD_KEY).distinct()
    props = F.col("properties")
    inner = (inner_messages_df.select(*_RECORD_KEY, "topic", "queue_id", "queue_offset", "uniq_key", "body_crc",
                                      "born_ts", "store_ts", "properties")
             .join(records.select(*_RECORD_KEY, *_FROM_BATCH_RECORD), list(_RECORD_KEY))
             .withColumns({"origin_msg_id": props.getItem(PROP_ORIGIN_MESSAGE_ID),
                           "real_topic": props.getItem(PROP_REAL_TOPIC),
                           "retry_topic": props.getItem(PROP_RETRY_TOPIC),
                           "delay_level": F.coalesce(props.getItem(PROP_DELAY).try_cast("int"), F.lit(0))}))
    return records.join(batches, list(_RECORD_KEY), "left_anti"), inner.select(*RECORD_COLUMNS)


# --- hop classification ------------------------------------------------------------------------

def _present(col: Column) -> Column:
    """The value, or null when it is null or empty (an empty property counts as absent)."""
    return F.when(F.length(col) > 0, col)


def _fallback_key() -> Column:
    # born_ts as epoch milliseconds keeps the key independent of any time zone setting.
    return F.concat_ws(
        KEY_FIELD_SEPARATOR,
        F.coalesce(F.col("born_host"), F.lit("")),
        F.coalesce(F.unix_millis(F.col("born_ts")).cast("string"), F.lit("")),
        F.coalesce(F.col("body_crc").cast("string"), F.lit("")),
    )


def _with_message_key(commitlog_df: DataFrame) -> DataFrame:
    """Add ``message_key``; the window that finds a sibling's ORIGIN_MESSAGE_ID runs only over
    records without a UNIQ_KEY (old clients), so the common case costs no extra shuffle."""
    uniq = _present(F.col("uniq_key"))
    keyed = commitlog_df.where(uniq.isNotNull()).withColumn("message_key", uniq)
    unkeyed = commitlog_df.where(uniq.isNull())
    same_journey = Window.partitionBy("run_id", "_fallback_key")
    unkeyed = (
        unkeyed.withColumn("_fallback_key", _fallback_key())
        .withColumn("_sibling_origin", F.min(_present(F.col("origin_msg_id"))).over(same_journey))
        .withColumn("message_key", F.coalesce(_present(F.col("origin_msg_id")),
                                              F.col("_sibling_origin"), F.col("_fallback_key")))
        .drop("_fallback_key", "_sibling_origin")
    )
    return keyed.unionByName(unkeyed)


def _group_of(topic: Column) -> Column:
    """The group of a %RETRY%g / %DLQ%g topic, else null (names.group_of, as a column); of a 5.x
    POP retry topic %RETRY%g+T, g (names.pop_retry_v2_group)."""
    return (F.when(topic.startswith(RETRY_GROUP_TOPIC_PREFIX),
                   F.substring_index(topic.substr(len(RETRY_GROUP_TOPIC_PREFIX) + 1, 1 << 30),
                                     POP_RETRY_V2_SEPARATOR, 1))
            .when(topic.startswith(DLQ_GROUP_TOPIC_PREFIX),
                  topic.substr(len(DLQ_GROUP_TOPIC_PREFIX) + 1, 1 << 30)))


def _is_bookkeeping(topic: Column, real_topic: Column) -> Column:
    """The broker's own bookkeeping records, never message hops (names.is_bookkeeping_record)."""
    system_real_topic = F.coalesce(real_topic, F.lit(SYSTEM_TOPIC_PREFIX)).startswith(SYSTEM_TOPIC_PREFIX)
    return (F.when(topic == TIMER_TOPIC, system_real_topic)
            .otherwise(topic.startswith(SYSTEM_TOPIC_PREFIX)
                       | F.coalesce(_group_of(topic).startswith(SYSTEM_GROUP_PREFIX), F.lit(False))))


def _retry_owners(retry_topics_df: DataFrame) -> DataFrame:
    """(run_id, topic, _owner_group): the owner an import found for a %RETRY% topic, where every
    broker of the run that knows the topic found the same one (ambiguous rows have no group)."""
    return (retry_topics_df.groupBy("run_id", F.col("retry_topic").alias("topic"))
            .agg(F.min("group").alias("_owner_min"), F.max("group").alias("_owner_max"),
                 F.count_if(F.col("group").isNull()).alias("_unowned"))
            .where((F.col("_owner_min") == F.col("_owner_max")) & (F.col("_unowned") == 0))
            .select("run_id", "topic", F.col("_owner_min").alias("_owner_group")))


def classify_hops(commitlog_df: DataFrame, retry_topics_df: DataFrame | None = None) -> DataFrame:
    """Commit-log rows plus ``message_key``, ``hop_kind`` and ``group`` (null on shared hops),
    without the broker's bookkeeping records (which are no message's hops).

    ``retry_topics_df`` (an import's ``retry_topics``) gives the group of a %RETRY% topic whose
    name does not say where the group ends (a 5.x POP retry topic %RETRY%<group>_<topic>); a
    topic it does not resolve keeps the name's reading."""
    if retry_topics_df is not None:
        # One row per retry topic of a run: small enough to broadcast at any run size.
        commitlog_df = commitlog_df.join(F.broadcast(_retry_owners(retry_topics_df)), ["run_id", "topic"], "left")
    else:
        commitlog_df = commitlog_df.withColumn("_owner_group", F.lit(None).cast("string"))
    topic = F.col("topic")
    has_delay = (F.col("delay_level") > 0) | F.col("properties").getItem(DELAY_PROPERTY).isNotNull()
    # A 5.x timer's put to the real topic carries no DELAY, but always TIMER_DEQUEUE_MS.
    from_timer = F.col("properties").getItem(PROP_TIMER_DEQUEUE_MS).isNotNull()
    reput = (F.col("real_topic") == topic) & (has_delay | from_timer)
    hop_kind = (F.when(topic == SCHEDULE_TOPIC, "SCHEDULE")
                .when(topic == TIMER_TOPIC, "TIMER")
                .when(topic.startswith(RETRY_GROUP_TOPIC_PREFIX), "RETRY")
                .when(topic.startswith(DLQ_GROUP_TOPIC_PREFIX), "DLQ")
                .when(F.coalesce(reput, F.lit(False)), "DELIVER")
                .otherwise("PUBLISH"))
    waits = (topic == SCHEDULE_TOPIC) | (topic == TIMER_TOPIC)
    group = (F.when(waits, _group_of(F.coalesce(F.col("real_topic"), F.lit(""))))
             .otherwise(F.coalesce(F.col("_owner_group"), _group_of(topic))))
    messages = commitlog_df.where(~_is_bookkeeping(topic, F.col("real_topic")))
    return (_with_message_key(messages).withColumns({"hop_kind": hop_kind, "group": group})
            .drop("_owner_group"))


def _chained_hops(commitlog_df: DataFrame, retry_topics_df: DataFrame | None = None,
                  runs_df: DataFrame | None = None) -> DataFrame:
    """Classified records numbered along their chains, range-partitioned by (run_id, message_key).

    This is the lineage's one shuffle of the records: every window here and in the lineage
    partitions by (run_id, message_key[, group]), which the range partitioning satisfies, and a
    write sorted by (run_id, message_key, ...) needs only a sort within each partition. Besides
    the message_hops columns the rows keep the record facts the lineage reads (uniq_key,
    queue_offset, retry_topic, real_topic, and the record's own ORIGIN_MESSAGE_ID as
    rec_origin_msg_id). ``runs_df`` gives each broker's delay levels (``delay_levels_ms``),
    which tell a SCHEDULE record's delivery from a copy (:func:`_with_schedule_delivery`).
    """
    hops = (classify_hops(commitlog_df.select(*RECORD_COLUMNS), retry_topics_df)
            .withColumnRenamed("origin_msg_id", "rec_origin_msg_id")
            .repartitionByRange("run_id", "message_key"))
    per_message = Window.partitionBy("run_id", "message_key")
    chain = Window.partitionBy("run_id", "message_key", "group").orderBy(*RECORD_ORDER)
    shared = F.count(F.when(F.col("group").isNull(), F.lit(1))).over(per_message)
    position = F.row_number().over(chain) - 1
    hops = hops.withColumns({
        "hop_index": F.when(F.col("group").isNull(), position).otherwise(shared + position),
        "chain_next_ts": F.lead("store_ts").over(chain),
    })
    return _with_schedule_delivery(hops, _level_delays(runs_df) if runs_df is not None else None)


# The records the schedule re-puts from a SCHEDULE record keep its DELAY and reconsume times.
_REPUT_KINDS = ("DELIVER", "RETRY", "DLQ")


def _level_delays(runs_df: DataFrame) -> DataFrame:
    """(run_id, broker, delay_level, _level_delay_ms) for every level a run's broker knows."""
    levels = runs_df.where(F.col("broker").isNotNull()).select(
        "run_id", "broker", F.posexplode("delay_levels_ms").alias("_pos", "_level_delay_ms"))
    return (levels.where(F.col("_level_delay_ms").isNotNull())
            .select("run_id", "broker", (F.col("_pos") + 1).cast("int").alias("delay_level"), "_level_delay_ms")
            .dropDuplicates(["run_id", "broker", "delay_level"]))


def _with_schedule_delivery(hops: DataFrame, level_delays: DataFrame | None = None) -> DataFrame:
    """``next_store_ts`` and ``dwell_ms`` of each hop: a SCHEDULE hop's next store time is its
    delivery's, every other hop's the next hop's in its chain.

    A SCHEDULE record's delivery is the record the schedule re-put from it (DELIVER, RETRY or DLQ),
    which keeps its DELAY and reconsume times. Within a (message, group, ORIGIN_MESSAGE_ID, delay
    level, reconsume times), in store order, each re-put record pairs with the oldest SCHEDULE
    record still waiting before it (the schedule delivers each level's queue in order); a re-put
    record with none waiting is a copy a restarted broker put again (its delay offset died with
    it) and pairs with nothing. Where a record was sent back twice (it reached two consumers) two
    retry sequences interleave in the chain and the next hop is not the delivery. A SCHEDULE hop
    without a delivery (still waiting, or lost) keeps the next hop of its chain.

    A SCHEDULE record waits from its due time, its store time plus its level's delay (the
    broker's delay table, ``level_delays``: the schedule delivers it no earlier), or from its
    store time where the level's delay is not known. So a copy stored after a newer SCHEDULE of
    the same level, before that one was due, pairs with nothing rather than with it. The
    schedule and its deliveries are one broker's: pairs are sought within a broker.

    The matching is a running count of waiting SCHEDULE records that never goes below zero: with
    ``c`` the running sum of +1 per SCHEDULE and -1 per re-put, in the order of their waiting
    and store times, the count waiting before a row is ``c - min(0, least c so far)``, and a
    re-put is paired when it is positive; the k-th SCHEDULE then pairs with the k-th paired re-put.
    """
    kind = F.col("hop_kind")
    if level_delays is not None:
        hops = hops.join(F.broadcast(level_delays), ["run_id", "broker", "delay_level"], "left")
    else:
        hops = hops.withColumn("_level_delay_ms", F.lit(None).cast("long"))
    role = (F.when(kind == "SCHEDULE", F.lit(0))
            .when(kind.isin(*_REPUT_KINDS) & (F.col("delay_level") > 0), F.lit(1)))
    waits_from = F.when((kind == "SCHEDULE") & F.col("_level_delay_ms").isNotNull(),
                        F.timestamp_millis(F.unix_millis("store_ts") + F.col("_level_delay_ms"))
                        ).otherwise(F.col("store_ts"))
    pair_key = ("run_id", "message_key", "group", "broker", "rec_origin_msg_id", "delay_level", "reconsume_times")
    # A SCHEDULE due at the moment a re-put is stored is waiting for it (role 0 before role 1).
    event_order = ("_waits_from", "pair_role", *RECORD_ORDER)
    hops = hops.withColumns({"_waits_from": waits_from, "pair_role": role})
    in_order = Window.partitionBy(*pair_key).orderBy(*event_order)
    step = F.when(F.col("pair_role") == 0, F.lit(1)).when(F.col("pair_role") == 1, F.lit(-1)).otherwise(F.lit(0))
    counted = hops.withColumn(
        "_sum_before", F.sum(step).over(in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)) - step)
    lowest_before = F.least(F.lit(0), F.coalesce(
        F.min("_sum_before").over(in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)), F.lit(0)))
    paired_role = (F.when(F.col("pair_role") == 0, F.lit(0))
                   .when((F.col("pair_role") == 1) & (F.col("_sum_before") - lowest_before > 0), F.lit(1)))
    classed = counted.withColumn("pair_class", paired_role)
    ranked = classed.withColumn(
        "pair_rank", F.row_number().over(Window.partitionBy(*pair_key, "pair_class").orderBy(*event_order)))
    pairs = Window.partitionBy(*pair_key).orderBy("pair_rank", "pair_class")
    nxt_rank, nxt_class = F.lead("pair_rank").over(pairs), F.lead("pair_class").over(pairs)
    delivered_ts = F.when((F.col("pair_class") == 0) & (nxt_class == 1) & (nxt_rank == F.col("pair_rank")),
                          F.lead("store_ts").over(pairs))
    next_store_ts = F.when(kind == "SCHEDULE", F.coalesce(delivered_ts, F.col("chain_next_ts"))) \
        .otherwise(F.col("chain_next_ts"))
    # One projection rather than a withColumn per column: each withColumn re-analyses the plan.
    return ranked.withColumns({
        "next_store_ts": next_store_ts,
        "dwell_ms": F.unix_millis(next_store_ts) - F.unix_millis("store_ts"),
    }).drop("pair_role", "pair_class", "pair_rank", "_sum_before", "chain_next_ts", "_waits_from",
            "_level_delay_ms")


def build_message_hops(commitlog_df: DataFrame, retry_topics_df: DataFrame | None = None,
                       runs_df: DataFrame | None = None, inner_messages_df: DataFrame | None = None) -> DataFrame:
    """message_hops: one row per commit-log record of a journey, numbered along its chain.

    Shared hops (group null) are ordered by (store_ts, broker, phys_offset) and numbered from 0; a group's
    hops are ordered the same way and numbered after the shared ones. ``next_store_ts`` is the
    next hop's store time in the same chain (for a shared hop, the next shared hop). With
    ``inner_messages_df`` an unwrapped inner batch is a hop per message (:func:`unwrap_inner_batches`).
    """
    if inner_messages_df is not None:
        commitlog_df = unwrap_inner_batches(commitlog_df, inner_messages_df)
    return conform(_chained_hops(commitlog_df, retry_topics_df, runs_df), MESSAGE_HOPS)


# --- lineage -----------------------------------------------------------------------------------

def _first_by(value: Column, order: Column) -> Column:
    """The value of the earliest row (by ``order``) among rows where the value is not null."""
    return F.min_by(value, F.when(value.isNotNull(), order))


def _is_plain_topic(topic: Column) -> Column:
    return ~(topic.startswith(RETRY_GROUP_TOPIC_PREFIX) | topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
             | (topic == SCHEDULE_TOPIC) | topic.startswith(SYSTEM_TOPIC_PREFIX))


def _origin_cuts(runs_df: DataFrame) -> DataFrame:
    """(run_id, broker, _own_first_offset_hex, _host_first_offset_hex) for every broker of a run
    with a broker whose commit log starts past offset 0 (retention deleted its oldest files).

    A record on ``broker`` whose ORIGIN_MESSAGE_ID starts with store host H names a record of the
    broker whose records' msgIds start with H: its own broker when that is one of them (a broker
    keeps its address), else the first by name; ``_host_first_offset_hex`` maps H to that broker's
    first offset. A host no broker of the run has means the record's own broker
    (``_own_first_offset_hex``). Offsets are the 16 upper-case hex digits an offset msgId ends with
    ('' for a log that starts at 0), so an ORIGIN_MESSAGE_ID is compared with them as text:
    fixed-width hex orders as the number does, and no cast can overflow on a value that only looks
    like a msgId. A run's runs table is a row per broker: this is small enough to broadcast.
    """
    hex_offset = F.when(F.col("first_offset") > 0,
                        F.lpad(F.hex(F.col("first_offset")), MSG_ID_OFFSET_HEX_CHARS, "0")).otherwise("")
    brokers = runs_df.where(F.col("broker").isNotNull()).groupBy("run_id", "broker").agg(
        F.max(hex_offset).alias("_own_first_offset_hex"),
        F.flatten(F.collect_list(F.coalesce(F.col("msg_id_hosts"), F.array().cast("array<string>"))))
        .alias("_hosts"))
    cut = brokers.where(F.col("_own_first_offset_hex") != "").select("run_id").distinct()
    brokers = brokers.join(cut, "run_id")
    targets = brokers.select("run_id", F.col("broker").alias("_target"),
                             F.col("_own_first_offset_hex").alias("_target_hex"),
                             F.explode(F.array_distinct("_hosts")).alias("_host"))
    prefer = Window.partitionBy("run_id", "broker", "_host").orderBy(
        F.col("_target") != F.col("broker"), F.col("_target"))
    chosen = (brokers.select("run_id", "broker").join(targets, "run_id")
              .withColumn("_rank", F.row_number().over(prefer)).where(F.col("_rank") == 1)
              .groupBy("run_id", "broker")
              .agg(F.map_from_entries(F.collect_list(F.struct("_host", "_target_hex")))
                   .alias("_host_first_offset_hex")))
    return brokers.select("run_id", "broker", "_own_first_offset_hex").join(chosen, ["run_id", "broker"], "left")


def _names_a_removed_record() -> Column:
    """The record's ORIGIN_MESSAGE_ID is an offset msgId below the first offset of the broker it
    names (``_origin_cuts``): the record it names was in a commit-log file that retention deleted.
    A value equal to the record's UNIQ_KEY (a client's fallback send) is not an offset msgId,
    though it has as many digits."""
    origin = F.upper(_present(F.col("rec_origin_msg_id")))
    offset_hex = F.substring(origin, -MSG_ID_OFFSET_HEX_CHARS, MSG_ID_OFFSET_HEX_CHARS)
    host = F.expr(f"substring(upper(rec_origin_msg_id), 1, length(rec_origin_msg_id) - {MSG_ID_OFFSET_HEX_CHARS})")
    first_offset_hex = F.coalesce(F.element_at(F.col("_host_first_offset_hex"), host),
                                  F.col("_own_first_offset_hex"))
    return F.coalesce(origin.rlike(OFFSET_MSG_ID_REGEX) & ~F.col("rec_origin_msg_id").eqNullSafe(F.col("uniq_key"))
                      & (offset_hex < first_offset_hex), F.lit(False))


def _retries_seen() -> Column:
    """On a group hop: the retries its record says happened up to it, from the reconsume count
    (the larger of RECONSUME_TIME and the header's reconsume times; a client's send keeps the
    count in the property). The k-th RETRY record carries k; a SCHEDULE or DLQ record carries
    one more than the retries before it. Null on shared hops."""
    count = F.greatest(F.col("reconsume_times"),
                       F.coalesce(F.col("properties").getItem(PROP_RECONSUME_TIME).try_cast("int"),
                                  F.lit(0)))
    return F.when(F.col("group").isNotNull(),
                  F.when(F.col("hop_kind") == "RETRY", count).otherwise(count - 1))


def _retry_topic_origin() -> Column:
    """The origin topic a hop's RETRY_TOPIC names (names.origin_of_retry_topic_property, as a
    column): the property itself, or, when it is a POP retry topic of the hop's group (the 5.x
    proxy's DLQ record), the topic after ``%RETRY%<group>+`` or ``%RETRY%<group>_``; null for
    another %RETRY% name."""
    retry_topic, group = _present(F.col("retry_topic")), F.col("group")
    whole = F.lit(1 << 30)
    v2 = F.concat(F.lit(RETRY_GROUP_TOPIC_PREFIX), group, F.lit(POP_RETRY_V2_SEPARATOR))
    v1 = F.concat(F.lit(RETRY_GROUP_TOPIC_PREFIX), group, F.lit(POP_RETRY_V1_SEPARATOR))
    return (F.when(~retry_topic.startswith(RETRY_GROUP_TOPIC_PREFIX), retry_topic)
            .when(retry_topic.startswith(v2) & (F.length(retry_topic) > F.length(v2)),
                  retry_topic.substr(F.length(v2) + 1, whole))
            .when(retry_topic.startswith(v1) & (F.length(retry_topic) > F.length(v1)),
                  retry_topic.substr(F.length(v1) + 1, whole)))


def _with_message_facts(hops: DataFrame, origin_cuts: DataFrame) -> DataFrame:
    """Add per-message columns (the same on every hop of a message): origin_topic, origin_msg_id,
    _truncated and _hop_groups (the groups holding a hop of it), as window aggregates over one
    partitioning, and the per-hop _retries_seen."""
    message = Window.partitionBy("run_id", "message_key")
    order = F.struct(*RECORD_ORDER)
    # A broadcast of one row per broker of a cut run: the hops keep their partitioning for the
    # windows below.
    hops = hops.join(F.broadcast(origin_cuts), ["run_id", "broker"], "left")
    shared_schedule = F.col("hop_kind").isin("SCHEDULE", "TIMER") & F.col("group").isNull()
    delayed_real_topic = F.when(shared_schedule, _present(F.col("real_topic")))
    published_topic = F.when(F.col("hop_kind").isin("PUBLISH", "DELIVER"), F.col("topic"))
    origin_topic = F.coalesce(_first_by(_retry_topic_origin(), order).over(message),
                              _first_by(delayed_real_topic, order).over(message),
                              _first_by(published_topic, order).over(message))
    # The proxy's DLQ record of a POP message (RETRY_TOPIC a %RETRY% name) carries as
    # ORIGIN_MESSAGE_ID the msgId of the retry record it was sent back from, not the origin's.
    from_pop_retry = F.coalesce(_present(F.col("retry_topic")).startswith(RETRY_GROUP_TOPIC_PREFIX), F.lit(False))
    origin_msg_id = F.coalesce(_first_by(F.when(~from_pop_retry, _present(F.col("rec_origin_msg_id"))), order)
                               .over(message),
                               F.min_by(F.col("msg_id"), order).over(message))
    # A chain's first hop is its message's first shared hop; without one, or when it is a DELIVER
    # (the SCHEDULE before it is gone), the chain starts after its head.
    shared = F.col("group").isNull()
    first_shared_kind = F.min_by(F.when(shared, F.col("hop_kind")), F.when(shared, order)).over(message)
    truncated = (first_shared_kind.isNull() | F.coalesce(first_shared_kind == "DELIVER", F.lit(False))
                 | F.bool_or(_names_a_removed_record()).over(message))
    return hops.withColumns({"origin_topic": origin_topic, "origin_msg_id": origin_msg_id,
                             "_truncated": truncated, "_retries_seen": _retries_seen(),
                             "_hop_groups": F.collect_set("group").over(message)}
                            ).drop("_own_first_offset_hex", "_host_first_offset_hex")


def _subscriptions(consume_attempts_df: DataFrame, consumer_offsets_df: DataFrame,
                   commitlog_df: DataFrame, pop_evidence_df: DataFrame | None = None) -> DataFrame:
    """(run_id, group, topic) a group is known to consume: from deliveries, committed offsets, the
    RETRY_TOPIC (origin topic) of the group's %RETRY%/%DLQ% records, and the topics a POP group
    popped (its checkpoints). The last one is the only witness of a POP group that never failed a
    message on a store whose consumer offsets are in RocksDB (``storeType=defaultRocksDB``: no
    consumerOffset.json, docs/rocketmq-5x.md)."""
    # Both topics of a delivery (the message's and the queue's) from one scan of the deliveries.
    attempts = consume_attempts_df.select(
        "run_id", "group", F.explode(F.array("topic", "queue_topic")).alias("topic"))
    offsets = consumer_offsets_df.select("run_id", "group", "topic")
    # Read straight from the commit log (a filter, no join) so the hops are not computed twice.
    from_records = (commitlog_df.select("run_id", _group_of(F.col("topic")).alias("group"),
                                        _present(F.col("retry_topic")).alias("topic")))
    subs = attempts.unionByName(offsets).unionByName(from_records)
    if pop_evidence_df is not None:
        subs = subs.unionByName(pop_evidence_df.where(F.col("kind") == "ck").select("run_id", "group", "topic"))
    return (subs.where(F.col("group").isNotNull() & F.col("topic").isNotNull()
                       & _is_plain_topic(F.col("topic")))
            .distinct())


def _hop_label() -> Column:
    # A schedule hop shows its delay level; the schedule queue id is level - 1 (ScheduleMessageService).
    level = F.when(F.col("delay_level") > 0, F.col("delay_level")).otherwise(F.col("queue_id") + 1)
    return F.when(F.col("hop_kind") == "SCHEDULE",
                  F.concat(F.col("topic"), F.lit("["), level.cast("string"), F.lit("]"))
                  ).otherwise(F.col("topic"))


def _chains(hops: DataFrame, subs: DataFrame) -> DataFrame:
    """One row per (hop, group whose chain holds it): a shared hop is repeated for every group of
    its message (the subscribers of its origin topic and the groups with hops of it), or kept once
    with group null when the message has no group at all."""
    groups_by_topic = (subs.groupBy("run_id", F.col("topic").alias("origin_topic"))
                       .agg(F.collect_set("group").alias("_sub_groups")))
    # The subscription table is small (groups x topics): broadcast it rather than shuffle the hops.
    with_groups = hops.join(F.broadcast(groups_by_topic), ["run_id", "origin_topic"], "left")
    every_group = F.array_union(F.coalesce(F.col("_sub_groups"), F.array().cast("array<string>")),
                                F.col("_hop_groups"))
    own_groups = F.when(F.col("group").isNull(), every_group).otherwise(F.array(F.col("group")))
    return (with_groups
            .withColumn("group", F.explode_outer(own_groups))
            .drop("_sub_groups", "_hop_groups"))


def _pop_acks(pop_evidence_df: DataFrame) -> DataFrame:
    """(run_id, group, _c_topic, _c_broker, _c_queue, _c_offset, _pop_acked, _pop_revive_ts) for
    every record a POP group popped: whether the group's last checkpoint of it (the latest pop
    time) was acked, and that checkpoint's revive time (the end of its invisible time).

    A failed POP delivery changes the record's invisible time: the broker writes a new checkpoint
    of that offset and acks the old one (docs/rocketmq-5x.md), so an ack of an earlier checkpoint
    does not mean the group consumed the record; only the last checkpoint's ack does. Each
    checkpoint and ack is in the store twice (timer, then revive topic): distinct() keeps one.
    Checkpoints of one pop time are ordered by start offset, then revive time, so both engines
    pick the same one."""
    ck_key = ("run_id", "broker", "group", "topic", "queue_id", "start_offset", "pop_ts", "_offset")
    exploded = pop_evidence_df.select("*", F.explode("offsets").alias("_offset"))
    checkpoints = exploded.where(F.col("kind") == "ck").select(*ck_key, "revive_ts").distinct()
    acks = (exploded.where(F.col("kind") != "ck").select(*ck_key).distinct()
            .withColumn("_ck_acked", F.lit(True)))
    last = F.max_by(F.struct(F.coalesce(F.col("_ck_acked"), F.lit(False)).alias("acked"), "revive_ts"),
                    F.struct("pop_ts", "start_offset", "revive_ts"))
    return (checkpoints.join(acks, list(ck_key), "left")
            .groupBy("run_id", "group", F.col("topic").alias("_c_topic"), F.col("broker").alias("_c_broker"),
                     F.col("queue_id").alias("_c_queue"), F.col("_offset").alias("_c_offset"))
            .agg(last.alias("_last_ck"))
            .select("*", F.col("_last_ck.acked").alias("_pop_acked"),
                    F.col("_last_ck.revive_ts").alias("_pop_revive_ts"))
            .drop("_last_ck"))


def _snapshots(runs_df: DataFrame) -> DataFrame:
    """(run_id, _c_broker, _snapshot_ts): when each broker's store was taken, ``runs.sim_end_ts``:
    an import's last commit-log record's store time, a simulation's clock when the run stopped."""
    return (runs_df.where(F.col("broker").isNotNull())
            .groupBy("run_id", F.col("broker").alias("_c_broker"))
            .agg(F.max("sim_end_ts").alias("_snapshot_ts")))


def _final_state(consume_attempts_df: DataFrame, consumer_offsets_df: DataFrame,
                 per_chain: DataFrame, pop_evidence_df: DataFrame | None = None,
                 runs_df: DataFrame | None = None) -> DataFrame:
    """Add final_state and invisible_until to per-chain rows holding _last (kind of the last hop)
    and _consumable (the last PUBLISH/DELIVER/RETRY record: broker, phys_offset, topic, queue_id,
    queue_offset, uniq_key).

    A record a POP group popped (``pop_evidence``) is consumed when its last checkpoint was acked:
    a POP group's committed offset moves past a record when it is popped, not when it is acked,
    so for such a record the offsets say nothing. When that checkpoint is not acked, the record
    is IN_FLIGHT while its revive time is after the snapshot of its broker (``runs_df``:
    ``sim_end_ts``), RETRYING once it is not (the revive service's retry is pending)."""
    # An ACKED delivery counts for the record it names: by offset and, for a record with a
    # UNIQ_KEY, by that key (after a crash a lost record's offset may hold another message). For
    # a record without one the consumer reports the offset msgId (MessageClientExt.getMsgId), so
    # the offset alone decides; '' stands for "no key" on both sides of the join.
    reported = _present(F.col("uniq_key"))
    acked = (consume_attempts_df.where(F.col("outcome") == ACKED)
             .select("run_id", "group", F.col("phys_offset").alias("_c_phys"),
                     F.coalesce(F.when(~reported.eqNullSafe(F.col("msg_id")), reported),
                                F.lit("")).alias("_c_key"))
             .distinct()
             .withColumn("_acked", F.lit(True)))
    # Committed offsets witness consumption only in runs without delivery rows (imported stores).
    # They are per broker: queue 0 of a topic on one broker is not queue 0 on another.
    runs_with_attempts = consume_attempts_df.select("run_id").distinct()
    committed = (consumer_offsets_df
                 .join(F.broadcast(runs_with_attempts), "run_id", "left_anti")
                 .groupBy("run_id", "group", F.col("topic").alias("_c_topic"),
                          F.col("broker").alias("_c_broker"), F.col("queue_id").alias("_c_queue"))
                 .agg(F.max_by("offset", F.struct("ts", "offset")).alias("_committed")))
    rows = (per_chain
            .withColumns({"_c_phys": F.col("_consumable.phys_offset"),
                          "_c_topic": F.col("_consumable.topic"),
                          "_c_broker": F.col("_consumable.broker"),
                          "_c_queue": F.col("_consumable.queue_id"),
                          "_c_offset": F.col("_consumable.queue_offset"),
                          "_c_key": F.coalesce(_present(F.col("_consumable.uniq_key")), F.lit(""))})
            .join(acked, ["run_id", "group", "_c_phys", "_c_key"], "left")
            # One row per (group, topic, broker, queue): small enough to broadcast at any run size.
            .join(F.broadcast(committed), ["run_id", "group", "_c_topic", "_c_broker", "_c_queue"], "left"))
    if pop_evidence_df is not None:
        # One row per popped record offset: as many as the records a POP group popped.
        rows = rows.join(_pop_acks(pop_evidence_df), ["run_id", "group", "_c_topic", "_c_broker", "_c_queue",
                                                      "_c_offset"], "left")
    else:
        rows = rows.withColumns({"_pop_acked": F.lit(None).cast("boolean"),
                                 "_pop_revive_ts": F.lit(None).cast("timestamp")})
    if runs_df is not None:
        # One row per broker of a run: broadcast.
        rows = rows.join(F.broadcast(_snapshots(runs_df)), ["run_id", "_c_broker"], "left")
    else:
        rows = rows.withColumn("_snapshot_ts", F.lit(None).cast("timestamp"))
    # An inner batch is consumed once the committed offset is past its last message.
    last_offset = F.col("_consumable.queue_offset") + F.col("_consumable.inner_num") - 1
    consumed = F.coalesce(
        F.col("_pop_acked"),
        F.coalesce(F.col("_acked"), F.lit(False))
        | F.coalesce(F.col("_committed") > last_offset, F.lit(False)))
    last_kind = F.col("_last.hop_kind")
    # The chain's end decides first: a record sent back to the schedule was delivered (offsets
    # move past it) but not consumed, so "waiting in the schedule" outranks offset evidence. A
    # timer recalled while still in the wheel ends there, and the wheel drops it: RECALLED.
    # The chain ends at a record a POP group popped whose last checkpoint is not acked: the record
    # is invisible until that checkpoint's revive time, then the revive service puts it back (a
    # retry record, which would be the chain's end). A revive time not after the snapshot: the
    # invisible time is over and the revive is pending.
    awaits_revive = ~F.coalesce(F.col("_pop_acked"), F.lit(True)) & ~last_kind.isin("DLQ", "SCHEDULE", "TIMER")
    invisible = awaits_revive & F.coalesce(F.col("_snapshot_ts") < F.col("_pop_revive_ts"), F.lit(False))
    final_state = (F.when(last_kind == "DLQ", "DLQ")
                   .when((last_kind == "TIMER") & F.col("_recalled"), "RECALLED")
                   .when(last_kind.isin("SCHEDULE", "TIMER"), "RETRYING")
                   .when(consumed, "CONSUMED")
                   .when(invisible, "IN_FLIGHT")
                   .when(last_kind == "RETRY", "RETRYING")
                   .when(awaits_revive, "RETRYING")
                   .otherwise("UNCONSUMED"))
    return rows.withColumns({"final_state": final_state,
                             "invisible_until": F.when(awaits_revive, F.col("_pop_revive_ts"))})


def build_message_lineage(hops_df: DataFrame, commitlog_df: DataFrame,
                          consume_attempts_df: DataFrame, consumer_offsets_df: DataFrame,
                          produced_df: DataFrame, runs_df: DataFrame | None = None,
                          pop_evidence_df: DataFrame | None = None,
                          inner_messages_df: DataFrame | None = None) -> DataFrame:
    """message_lineage: one row per (message, subscribing group) with its path and final state.

    ``hops_df`` is a message_hops table; the record facts it lacks (UNIQ_KEY, queue offset,
    RETRY_TOPIC, REAL_TOPIC, ORIGIN_MESSAGE_ID, properties) are joined back from the commit log by
    (run_id, broker, phys_offset). ``run_lineage`` skips that join: its hops still carry those
    facts. ``runs_df`` gives each broker's ``first_offset``; without it no commit log is taken to
    start past 0 (a chain is still truncated when it has no head at all). It also gives each
    broker's snapshot time (``sim_end_ts``); without it no POP record is IN_FLIGHT.
    ``pop_evidence_df`` decides whether a POP group consumed a record it popped (``_final_state``).
    ``inner_messages_df`` must be the one ``hops_df`` was built with: an inner message's facts are
    its own, found by its offset and its UNIQ_KEY (several hops share a batch's offset).
    """
    def facts(records: DataFrame) -> DataFrame:
        return records.select("run_id", "broker", "phys_offset", "uniq_key", "queue_offset", "retry_topic",
                              "real_topic", F.col("origin_msg_id").alias("rec_origin_msg_id"), "properties")

    if inner_messages_df is None:
        hops = hops_df.join(facts(commitlog_df), ["run_id", "broker", "phys_offset"], "left")
    else:
        plain, inner = _split_inner_batches(commitlog_df, inner_messages_df)
        record_facts = (facts(plain).withColumn("_inner_key", F.lit(None).cast("string"))
                        .unionByName(facts(inner).withColumn("_inner_key", F.col("uniq_key"))))
        commitlog_df = plain.unionByName(inner)
        f = record_facts.alias("f")
        same_record = [F.col(f"h.{k}") == F.col(f"f.{k}") for k in _RECORD_KEY]
        own = F.col("f._inner_key").isNull() | (F.col("f._inner_key") == F.col("h.message_key"))
        hops = (hops_df.alias("h").join(f, same_record + [own], "left")
                .select("h.*", *[F.col(f"f.{c}") for c in record_facts.columns
                                 if c not in _RECORD_KEY and c != "_inner_key"]))
    hops = hops.repartition("run_id", "message_key")
    if runs_df is None:
        runs_df = _empty(hops_df.sparkSession, RUNS)
    return _lineage_of(hops, commitlog_df, consume_attempts_df, consumer_offsets_df, produced_df,
                       runs_df, pop_evidence_df)


def _lineage_of(hops: DataFrame, commitlog_df: DataFrame, consume_attempts_df: DataFrame,
                consumer_offsets_df: DataFrame, produced_df: DataFrame,
                runs_df: DataFrame, pop_evidence_df: DataFrame | None = None) -> DataFrame:
    """message_lineage from hops partitioned by (run_id, message_key) that carry the record facts.

    The per-message facts (window aggregates), the fan-out of shared hops to groups (a broadcast
    join) and the per-chain aggregation all reuse the hops' partitioning: no shuffle of the hops.
    """
    hops = _with_message_facts(hops, _origin_cuts(runs_df))
    subs = _subscriptions(consume_attempts_df, consumer_offsets_df, commitlog_df, pop_evidence_df)
    chain = _chains(hops, subs).withColumn("_label", _hop_label())

    consumable = F.col("hop_kind").isin(*CONSUMABLE_KINDS)
    last = F.struct("hop_kind", "topic", "store_ts")
    # An inner batch's record stands for INNER_NUM queue offsets from its own (docs/rocketmq-5x.md).
    inner_num = F.greatest(F.coalesce(F.col("properties").getItem(PROP_INNER_NUM).try_cast("int"), F.lit(1)),
                           F.lit(1))
    last_consumable = F.struct("broker", "phys_offset", "topic", "queue_id", "queue_offset", "uniq_key",
                               inner_num.alias("inner_num"))
    recall = F.col("properties").getItem(PROP_TIMER_DEL_UNIQKEY).isNotNull()
    per_chain = chain.groupBy("run_id", "message_key", "group").agg(
        F.count(F.lit(1)).cast("int").alias("hops"),
        F.count(F.when(F.col("hop_kind") == "RETRY", F.lit(1))).cast("int").alias("retries"),
        F.array_join(F.transform(F.sort_array(F.collect_list(F.struct("hop_index", "_label"))),
                                 lambda hop: hop["_label"]), PATH_SEPARATOR).alias("path"),
        F.max_by(last, F.col("hop_index")).alias("_last"),
        F.min_by(F.col("store_ts"), F.col("hop_index")).alias("first_store_ts"),
        F.max_by(last_consumable, F.when(consumable, F.col("hop_index"))).alias("_consumable"),
        F.max("origin_topic").alias("origin_topic"),
        F.max("origin_msg_id").alias("origin_msg_id"),
        F.bool_or("_truncated").alias("truncated"),
        F.max("_retries_seen").alias("_retries_seen"),
        F.bool_or(recall).alias("_recalled"),
    )
    # A truncated chain lost RETRY hops with its head: its retries are what its surviving records
    # say happened, when that is more than the RETRY hops left.
    per_chain = per_chain.withColumn(
        "retries", F.when(F.col("truncated"),
                          F.greatest(F.col("retries"), F.coalesce(F.col("_retries_seen"), F.lit(0))))
        .otherwise(F.col("retries")))
    stored = _final_state(consume_attempts_df, consumer_offsets_df, per_chain, pop_evidence_df,
                          runs_df).withColumns({
        "final_topic": F.col("_last.topic"),
        "last_store_ts": F.col("_last.store_ts"),
        "total_delay_ms": F.unix_millis("_last.store_ts") - F.unix_millis("first_store_ts"),
    })
    return conform(stored, MESSAGE_LINEAGE).unionByName(
        _lost_messages(commitlog_df, produced_df, subs))


def _lost_messages(commitlog_df: DataFrame, produced_df: DataFrame, subs: DataFrame) -> DataFrame:
    """LOST rows: the producer got SEND_OK for a UNIQ_KEY that no commit-log record carries."""
    stored_keys = (commitlog_df.select("run_id", F.col("uniq_key")).where(F.col("uniq_key").isNotNull())
                   .distinct())
    accepted = (produced_df.where((F.col("status") == SEND_OK) & F.col("uniq_key").isNotNull())
                .groupBy("run_id", "uniq_key")
                .agg(F.min("topic").alias("origin_topic"), F.min("msg_id").alias("origin_msg_id")))
    lost = accepted.join(stored_keys, ["run_id", "uniq_key"], "left_anti")
    with_groups = (lost.join(F.broadcast(subs),
                             (lost.run_id == subs.run_id) & (lost.origin_topic == subs.topic),
                             "left")
                   .select(lost["*"], subs.group))
    rows = with_groups.withColumns({"message_key": F.col("uniq_key"), "hops": F.lit(0),
                                    "retries": F.lit(0), "final_state": F.lit("LOST"),
                                    "truncated": F.lit(False)})
    return conform(rows, MESSAGE_LINEAGE)


# --- run directories ---------------------------------------------------------------------------

def is_uri(run_dir: str | Path) -> bool:
    """True for a run directory given as a URI (hdfs://, s3a://, file://...) rather than a path."""
    return "://" in str(run_dir)


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
    """The input tables of a run directory as DataFrames in contract shape (empty if absent;
    ``inner_messages`` only when it has rows).

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
        if _has_parquet(spark, location):
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
    commitlog = tables["commitlog"]
    if "inner_messages" in tables:
        commitlog = unwrap_inner_batches(commitlog, tables["inner_messages"])
    # Both tables are built from the same chained hops: kept after the first write (spilling to
    # local disk when memory is short) so the second does not read and shuffle the records again.
    chained = _chained_hops(commitlog, tables["retry_topics"], tables["runs"]
                            ).persist(StorageLevel.MEMORY_AND_DISK)
    kept = [chained]
    try:
        # Sorted before conform(): the hops are range-partitioned by (run_id, message_key), so
        # this is a sort within each partition; conform's union would hide that partitioning.
        hops = conform(chained.orderBy(*HOPS_ORDER), MESSAGE_HOPS)
        counts["message_hops"] = _write(hops, f"{out}/message_hops")
        say(f"lineage: message_hops {counts['message_hops']} rows")
        # Kept before the global sort too: the sort samples its input to pick the partition
        # ranges, and the joins that make the rows would otherwise run once per sampling pass.
        lineage = _lineage_of(chained, commitlog, tables["consume_attempts"],
                              tables["consumer_offsets"], tables["produced"], tables["runs"],
                              tables["pop_evidence"]).persist(StorageLevel.MEMORY_AND_DISK)
        kept.append(lineage)
        counts["message_lineage"] = _write(lineage.orderBy(*LINEAGE_ORDER), f"{out}/message_lineage")
        say(f"lineage: message_lineage {counts['message_lineage']} rows")
    finally:
        for frame in kept:
            frame.unpersist()
    assert set(counts) == set(LINEAGE_TABLES), counts
    return counts


def commitlog_parquet_bytes(run_dir: str | Path) -> int:
    """Bytes of a local run directory's commit-log Parquet (what sizes the shuffle)."""
    return sum(f.stat().st_size for f in (Path(run_dir) / "parquet" / "commitlog").glob("*.parquet"))


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
