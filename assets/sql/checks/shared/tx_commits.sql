-- The commit records of transactions (sysFlag COMMIT), each with the message its hop row keys it
-- by and its back-pointer: run_id, broker, phys_offset, uniq_key, prepared_tx_offset,
-- message_key. A SELECT, used as a subquery.
SELECT c.run_id, c.broker, c.phys_offset, c.uniq_key, c.prepared_tx_offset,
       coalesce(h.message_key, c.uniq_key) AS message_key
FROM commitlog c
LEFT JOIN (SELECT DISTINCT run_id, broker, phys_offset, message_key FROM message_hops WHERE "group" IS NULL) h
  ON h.run_id = c.run_id AND h.broker = c.broker AND h.phys_offset = c.phys_offset
WHERE (coalesce(c.sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}}
