-- traced_attempts: one row per delivery of a message to a listener that a client's message trace
-- records (docs/client-trace.md): the group, the message, its reconsume times, when the listener
-- began and ended, its time, whether it succeeded and how (ConsumeReturnType), and the lineage's
-- final state of the message for that group. Empty without a client trace (every simulation).
-- outcome_traced is false when the client's SubAfter is missing (the trace is lossy).
CREATE OR REPLACE TABLE traced_attempts AS
SELECT t.run_id, t."group", t.message_key, t.retry_times AS reconsume_times, t.begin_ts, t.end_ts, t.cost_ms,
       t.success, t.consume_return, t.success IS NOT NULL AS outcome_traced, t.request_id,
       l.final_state
FROM ({{traced_consumes}}) t
LEFT JOIN (SELECT run_id, message_key, "group", any_value(final_state) AS final_state
           FROM message_lineage GROUP BY run_id, message_key, "group") l
  ON l.run_id = t.run_id AND l.message_key = t.message_key AND l."group" = t."group"
ORDER BY t.run_id, t."group", t.message_key, t.begin_ts, t.request_id;
