-- delay_accuracy: per run and delay level, how punctually the schedule service moved messages out
-- of SCHEDULE_TOPIC_XXXX. lateness_ms = delivered - due; a negative value is an early delivery,
-- which the broker must never make.
--
-- A simulation records every delivery (schedule_deliveries). An imported store does not, so its
-- lateness is measured from the commit log: a SCHEDULE hop's dwell (the time until the record
-- re-put from it was stored) minus its level's delay; the broker computes the due time from the
-- SCHEDULE record's store time the same way. The level's delay comes from delay_levels; a store
-- does not record its broker's messageDelayLevel, so there the delay is estimated as the level's
-- shortest dwell, and lateness is relative to the fastest delivery. measured_from says which.
CREATE OR REPLACE TABLE delay_accuracy AS
WITH recorded AS (
    SELECT run_id, delay_level,
           epoch_ms(due_ts) - epoch_ms(scheduled_store_ts) AS expected_ms,
           lateness_ms, put_attempts
    FROM schedule_deliveries
),
scheduled_hops AS (
    SELECT h.run_id, h.delay_level, h.dwell_ms, l.delay_ms,
           min(h.dwell_ms) OVER (PARTITION BY h.run_id, h.delay_level) AS shortest_dwell_ms
    FROM message_hops h
    LEFT JOIN delay_levels l ON l.run_id = h.run_id AND l.delay_level = h.delay_level
    WHERE h.hop_kind = 'SCHEDULE' AND h.dwell_ms IS NOT NULL
      AND h.run_id NOT IN (SELECT DISTINCT run_id FROM schedule_deliveries)
),
from_commitlog AS (
    SELECT run_id, delay_level, coalesce(delay_ms, shortest_dwell_ms) AS expected_ms,
           dwell_ms - coalesce(delay_ms, shortest_dwell_ms) AS lateness_ms,
           CAST(NULL AS INTEGER) AS put_attempts,
           CASE WHEN delay_ms IS NULL THEN 'commitlog, delay estimated as the shortest dwell'
                ELSE 'commitlog' END AS measured_from
    FROM scheduled_hops
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
       count(*) FILTER (WHERE lateness_ms > getvariable('late_delivery_ms_threshold')) AS late_count,
       CAST(coalesce(sum(put_attempts - 1) FILTER (WHERE put_attempts > 1), 0) AS BIGINT) AS put_retries,
       any_value(measured_from) AS measured_from
FROM deliveries
GROUP BY run_id, delay_level
ORDER BY run_id, delay_level;
