-- The commit records of transactions (sysFlag COMMIT), each with the message its hop row keys it
-- by and its back-pointer: run_id, broker, phys_offset, uniq_key, prepared_tx_offset,
-- message_key. A SELECT, used as a subquery.
-- The hop rows are read at the commit records' offsets only (none without a transaction).
WITH commits AS (
    SELECT run_id, broker, phys_offset, uniq_key, prepared_tx_offset
    FROM commitlog
    WHERE (coalesce(sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}}
)
SELECT c.run_id, c.broker, c.phys_offset, c.uniq_key, c.prepared_tx_offset,
       coalesce(h.message_key, c.uniq_key) AS message_key
FROM commits c
LEFT JOIN (SELECT DISTINCT h.run_id, h.broker, h.phys_offset, h.message_key
           FROM message_hops h
           SEMI JOIN commits k ON k.run_id = h.run_id AND k.broker = h.broker AND k.phys_offset = h.phys_offset
           WHERE h."group" IS NULL) h
  ON h.run_id = c.run_id AND h.broker = c.broker AND h.phys_offset = c.phys_offset
