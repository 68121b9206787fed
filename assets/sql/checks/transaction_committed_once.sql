-- transaction_committed_once: the shared fragment commits_repeated has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{commits_repeated}}) v
