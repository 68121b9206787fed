-- dlq_only_after_max_retries: every record in %DLQ%<group> is explained by a way a real broker or
-- client puts a message there: the maximum reconsume times reached (the send-back, the revive, a
-- client's own send at its maximum), or a send-back before it that a consumer asked for (a delay
-- level < 0, a lower maximum of its own client). The shared fragment dlq_explained has the rules.
SELECT run_id, message_key, "group",
       'in the DLQ after ' || CAST(reconsumes AS VARCHAR) || ' reconsumes ('
       || CAST(retries AS VARCHAR) || ' retry hops); the maximum is ' || CAST(max_times AS VARCHAR)
       || ', and ' || unexplained_because AS detail
FROM ({{dlq_explained}}) d
WHERE dlq_reason IS NULL
