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
levels AS (
    -- A level whose every record had the one delay is one period, told by an aggregate (the usual
    -- case); only the others are ordered to find where their delay changed.
    SELECT run_id, broker, delay_level, any_value(delay_ms) AS delay_ms, min(store_ts) AS from_ts,
           max(store_ts) AS to_ts, count(*) AS records,
           coalesce(count(*) = count(delay_ms) AND min(delay_ms) = max(delay_ms), false) AS one_delay
    FROM units
    GROUP BY run_id, broker, delay_level
),
changes AS (
    SELECT u.*,
           CASE WHEN u.delay_ms IS DISTINCT FROM lag(u.delay_ms) OVER w THEN 1 ELSE 0 END AS starts_period
    FROM units u
    SEMI JOIN levels l ON l.run_id = u.run_id AND l.broker = u.broker
                      AND l.delay_level IS NOT DISTINCT FROM u.delay_level AND NOT l.one_delay
    WINDOW w AS (PARTITION BY u.run_id, u.broker, u.delay_level ORDER BY u.store_ts, u.phys_offset)
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
UNION ALL
SELECT run_id, broker, delay_level, CAST(1 AS INTEGER), delay_ms, from_ts, to_ts, records
FROM levels
WHERE one_delay
ORDER BY run_id, broker, delay_level, period;
