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
-- The message of each record named here, read from its hops: from those records' hops only (the
-- DISTINCT over every hop cost 2.4 s on a 10M-record store with no LMQ record at all).
LEFT JOIN (SELECT DISTINCT h.run_id, h.broker, h.phys_offset, h.message_key
           FROM message_hops h
           SEMI JOIN (SELECT run_id, broker, phys_offset FROM lmq_dispatches
                      WHERE state IN {{lmq_broken_states}}) b
             ON b.run_id = h.run_id AND b.broker = h.broker AND b.phys_offset = h.phys_offset) h
  ON h.run_id = d.run_id AND h.broker = d.broker AND h.phys_offset = d.phys_offset
WHERE d.state IN {{lmq_broken_states}}
