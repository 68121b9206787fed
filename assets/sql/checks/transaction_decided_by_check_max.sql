-- transaction_decided_by_check_max: the shared fragment transactions_past_check_max has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{transactions_past_check_max}}) v
