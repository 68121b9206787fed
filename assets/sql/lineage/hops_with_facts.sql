-- A message_hops table with the record facts the lineage reads (what chained.sql keeps beside
-- each hop), joined back from the classified records by the record and the message: several
-- messages of an unwrapped inner batch share one (broker, phys_offset). Reads message_hops and
-- classified (classified.sql); for lineages built from a hops table rather than in one go.
-- reput_copy is read from the hops' pairing (chained.sql): a re-put record that no SCHEDULE hop
-- of its (message, group, broker, delay level, reconsume times) names as its delivery.
WITH deliveries AS (
    SELECT DISTINCT run_id, message_key, `group`, broker, delay_level, reconsume_times, next_store_ts
    FROM message_hops
    WHERE hop_kind = 'SCHEDULE' AND next_store_ts IS NOT NULL
)
SELECT h.run_id, h.message_key, h.`group`, h.hop_index, h.hop_kind, h.topic, h.queue_id, h.broker, h.phys_offset,
       h.msg_id, h.delay_level, h.reconsume_times, h.store_ts, h.next_store_ts, h.dwell_ms,
       c.uniq_key, c.queue_offset, c.rec_origin_msg_id, c.real_topic, c.retry_topic, c.rec_reconsume_time,
       c.recall, c.inner_num, c.tx_check_times, c.tx_commit_of, c.dispatch_to, c.dispatched,
       h.hop_kind IN ('DELIVER', 'RETRY', 'DLQ') AND coalesce(h.delay_level > 0, false) AND d.run_id IS NULL
         AS reput_copy,
       {{chain_previous}}
FROM message_hops h
LEFT JOIN classified c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
                      AND c.message_key = h.message_key
LEFT JOIN deliveries d ON d.run_id = h.run_id AND d.message_key = h.message_key
                      AND d.`group` IS NOT DISTINCT FROM h.`group` AND d.broker = h.broker
                      AND d.delay_level = h.delay_level AND d.reconsume_times = h.reconsume_times
                      AND d.next_store_ts = h.store_ts
WINDOW chain AS (PARTITION BY h.run_id, h.message_key, h.`group` ORDER BY h.hop_index ASC NULLS FIRST)
