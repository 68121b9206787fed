-- delivery_accounting: the OpenChaos queue checker's fields per run and group.
--   enqueue_invoke   messages the producers tried to send to a topic the group subscribes to
--   enqueue_success  of those, sent with SEND_OK
--   dequeue_success  deliveries the listener consumed successfully (acked, or expired after
--                    succeeding: the effect happened); every duplicate counts
--   lost             SEND_OK messages with no commit-log record at all (final_state LOST)
--   duplicated       messages consumed successfully more than once (per consumer when broadcasting)
--   at_least_once   lost = 0;  exactly_once: lost = 0 and duplicated = 0
-- A run without producer ground truth (an imported store) counts from its lineage and consumer
-- offsets instead: sent = the messages seen, dequeued = CONSUMED, duplicates unknown (NULL).
CREATE OR REPLACE TABLE delivery_accounting AS
WITH groups AS (
    SELECT run_id, "group",
           count(*) FILTER (WHERE final_state <> 'LOST') AS seen,
           count(*) FILTER (WHERE final_state = 'CONSUMED') AS consumed,
           count(*) FILTER (WHERE final_state = 'LOST') AS lost
    FROM message_lineage
    WHERE "group" IS NOT NULL
    GROUP BY run_id, "group"
),
subscriptions AS (
    SELECT DISTINCT run_id, "group", origin_topic AS topic
    FROM message_lineage
    WHERE "group" IS NOT NULL AND origin_topic IS NOT NULL
),
sim_runs AS (
    SELECT DISTINCT run_id FROM produced
),
sent AS (
    SELECT s.run_id, s."group",
           count(DISTINCT p.uniq_key) AS enqueue_invoke,
           count(DISTINCT p.uniq_key) FILTER (WHERE p.status = 'SEND_OK') AS enqueue_success
    FROM subscriptions s
    JOIN produced p ON p.run_id = s.run_id AND p.topic = s.topic
    GROUP BY s.run_id, s."group"
),
acked AS (
    SELECT run_id, "group", uniq_key,
           CASE WHEN upper(model) = 'BROADCASTING' THEN consumer_id ELSE '' END AS receiver,
           count(*) AS n
    FROM consume_attempts
    WHERE status = 'CONSUME_SUCCESS' AND outcome IN ('ACKED', 'EXPIRED')
    GROUP BY ALL
),
dequeued AS (
    SELECT run_id, "group",
           sum(n) AS dequeue_success,
           count(DISTINCT uniq_key) FILTER (WHERE n > 1) AS duplicated
    FROM acked
    GROUP BY run_id, "group"
)
SELECT g.run_id,
       g."group",
       CASE WHEN r.run_id IS NULL THEN g.seen ELSE coalesce(s.enqueue_invoke, 0) END AS enqueue_invoke,
       CASE WHEN r.run_id IS NULL THEN g.seen ELSE coalesce(s.enqueue_success, 0) END AS enqueue_success,
       CASE WHEN r.run_id IS NULL THEN g.consumed ELSE coalesce(CAST(d.dequeue_success AS BIGINT), 0) END
           AS dequeue_success,
       g.lost,
       CASE WHEN r.run_id IS NULL THEN NULL ELSE coalesce(d.duplicated, 0) END AS duplicated,
       g.lost = 0 AS at_least_once,
       CASE WHEN r.run_id IS NULL THEN NULL ELSE g.lost = 0 AND coalesce(d.duplicated, 0) = 0 END
           AS exactly_once,
       CASE WHEN r.run_id IS NULL THEN 'lineage' ELSE 'producer' END AS counted_from
FROM groups g
LEFT JOIN sim_runs r ON r.run_id = g.run_id
LEFT JOIN sent s ON s.run_id = g.run_id AND s."group" = g."group"
LEFT JOIN dequeued d ON d.run_id = g.run_id AND d."group" = g."group"
ORDER BY g.run_id, g."group";
