-- delay_accuracy: per run and delay level, how punctually the schedule service moved messages out
-- of SCHEDULE_TOPIC_XXXX. lateness_ms = delivered - due; a negative value is an early delivery,
-- which the broker must never make.
--
-- A simulation records every delivery (schedule_deliveries). An imported store does not, so its
-- deliveries are measured from the commit log and the schedule queues (schedule_dwells: each
-- SCHEDULE hop's delivery against its record's own due time); measured_from says which. A level
-- whose delays changed (a broker restarted with another messageDelayLevel) has each delivery
-- judged by its own period's delay; delay_periods lists the periods.
CREATE OR REPLACE TABLE delay_accuracy AS
WITH recorded AS (
    SELECT run_id, delay_level,
           epoch_ms(due_ts) - epoch_ms(scheduled_store_ts) AS expected_ms,
           lateness_ms, put_attempts
    FROM schedule_deliveries
),
from_commitlog AS (
    SELECT run_id, delay_level, expected_ms, lateness_ms, CAST(NULL AS INTEGER) AS put_attempts, measured_from
    FROM schedule_dwells
),
deliveries AS (
    SELECT *, 'schedule_deliveries' AS measured_from FROM recorded
    UNION ALL
    SELECT * FROM from_commitlog
)
SELECT run_id,
       delay_level,
       count(*) AS deliveries,
       CAST(median(expected_ms) AS BIGINT) AS expected_delay_ms,
       quantile_disc(lateness_ms, 0.5) AS lateness_p50_ms,
       quantile_disc(lateness_ms, 0.99) AS lateness_p99_ms,
       max(lateness_ms) AS lateness_max_ms,
       min(lateness_ms) AS lateness_min_ms,
       count(*) FILTER (WHERE lateness_ms < 0) AS early_count,
       count(*) FILTER (WHERE lateness_ms > {{late_delivery_ms_threshold}}) AS late_count,
       CAST(coalesce(sum(put_attempts - 1) FILTER (WHERE put_attempts > 1), 0) AS BIGINT) AS put_retries,
       any_value(measured_from) AS measured_from
FROM deliveries
GROUP BY run_id, delay_level
ORDER BY run_id, delay_level;
