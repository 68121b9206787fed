-- Two CTEs, configured and carried: each group's maximum reconsume times as the run manifest
-- configures it (-1 = the default when consuming concurrently, unlimited when orderly), and the
-- largest MAX_RECONSUME_TIMES its records carry. Read by dlq_explained and
-- retries_within_group_maximum.
configured AS (
    SELECT run_id, "group",
           CASE WHEN max_reconsume_times >= 0 THEN max_reconsume_times
                WHEN lower(mode) = 'orderly' THEN {{orderly_max_reconsume_times}}
                ELSE {{retry_max_times_default}} END AS max_times
    FROM run_groups
),
carried AS (
    SELECT h.run_id, h."group", max(c.max_reconsume_times) AS max_times
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    WHERE h."group" IS NOT NULL AND c.max_reconsume_times >= 0
    GROUP BY h.run_id, h."group"
)
