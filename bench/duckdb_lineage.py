"""The whole lineage in DuckDB: P4's baseline, the same rows as ``assets.lineage`` builds with Spark.

P4 compares the Spark lineage with "the same grouping in DuckDB". A baseline that only numbers
the hops and groups them into paths does less than the Spark side (no per-message facts, no
subscription fan-out of shared hops, no final_state joins, no LOST rows) and so overstates the
ratio. This is the lineage itself, rule for rule (``docs/lineage.md``), written as DuckDB SQL the
way one would write it for DuckDB (per-message facts as one aggregation joined back rather than
Spark's windows). ``tests/bench/test_duckdb_lineage.py`` checks that it writes the same rows as
``run_lineage`` on hand-built, simulated and imported runs, so the baseline cannot quietly drift
into doing less.

Two ways to run it. ``duckdb_lineage`` runs it over the whole input in one statement per table;
at 50M records that ran out of memory (the per-chain aggregation over 51M chains held 18.8 GiB,
bench/results/lineage_scale.md). ``duckdb_lineage_by_run`` runs the same statements once per
run_id, in run_id order, and writes one file per run and table: every key of the lineage holds
run_id, so the runs never meet and the files read in name order are the same rows in the same
order. It is what one does with DuckDB when the whole does not fit, and what P4 times.

It is a benchmark baseline, not a second lineage engine: the pipeline, the CLI and the warehouse
use the Spark lineage only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

from assets.checks import sql_fragment
from assets.lineage import INPUT_TABLES, RECORD_COLUMNS
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
from broker_core.export.schema import RAW_TABLES
from broker_core.message import (
    PROP_DELAY,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
)

_RETRY, _DLQ = RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX


def _group_of(topic: str) -> str:
    """SQL: the group of a %RETRY%g / %DLQ%g topic (of %RETRY%g+T: g), else null."""
    return (f"CASE WHEN starts_with({topic}, '{_RETRY}') "
            f"THEN split_part(substr({topic}, {len(_RETRY) + 1}), '{POP_RETRY_V2_SEPARATOR}', 1) "
            f"WHEN starts_with({topic}, '{_DLQ}') THEN substr({topic}, {len(_DLQ) + 1}) END")


def _retry_topic_origin(retry_topic: str, group: str) -> str:
    """SQL: the origin topic a RETRY_TOPIC names on a hop of ``group``
    (names.origin_of_retry_topic_property): itself, or the topic of a POP retry topic of the group."""
    rt = f"nullif({retry_topic}, '')"
    v2 = f"('{_RETRY}' || {group} || '{POP_RETRY_V2_SEPARATOR}')"
    v1 = f"('{_RETRY}' || {group} || '{POP_RETRY_V1_SEPARATOR}')"
    return (f"CASE WHEN NOT starts_with({rt}, '{_RETRY}') THEN {rt} "
            f"WHEN starts_with({rt}, {v2}) AND length({rt}) > length({v2}) THEN substr({rt}, length({v2}) + 1) "
            f"WHEN starts_with({rt}, {v1}) AND length({rt}) > length({v1}) THEN substr({rt}, length({v1}) + 1) END")


def _is_plain_topic(topic: str) -> str:
    return (f"NOT (starts_with({topic}, '{_RETRY}') OR starts_with({topic}, '{_DLQ}') "
            f"OR {topic} = '{SCHEDULE_TOPIC}' OR starts_with({topic}, '{SYSTEM_TOPIC_PREFIX}'))")


def _is_bookkeeping(topic: str, real_topic: str) -> str:
    """SQL: the broker's own bookkeeping records, never message hops (names.is_bookkeeping_record)."""
    return (f"CASE WHEN {topic} = '{TIMER_TOPIC}' "
            f"THEN starts_with(coalesce({real_topic}, '{SYSTEM_TOPIC_PREFIX}'), '{SYSTEM_TOPIC_PREFIX}') "
            f"ELSE starts_with({topic}, '{SYSTEM_TOPIC_PREFIX}') "
            f"OR coalesce(starts_with({_group_of(topic)}, '{SYSTEM_GROUP_PREFIX}'), false) END")


# Classified hops numbered along their chains, with the record facts the lineage reads; kept in a
# table for both outputs, as the Spark lineage keeps its chained hops between its two writes.
CHAINED_SQL = f"""
CREATE TEMP TABLE chained AS
WITH unwrapped AS (
  -- An inner batch the import unwrapped stands for its messages (assets.lineage.unwrap_inner_batches):
  -- each with its own UNIQ_KEY, queue offset, properties and body CRC, the rest its record's.
  SELECT {', '.join(RECORD_COLUMNS)} FROM commitlog c
  WHERE NOT EXISTS (SELECT 1 FROM inner_messages i
                    WHERE i.run_id = c.run_id AND i.broker = c.broker AND i.phys_offset = c.phys_offset)
  UNION ALL BY NAME
  SELECT i.run_id, i.broker, i.phys_offset, i.topic, i.queue_id, i.queue_offset, c.msg_id, i.uniq_key,
         i.properties['{PROP_ORIGIN_MESSAGE_ID}'] AS origin_msg_id, i.properties['{PROP_REAL_TOPIC}'] AS real_topic,
         i.properties['{PROP_RETRY_TOPIC}'] AS retry_topic,
         coalesce(TRY_CAST(i.properties['{PROP_DELAY}'] AS INTEGER), 0) AS delay_level, c.reconsume_times,
         i.store_ts, i.born_ts, c.born_host, i.body_crc, i.properties
  FROM inner_messages i JOIN commitlog c USING (run_id, broker, phys_offset)
), records AS (
  SELECT * FROM unwrapped WHERE NOT ({_is_bookkeeping("topic", "real_topic")})
), owners AS (
  -- The owner the import found for a %RETRY% topic, where every broker listing it agrees.
  SELECT run_id, retry_topic AS topic, min("group") AS owner_group
  FROM retry_topics GROUP BY ALL
  HAVING min("group") = max("group") AND count(*) FILTER (WHERE "group" IS NULL) = 0
), keyed AS (
  SELECT * EXCLUDE (origin_msg_id), origin_msg_id AS rec_origin_msg_id, uniq_key AS message_key
  FROM records WHERE length(uniq_key) > 0
  UNION ALL BY NAME
  -- Without a UNIQ_KEY: the record's ORIGIN_MESSAGE_ID, else a sibling's (same born host, born
  -- time and body CRC), else those fields themselves.
  SELECT * EXCLUDE (origin_msg_id, fallback), origin_msg_id AS rec_origin_msg_id,
         coalesce(nullif(origin_msg_id, ''),
                  min(nullif(origin_msg_id, '')) OVER (PARTITION BY run_id, fallback),
                  fallback) AS message_key
  FROM (SELECT *, concat_ws('|', coalesce(born_host, ''), coalesce(epoch_ms(born_ts)::VARCHAR, ''),
                            coalesce(body_crc::VARCHAR, '')) AS fallback
        FROM records WHERE uniq_key IS NULL OR length(uniq_key) = 0)
), classified AS (
  SELECT * EXCLUDE (born_ts, born_host, body_crc, properties, owner_group),
         properties['{PROP_RECONSUME_TIME}'] AS rec_reconsume_time,
         properties['{PROP_TIMER_DEL_UNIQKEY}'] IS NOT NULL AS recall,
         greatest(coalesce(TRY_CAST(properties['{PROP_INNER_NUM}'] AS INTEGER), 1), 1) AS inner_num,
         CASE WHEN topic = '{SCHEDULE_TOPIC}' THEN 'SCHEDULE'
              WHEN topic = '{TIMER_TOPIC}' THEN 'TIMER'
              WHEN starts_with(topic, '{_RETRY}') THEN 'RETRY'
              WHEN starts_with(topic, '{_DLQ}') THEN 'DLQ'
              WHEN real_topic = topic AND (delay_level > 0 OR properties['DELAY'] IS NOT NULL
                                           OR properties['{PROP_TIMER_DEQUEUE_MS}'] IS NOT NULL)
                THEN 'DELIVER'
              ELSE 'PUBLISH' END AS hop_kind,
         CASE WHEN topic IN ('{SCHEDULE_TOPIC}', '{TIMER_TOPIC}') THEN {_group_of("coalesce(real_topic, '')")}
              ELSE coalesce(owner_group, {_group_of("topic")}) END AS "group"
  FROM keyed LEFT JOIN owners USING (run_id, topic)
), numbered AS (
  SELECT *,
         (CASE WHEN "group" IS NULL THEN 0
               ELSE count(*) FILTER (WHERE "group" IS NULL) OVER (PARTITION BY run_id, message_key)
          END + row_number() OVER chain - 1)::INTEGER AS hop_index,
         lead(store_ts) OVER chain AS chain_next_ts,
         CASE WHEN hop_kind = 'SCHEDULE' THEN 0
              WHEN hop_kind IN ('DELIVER', 'RETRY', 'DLQ') AND delay_level > 0 THEN 1 END AS pair_role
  FROM classified
  WINDOW chain AS (PARTITION BY run_id, message_key, "group" ORDER BY store_ts, broker, phys_offset)
), level_delays AS (
  SELECT DISTINCT run_id, broker, delay_level::INTEGER AS delay_level, level_delay_ms
  FROM (SELECT run_id, broker, generate_subscripts(delay_levels_ms, 1) AS delay_level,
               unnest(delay_levels_ms) AS level_delay_ms
        FROM runs WHERE broker IS NOT NULL)
  WHERE level_delay_ms IS NOT NULL
), waiting AS (
  -- A SCHEDULE record waits from its due time when its level's delay is known (assets.lineage).
  SELECT n.*, CASE WHEN n.hop_kind = 'SCHEDULE' AND d.level_delay_ms IS NOT NULL
                   THEN n.store_ts + to_milliseconds(d.level_delay_ms)
                   ELSE n.store_ts END AS waits_from
  FROM numbered n LEFT JOIN level_delays d USING (run_id, broker, delay_level)
), counted AS (
  -- A SCHEDULE hop's delivery (assets.lineage): each re-put record pairs with the oldest SCHEDULE
  -- still waiting before it in its (message, group, broker, ORIGIN_MESSAGE_ID, level, reconsume
  -- times); the waiting count is the running sum of +1/-1 kept from going below zero.
  SELECT *, sum(CASE pair_role WHEN 0 THEN 1 WHEN 1 THEN -1 ELSE 0 END) OVER in_order
            - CASE pair_role WHEN 0 THEN 1 WHEN 1 THEN -1 ELSE 0 END AS sum_before
  FROM waiting
  WINDOW in_order AS (PARTITION BY run_id, message_key, "group", broker, rec_origin_msg_id, delay_level,
                                   reconsume_times
                      ORDER BY waits_from, pair_role NULLS FIRST, store_ts, broker, phys_offset
                      ROWS UNBOUNDED PRECEDING)
), classed AS (
  SELECT *, CASE WHEN pair_role = 0 THEN 0
                 WHEN pair_role = 1 AND sum_before - least(0, min(sum_before) OVER in_order) > 0 THEN 1
            END AS pair_class
  FROM counted
  WINDOW in_order AS (PARTITION BY run_id, message_key, "group", broker, rec_origin_msg_id, delay_level,
                                   reconsume_times
                      ORDER BY waits_from, pair_role NULLS FIRST, store_ts, broker, phys_offset
                      ROWS UNBOUNDED PRECEDING)
), ranked AS (
  SELECT *, row_number() OVER (PARTITION BY run_id, message_key, "group", broker, rec_origin_msg_id,
                                            delay_level, reconsume_times, pair_class
                               ORDER BY waits_from, pair_role NULLS FIRST, store_ts, broker, phys_offset)
            AS pair_rank
  FROM classed
), paired AS (
  SELECT * EXCLUDE (chain_next_ts, pair_role, pair_class, pair_rank, sum_before, waits_from),
         CASE WHEN hop_kind = 'SCHEDULE'
              THEN coalesce(CASE WHEN pair_class = 0 AND lead(pair_class) OVER pairs = 1
                                      AND lead(pair_rank) OVER pairs = pair_rank
                                 THEN lead(store_ts) OVER pairs END, chain_next_ts)
              ELSE chain_next_ts END AS next_store_ts
  FROM ranked
  WINDOW pairs AS (PARTITION BY run_id, message_key, "group", broker, rec_origin_msg_id, delay_level,
                                reconsume_times
                   ORDER BY pair_rank, pair_class NULLS FIRST)
)
SELECT *, epoch_ms(next_store_ts) - epoch_ms(store_ts) AS dwell_ms
FROM paired
"""

HOPS_SQL = """
SELECT run_id, message_key, "group", hop_index, hop_kind, topic, queue_id, broker, phys_offset, msg_id,
       delay_level, reconsume_times, store_ts, next_store_ts, dwell_ms
FROM chained
ORDER BY run_id, message_key, hop_index, "group" NULLS FIRST
"""

LINEAGE_SQL = f"""
WITH {sql_fragment("origin_cuts_ctes")},
origins AS (
  -- Brokers whose commit log starts past 0 (retention): which of the records name, as
  -- ORIGIN_MESSAGE_ID (not the UNIQ_KEY), a record below the first offset of the broker it was on.
  SELECT c.run_id, c.broker, c.phys_offset, {sql_fragment("names_a_removed_record")} AS removed
  FROM (SELECT run_id, broker, phys_offset, rec_origin_msg_id AS origin_msg_id, uniq_key FROM chained
        WHERE run_id IN (SELECT run_id FROM cut_runs) AND rec_origin_msg_id IS NOT NULL) c
  {sql_fragment("origin_cut_joins")}
), facts AS (
  -- Per message: the origin topic and message id (first non-null by store time), the groups
  -- holding a hop of it, and whether its first hops are gone: no shared hop, a DELIVER as the
  -- first, or an ORIGIN_MESSAGE_ID naming a record retention deleted.
  SELECT run_id, message_key,
         coalesce(arg_min({_retry_topic_origin("retry_topic", '"group"')}, (store_ts, broker, phys_offset)),
                  arg_min(nullif(real_topic, ''), (store_ts, broker, phys_offset))
                    FILTER (WHERE hop_kind IN ('SCHEDULE', 'TIMER') AND "group" IS NULL),
                  arg_min(topic, (store_ts, broker, phys_offset))
                    FILTER (WHERE hop_kind IN ('PUBLISH', 'DELIVER'))) AS origin_topic,
         coalesce(arg_min(CASE WHEN coalesce(starts_with(nullif(retry_topic, ''), '{_RETRY}'), false) THEN NULL
                               ELSE nullif(rec_origin_msg_id, '') END, (store_ts, broker, phys_offset)),
                  arg_min_null(msg_id, (store_ts, broker, phys_offset))) AS origin_msg_id,
         coalesce(list(DISTINCT "group") FILTER (WHERE "group" IS NOT NULL), []) AS hop_groups,
         coalesce(arg_min(hop_kind, (store_ts, broker, phys_offset)) FILTER (WHERE "group" IS NULL),
                  'DELIVER') = 'DELIVER'
           OR coalesce(bool_or(o.removed), false) AS truncated
  FROM chained LEFT JOIN origins o USING (run_id, broker, phys_offset) GROUP BY run_id, message_key
), subs AS (
  -- (run, group, topic) a group is known to consume: deliveries (both topics), committed
  -- offsets, the RETRY_TOPIC of the group's own %RETRY%/%DLQ% records, and the topics a POP
  -- group popped (its checkpoints).
  SELECT DISTINCT run_id, "group", topic FROM (
    SELECT run_id, "group", topic FROM consume_attempts
    UNION ALL SELECT run_id, "group", queue_topic FROM consume_attempts
    UNION ALL SELECT run_id, "group", topic FROM consumer_offsets
    UNION ALL SELECT run_id, "group", topic FROM pop_evidence WHERE kind = 'ck'
    UNION ALL SELECT run_id, {_group_of("topic")}, nullif(retry_topic, '') FROM chained)
  WHERE "group" IS NOT NULL AND topic IS NOT NULL AND {_is_plain_topic("topic")}
), subscribers AS (
  SELECT run_id, topic AS origin_topic, list(DISTINCT "group") AS groups FROM subs GROUP BY ALL
), fanned AS (
  -- A shared hop (group null) belongs to the chain of every group of its message, or stays
  -- alone with group null when the message has none.
  SELECT c.*, f.origin_topic, f.origin_msg_id, f.truncated,
         -- On a group hop, the retries its reconsume count says happened up to it.
         CASE WHEN c."group" IS NOT NULL THEN
           greatest(reconsume_times, coalesce(TRY_CAST(rec_reconsume_time AS INTEGER), 0))
           - CASE WHEN hop_kind = 'RETRY' THEN 0 ELSE 1 END END AS retries_seen,
         unnest(CASE WHEN c."group" IS NOT NULL THEN [c."group"]
                     WHEN len(list_distinct(list_concat(coalesce(s.groups, []), f.hop_groups))) = 0
                       THEN [NULL]
                     ELSE list_distinct(list_concat(coalesce(s.groups, []), f.hop_groups))
                END) AS chain_group
  FROM chained c
  JOIN facts f USING (run_id, message_key)
  LEFT JOIN subscribers s ON s.run_id = c.run_id AND s.origin_topic = f.origin_topic
), per_chain AS (
  SELECT run_id, message_key, chain_group AS "group",
         count(*)::INTEGER AS hops,
         count(*) FILTER (WHERE hop_kind = 'RETRY')::INTEGER AS retries,
         string_agg(CASE WHEN hop_kind = 'SCHEDULE'
                         THEN topic || '[' || CASE WHEN delay_level > 0 THEN delay_level
                                                   ELSE queue_id + 1 END || ']'
                         ELSE topic END, ' > ' ORDER BY hop_index) AS path,
         arg_max({{'kind': hop_kind, 'topic': topic, 'ts': store_ts}}, hop_index) AS last,
         arg_min(store_ts, hop_index) AS first_store_ts,
         arg_max({{'broker': broker, 'phys': phys_offset, 'topic': topic, 'queue': queue_id,
                  'qoff': queue_offset, 'uniq': uniq_key, 'inner_num': inner_num}}, hop_index)
           FILTER (WHERE hop_kind IN ('PUBLISH', 'DELIVER', 'RETRY')) AS consumable,
         max(origin_topic) AS origin_topic, max(origin_msg_id) AS origin_msg_id,
         bool_or(truncated) AS truncated, max(retries_seen) AS retries_seen, bool_or(recall) AS recalled
  FROM fanned GROUP BY run_id, message_key, chain_group
), acked AS (
  -- An ACKED delivery counts for the record it names: offset and UNIQ_KEY ('' when the consumer
  -- reported the offset msgId because the record has none).
  SELECT DISTINCT run_id, "group", phys_offset AS phys,
         CASE WHEN length(uniq_key) > 0 AND uniq_key IS DISTINCT FROM msg_id THEN uniq_key
              ELSE '' END AS ukey
  FROM consume_attempts WHERE outcome = 'ACKED'
), committed AS (
  -- Committed offsets witness consumption only in runs without delivery rows (imports); they
  -- are per broker and queue.
  SELECT run_id, "group", topic, broker, queue_id, arg_max("offset", (ts, "offset")) AS committed
  FROM consumer_offsets o
  WHERE NOT EXISTS (SELECT 1 FROM consume_attempts a WHERE a.run_id = o.run_id)
  GROUP BY ALL
), pop_checkpoints AS (
  SELECT DISTINCT run_id, broker, "group", topic, queue_id, start_offset, pop_ts, revive_ts, unnest(offsets) AS off
  FROM pop_evidence WHERE kind = 'ck'
), pop_acks AS (
  SELECT DISTINCT run_id, broker, "group", topic, queue_id, start_offset, pop_ts, unnest(offsets) AS off
  FROM pop_evidence WHERE kind <> 'ck'
), pop_acked AS (
  -- A record a POP group popped: whether its last checkpoint (latest pop time; then start offset,
  -- revive time) was acked, and that checkpoint's revive time.
  SELECT k.run_id, k.broker, k."group", k.topic, k.queue_id, k.off,
         arg_max({{'acked': a.off IS NOT NULL, 'revive_ts': k.revive_ts}},
                 (k.pop_ts, k.start_offset, k.revive_ts)) AS last_ck
  FROM pop_checkpoints k
  LEFT JOIN pop_acks a ON a.run_id = k.run_id AND a.broker = k.broker AND a."group" = k."group"
                      AND a.topic = k.topic AND a.queue_id = k.queue_id
                      AND a.start_offset = k.start_offset AND a.pop_ts = k.pop_ts AND a.off = k.off
  GROUP BY ALL
), snapshots AS (
  -- When each broker's store was taken: an import's last record, a simulation's end of clock.
  SELECT run_id, broker, max(sim_end_ts) AS snapshot_ts FROM runs WHERE broker IS NOT NULL GROUP BY ALL
), judged AS (
  SELECT p.*, pa.last_ck.acked AS pop_acked, pa.last_ck.revive_ts AS pop_revive_ts,
         a.phys IS NOT NULL AS attempt_acked, c.committed, sn.snapshot_ts,
         -- The chain ends at a popped record whose last checkpoint is not acked: invisible until
         -- its revive time, then the revive service's retry is pending.
         NOT coalesce(pa.last_ck.acked, true) AND p.last.kind NOT IN ('DLQ', 'SCHEDULE', 'TIMER') AS awaits_revive
  FROM per_chain p
  LEFT JOIN acked a ON a.run_id = p.run_id AND a."group" = p."group"
                   AND a.phys = p.consumable.phys AND a.ukey = coalesce(nullif(p.consumable.uniq, ''), '')
  LEFT JOIN committed c ON c.run_id = p.run_id AND c."group" = p."group"
                       AND c.topic = p.consumable.topic AND c.broker = p.consumable.broker
                       AND c.queue_id = p.consumable.queue
  LEFT JOIN pop_acked pa ON pa.run_id = p.run_id AND pa."group" = p."group"
                        AND pa.topic = p.consumable.topic AND pa.broker = p.consumable.broker
                        AND pa.queue_id = p.consumable.queue AND pa.off = p.consumable.qoff
  LEFT JOIN snapshots sn ON sn.run_id = p.run_id AND sn.broker = p.consumable.broker
), stored AS (
  SELECT p.run_id, p.message_key, p."group", p.origin_topic, p.origin_msg_id, p.hops,
         -- A truncated chain: the retries its surviving records say happened, if more.
         CASE WHEN p.truncated THEN greatest(p.retries, coalesce(p.retries_seen, 0))
              ELSE p.retries END AS retries,
         p.path, p.last.topic AS final_topic,
         CASE WHEN p.last.kind = 'DLQ' THEN 'DLQ'
              WHEN p.last.kind = 'TIMER' AND p.recalled THEN 'RECALLED'
              WHEN p.last.kind IN ('SCHEDULE', 'TIMER') THEN 'RETRYING'
              WHEN coalesce(p.pop_acked, p.attempt_acked
                            OR coalesce(p.committed > p.consumable.qoff + p.consumable.inner_num - 1, false))
                THEN 'CONSUMED'
              WHEN p.awaits_revive AND coalesce(p.snapshot_ts < p.pop_revive_ts, false) THEN 'IN_FLIGHT'
              WHEN p.last.kind = 'RETRY' THEN 'RETRYING'
              WHEN p.awaits_revive THEN 'RETRYING'
              ELSE 'UNCONSUMED' END AS final_state,
         p.first_store_ts, p.last.ts AS last_store_ts,
         epoch_ms(p.last.ts) - epoch_ms(p.first_store_ts) AS total_delay_ms, p.truncated,
         CASE WHEN p.awaits_revive THEN p.pop_revive_ts END AS invisible_until
  FROM judged p
), accepted AS (
  -- LOST: the producer got SEND_OK for a UNIQ_KEY no commit-log record carries.
  SELECT run_id, uniq_key, min(topic) AS origin_topic, min(msg_id) AS origin_msg_id
  FROM produced WHERE status = 'SEND_OK' AND uniq_key IS NOT NULL
  GROUP BY run_id, uniq_key
), lost AS (
  SELECT l.run_id, l.uniq_key AS message_key, s."group", l.origin_topic, l.origin_msg_id,
         0 AS hops, 0 AS retries, NULL AS path, NULL AS final_topic, 'LOST' AS final_state,
         NULL::TIMESTAMPTZ AS first_store_ts, NULL::TIMESTAMPTZ AS last_store_ts,
         NULL::BIGINT AS total_delay_ms, false AS truncated, NULL::TIMESTAMPTZ AS invisible_until
  FROM accepted l
  LEFT JOIN subs s ON s.run_id = l.run_id AND s.topic = l.origin_topic
  WHERE NOT EXISTS (SELECT 1 FROM chained k WHERE k.run_id = l.run_id AND k.uniq_key = l.uniq_key)
)
SELECT * FROM stored
UNION ALL
SELECT * FROM lost
ORDER BY run_id, message_key, "group" NULLS FIRST
"""


def _input_table(con: duckdb.DuckDBPyConnection, run_dir: Path, name: str) -> None:
    """View ``_all_<name>`` over RUN_DIR/parquet/<name>/, or an empty table of its contract
    schema; the statements read ``name``, a view over it (all of it, or one run's rows)."""
    folder = run_dir / "parquet" / name
    if any(folder.glob("*.parquet")):
        con.execute(f"CREATE OR REPLACE VIEW _all_{name} AS "
                    f"SELECT * FROM read_parquet('{folder}/*.parquet', union_by_name = true)")
    else:
        con.register(f"_{name}_empty", pa.table({f.name: pa.array([], f.type) for f in RAW_TABLES[name]}))
        con.execute(f"CREATE OR REPLACE VIEW _all_{name} AS SELECT * FROM _{name}_empty")
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _all_{name}")


def _write(con: duckdb.DuckDBPyConnection, hops: Path, lineage: Path) -> None:
    con.execute("DROP TABLE IF EXISTS chained")
    con.execute(CHAINED_SQL)
    con.execute(f"COPY ({HOPS_SQL}) TO '{hops}' (FORMAT parquet)")
    con.execute(f"COPY ({LINEAGE_SQL}) TO '{lineage}' (FORMAT parquet)")
    con.execute("DROP TABLE chained")


def duckdb_lineage(con: duckdb.DuckDBPyConnection, run_dir: Path, out: Path) -> None:
    """Write OUT/message_hops.parquet and OUT/message_lineage.parquet for RUN_DIR with ``con``."""
    for name in INPUT_TABLES:
        _input_table(con, run_dir, name)
    _write(con, out / "message_hops.parquet", out / "message_lineage.parquet")


def duckdb_lineage_by_run(con: duckdb.DuckDBPyConnection, run_dir: Path, out: Path,
                          progress: Callable[[int, int], None] | None = None) -> int:
    """The same tables as ``duckdb_lineage``, one run_id at a time: OUT/<table>/part-NNNNN.parquet,
    one file per run in run_id order (read in name order they are the whole tables' rows, in
    order). ``progress(done, runs)`` is called after each run. Returns the number of runs."""
    for name in INPUT_TABLES:
        _input_table(con, run_dir, name)
    run_ids = [row[0] for row in con.execute(
        " UNION ".join(f"SELECT DISTINCT run_id FROM _all_{name}" for name in INPUT_TABLES)
        + " ORDER BY run_id").fetchall()]
    for table in ("message_hops", "message_lineage"):
        (out / table).mkdir(parents=True, exist_ok=True)
    for k, run_id in enumerate(run_ids):
        for name in INPUT_TABLES:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _all_{name} "
                        f"WHERE run_id = '{run_id.replace(chr(39), chr(39) * 2)}'")
        part = f"part-{k:05d}.parquet"
        _write(con, out / "message_hops" / part, out / "message_lineage" / part)
        if progress is not None:
            progress(k + 1, len(run_ids))
    return len(run_ids)
