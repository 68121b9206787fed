-- Op records that decided a half queue offset the store never had (the rows of
-- transaction_op_names_a_half and the OP_WITHOUT_HALF anomalies): no RMQ_SYS_TRANS_HALF_TOPIC
-- record at that queue offset of the op's queue id on its broker, unless retention explains it
-- (the broker's log starts past 0 and the offset is below its first half record left). A
-- SELECT, used as a subquery.
WITH named AS (
    SELECT run_id, broker, phys_offset, queue_id, unnest(half_queue_offsets) AS half_offset
    FROM transaction_ops
),
halves AS (
    SELECT run_id, broker, queue_id, queue_offset
    FROM commitlog WHERE topic = '{{trans_half_topic}}'
),
kept_from AS (
    SELECT run_id, broker, queue_id, min(queue_offset) AS first_kept FROM halves GROUP BY run_id, broker, queue_id
),
cut AS (
    SELECT DISTINCT run_id, broker FROM runs WHERE first_offset > 0
)
SELECT n.run_id, NULL AS message_key, NULL AS "group",
       'op record at ' || n.broker || '@' || CAST(n.phys_offset AS VARCHAR) || ' decided half queue offset '
       || CAST(n.half_offset AS VARCHAR) || ' of queue ' || CAST(n.queue_id AS VARCHAR)
       || ', which the store never had' AS detail
FROM named n
LEFT JOIN halves h ON h.run_id = n.run_id AND h.broker = n.broker AND h.queue_id = n.queue_id
                  AND h.queue_offset = n.half_offset
LEFT JOIN kept_from k ON k.run_id = n.run_id AND k.broker = n.broker AND k.queue_id = n.queue_id
LEFT JOIN cut ON cut.run_id = n.run_id AND cut.broker = n.broker
WHERE h.queue_offset IS NULL
  AND NOT (cut.broker IS NOT NULL AND (k.first_kept IS NULL OR n.half_offset < k.first_kept))
