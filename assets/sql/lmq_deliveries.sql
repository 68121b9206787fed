-- lmq_deliveries: one row per consume-queue position a multi-dispatched (LMQ) record was given
-- (lmq_dispatches with an offset): the message it belongs to (message_hops: one message however
-- many queues, docs/lineage.md "Fan-out is not a hop") and the record's hop kind there, which
-- delivery of the message in that queue it is (a send-back copies INNER_MULTI_DISPATCH, so the
-- broker dispatches each SCHEDULE, RETRY and DLQ record of the message again: an LMQ reader gets
-- it once per position), and the groups whose committed offset on that queue (consumer_offsets,
-- an LMQ's queue 0, from lmqConsumerOffset.json) is past it.
CREATE OR REPLACE TABLE lmq_deliveries AS
WITH hops AS (
    -- Only the dispatched records' (without an LMQ nothing of the lineage is read past the join).
    SELECT DISTINCT h.run_id, h.broker, h.phys_offset, h.message_key, h.hop_kind
    FROM message_hops h
    SEMI JOIN lmq_dispatches d ON d.run_id = h.run_id AND d.broker = h.broker AND d.phys_offset = h.phys_offset
),
committed AS (
    -- The last committed offset per (group, queue) of each broker, for the dispatch queues only.
    SELECT o.run_id, o.broker, o.topic, o.queue_id, o."group", max_by(o."offset", (o.ts, o."offset")) AS committed
    FROM consumer_offsets o
    SEMI JOIN lmq_dispatches d ON d.run_id = o.run_id AND d.broker = o.broker AND d.dispatch_queue = o.topic
                              AND d.dispatch_queue_id = o.queue_id AND d.dispatch_offset IS NOT NULL
    WHERE o.broker IS NOT NULL
    GROUP BY ALL
),
positions AS (
    SELECT d.run_id, d.broker, d.dispatch_queue, d.dispatch_queue_id, d.dispatch_offset, h.message_key, d.uniq_key,
           h.hop_kind, d.topic, d.phys_offset, d.state
    FROM lmq_dispatches d
    LEFT JOIN hops h ON h.run_id = d.run_id AND h.broker = d.broker AND h.phys_offset = d.phys_offset
    WHERE d.dispatch_offset IS NOT NULL
),
consumers AS (
    SELECT p.run_id, p.broker, p.dispatch_queue, p.dispatch_queue_id, p.dispatch_offset,
           list(o."group" ORDER BY o."group") AS consumed_by
    FROM positions p
    JOIN committed o ON o.run_id = p.run_id AND o.broker = p.broker AND o.topic = p.dispatch_queue
                    AND o.queue_id = p.dispatch_queue_id AND o.committed > p.dispatch_offset
    GROUP BY ALL
)
SELECT p.run_id, p.broker, p.dispatch_queue, p.dispatch_queue_id, p.dispatch_offset, p.message_key, p.uniq_key,
       p.hop_kind, p.topic, p.phys_offset, p.state,
       CASE WHEN p.message_key IS NOT NULL
            THEN row_number() OVER (PARTITION BY p.run_id, p.broker, p.dispatch_queue, p.dispatch_queue_id, p.message_key
                                    ORDER BY p.dispatch_offset) END AS delivery,
       CASE WHEN p.message_key IS NOT NULL
            THEN count(*) OVER (PARTITION BY p.run_id, p.broker, p.dispatch_queue, p.dispatch_queue_id, p.message_key)
       END AS deliveries_in_queue,
       coalesce(c.consumed_by, []) AS consumed_by
FROM positions p
LEFT JOIN consumers c ON c.run_id = p.run_id AND c.broker = p.broker AND c.dispatch_queue = p.dispatch_queue
                     AND c.dispatch_queue_id = p.dispatch_queue_id AND c.dispatch_offset = p.dispatch_offset
ORDER BY p.run_id, p.broker, p.dispatch_queue, p.dispatch_queue_id, p.dispatch_offset;
