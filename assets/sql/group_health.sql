-- group_health: one row per run and consumer group: how many messages it owns and where they
-- ended, how often it retries, and how long a message takes from first store to its successful
-- consume (end-to-end; from the lineage's total delay when no consume was recorded, as for imports).
CREATE OR REPLACE TABLE group_health AS
WITH acked AS (
    -- One row per run, group and message. A clustering group's row in consume_acks is that
    -- already (receiver ''); a broadcasting group has a row per consumer, and a duplicate is a
    -- second success at one consumer. A group is one or the other (run_groups.model).
    SELECT run_id, "group", uniq_key, acked_ts, n AS acks
    FROM consume_acks
    WHERE receiver = ''
    UNION ALL
    SELECT run_id, "group", uniq_key, max(acked_ts), max(n)
    FROM consume_acks
    WHERE receiver IS DISTINCT FROM ''
    GROUP BY run_id, "group", uniq_key
),
chains AS (
    SELECT l.*,
           CASE WHEN l.final_state = 'CONSUMED'
                THEN coalesce(epoch_ms(a.acked_ts) - epoch_ms(l.first_store_ts), l.total_delay_ms)
           END AS e2e_ms,
           coalesce(a.acks, 0) AS acks
    FROM message_lineage l
    LEFT JOIN acked a ON a.run_id = l.run_id AND a."group" = l."group" AND a.uniq_key = l.message_key
    WHERE l."group" IS NOT NULL
)
SELECT run_id,
       "group",
       count(*) AS messages,
       count(*) FILTER (WHERE final_state = 'CONSUMED') AS consumed,
       count(*) FILTER (WHERE final_state = 'DLQ') AS dlq,
       count(*) FILTER (WHERE final_state = 'RETRYING') AS retrying,
       count(*) FILTER (WHERE final_state = 'IN_FLIGHT') AS in_flight,
       count(*) FILTER (WHERE final_state = 'UNCONSUMED') AS unconsumed,
       count(*) FILTER (WHERE final_state = 'LOST') AS lost,
       count(*) FILTER (WHERE retries > 0) AS retried,
       CAST(sum(retries) AS BIGINT) AS retries,
       round(count(*) FILTER (WHERE retries > 0) / count(*), 6) AS retry_rate,
       count(*) FILTER (WHERE acks > 1) AS duplicate_consumed,
       quantile_disc(e2e_ms, 0.5) AS e2e_p50_ms,
       quantile_disc(e2e_ms, 0.99) AS e2e_p99_ms,
       max(e2e_ms) AS e2e_max_ms
FROM chains
GROUP BY run_id, "group"
ORDER BY run_id, "group";
