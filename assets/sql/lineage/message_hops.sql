-- message_hops (broker_core.export.schema.MESSAGE_HOPS), in its written order. Reads chained
-- (chained.sql), which Spark has range-partitioned by (run_id, message_key): a sort within each
-- partition.
SELECT run_id, message_key, `group`, hop_index, hop_kind, topic, queue_id, broker, phys_offset, msg_id,
       delay_level, reconsume_times, store_ts, next_store_ts, dwell_ms
FROM chained
ORDER BY run_id ASC NULLS FIRST, message_key ASC NULLS FIRST, hop_index ASC NULLS FIRST, `group` ASC NULLS FIRST
