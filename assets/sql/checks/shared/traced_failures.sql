-- The consumes a client's trace says failed that the run can judge (the rows
-- trace_failed_consume_retried judges): the listener did not succeed (SubAfter success false),
-- before the first of the run's brokers stopped recording (runs.sim_end_ts: the send-back after a
-- failure comes within milliseconds of it, so a failure later than that may have its retry
-- record outside the stores read). Columns as traced_consumes. A SELECT, used as a subquery.
SELECT t.*
FROM ({{traced_consumes}}) t
JOIN (SELECT run_id, min(sim_end_ts) AS snapshot_ts FROM runs GROUP BY run_id) r ON r.run_id = t.run_id
WHERE t.success = false AND coalesce(t.end_ts, t.begin_ts) <= r.snapshot_ts
