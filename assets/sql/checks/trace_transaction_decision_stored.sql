-- trace_transaction_decision_stored: the shared fragment traced_decisions_not_stored has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{traced_decisions_not_stored}}) v
