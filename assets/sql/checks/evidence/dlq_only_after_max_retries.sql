-- The records dlq_only_after_max_retries judges: every DLQ hop.
SELECT run_id, count(*) AS judged FROM message_hops WHERE hop_kind = 'DLQ' GROUP BY run_id
