-- traced_attempts: one row per delivery of a message to a listener that a client's message trace
-- records (docs/client-trace.md): the group, the message, its reconsume times, when the listener
-- began and ended, its time, whether it succeeded and how (ConsumeReturnType), and the lineage's
-- final state of the message for that group. Empty without a client trace (every simulation).
-- outcome_traced is false when the client's SubAfter is missing (the trace is lossy).
CREATE OR REPLACE TABLE traced_attempts AS
WITH traced AS MATERIALIZED ({{traced_consumes}})
SELECT t.run_id, t."group", t.message_key, t.retry_times AS reconsume_times, t.begin_ts, t.end_ts, t.cost_ms,
       t.success, t.consume_return, t.success IS NOT NULL AS outcome_traced, t.request_id,
       l.final_state
FROM traced t
LEFT JOIN (SELECT l.run_id, l.message_key, l."group", any_value(l.final_state) AS final_state
           FROM message_lineage l
           -- Only the traced chains: without a trace nothing of the lineage is grouped.
           SEMI JOIN traced t ON t.run_id = l.run_id AND t.message_key = l.message_key AND t."group" = l."group"
           GROUP BY l.run_id, l.message_key, l."group") l
  ON l.run_id = t.run_id AND l.message_key = t.message_key AND l."group" = t."group"
ORDER BY t.run_id, t."group", t.message_key, t.begin_ts, t.request_id;
