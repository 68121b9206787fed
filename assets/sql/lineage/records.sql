-- The commit log as the consumers see it (docs/lineage.md, "5.x inner batches"): every record but
-- the inner batches the import unwrapped, and each message of those batches as a record of its
-- own at the batch's (broker, phys_offset): its own UNIQ_KEY, queue offset, properties (and the
-- ORIGIN_MESSAGE_ID, REAL_TOPIC, RETRY_TOPIC and DELAY read from them, as the import reads a
-- record's) and body CRC; the batch record's topic, queue, hosts and reconsume times, as the
-- consumer's client copies them (MessageDecoder.decodeMessage). Reads commitlog and
-- inner_messages; a run without inner_messages rows reads its commit log as it is.
SELECT c.run_id, c.broker, c.phys_offset, c.topic, c.queue_id, c.queue_offset, c.msg_id, c.uniq_key,
       c.origin_msg_id, c.real_topic, c.retry_topic, c.delay_level, c.reconsume_times, c.store_ts,
       c.born_ts, c.born_host, c.body_crc, c.properties, c.sys_flag, c.prepared_tx_offset
FROM commitlog c
ANTI JOIN (SELECT DISTINCT run_id, broker, phys_offset FROM inner_messages) b
    ON b.run_id = c.run_id AND b.broker = c.broker AND b.phys_offset = c.phys_offset
UNION ALL
SELECT i.run_id, i.broker, i.phys_offset, i.topic, i.queue_id, i.queue_offset, c.msg_id, i.uniq_key,
       i.properties['{{prop_origin_message_id}}'], i.properties['{{prop_real_topic}}'],
       i.properties['{{prop_retry_topic}}'], coalesce(TRY_CAST(i.properties['{{prop_delay}}'] AS INT), 0),
       c.reconsume_times, i.store_ts, i.born_ts, c.born_host, i.body_crc, i.properties,
       CAST(0 AS INT), CAST(0 AS BIGINT)
FROM inner_messages i
JOIN commitlog c ON c.run_id = i.run_id AND c.broker = i.broker AND c.phys_offset = i.phys_offset
