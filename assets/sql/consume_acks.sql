-- consume_acks: a temporary table of the build, read by delivery_accounting, group_health and
-- anomalies (not stored in the warehouse). One row per run, group, message and receiver with its
-- successful consumes (CONSUME_SUCCESS, acked or expired after succeeding: the effect happened).
-- A broadcasting group delivers to every consumer, so there the receiver is the consumer and a
-- duplicate is a second success at one consumer; in a clustering group the receiver is ''.
-- Almost every key has one success, so the keys are told apart by their 64-bit hash first (an
-- aggregate on one integer costs a fraction of the one on four strings): a row whose hash no
-- other row has is its key's only success, and only the keys of the other hashes are grouped by
-- value. Rows of one key share a hash, so the result is exact.
CREATE OR REPLACE TEMP TABLE consume_acks AS
WITH successes AS (
    SELECT run_id, "group", uniq_key, start_ts, end_ts,
           CASE WHEN upper(model) = 'BROADCASTING' THEN consumer_id ELSE '' END AS receiver
    FROM consume_attempts
    WHERE status = 'CONSUME_SUCCESS' AND outcome IN ('ACKED', 'EXPIRED')
),
repeated AS (
    SELECT hash(run_id, "group", uniq_key, receiver) AS k
    FROM successes
    GROUP BY k
    HAVING count(*) > 1
)
SELECT run_id, "group", uniq_key, receiver, CAST(1 AS BIGINT) AS n, start_ts AS last_ok_ts, end_ts AS acked_ts
FROM successes
WHERE hash(run_id, "group", uniq_key, receiver) NOT IN (SELECT k FROM repeated)
UNION ALL
SELECT run_id, "group", uniq_key, receiver, count(*), max(start_ts), max(end_ts)
FROM successes
WHERE hash(run_id, "group", uniq_key, receiver) IN (SELECT k FROM repeated)
GROUP BY run_id, "group", uniq_key, receiver;
