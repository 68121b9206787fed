-- anomalies: one row per thing an operator should look at, by kind:
--   DUPLICATE_CONSUME  a group consumed one message successfully more than once (per consumer
--                      when broadcasting): at-least-once delivery showing, e.g. after a crash
--   LOST               a SEND_OK message with no commit-log record; the detail says whether a
--                      broker_crash under async flush after the send explains it
--   EARLY_DELIVERY     the schedule service delivered before the due time (never allowed)
--   LATE_DELIVERY      delivered more than late_delivery_ms_threshold after the due time
--   STORE_DAMAGE       damage found while reading an imported store
CREATE OR REPLACE TABLE anomalies AS
WITH acked AS (
    SELECT run_id, "group", uniq_key,
           CASE WHEN upper(model) = 'BROADCASTING' THEN consumer_id END AS receiver,
           count(*) AS n,
           string_agg(DISTINCT consumer_id, ',' ORDER BY consumer_id) AS consumers
    FROM consume_attempts
    WHERE status = 'CONSUME_SUCCESS' AND outcome IN ('ACKED', 'EXPIRED')
    GROUP BY ALL
),
crashes AS (
    -- kill -9 loses the unflushed tail only under async flush (run_manifest; imports: unknown).
    SELECT f.run_id, f.ts, f.kind
    FROM faults f
    LEFT JOIN run_manifest m ON m.run_id = f.run_id
    WHERE f.kind IN ('broker_crash', 'torn_write') AND coalesce(m.flush, 'async') <> 'sync'
      AND NOT coalesce(starts_with(f.detail, 'skipped'), false)
),
lost AS (
    SELECT l.run_id, l.message_key, l."group", p.send_ts,
           (SELECT min(c.ts) FROM crashes c WHERE c.run_id = l.run_id AND c.ts >= p.send_ts) AS crash_ts
    FROM message_lineage l
    LEFT JOIN produced p ON p.run_id = l.run_id AND p.uniq_key = l.message_key AND p.status = 'SEND_OK'
    WHERE l.final_state = 'LOST'
),
hop_of_delivery AS (
    SELECT run_id, msg_id, any_value(message_key) AS message_key, any_value("group") AS "group"
    FROM message_hops
    WHERE hop_kind IN ('DELIVER', 'RETRY')
    GROUP BY run_id, msg_id
)
SELECT run_id, 'DUPLICATE_CONSUME' AS kind, uniq_key AS message_key, "group",
       'consumed successfully ' || CAST(n AS VARCHAR) || ' times by ' || consumers AS detail
FROM acked WHERE n > 1
UNION ALL
SELECT run_id, 'LOST', message_key, "group",
       CASE WHEN crash_ts IS NOT NULL
            THEN 'sent ' || strftime(send_ts, '%Y-%m-%dT%H:%M:%S.%g') || ', explained by a crash at '
                 || strftime(crash_ts, '%Y-%m-%dT%H:%M:%S.%g') || ' (async flush: unflushed tail lost)'
            ELSE 'sent ' || coalesce(strftime(send_ts, '%Y-%m-%dT%H:%M:%S.%g'), '?')
                 || ', no broker_crash under async flush explains it'
       END
FROM lost
UNION ALL
SELECT s.run_id,
       CASE WHEN s.lateness_ms < 0 THEN 'EARLY_DELIVERY' ELSE 'LATE_DELIVERY' END,
       coalesce(h.message_key, s.uniq_key), h."group",
       'level ' || CAST(s.delay_level AS VARCHAR) || ' to ' || coalesce(s.real_topic, '?')
       || ', lateness ' || CAST(s.lateness_ms AS VARCHAR) || ' ms (delivered msgId '
       || coalesce(s.delivered_msg_id, '?') || ')'
FROM schedule_deliveries s
LEFT JOIN hop_of_delivery h ON h.run_id = s.run_id AND h.msg_id = s.delivered_msg_id
WHERE s.lateness_ms < 0 OR s.lateness_ms > getvariable('late_delivery_ms_threshold')
UNION ALL
SELECT run_id, 'STORE_DAMAGE', NULL, NULL,
       kind || ' in ' || coalesce(file_name, '?') || ' at offset ' || coalesce(CAST("offset" AS VARCHAR), '?')
       || ': ' || coalesce(detail, '')
FROM store_problems
ORDER BY 1, 2, 3, 4;
