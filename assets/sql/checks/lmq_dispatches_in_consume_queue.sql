-- lmq_dispatches_in_consume_queue: every consume-queue position a multi-dispatched record names in
-- INNER_MULTI_QUEUE_OFFSET holds a unit naming that record, and every unit of an %LMQ% queue names a
-- record dispatched there (docs/warehouse.md). The import matched them (lmq_dispatches.state): a
-- position with no unit in a store at rest, a unit naming another record, a unit no record claims.
-- A deleted LMQ, a queue whose head files are gone or a dispatch the broker has not written yet
-- (a live or crashed store) break nothing.
SELECT d.run_id, h.message_key, CAST(NULL AS VARCHAR) AS "group",
       d.state || ': ' || d.dispatch_queue || '/' || CAST(d.dispatch_queue_id AS VARCHAR) || ' offset '
       || coalesce(CAST(d.dispatch_offset AS VARCHAR), '?') || ', record at ' || d.broker || ' commit-log offset '
       || CAST(d.phys_offset AS VARCHAR) AS detail
FROM lmq_dispatches d
LEFT JOIN (SELECT DISTINCT run_id, broker, phys_offset, message_key FROM message_hops) h
  ON h.run_id = d.run_id AND h.broker = d.broker AND h.phys_offset = d.phys_offset
WHERE d.state IN {{lmq_broken_states}}
