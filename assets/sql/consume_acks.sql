-- consume_acks: a temporary table of the build, read by delivery_accounting, group_health and
-- anomalies (not stored in the warehouse). One row per run, group, message and receiver with its
-- successful consumes (CONSUME_SUCCESS, acked or expired after succeeding: the effect happened).
-- A broadcasting group delivers to every consumer, so there the receiver is the consumer and a
-- duplicate is a second success at one consumer; in a clustering group the receiver is ''.
-- Grouping every delivery is the build's largest aggregate: it is done once, here.
CREATE OR REPLACE TEMP TABLE consume_acks AS
SELECT run_id, "group", uniq_key,
       CASE WHEN upper(model) = 'BROADCASTING' THEN consumer_id ELSE '' END AS receiver,
       count(*) AS n,
       max(start_ts) AS last_ok_ts,
       max(end_ts) AS acked_ts
FROM consume_attempts
WHERE status = 'CONSUME_SUCCESS' AND outcome IN ('ACKED', 'EXPIRED')
GROUP BY run_id, "group", uniq_key, receiver;
