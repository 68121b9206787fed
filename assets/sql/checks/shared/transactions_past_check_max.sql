-- Transactional messages the broker checked past its transactionCheckMax with no decision (the
-- rows of transaction_decided_by_check_max and the TRANSACTION_PAST_CHECK_MAX anomalies): a half
-- copy whose TRANSACTION_CHECK_TIMES is above the maximum, of a message neither committed nor
-- rolled back. The maximum is the broker's: the check count its discarded copies carry (it
-- discards the copy checked that often), else RocketMQ's default. A SELECT, used as a subquery.
WITH tx_copies AS (
    SELECT h.run_id, h.message_key, h.hop_kind, h.broker,
           TRY_CAST(c.properties['{{prop_transaction_check_times}}'] AS INTEGER) AS check_times
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    WHERE h.hop_kind IN ('HALF', 'DISCARD')
),
check_max AS (
    SELECT run_id, broker, max(check_times) AS check_max
    FROM tx_copies WHERE hop_kind = 'DISCARD' GROUP BY run_id, broker
),
undecided AS (
    SELECT DISTINCT run_id, message_key, transaction_state
    FROM message_lineage
    WHERE transaction_state IN ('UNDECIDED', 'DISCARDED')
)
SELECT x.run_id, x.message_key, NULL AS "group",
       'checked ' || CAST(x.check_times AS VARCHAR) || ' times on ' || coalesce(x.broker, '?')
       || ', past the maximum of ' || CAST(coalesce(m.check_max, {{transaction_check_max_default}}) AS VARCHAR)
       || ' checks' || CASE WHEN m.check_max IS NULL THEN ' (RocketMQ''s default: the broker discarded nothing)'
                            ELSE ' (its discarded copies'' count)' END
       || ', and ' || lower(u.transaction_state) || ': no commit and no op record decided it' AS detail
FROM (SELECT run_id, message_key, broker, max(check_times) AS check_times
      FROM tx_copies WHERE hop_kind = 'HALF' GROUP BY run_id, message_key, broker) x
JOIN undecided u ON u.run_id = x.run_id AND u.message_key = x.message_key
LEFT JOIN check_max m ON m.run_id = x.run_id AND m.broker IS NOT DISTINCT FROM x.broker
WHERE x.check_times > coalesce(m.check_max, {{transaction_check_max_default}})
