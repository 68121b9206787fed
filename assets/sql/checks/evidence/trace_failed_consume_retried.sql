-- The consumes trace_failed_consume_retried judges: each failure a client's trace holds, before
-- the run's brokers stopped recording (traced_failures).
SELECT run_id, count(*) AS judged FROM ({{traced_failures}}) f GROUP BY run_id
