-- no_delivery_before_due_time: no delayed message leaves SCHEDULE_TOPIC_XXXX before its due time,
-- no 5.x POP retry is written before its revive time (the last part), and no 5.x timer message
-- reaches its real topic before its due time: a timer's DELIVER (the only
-- DELIVER without a delay level) is stored no earlier than its TIMER_OUT_MS.
-- The shared fragment early_deliveries has the rules (also the EARLY_DELIVERY anomalies).
SELECT run_id, message_key, "group", detail FROM ({{early_deliveries}}) e
