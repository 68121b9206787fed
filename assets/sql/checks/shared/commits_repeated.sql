-- Transactional messages committed more than once (the rows of transaction_committed_once and
-- the COMMITTED_TWICE anomalies): more than one commit record of one message. A 5.x broker does
-- it when a batched op record comes after the next check run began and the producer answers the
-- repeated check (docs/transactions.md): the consumers get the message twice. A SELECT, used as a
-- subquery.
SELECT run_id, message_key, NULL AS "group",
       'committed ' || CAST(count(*) AS VARCHAR) || ' times: '
       || string_agg(broker || '@' || CAST(phys_offset AS VARCHAR) || ' (copy at '
                     || CAST(prepared_tx_offset AS VARCHAR) || ')', ', ' ORDER BY broker, phys_offset) AS detail
FROM ({{tx_commits}}) c
GROUP BY run_id, message_key
HAVING count(*) > 1
