-- The groups duplicate_rate_below_max judges: those whose duplicates are counted (a simulation's
-- consume attempts; an imported store cannot tell a duplicate consume: NULL).
SELECT run_id, count(*) AS judged FROM delivery_accounting
WHERE duplicated IS NOT NULL AND enqueue_success > 0 GROUP BY run_id
