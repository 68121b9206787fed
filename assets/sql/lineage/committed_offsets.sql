-- The committed offsets lineage_rows.sql reads a chain's consumption from where a run has no
-- delivery rows. Reads consumer_offsets and consume_attempts. Per run, not per message: the DuckDB
-- lineage builds it once for a run it writes in slices.
-- Committed offsets witness consumption only in runs without delivery rows (imported
-- stores); they are per broker and queue, the last event per key by time. One row per (group,
-- topic, broker, queue): broadcast.
SELECT /*+ BROADCAST(a) */ o.run_id, o.`group`, o.topic AS c_topic, o.broker AS c_broker, o.queue_id AS c_queue,
       max_by(o.`offset`, (o.ts, o.`offset`)) AS committed
FROM consumer_offsets o
ANTI JOIN (SELECT DISTINCT run_id FROM consume_attempts) a ON a.run_id = o.run_id
GROUP BY o.run_id, o.`group`, o.topic, o.broker, o.queue_id
