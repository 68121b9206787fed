-- A message_hops table with the record facts the lineage reads (what chained.sql keeps beside
-- each hop), joined back from the classified records by the record and the message: several
-- messages of an unwrapped inner batch share one (broker, phys_offset). Reads message_hops and
-- classified (classified.sql); for lineages built from a hops table rather than in one go.
SELECT h.run_id, h.message_key, h.`group`, h.hop_index, h.hop_kind, h.topic, h.queue_id, h.broker, h.phys_offset,
       h.msg_id, h.delay_level, h.reconsume_times, h.store_ts, h.next_store_ts, h.dwell_ms,
       c.uniq_key, c.queue_offset, c.rec_origin_msg_id, c.real_topic, c.retry_topic, c.rec_reconsume_time,
       c.recall, c.inner_num, c.tx_check_times, c.tx_commit_of
FROM message_hops h
LEFT JOIN classified c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
                      AND c.message_key = h.message_key
