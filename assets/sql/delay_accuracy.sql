-- delay_accuracy: per run and delay level, how punctually the schedule service moved messages out
-- of SCHEDULE_TOPIC_XXXX. lateness_ms = delivered_ts - due_ts; a negative value is an early
-- delivery, which the broker must never make.
CREATE OR REPLACE TABLE delay_accuracy AS
SELECT run_id,
       delay_level,
       count(*) AS deliveries,
       CAST(median(epoch_ms(due_ts) - epoch_ms(scheduled_store_ts)) AS BIGINT) AS expected_delay_ms,
       quantile_disc(lateness_ms, 0.5) AS lateness_p50_ms,
       quantile_disc(lateness_ms, 0.99) AS lateness_p99_ms,
       max(lateness_ms) AS lateness_max_ms,
       min(lateness_ms) AS lateness_min_ms,
       count(*) FILTER (WHERE lateness_ms < 0) AS early_count,
       count(*) FILTER (WHERE lateness_ms > getvariable('late_delivery_ms_threshold')) AS late_count,
       CAST(coalesce(sum(put_attempts - 1) FILTER (WHERE put_attempts > 1), 0) AS BIGINT) AS put_retries
FROM schedule_deliveries
GROUP BY run_id, delay_level
ORDER BY run_id, delay_level;
