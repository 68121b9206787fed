-- The positions lmq_dispatches_in_consume_queue judges: each one the import found a unit for, or
-- should have (neither a deleted queue nor a head cut nor a dispatch still pending).
SELECT run_id, count(*) AS judged FROM lmq_dispatches WHERE state = 'IN_QUEUE' OR state IN {{lmq_broken_states}} GROUP BY run_id
