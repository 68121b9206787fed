-- The chains retries_within_group_maximum judges: every chain of a group that retried at least once.
SELECT run_id, count(*) AS judged
FROM message_lineage
WHERE "group" IS NOT NULL AND final_state <> 'LOST' AND retries > 0
GROUP BY run_id
