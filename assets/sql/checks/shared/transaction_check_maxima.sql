-- Each broker's transactionCheckMax where the run holds evidence of it, and where that comes
-- from: the check count its discarded copies carry (it discards the copy checked that often),
-- else the maximum the run's manifest states (a simulation's broker.transaction_check_max).
-- A broker with neither has no row: a half checked past RocketMQ's default (15) there may be a
-- broker configured higher, so transaction_decided_by_check_max does not judge its messages.
-- Columns run_id, broker, check_max, source ('discards' | 'manifest'). A SELECT, used as a subquery.
SELECT b.run_id, b.broker, coalesce(d.check_max, m.transaction_check_max) AS check_max,
       CASE WHEN d.check_max IS NOT NULL THEN 'discards' ELSE 'manifest' END AS source
FROM (SELECT DISTINCT h.run_id, h.broker FROM message_hops h WHERE h.hop_kind IN ('HALF', 'DISCARD')) b
LEFT JOIN (SELECT h.run_id, h.broker,
                  max(p.transaction_check_times) AS check_max
           FROM message_hops h
           JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
           LEFT JOIN record_properties p ON p.run_id = c.run_id AND p.broker = c.broker AND p.phys_offset = c.phys_offset
           WHERE h.hop_kind = 'DISCARD' GROUP BY h.run_id, h.broker) d
       ON d.run_id = b.run_id AND d.broker IS NOT DISTINCT FROM b.broker
LEFT JOIN run_manifest m ON m.run_id = b.run_id
WHERE coalesce(d.check_max, m.transaction_check_max) IS NOT NULL
