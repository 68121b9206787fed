-- The decisions trace_transaction_decision_stored judges: each COMMIT_MESSAGE or ROLLBACK_MESSAGE a
-- producer's trace holds for a message whose half the run holds, before its broker's last record
-- (traced_decisions).
SELECT run_id, count(*) AS judged FROM ({{traced_decisions}}) d GROUP BY run_id
