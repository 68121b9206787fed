-- delay_lateness_p99_below_max (drift): every delay level's p99 lateness is at most lateness_p99_ms_max.
SELECT run_id, NULL AS message_key, NULL AS "group",
       'delay level ' || CAST(delay_level AS VARCHAR) || ': p99 lateness ' || CAST(lateness_p99_ms AS VARCHAR)
       || ' ms > {{lateness_p99_ms_max}} ms over ' || CAST(deliveries AS VARCHAR) || ' deliveries' AS detail
FROM delay_accuracy
WHERE lateness_p99_ms > {{lateness_p99_ms_max}}
