-- The rows of trace_failed_consume_retried and the anomalies of its kind (assets/sql/anomalies.sql). A SELECT, used as a subquery.
-- trace_failed_consume_retried: a consume a client's trace says failed is retried: the store holds
-- a RETRY or DLQ hop of the message for that group past the failed delivery's reconsume times (a
-- send-back, the client's fallback send, a DLQ at the maximum), or the client's trace shows the
-- group handed the message to a listener again afterwards (an orderly consumer's local retry, a
-- send-back that failed twice, a redelivery after a crash). Otherwise the failure left nothing
-- behind: the message was dropped for that group (a broadcasting consumer drops its failures by
-- design). The trace is lossy: a lost later SubBefore makes a retried message look dropped.
SELECT f.run_id, f.message_key, f."group",
       'failed (' || coalesce(f.consume_return, 'outcome code unknown') || ') at reconsume '
       || CAST(f.retry_times AS VARCHAR) || ' at ' || strftime(f.begin_ts, '%Y-%m-%d %H:%M:%S.%g')
       || ': no RETRY or DLQ hop of it for the group past reconsume ' || CAST(f.retry_times AS VARCHAR)
       || ', and the client never consumed it again' AS detail
FROM ({{traced_failures}}) f
WHERE NOT EXISTS (SELECT 1 FROM message_hops h
                  WHERE h.run_id = f.run_id AND h.message_key = f.message_key AND h."group" = f."group"
                    AND h.hop_kind IN ('RETRY', 'DLQ') AND h.reconsume_times > f.retry_times)
  AND NOT EXISTS (SELECT 1 FROM client_trace l
                  WHERE l.run_id = f.run_id AND l.trace_type = 'SubBefore' AND l.msg_id = f.message_key
                    AND l."group" = f."group" AND l.ts > f.begin_ts AND l.request_id IS DISTINCT FROM f.request_id)
