-- The records transaction_commit_names_its_half judges: every transaction commit record.
SELECT run_id, count(*) AS judged FROM commitlog
WHERE (coalesce(sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}} GROUP BY run_id
