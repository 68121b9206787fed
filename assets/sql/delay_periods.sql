-- delay_periods: per run, broker and delay level, each stretch of time in which the broker gave the
-- level one delay, read from the store: a schedule_units row's due time minus its SCHEDULE record's
-- store time is the delay of that record's level when it was stored. A broker restarted with
-- another messageDelayLevel (broker.conf) starts a new period; runs.delay_levels_ms holds only the
-- newest table, the lineage's pairing reads it, and each delivery is judged by its own record's
-- due time (delay_accuracy, no_delivery_before_due_time).
CREATE OR REPLACE TABLE delay_periods AS
WITH units AS (
    SELECT u.run_id, u.broker, u.delay_level, c.store_ts, u.phys_offset,
           epoch_ms(u.due_ts) - epoch_ms(c.store_ts) AS delay_ms
    FROM schedule_units u
    JOIN (SELECT run_id, broker, phys_offset, store_ts FROM commitlog WHERE topic = '{{schedule_topic}}') c
      ON c.run_id = u.run_id AND c.broker = u.broker AND c.phys_offset = u.phys_offset
),
changes AS (
    SELECT *,
           CASE WHEN delay_ms IS DISTINCT FROM lag(delay_ms) OVER w THEN 1 ELSE 0 END AS starts_period
    FROM units
    WINDOW w AS (PARTITION BY run_id, broker, delay_level ORDER BY store_ts, phys_offset)
),
numbered AS (
    SELECT *, sum(starts_period) OVER (PARTITION BY run_id, broker, delay_level
                                       ORDER BY store_ts, phys_offset) AS period
    FROM changes
)
SELECT run_id, broker, delay_level, CAST(period AS INTEGER) AS period, any_value(delay_ms) AS delay_ms,
       min(store_ts) AS from_ts, max(store_ts) AS to_ts, count(*) AS records
FROM numbered
GROUP BY run_id, broker, delay_level, period
ORDER BY run_id, broker, delay_level, period;
