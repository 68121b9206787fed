-- trace_failed_consume_retried: the shared fragment traced_failures_not_retried has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{traced_failures_not_retried}}) v
