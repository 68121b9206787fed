-- trace_send_ok_stored: the shared fragment traced_sends_not_stored has the rule (also the anomalies of its kind).
SELECT run_id, message_key, "group", detail FROM ({{traced_sends_not_stored}}) v
