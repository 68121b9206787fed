-- transaction_op_names_a_half: the shared fragment ops_without_half has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{ops_without_half}}) v
