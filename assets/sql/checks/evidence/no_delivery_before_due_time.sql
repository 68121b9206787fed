-- The deliveries no_delivery_before_due_time judges: a simulation's schedule deliveries; a store's
-- SCHEDULE records with a schedule-queue unit (their due time); timer deliveries;
-- POP retries of a retry topic retry_topics knows the origin of.
SELECT run_id, sum(n) AS judged
FROM (
    SELECT run_id, count(*) AS n FROM schedule_deliveries GROUP BY run_id
    UNION ALL
    -- a unit names a SCHEDULE record of the valid log (the import keeps no other)
    SELECT run_id, count(*) FROM schedule_units
    WHERE run_id NOT IN (SELECT run_id FROM schedule_deliveries)
    GROUP BY run_id
    UNION ALL
    -- a timer's DELIVER is the only DELIVER without a delay level
    SELECT run_id, count(*) FROM message_hops
    WHERE hop_kind = 'DELIVER' AND coalesce(delay_level, 0) = 0
    GROUP BY run_id
    UNION ALL
    SELECT h.run_id, count(*) FROM message_hops h
    SEMI JOIN retry_topics r ON r.run_id = h.run_id AND r.broker = h.broker AND r.retry_topic = h.topic
                            AND r.origin_topic IS NOT NULL
    WHERE h.hop_kind = 'RETRY'
    GROUP BY h.run_id
) AS evidence
GROUP BY run_id
