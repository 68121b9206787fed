-- no_delivery_before_due_time: no delayed message leaves SCHEDULE_TOPIC_XXXX before its due time.
SELECT run_id, uniq_key AS message_key, NULL AS "group",
       'level ' || CAST(delay_level AS VARCHAR) || ' delivered ' || CAST(-lateness_ms AS VARCHAR)
       || ' ms before its due time (msgId ' || coalesce(delivered_msg_id, '?') || ')' AS detail
FROM schedule_deliveries
WHERE lateness_ms < 0 OR delivered_ts < due_ts
