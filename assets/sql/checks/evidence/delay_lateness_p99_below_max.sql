-- The deliveries delay_lateness_p99_below_max judges: those delay_accuracy measured against a known
-- due time.
SELECT run_id, sum(deliveries) AS judged FROM delay_accuracy GROUP BY run_id
