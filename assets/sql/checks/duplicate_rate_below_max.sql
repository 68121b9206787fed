-- duplicate_rate_below_max (drift): at most duplicate_rate_max of a group's messages are consumed
-- more than once.
SELECT run_id, NULL AS message_key, "group",
       CAST(duplicated AS VARCHAR) || ' of ' || CAST(enqueue_success AS VARCHAR)
       || ' messages consumed more than once (' || CAST(round(100.0 * duplicated / enqueue_success, 2) AS VARCHAR)
       || ' % > {{duplicate_rate_max_percent}} %)' AS detail
FROM delivery_accounting
WHERE enqueue_success > 0 AND duplicated / enqueue_success > {{duplicate_rate_max}}
