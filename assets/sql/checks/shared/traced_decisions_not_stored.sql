-- The rows of trace_transaction_decision_stored and the anomalies of its kind (assets/sql/anomalies.sql). A SELECT, used as a subquery.
-- trace_transaction_decision_stored: the decision a transactional producer's trace says it sent
-- is the one the store holds: a COMMIT_MESSAGE has a commit record (transaction_state COMMITTED), a
-- ROLLBACK_MESSAGE an op record and no commit (ROLLED_BACK). A message the store shows undecided
-- or discarded after its producer decided lost the decision between client and broker (the end
-- transaction request is one-way: nothing tells the client), which the store alone cannot tell
-- from a producer that never answered (traced_decisions says which decisions are judged).
SELECT d.run_id, d.message_key, NULL AS "group",
       'its producer ' || coalesce(d.producer_group, '?') || ' answered ' || d.decision
       || CASE WHEN d.from_check THEN ' to a check' ELSE ' at once' END
       || ' at ' || strftime(d.ts, '%Y-%m-%d %H:%M:%S.%g') || ', but the store shows it '
       || coalesce(lower(d.transaction_state), 'without a transaction state') || ' on ' || coalesce(d.broker, '?') AS detail
FROM ({{traced_decisions}}) d
WHERE d.transaction_state IS DISTINCT FROM CASE d.decision WHEN 'COMMIT_MESSAGE' THEN 'COMMITTED' ELSE 'ROLLED_BACK' END
