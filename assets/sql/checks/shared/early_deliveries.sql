-- Every delivery made before its due time (the rows of no_delivery_before_due_time and the
-- EARLY_DELIVERY anomalies): run_id, message_key, group, detail. A SELECT, used as a subquery.
SELECT run_id, uniq_key AS message_key, NULL AS "group",
       'level ' || CAST(delay_level AS VARCHAR) || ' delivered ' || CAST(-lateness_ms AS VARCHAR)
       || ' ms before its due time (msgId ' || coalesce(delivered_msg_id, '?') || ')' AS detail
FROM schedule_deliveries
WHERE lateness_ms < 0 OR delivered_ts < due_ts
UNION ALL
SELECT h.run_id, h.message_key, NULL,
       'timer delivered ' || CAST(p.timer_out_ms - epoch_ms(c.store_ts) AS VARCHAR)
       || ' ms before its due time {{prop_timer_out_ms}} (msgId ' || coalesce(h.msg_id, '?') || ')'
FROM (SELECT run_id, message_key, broker, phys_offset, msg_id FROM message_hops
      WHERE hop_kind = 'DELIVER' AND coalesce(delay_level, 0) = 0) h
JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
JOIN record_properties p ON p.run_id = c.run_id AND p.broker = c.broker AND p.phys_offset = c.phys_offset
WHERE epoch_ms(c.store_ts) < p.timer_out_ms
UNION ALL
-- and no 5.x POP retry is written before it could be revived: a RETRY hop in a POP retry topic (one
-- with an origin topic in retry_topics) is stored no earlier than the earliest revive time of the
-- group's checkpoints of a record it can have been revived from. The revive writes the popped
-- record's reconsume times + 1 (PopReviveService.reviveRetry), so its source is a record of the
-- message (shared, or the group's) one count below it, stored before it: after a crash lost a pop's
-- ack or offset the same record is popped again and the chain forks, so the record just before
-- it in hop order need not be its source. It is early only when it is before the revive time of
-- every such record's checkpoints; where one of them has no checkpoint stored (the POP KV service,
-- a buffer-merged pop), it is not judged.
SELECT run_id, message_key, "group",
       'POP retry stored ' || CAST(epoch_ms(min(revive_ts)) - epoch_ms(store_ts) AS VARCHAR)
       || ' ms before the revive time of its previous record''s checkpoints (msgId '
       || coalesce(msg_id, '?') || ')'
FROM (-- One row per (retry, record it can come from): that record's earliest revive time (NULL
      -- without a checkpoint).
      SELECT h.run_id, h.message_key, h."group", h.store_ts, h.msg_id, h.broker, h.phys_offset,
             min(e.revive_ts) AS revive_ts
      FROM message_hops h
      JOIN retry_topics r ON r.run_id = h.run_id AND r.broker = h.broker AND r.retry_topic = h.topic
           AND r.origin_topic IS NOT NULL
      JOIN message_hops p ON p.run_id = h.run_id AND p.message_key = h.message_key
           AND (p."group" = h."group" OR p."group" IS NULL)
           AND p.reconsume_times = h.reconsume_times - 1 AND p.store_ts <= h.store_ts
      JOIN commitlog pc ON pc.run_id = p.run_id AND pc.broker = p.broker AND pc.phys_offset = p.phys_offset
      LEFT JOIN pop_evidence e ON e.run_id = h.run_id AND e.broker = p.broker AND e.kind = 'ck'
           AND e."group" = h."group" AND e.topic = pc.topic AND e.queue_id = pc.queue_id
           AND list_contains(e.offsets, pc.queue_offset)
      WHERE h.hop_kind = 'RETRY'
      GROUP BY h.run_id, h.message_key, h."group", h.store_ts, h.msg_id, h.broker, h.phys_offset,
               p.broker, p.phys_offset) s
GROUP BY run_id, message_key, "group", store_ts, msg_id, broker, phys_offset
HAVING count(*) = count(revive_ts) AND min(revive_ts) > store_ts
UNION ALL
-- and, from the store alone (simulations and imports alike): no record the schedule re-put from a
-- SCHEDULE record (a DELIVER, RETRY or DLQ hop keeping its DELAY) is stored before the due time of
-- every SCHEDULE record of the same message, group, broker, level and reconsume count stored before
-- it. The due time is the record's own: its schedule_units row (the consume-queue unit's tags
-- code), so a broker restarted with another messageDelayLevel judges each record by its own
-- period's delay. A re-put record must come from one of those records, so this never reports a
-- copy a restart put again; a record with no unit (lost with a crashed queue) is not judged. A
-- simulation's deliveries are judged above (schedule_deliveries), each once.
SELECT r.run_id, r.message_key, r."group",
       'level ' || CAST(r.delay_level AS VARCHAR) || ' delivered '
       || CAST(epoch_ms(min(d.due_ts)) - epoch_ms(r.store_ts) AS VARCHAR)
       || ' ms before its SCHEDULE record''s due time in the schedule queue (msgId ' || coalesce(r.msg_id, '?') || ')'
FROM message_hops r
JOIN (SELECT h.run_id, h.message_key, h."group", h.broker, h.delay_level, h.reconsume_times, h.store_ts, u.due_ts
      FROM message_hops h
      JOIN schedule_units u ON u.run_id = h.run_id AND u.broker = h.broker AND u.phys_offset = h.phys_offset
      WHERE h.hop_kind = 'SCHEDULE' AND h.run_id NOT IN (SELECT run_id FROM schedule_deliveries)) d
     ON d.run_id = r.run_id AND d.message_key = r.message_key AND d."group" IS NOT DISTINCT FROM r."group"
        AND d.broker = r.broker AND d.delay_level = r.delay_level AND d.reconsume_times = r.reconsume_times
        AND d.store_ts <= r.store_ts
WHERE r.hop_kind IN ('DELIVER', 'RETRY', 'DLQ') AND r.delay_level > 0
  AND r.run_id NOT IN (SELECT run_id FROM schedule_deliveries)
GROUP BY r.run_id, r.message_key, r."group", r.delay_level, r.store_ts, r.msg_id, r.broker, r.phys_offset
HAVING min(d.due_ts) > r.store_ts
