-- The transaction decisions a client's trace holds that the run can judge (the rows
-- trace_transaction_decision_stored judges): EndTransaction records answering COMMIT_MESSAGE or
-- ROLLBACK_MESSAGE (UNKNOW decides nothing) for a message whose half record the run holds, made
-- before its broker's last stored record (runs.sim_end_ts: the commit or op record follows the
-- decision within milliseconds on 4.9.4; a 5.x broker batches op records, up to
-- transactionOpBatchInterval later). Columns run_id, message_key, producer_group, decision,
-- from_check, ts, broker, transaction_state (the lineage's). A SELECT, used as a subquery.
WITH halves AS (
    SELECT h.run_id, h.message_key, min(h.broker) AS broker
    FROM message_hops h WHERE h.hop_kind = 'HALF' GROUP BY h.run_id, h.message_key
),
states AS (
    SELECT run_id, message_key, any_value(transaction_state) AS transaction_state
    FROM message_lineage WHERE transaction_state IS NOT NULL GROUP BY run_id, message_key
)
SELECT DISTINCT t.run_id, t.msg_id AS message_key, t."group" AS producer_group,
       t.transaction_state AS decision, t.from_transaction_check AS from_check, t.ts, hv.broker,
       s.transaction_state
FROM client_trace t
JOIN halves hv ON hv.run_id = t.run_id AND hv.message_key = t.msg_id
JOIN runs r ON r.run_id = t.run_id AND r.broker IS NOT DISTINCT FROM hv.broker
LEFT JOIN states s ON s.run_id = t.run_id AND s.message_key = t.msg_id
WHERE t.trace_type = 'EndTransaction' AND t.transaction_state IN ('COMMIT_MESSAGE', 'ROLLBACK_MESSAGE')
  AND t.ts <= r.sim_end_ts
