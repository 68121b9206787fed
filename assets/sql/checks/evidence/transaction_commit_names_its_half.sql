-- The records transaction_commit_names_its_half judges: every transaction commit record with a
-- back-pointer (a run written before commitlog.prepared_tx_offset existed has none).
SELECT run_id, count(*) AS judged FROM commitlog
WHERE (coalesce(sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}}
  AND prepared_tx_offset IS NOT NULL GROUP BY run_id
