-- no_delivery_before_due_time: no delayed message leaves SCHEDULE_TOPIC_XXXX before its due time,
-- and no 5.x timer message reaches its real topic before its due time: a timer's DELIVER (the only
-- DELIVER without a delay level) is stored no earlier than its TIMER_OUT_MS.
SELECT run_id, uniq_key AS message_key, NULL AS "group",
       'level ' || CAST(delay_level AS VARCHAR) || ' delivered ' || CAST(-lateness_ms AS VARCHAR)
       || ' ms before its due time (msgId ' || coalesce(delivered_msg_id, '?') || ')' AS detail
FROM schedule_deliveries
WHERE lateness_ms < 0 OR delivered_ts < due_ts
UNION ALL
SELECT h.run_id, h.message_key, NULL,
       'timer delivered ' || CAST(TRY_CAST(c.properties['{{prop_timer_out_ms}}'] AS BIGINT) - epoch_ms(c.store_ts) AS VARCHAR)
       || ' ms before its due time {{prop_timer_out_ms}} (msgId ' || coalesce(h.msg_id, '?') || ')'
FROM (SELECT run_id, message_key, broker, phys_offset, msg_id FROM message_hops
      WHERE hop_kind = 'DELIVER' AND coalesce(delay_level, 0) = 0) h
JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
WHERE epoch_ms(c.store_ts) < TRY_CAST(c.properties['{{prop_timer_out_ms}}'] AS BIGINT)
