-- retry_funnel: per run, group and origin topic, how many messages reached each delivery attempt
-- (0 = the first delivery, n = the n-th redelivery from %RETRY%<group>), how many were consumed at
-- that attempt and how many went to the DLQ after it. Built from message_lineage, so it works for
-- imported stores too.
CREATE OR REPLACE TABLE retry_funnel AS
WITH chains AS (
    -- The chains counted by depth and final state (a few rows per group), then fanned out to the
    -- attempts each reached.
    SELECT run_id, "group", origin_topic, retries, final_state, count(*) AS n
    FROM message_lineage
    WHERE "group" IS NOT NULL AND final_state <> 'LOST'
    GROUP BY run_id, "group", origin_topic, retries, final_state
),
attempts AS (
    SELECT run_id, "group", origin_topic, unnest(generate_series(0, max(retries))) AS attempt
    FROM chains
    GROUP BY run_id, "group", origin_topic
)
SELECT a.run_id,
       a."group",
       a.origin_topic,
       CAST(a.attempt AS INTEGER) AS attempt,
       CAST(sum(c.n) AS BIGINT) AS reached,
       CAST(coalesce(sum(c.n) FILTER (WHERE c.retries = a.attempt AND c.final_state = 'CONSUMED'), 0) AS BIGINT)
           AS succeeded,
       CAST(coalesce(sum(c.n) FILTER (WHERE c.retries = a.attempt AND c.final_state = 'DLQ'), 0) AS BIGINT) AS to_dlq,
       CAST(coalesce(sum(c.n) FILTER (WHERE c.retries = a.attempt
                                       AND c.final_state IN ('RETRYING', 'IN_FLIGHT', 'UNCONSUMED')), 0) AS BIGINT)
           AS pending
FROM attempts a
JOIN chains c
  ON c.run_id = a.run_id AND c."group" = a."group" AND c.origin_topic IS NOT DISTINCT FROM a.origin_topic
 AND c.retries >= a.attempt
GROUP BY a.run_id, a."group", a.origin_topic, a.attempt
ORDER BY a.run_id, a."group", a.origin_topic, a.attempt;
