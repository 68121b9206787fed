-- The chains origin_and_retry_topic_stable judges: those with a retry or DLQ record.
SELECT run_id, count(DISTINCT (message_key, "group")) AS judged
FROM message_hops WHERE hop_kind IN ('RETRY', 'DLQ') GROUP BY run_id
