-- The messages transaction_decided_by_check_max judges: every transactional message with a half
-- record on a broker whose maximum the run shows (transaction_check_maxima); without discards or
-- a stated maximum there is nothing to judge it by.
SELECT h.run_id, count(DISTINCT h.message_key) AS judged
FROM message_hops h
JOIN ({{transaction_check_maxima}}) m ON m.run_id = h.run_id AND m.broker IS NOT DISTINCT FROM h.broker
WHERE h.hop_kind = 'HALF' GROUP BY h.run_id
