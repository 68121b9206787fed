-- Transactional messages the broker checked past its transactionCheckMax with no decision (the
-- rows of transaction_decided_by_check_max and the TRANSACTION_PAST_CHECK_MAX anomalies): a half
-- copy whose TRANSACTION_CHECK_TIMES is above the maximum, of a message neither committed nor
-- rolled back. The maximum is the broker's as the run shows it (transaction_check_maxima: its
-- discarded copies' count, else the manifest's); a broker with no evidence of it is not judged.
-- A SELECT, used as a subquery.
WITH tx_copies AS (
    SELECT h.run_id, h.message_key, h.broker,
           p.transaction_check_times AS check_times
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    LEFT JOIN record_properties p ON p.run_id = c.run_id AND p.broker = c.broker AND p.phys_offset = c.phys_offset
    WHERE h.hop_kind = 'HALF'
),
undecided AS (
    SELECT DISTINCT run_id, message_key, transaction_state
    FROM message_lineage
    WHERE transaction_state IN ('UNDECIDED', 'DISCARDED')
)
SELECT x.run_id, x.message_key, NULL AS "group",
       'checked ' || CAST(x.check_times AS VARCHAR) || ' times on ' || coalesce(x.broker, '?')
       || ', past the maximum of ' || CAST(m.check_max AS VARCHAR) || ' checks'
       || CASE WHEN m.source = 'discards' THEN ' (its discarded copies'' count)'
               ELSE ' (the run''s manifest: the broker discarded nothing)' END
       || ', and ' || lower(u.transaction_state) || ': no commit and no op record decided it' AS detail
FROM (SELECT run_id, message_key, broker, max(check_times) AS check_times
      FROM tx_copies GROUP BY run_id, message_key, broker) x
JOIN undecided u ON u.run_id = x.run_id AND u.message_key = x.message_key
JOIN ({{transaction_check_maxima}}) m ON m.run_id = x.run_id AND m.broker IS NOT DISTINCT FROM x.broker
WHERE x.check_times > m.check_max
