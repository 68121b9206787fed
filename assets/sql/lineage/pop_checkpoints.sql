-- The POP checkpoints lineage_rows.sql reads a POP group's consumption and invisible time from.
-- Reads pop_evidence. Per run, not per message: the DuckDB lineage builds it once for a run it
-- writes in slices.
-- Per record a POP group popped: whether its last checkpoint (latest pop time; then start
-- offset, revive time) was acked, and that checkpoint's revive time. A failed POP delivery
-- writes a new checkpoint and acks the old one, so only the last checkpoint's ack is
-- consumption. Each checkpoint and ack is in the store twice (timer, then revive topic).
WITH pop_offsets AS (
    SELECT run_id, broker, `group`, topic, queue_id, start_offset, pop_ts, revive_ts, kind,
           {{explode}}(offsets) AS c_offset
    FROM pop_evidence
)
SELECT k.run_id, k.`group`, k.topic AS c_topic, k.broker AS c_broker, k.queue_id AS c_queue, k.c_offset,
       max_by(a.c_offset IS NOT NULL, (k.pop_ts, k.start_offset, k.revive_ts)) AS pop_acked,
       max_by(k.revive_ts, (k.pop_ts, k.start_offset, k.revive_ts)) AS pop_revive_ts
FROM (SELECT DISTINCT run_id, broker, `group`, topic, queue_id, start_offset, pop_ts, c_offset, revive_ts
      FROM pop_offsets WHERE kind = 'ck') k
LEFT JOIN (SELECT DISTINCT run_id, broker, `group`, topic, queue_id, start_offset, pop_ts, c_offset
           FROM pop_offsets WHERE kind <> 'ck') a
  ON a.run_id = k.run_id AND a.broker = k.broker AND a.`group` = k.`group` AND a.topic = k.topic
 AND a.queue_id = k.queue_id AND a.start_offset = k.start_offset AND a.pop_ts = k.pop_ts
 AND a.c_offset = k.c_offset
GROUP BY k.run_id, k.`group`, k.topic, k.broker, k.queue_id, k.c_offset
