-- The messages transaction_committed_once judges: every committed transactional message.
SELECT run_id, count(DISTINCT message_key) AS judged FROM message_lineage
WHERE transaction_state = 'COMMITTED' GROUP BY run_id
