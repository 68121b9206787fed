-- transactions: one row per transactional message (docs/transactions.md), what its producer and
-- the broker decided: the lineage's transaction_state and transaction_checks, its half records
-- (the half and each check copy), its commit records, when its half was stored and when it was
-- decided (the first commit; for a rollback the op record that decided a copy of it; for a
-- discard the discarded copy), and the time between.
CREATE OR REPLACE TABLE transactions AS
WITH tx AS (
    SELECT run_id, message_key, any_value(origin_topic) AS topic, any_value(transaction_state) AS transaction_state,
           any_value(transaction_checks) AS transaction_checks
    FROM message_lineage
    WHERE transaction_state IS NOT NULL
    GROUP BY run_id, message_key
),
tx_records AS (
    SELECT DISTINCT h.run_id, h.message_key, h.hop_kind, h.broker, h.phys_offset, h.queue_id, h.store_ts,
           c.queue_offset, c.properties['{{prop_pgroup}}'] AS producer_group,
           (coalesce(c.sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}} AS is_commit
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    SEMI JOIN tx ON tx.run_id = h.run_id AND tx.message_key = h.message_key
    WHERE h."group" IS NULL
),
decisions AS (
    -- The first op record that decided a half copy of each message.
    SELECT r.run_id, r.message_key, min(o.store_ts) AS op_ts
    FROM tx_records r
    JOIN (SELECT run_id, broker, queue_id, store_ts, unnest(half_queue_offsets) AS half_offset
          FROM transaction_ops) o
      ON o.run_id = r.run_id AND o.broker = r.broker AND o.queue_id = r.queue_id AND o.half_offset = r.queue_offset
    WHERE r.hop_kind = 'HALF'
    GROUP BY r.run_id, r.message_key
),
per_message AS (
    SELECT run_id, message_key,
           any_value(producer_group) FILTER (WHERE hop_kind = 'HALF') AS producer_group,
           min(broker) FILTER (WHERE hop_kind = 'HALF') AS broker,
           count(*) FILTER (WHERE hop_kind = 'HALF') AS half_records,
           count(*) FILTER (WHERE is_commit) AS commits,
           min(store_ts) FILTER (WHERE hop_kind = 'HALF') AS half_ts,
           min(store_ts) FILTER (WHERE is_commit) AS commit_ts,
           min(store_ts) FILTER (WHERE hop_kind = 'DISCARD') AS discard_ts
    FROM tx_records
    GROUP BY run_id, message_key
),
decided AS (
    SELECT t.*, p.producer_group, p.broker, coalesce(p.half_records, 0) AS half_records,
           coalesce(p.commits, 0) AS commits, p.half_ts, d.op_ts,
           CASE t.transaction_state WHEN 'COMMITTED' THEN p.commit_ts WHEN 'ROLLED_BACK' THEN d.op_ts
                                    WHEN 'DISCARDED' THEN p.discard_ts END AS decided_ts
    FROM tx t
    LEFT JOIN per_message p ON p.run_id = t.run_id AND p.message_key = t.message_key
    LEFT JOIN decisions d ON d.run_id = t.run_id AND d.message_key = t.message_key
)
SELECT run_id, message_key, producer_group, topic, broker, transaction_state, transaction_checks,
       half_records, commits, half_ts, op_ts, decided_ts,
       epoch_ms(decided_ts) - epoch_ms(half_ts) AS decision_ms
FROM decided
ORDER BY run_id, message_key;
