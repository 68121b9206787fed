-- The classified records numbered along their chains (docs/lineage.md, "message_hops"): hop_index,
-- and next_store_ts and dwell_ms, where a SCHEDULE hop's next store time is its delivery's. Reads
-- classified (classified.sql) and runs (each broker's delay levels). Every window partitions by
-- (run_id, message_key[, ...]): Spark range-partitions classified by (run_id, message_key) once
-- and runs them all inside those partitions.
WITH level_delays AS (
    -- (run_id, broker, delay_level, level_delay_ms) for every level a run's broker knows. One row
    -- per broker and level: broadcast at any run size.
    SELECT run_id, broker, delay_level, min(level_delay_ms) AS level_delay_ms
    FROM (SELECT run_id, broker, level AS delay_level, {{element_at}}(delay_levels_ms, level) AS level_delay_ms
          FROM (SELECT run_id, broker, delay_levels_ms,
                       {{explode}}({{sequence}}(1, CAST(cardinality(delay_levels_ms) AS INT))) AS level
                FROM runs
                WHERE broker IS NOT NULL AND cardinality(delay_levels_ms) > 0) l) d
    WHERE level_delay_ms IS NOT NULL
    GROUP BY run_id, broker, delay_level
),
numbered AS (
    -- Shared hops (group null) are numbered from 0 in record order; a group's hops after them.
    -- A SCHEDULE record waits from its due time, its store time plus its level's delay (the
    -- schedule delivers it no earlier), or from its store time where that delay is not known.
    -- pair_role: 0 for a SCHEDULE record, 1 for a record the schedule re-put from one (DELIVER,
    -- RETRY or DLQ keeping its DELAY).
    SELECT /*+ BROADCAST(d) */ h.*,
           CAST(CASE WHEN h.`group` IS NULL THEN 0
                     ELSE count(CASE WHEN h.`group` IS NULL THEN 1 END) OVER message END
                + row_number() OVER chain - 1 AS INT) AS hop_index,
           lead(h.store_ts) OVER chain AS chain_next_ts,
           {{chain_previous}},
           CASE WHEN h.hop_kind = 'SCHEDULE' THEN 0
                WHEN h.hop_kind IN ('DELIVER', 'RETRY', 'DLQ') AND h.delay_level > 0 THEN 1 END AS pair_role,
           {{unix_millis}}(h.store_ts)
             + CASE WHEN h.hop_kind = 'SCHEDULE' THEN coalesce(d.level_delay_ms, 0) ELSE 0 END AS waits_from_ms
    FROM classified h
    LEFT JOIN level_delays d ON d.run_id = h.run_id AND d.broker = h.broker AND d.delay_level = h.delay_level
    WINDOW message AS (PARTITION BY h.run_id, h.message_key),
           chain AS (PARTITION BY h.run_id, h.message_key, h.`group`
                     ORDER BY h.store_ts ASC NULLS FIRST, h.broker ASC NULLS FIRST, h.phys_offset ASC NULLS FIRST)
),
counted AS (
    -- A SCHEDULE hop's delivery: within a (message, group, broker, ORIGIN_MESSAGE_ID, delay level,
    -- reconsume times), in the order of waiting and store times, each re-put record pairs with
    -- the oldest SCHEDULE record still waiting before it; one with none waiting is a copy a
    -- restarted broker put again and pairs with nothing. The count waiting is a running sum of
    -- +1 per SCHEDULE and -1 per re-put kept from going below zero: with c that sum before a row,
    -- c - min(0, least c so far); a re-put is paired when it is positive, and the k-th SCHEDULE
    -- pairs with the k-th paired re-put. A SCHEDULE due when a re-put is stored is waiting for
    -- it (role 0 before role 1).
    SELECT n.*,
           sum(CASE pair_role WHEN 0 THEN 1 WHEN 1 THEN -1 ELSE 0 END) OVER in_order
             - CASE pair_role WHEN 0 THEN 1 WHEN 1 THEN -1 ELSE 0 END AS sum_before,
           count(CASE WHEN pair_role = 0 THEN 1 END) OVER in_order AS schedules_so_far,
           count(CASE WHEN pair_role = 1 THEN 1 END) OVER in_order AS reputs_so_far
    FROM numbered n
    WINDOW in_order AS (PARTITION BY {{schedule_pair_key}} ORDER BY {{schedule_pair_order}}
                        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
ranked AS (
    -- pair_class: 0 for a SCHEDULE, 1 for a paired re-put; pair_rank: its rank among its class in
    -- that order. Every re-put that paired with nothing lowered the running sum's least value by
    -- one, so a re-put's rank is the re-puts so far less -least(0, that least value), its own
    -- sum after it (sum_before - 1) included.
    SELECT c.*,
           CASE WHEN pair_role = 0 THEN 0 WHEN pair_role = 1 AND sum_before - least_before > 0 THEN 1 END
             AS pair_class,
           CASE WHEN pair_role = 0 THEN schedules_so_far
                WHEN pair_role = 1 AND sum_before - least_before > 0
                THEN reputs_so_far + least(least_before, sum_before - 1) END AS pair_rank
    FROM (SELECT c.*, least(0, min(sum_before) OVER in_order) AS least_before
          FROM counted c
          WINDOW in_order AS (PARTITION BY {{schedule_pair_key}} ORDER BY {{schedule_pair_order}}
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) c
),
paired AS (
    SELECT r.*,
           CASE WHEN pair_class = 0 AND lead(pair_class) OVER pairs = 1 AND lead(pair_rank) OVER pairs = pair_rank
                THEN lead(store_ts) OVER pairs END AS delivered_ts
    FROM ranked r
    WINDOW pairs AS (PARTITION BY {{schedule_pair_key}} ORDER BY pair_rank ASC NULLS FIRST, pair_class ASC NULLS FIRST)
),
delivered AS (
    -- A SCHEDULE hop without a delivery (still waiting, or lost) keeps the next hop of its chain.
    SELECT p.*,
           CASE WHEN hop_kind = 'SCHEDULE' THEN coalesce(delivered_ts, chain_next_ts)
                ELSE chain_next_ts END AS next_store_ts
    FROM paired p
)
SELECT run_id, message_key, `group`, hop_index, hop_kind, topic, queue_id, broker, phys_offset, msg_id,
       delay_level, reconsume_times, store_ts, next_store_ts,
       {{unix_millis}}(next_store_ts) - {{unix_millis}}(store_ts) AS dwell_ms,
       uniq_key, queue_offset, rec_origin_msg_id, real_topic, retry_topic, rec_reconsume_time, recall, inner_num,
       -- A re-put record no SCHEDULE record was waiting for: a copy the schedule put again (the
       -- lineage reads it as a fork's cause).
       coalesce(pair_role = 1 AND pair_class IS NULL, false) AS reput_copy,
       tx_check_times, tx_commit_of, dispatch_to, dispatched, prev_kind, prev_broker, prev_phys
FROM delivered
