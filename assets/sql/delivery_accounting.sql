-- delivery_accounting: the OpenChaos queue checker's fields per run and group.
--   enqueue_invoke   messages the producers tried to send to a topic the group subscribes to
--   enqueue_success  of those, sent with SEND_OK
--   dequeue_success  deliveries the listener consumed successfully (acked, or expired after
--                    succeeding: the effect happened); every duplicate counts
--   lost             SEND_OK messages with no commit-log record at all (final_state LOST)
--   duplicated       messages consumed successfully more than once (per consumer when broadcasting)
--   at_least_once   lost = 0;  exactly_once: lost = 0 and duplicated = 0
--   forked_messages  messages whose chain forked (docs/lineage.md "forks"): handed out again
--   duplicate_deliveries  their extra copies (records beyond one per attempt and hop kind), each a
--                    delivery or send-back the message would not have had without the fork: the
--                    duplicates the store shows, whether or not a duplicate was consumed
--   duplicate_deliveries_at_restart  of those, in chains a broker restart explains
--                    (fork_cause BROKER_RESTART)
-- A run without producer ground truth (an imported store) counts from its lineage and consumer
-- offsets instead: sent = the messages seen, dequeued = CONSUMED, duplicated unknown (NULL: a
-- store shows a message delivered twice, not consumed twice).
CREATE OR REPLACE TABLE delivery_accounting AS
WITH groups AS (
    SELECT run_id, "group",
           count(*) FILTER (WHERE final_state <> 'LOST') AS seen,
           count(*) FILTER (WHERE final_state = 'CONSUMED') AS consumed,
           count(*) FILTER (WHERE final_state = 'LOST') AS lost,
           count(*) FILTER (WHERE forks > 0) AS forked_messages,
           coalesce(sum(forks), 0) AS duplicate_deliveries,
           coalesce(sum(forks) FILTER (WHERE fork_cause = 'BROKER_RESTART'), 0) AS duplicate_deliveries_at_restart
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
resent AS (
    -- Hashes of the messages with more than one send row (an integer aggregate costs a fraction
    -- of one on the values; the rows of one message share a hash).
    SELECT hash(run_id, uniq_key) AS k
    FROM produced
    WHERE uniq_key IS NOT NULL AND topic IS NOT NULL
    GROUP BY k
    HAVING count(*) > 1
),
sent_keys AS (
    -- One row per message: its topic and whether any send of it was SEND_OK. A message is sent
    -- to one topic; the rare one sent to several (topic <> topic_hi) is counted below from its
    -- sends instead (grouping every send per subscribing group costs several times more). A
    -- message whose hash no other send row has was sent once; only the others are grouped.
    SELECT run_id, uniq_key, topic, topic AS topic_hi, status = 'SEND_OK' AS send_ok
    FROM produced
    WHERE uniq_key IS NOT NULL AND topic IS NOT NULL AND hash(run_id, uniq_key) NOT IN (SELECT k FROM resent)
    UNION ALL
    SELECT run_id, uniq_key, min(topic), max(topic), bool_or(status = 'SEND_OK')
    FROM produced
    WHERE uniq_key IS NOT NULL AND topic IS NOT NULL AND hash(run_id, uniq_key) IN (SELECT k FROM resent)
    GROUP BY run_id, uniq_key
),
sent_messages AS (
    -- One row per message and subscribing group.
    SELECT s.run_id, s."group", k.send_ok
    FROM sent_keys k
    JOIN subscriptions s ON s.run_id = k.run_id AND s.topic = k.topic
    WHERE k.topic = k.topic_hi
    UNION ALL
    SELECT s.run_id, s."group", bool_or(p.status = 'SEND_OK')
    FROM subscriptions s
    JOIN produced p ON p.run_id = s.run_id AND p.topic = s.topic
    SEMI JOIN sent_keys k ON k.run_id = p.run_id AND k.uniq_key = p.uniq_key AND k.topic <> k.topic_hi
    GROUP BY s.run_id, s."group", p.uniq_key
),
sent AS (
    SELECT run_id, "group", count(*) AS enqueue_invoke, count(*) FILTER (WHERE send_ok) AS enqueue_success
    FROM sent_messages
    GROUP BY run_id, "group"
),
acked AS (
    SELECT run_id, "group", uniq_key, receiver, n FROM consume_acks
),
dequeued AS (
    SELECT a.run_id, a."group", sum(a.n) AS dequeue_success, coalesce(any_value(d.duplicated), 0) AS duplicated
    FROM acked a
    LEFT JOIN (SELECT run_id, "group", count(DISTINCT uniq_key) AS duplicated
               FROM acked WHERE n > 1
               GROUP BY run_id, "group") d
      ON d.run_id IS NOT DISTINCT FROM a.run_id AND d."group" IS NOT DISTINCT FROM a."group"
    GROUP BY a.run_id, a."group"
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
       CAST(g.forked_messages AS BIGINT) AS forked_messages,
       CAST(g.duplicate_deliveries AS BIGINT) AS duplicate_deliveries,
       CAST(g.duplicate_deliveries_at_restart AS BIGINT) AS duplicate_deliveries_at_restart,
       CASE WHEN r.run_id IS NULL THEN 'lineage' ELSE 'producer' END AS counted_from
FROM groups g
LEFT JOIN sim_runs r ON r.run_id = g.run_id
LEFT JOIN sent s ON s.run_id = g.run_id AND s."group" = g."group"
LEFT JOIN dequeued d ON d.run_id = g.run_id AND d."group" = g."group"
ORDER BY g.run_id, g."group";
