-- The consumes a client's trace holds: each SubBefore (a message handed to a listener: group,
-- retry times) with its SubAfter (the listener's outcome and time), joined by request id and
-- message id; a SubAfter the client lost leaves the outcome null. A trace message the client's
-- trace producer sent twice (a retried send) counts once. Columns run_id, message_key, group,
-- retry_times, begin_ts, end_ts, cost_ms, success, consume_return, request_id. A SELECT.
WITH before AS (
    SELECT run_id, request_id, msg_id, any_value("group") AS "group", any_value(retry_times) AS retry_times,
           min(ts) AS ts
    FROM client_trace WHERE trace_type = 'SubBefore'
    GROUP BY run_id, request_id, msg_id
),
after AS (
    SELECT run_id, request_id, msg_id, any_value(ts) AS ts, any_value(cost_ms) AS cost_ms,
           bool_and(success) AS success, any_value(consume_return) AS consume_return
    FROM client_trace WHERE trace_type = 'SubAfter'
    GROUP BY run_id, request_id, msg_id
)
SELECT b.run_id, b.msg_id AS message_key, b."group", b.retry_times, b.ts AS begin_ts,
       coalesce(a.ts, b.ts + to_milliseconds(a.cost_ms)) AS end_ts, a.cost_ms, a.success, a.consume_return,
       b.request_id
FROM before b
LEFT JOIN after a ON a.run_id = b.run_id AND a.request_id = b.request_id AND a.msg_id = b.msg_id
