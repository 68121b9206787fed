-- The messages transaction_decided_by_check_max judges: every transactional message.
SELECT run_id, count(DISTINCT message_key) AS judged FROM message_lineage
WHERE transaction_state IS NOT NULL GROUP BY run_id
