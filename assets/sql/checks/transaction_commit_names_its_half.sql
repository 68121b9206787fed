-- transaction_commit_names_its_half: the shared fragment commits_without_half has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{commits_without_half}}) v
