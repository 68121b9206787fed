-- The rows of message_lineage (docs/lineage.md, "message_lineage"), unsorted: one per (message,
-- group) of every chain, and the LOST messages. Reads chained (chained.sql), records (records.sql),
-- produced, runs and the per-run steps: subscriptions, acked_records, committed_offsets,
-- pop_checkpoints and transaction_decisions (each its own file). The per-message facts are
-- windows over the chained hops and the per-chain aggregation groups them by (run_id, message_key,
-- group): in Spark both run inside the hops' range partitions, and every small table (cuts,
-- subscriptions, committed offsets, snapshots) is broadcast.
WITH {{origin_cuts_ctes}},
hop_facts AS (
    -- Per hop: what it says of its message's origin, and whether its ORIGIN_MESSAGE_ID names a
    -- record retention deleted (a truncated head).
    SELECT /*+ BROADCAST(own_cut), BROADCAST(host_cut), BROADCAST(restored), BROADCAST(txd) */
           c.run_id, c.message_key, c.`group`, c.hop_index, c.hop_kind, c.topic, c.queue_id, c.broker,
           c.phys_offset, c.msg_id, c.delay_level, c.reconsume_times, c.store_ts, c.uniq_key, c.queue_offset,
           c.origin_msg_id AS rec_origin_msg_id, c.recall, c.inner_num, c.reput_copy, c.tx_check_times, c.tx_commit_of,
           c.dispatch_to, c.dispatched,
           -- A hop's place among its message's records (store time, broker, offset): "the first
           -- by record order" below is the least of it (a number orders far cheaper than a
           -- (store_ts, broker, phys_offset) row in a window).
           row_number() OVER (PARTITION BY c.run_id, c.message_key
                              ORDER BY c.store_ts ASC NULLS FIRST, c.broker ASC NULLS FIRST,
                                       c.phys_offset ASC NULLS FIRST) AS record_order,
           txd.half_offset IS NOT NULL AS tx_decided,
           -- The origin topic its RETRY_TOPIC names (names.origin_of_retry_topic_property): the
           -- property itself, or, for a POP retry topic of the hop's group (the 5.x proxy's DLQ
           -- record), the topic after %RETRY%<group>+ or %RETRY%<group>_; another %RETRY% name
           -- names none.
           CASE WHEN NOT {{starts_with}}(c.retry_topic_named, '{{retry_topic_prefix}}') THEN c.retry_topic_named
                WHEN {{starts_with}}(c.retry_topic_named, c.pop_retry_v2)
                     AND length(c.retry_topic_named) > length(c.pop_retry_v2)
                THEN substr(c.retry_topic_named, length(c.pop_retry_v2) + 1)
                WHEN {{starts_with}}(c.retry_topic_named, c.pop_retry_v1)
                     AND length(c.retry_topic_named) > length(c.pop_retry_v1)
                THEN substr(c.retry_topic_named, length(c.pop_retry_v1) + 1) END AS retry_origin,
           -- The REAL_TOPIC of a delayed publish's SCHEDULE hop, a timer message's TIMER hop or a
           -- transaction's HALF and DISCARD hops.
           CASE WHEN c.hop_kind IN ('SCHEDULE', 'TIMER', 'HALF', 'DISCARD') AND c.`group` IS NULL THEN nullif(c.real_topic, '')
           END AS delayed_topic,
           CASE WHEN c.hop_kind IN ('PUBLISH', 'DELIVER') THEN c.topic END AS published_topic,
           -- The proxy's DLQ record of a POP message (RETRY_TOPIC a %RETRY% name) carries as
           -- ORIGIN_MESSAGE_ID the msgId of the retry record it was sent back from, not the origin's.
           CASE WHEN NOT coalesce({{starts_with}}(c.retry_topic_named, '{{retry_topic_prefix}}'), false)
                THEN nullif(c.origin_msg_id, '') END AS kept_origin_msg_id,
           {{names_a_removed_record}} OR {{commits_a_removed_record}} AS names_removed,
           -- A group's RETRY the schedule put (DELAY kept) whose SCHEDULE retention deleted: the
           -- chain's previous hop is no SCHEDULE, and the log of the RETRY's broker starts past
           -- where that SCHEDULE was (past the previous hop when that is on the same broker; for
           -- the chain's first hop, past the message's last shared hop there; else past 0). Only a
           -- tiered store brings back such a RETRY (docs/lineage.md).
           coalesce(c.`group` IS NOT NULL AND c.hop_kind = 'RETRY' AND c.delay_level > 0
                    AND coalesce(c.prev_kind, '') <> 'SCHEDULE'
                    AND own_cut.first_offset > CASE WHEN c.prev_broker = c.broker THEN c.prev_phys
                                                    WHEN c.prev_kind IS NULL THEN coalesce(c.shared_phys, 0)
                                                    ELSE 0 END,
                    false) AS schedule_removed,
           -- On a group hop, the retries its record says happened up to it: the larger of the
           -- header's reconsume times and RECONSUME_TIME (a client's send keeps the count there);
           -- the k-th RETRY record carries k, a SCHEDULE or DLQ record one more than the retries
           -- before it.
           CASE WHEN c.`group` IS NOT NULL
                THEN greatest(c.reconsume_times, coalesce(TRY_CAST(c.rec_reconsume_time AS INT), 0))
                     - CASE WHEN c.hop_kind = 'RETRY' THEN 0 ELSE 1 END END AS retries_seen
    FROM (SELECT h.*, h.rec_origin_msg_id AS origin_msg_id, nullif(h.retry_topic, '') AS retry_topic_named,
                 '{{retry_topic_prefix}}' || h.`group` || '{{pop_retry_v2_separator}}' AS pop_retry_v2,
                 '{{retry_topic_prefix}}' || h.`group` || '{{pop_retry_v1_separator}}' AS pop_retry_v1,
                 max(CASE WHEN h.`group` IS NULL THEN h.phys_offset END) OVER on_broker AS shared_phys
          FROM chained h
          WINDOW on_broker AS (PARTITION BY h.run_id, h.message_key, h.broker)) c
    {{origin_cut_joins}}
    LEFT JOIN transaction_decisions txd ON c.hop_kind = 'HALF' AND txd.run_id = c.run_id AND txd.broker = c.broker
          AND txd.queue_id = c.queue_id AND txd.half_offset = c.queue_offset
),
message_facts AS (
    -- Per message, the same on every hop of it: the origin topic (RETRY_TOPIC, else a delayed or
    -- timer publish's REAL_TOPIC, else the PUBLISH or DELIVER topic) and origin msgId (a later
    -- hop's ORIGIN_MESSAGE_ID, else the first record's msgId), each the first by record order;
    -- whether its head is gone (no shared hop, a DELIVER as the first, or an ORIGIN_MESSAGE_ID
    -- naming a deleted record); and the groups holding a hop of it.
    SELECT f.*,
           coalesce(min_by(retry_origin, CASE WHEN retry_origin IS NOT NULL THEN record_order END)
                      OVER message,
                    min_by(delayed_topic, CASE WHEN delayed_topic IS NOT NULL THEN record_order END)
                      OVER message,
                    min_by(published_topic, CASE WHEN published_topic IS NOT NULL THEN record_order END)
                      OVER message) AS origin_topic,
           coalesce(min_by(kept_origin_msg_id,
                           CASE WHEN kept_origin_msg_id IS NOT NULL THEN record_order END) OVER message,
                    min_by(msg_id, record_order) OVER message) AS origin_msg_id,
           min_by(CASE WHEN `group` IS NULL THEN hop_kind END,
                  CASE WHEN `group` IS NULL THEN record_order END) OVER message AS first_shared_kind,
           bool_or(names_removed OR schedule_removed) OVER message AS head_removed,
           array_distinct(array_agg(`group`) OVER message) AS hop_groups,
           -- A transactional message (a HALF, DISCARD or commit record of it): committed (a commit
           -- record), else rolled back (an op record decided a copy of it), else discarded after its
           -- last check, else undecided at the snapshot; and the most checks a record of it names.
           CASE WHEN bool_or(tx_commit_of IS NOT NULL) OVER message THEN 'COMMITTED'
                WHEN bool_or(tx_decided) OVER message THEN 'ROLLED_BACK'
                WHEN bool_or(hop_kind = 'DISCARD') OVER message THEN 'DISCARDED'
                WHEN bool_or(hop_kind = 'HALF') OVER message THEN 'UNDECIDED' END AS transaction_state,
           max(tx_check_times) OVER message AS transaction_checks,
           -- Its fan-out (multi-dispatch, LMQ): the queues its first record that lists any lists,
           -- and the positions all its records were given there (a retry copy of a dispatched
           -- record is dispatched again: its LMQ readers get the message once more).
           min_by(dispatch_to, CASE WHEN dispatch_to IS NOT NULL THEN record_order END)
             OVER message AS first_dispatch_to,
           sum(dispatched) OVER message AS message_dispatched
    FROM hop_facts f
    WINDOW message AS (PARTITION BY run_id, message_key)
),
subscribers AS (
    SELECT run_id, topic AS origin_topic, array_distinct(array_agg(`group`)) AS sub_groups
    FROM subscriptions
    GROUP BY run_id, topic
),
fanned_groups AS (
    -- The groups of a message: the subscribers of its origin topic and the groups with hops of it.
    SELECT /*+ BROADCAST(s) */ m.*,
           CASE WHEN s.sub_groups IS NULL THEN m.hop_groups
                ELSE array_distinct(s.sub_groups || m.hop_groups) END AS message_groups
    FROM message_facts m
    LEFT JOIN subscribers s ON s.run_id = m.run_id AND s.origin_topic = m.origin_topic
),
exploded AS (
    -- One row per (hop, group whose chain holds it): a shared hop is repeated for every group of
    -- its message, or kept once with group null when the message has none.
    SELECT g.*,
           {{explode}}(CASE WHEN g.`group` IS NOT NULL THEN {{array}}(g.`group`)
                            WHEN cardinality(g.message_groups) > 0 THEN g.message_groups
                            ELSE {{array}}(CAST(NULL AS STRING)) END) AS chain_group
    FROM fanned_groups g
),
chains AS (
    -- A fork: a record that continues its chain from an attempt another record of the same kind
    -- already continued it from. The steps that can fork are what the schedule re-puts (a DELIVER
    -- of a delayed publish) and a group's SCHEDULE, RETRY and DLQ records, whose attempt is the
    -- reconsume count they carry (retries_seen); the first record of each (attempt, kind) in
    -- chain order is the chain's, every later one an extra copy. PUBLISH and TIMER records are
    -- no steps: a producer's second send is another message's head, a timer roll is a roll.
    SELECT e.*,
           CASE WHEN e.hop_kind = 'DELIVER' OR (e.`group` IS NOT NULL AND e.hop_kind IN ('SCHEDULE', 'RETRY', 'DLQ'))
                THEN row_number() OVER (PARTITION BY e.run_id, e.message_key, e.chain_group, e.hop_kind,
                                                     e.retries_seen
                                        ORDER BY e.hop_index ASC NULLS FIRST) > 1
                ELSE false END AS extra_copy
    FROM exploded e
),
per_chain AS (
    -- A chain: its hops and RETRY hops, its path (a SCHEDULE hop shown with its delay level, or
    -- its schedule queue id + 1), its last hop, its first and last store times, and its last
    -- consumable record (PUBLISH, DELIVER or RETRY: what the group pulls).
    SELECT run_id, message_key, chain_group AS `group`,
           CAST(count(*) AS INT) AS hops,
           CAST(count_if(hop_kind = 'RETRY' AND NOT extra_copy) AS INT) AS retries,
           CAST(count_if(extra_copy) AS INT) AS forks,
           min(CASE WHEN extra_copy THEN hop_index END) AS fork_hop_index,
           min_by(broker, CASE WHEN extra_copy THEN hop_index END) AS fork_broker,
           -- A chain one of whose copies the schedule put again (no SCHEDULE record was waiting
           -- for it: a broker's schedule restarted from the delay offsets it last persisted) forked
           -- at a restart, which also lost the consumers' offsets and handed messages out twice;
           -- any other fork is a second send-back of a message handed out twice.
           CASE WHEN count_if(extra_copy) = 0 THEN NULL
                WHEN bool_or(extra_copy AND reput_copy) THEN 'BROKER_RESTART'
                ELSE 'DUPLICATE_DELIVERY' END AS fork_cause,
           string_agg(hop_label, ' > ' {{aggregate_order_by}} hop_index) AS path,
           max_by(hop_kind, hop_index) AS last_kind,
           max_by(topic, hop_index) AS final_topic,
           max_by(store_ts, hop_index) AS last_store_ts,
           min_by(store_ts, hop_index) AS first_store_ts,
           max_by(broker, consumable_index) AS c_broker,
           max_by(phys_offset, consumable_index) AS c_phys,
           max_by(topic, consumable_index) AS c_topic,
           max_by(queue_id, consumable_index) AS c_queue,
           max_by(queue_offset, consumable_index) AS c_offset,
           coalesce(max_by(coalesce(nullif(uniq_key, ''), ''), consumable_index), '') AS c_key,
           max_by(inner_num, consumable_index) AS c_inner_num,
           max(origin_topic) AS origin_topic,
           max(origin_msg_id) AS origin_msg_id,
           bool_or(first_shared_kind IS NULL OR coalesce(first_shared_kind = 'DELIVER', false) OR head_removed)
             AS truncated,
           max(retries_seen) AS retries_seen,
           max(CASE WHEN hop_kind = 'RETRY' THEN retries_seen END) AS retry_depth,
           bool_or(recall) AS recalled,
           max(transaction_state) AS transaction_state,
           max(transaction_checks) AS transaction_checks,
           max(first_dispatch_to) AS dispatch_to,
           max(message_dispatched) AS dispatches
    FROM (SELECT c.*,
                 CASE WHEN hop_kind = 'SCHEDULE'
                      THEN topic || '[' || CAST(CASE WHEN delay_level > 0 THEN delay_level ELSE queue_id + 1 END
                                                AS STRING) || ']'
                      ELSE topic END AS hop_label,
                 CASE WHEN hop_kind IN ('PUBLISH', 'DELIVER', 'RETRY') THEN hop_index END AS consumable_index
          FROM chains c) c
    GROUP BY run_id, message_key, chain_group
),
snapshots AS (
    -- When each broker's store was taken (runs.sim_end_ts): an import's last record's store
    -- time, a simulation's clock when the run stopped. One row per broker: broadcast.
    SELECT run_id, broker AS c_broker, max(sim_end_ts) AS snapshot_ts
    FROM runs
    WHERE broker IS NOT NULL
    GROUP BY run_id, broker
),
judged AS (
    SELECT /*+ BROADCAST(o), BROADCAST(sn) */ p.*,
           a.c_phys IS NOT NULL AS attempt_acked, o.committed, k.pop_acked, k.pop_revive_ts, sn.snapshot_ts,
           -- The chain ends at a record a POP group popped whose last checkpoint is not acked: it
           -- is invisible until that checkpoint's revive time, then the revive service's retry is
           -- pending.
           NOT coalesce(k.pop_acked, true) AND p.last_kind NOT IN ('DLQ', 'SCHEDULE', 'TIMER') AS awaits_revive
    FROM per_chain p
    LEFT JOIN acked_records a ON a.run_id = p.run_id AND a.`group` = p.`group` AND a.c_phys = p.c_phys AND a.c_key = p.c_key
    LEFT JOIN committed_offsets o ON o.run_id = p.run_id AND o.`group` = p.`group` AND o.c_topic = p.c_topic
                         AND o.c_broker = p.c_broker AND o.c_queue = p.c_queue
    LEFT JOIN pop_checkpoints k ON k.run_id = p.run_id AND k.`group` = p.`group` AND k.c_topic = p.c_topic
                        AND k.c_broker = p.c_broker AND k.c_queue = p.c_queue AND k.c_offset = p.c_offset
    LEFT JOIN snapshots sn ON sn.run_id = p.run_id AND sn.c_broker = p.c_broker
),
stored AS (
    -- final_state, decided in this order: the chain's end first (a record sent back to the
    -- schedule was delivered, and offsets move past it, without being consumed), then
    -- consumption (the last POP checkpoint's ack; else an ACKED delivery, or the committed offset
    -- past the record's last queue offset), then a POP record's invisible time against its
    -- broker's snapshot.
    SELECT run_id, message_key, `group`, origin_topic, origin_msg_id, hops,
           -- A truncated chain lost RETRY hops with its head: its retries are what its surviving
           -- records say happened, when that is more. A forked chain's copies are no retries: its
           -- retries are the deepest count its RETRY records carry (an orderly group's DLQ record
           -- carries its local count, no retry), not its RETRY records' number: after a restart a
           -- copy can carry a count the chain already had under another reading, and counting it
           -- made a real crashed store's chain one retry deeper than its group's maximum.
           CASE WHEN truncated THEN greatest(retries, coalesce(retries_seen, 0))
                WHEN forks > 0 THEN coalesce(retry_depth, retries)
                ELSE retries END AS retries,
           path, final_topic,
           CASE WHEN last_kind = 'DLQ' THEN 'DLQ'
                WHEN last_kind = 'TIMER' AND recalled THEN 'RECALLED'
                WHEN last_kind IN ('SCHEDULE', 'TIMER') THEN 'RETRYING'
                WHEN coalesce(pop_acked, attempt_acked OR coalesce(committed > c_offset + c_inner_num - 1, false))
                  THEN 'CONSUMED'
                WHEN awaits_revive AND coalesce(snapshot_ts < pop_revive_ts, false) THEN 'IN_FLIGHT'
                WHEN last_kind = 'RETRY' THEN 'RETRYING'
                WHEN awaits_revive THEN 'RETRYING'
                ELSE 'UNCONSUMED' END AS final_state,
           first_store_ts, last_store_ts,
           {{unix_millis}}(last_store_ts) - {{unix_millis}}(first_store_ts) AS total_delay_ms,
           truncated,
           CASE WHEN awaits_revive THEN pop_revive_ts END AS invisible_until,
           forks, fork_hop_index, fork_broker, fork_cause,
           transaction_state, transaction_checks,
           CASE WHEN dispatch_to IS NOT NULL THEN split(dispatch_to, '{{multi_dispatch_separator}}') END
             AS dispatch_queues,
           CAST(dispatches AS INT) AS dispatches
    FROM judged
),
accepted AS (
    -- LOST: the producer got SEND_OK for a UNIQ_KEY that no commit-log record carries.
    SELECT run_id, uniq_key, min(topic) AS origin_topic, min(msg_id) AS origin_msg_id
    FROM produced
    WHERE status = 'SEND_OK' AND uniq_key IS NOT NULL
    GROUP BY run_id, uniq_key
),
lost AS (
    SELECT a.*
    FROM accepted a
    ANTI JOIN (SELECT DISTINCT run_id, uniq_key FROM records WHERE uniq_key IS NOT NULL) k
      ON k.run_id = a.run_id AND k.uniq_key = a.uniq_key
)
SELECT * FROM stored
UNION ALL
-- One row per group subscribing to its topic (group null when none does).
SELECT /*+ BROADCAST(s) */ l.run_id, l.uniq_key, s.`group`, l.origin_topic, l.origin_msg_id, 0, 0, NULL, NULL,
       'LOST', NULL, NULL, NULL, false, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0
FROM lost l
LEFT JOIN subscriptions s ON s.run_id = l.run_id AND s.topic = l.origin_topic
