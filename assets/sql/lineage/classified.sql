-- The records that are message hops, each with its message_key, hop_kind and group (docs/lineage.md:
-- "message_key", "hop_kind and group, per record"), and the record facts the chains and the
-- lineage read. The broker's bookkeeping records are no hops. Reads records (records.sql) and
-- retry_topics (an import's owners of %RETRY% topics; empty for a simulation).
WITH owners AS (
    -- The owner the import found for a %RETRY% topic, where every broker of the run that lists it
    -- agrees (an ambiguous row has no group). One row per retry topic: broadcast at any run size.
    SELECT run_id, retry_topic AS topic, min(`group`) AS owner_group
    FROM retry_topics
    GROUP BY run_id, retry_topic
    HAVING min(`group`) = max(`group`) AND count_if(`group` IS NULL) = 0
),
messages AS {{not_materialized}} (
    -- Read by both halves of keyed: kept whole, these wide rows (properties and all) cost DuckDB a
    -- copy of the commit log; read twice, the second half's filter on uniq_key reads almost nothing.
    SELECT c.run_id, c.broker, c.phys_offset, c.topic, c.queue_id, c.queue_offset, c.msg_id, c.uniq_key,
           c.origin_msg_id, c.real_topic, c.retry_topic, c.delay_level, c.reconsume_times, c.store_ts,
           c.born_ts, c.born_host, c.body_crc, c.properties, c.sys_flag, c.prepared_tx_offset
    FROM records c
    WHERE NOT ({{bookkeeping_record}})
),
keyed AS (
    -- The UNIQ_KEY (the producer's id, copied on every hop).
    SELECT run_id, broker, phys_offset, topic, queue_id, queue_offset, msg_id, uniq_key, origin_msg_id,
           real_topic, retry_topic, delay_level, reconsume_times, store_ts, properties, sys_flag, prepared_tx_offset,
           uniq_key AS message_key
    FROM messages
    WHERE length(uniq_key) > 0
    UNION ALL
    -- Without one (an old client): its ORIGIN_MESSAGE_ID; for the original record, which has none,
    -- the one its later hops carry, found through the fields the broker copies on every hop (born
    -- host, born time in epoch ms, body CRC); else those fields themselves. The window runs over
    -- these records only, so the common case costs no extra shuffle.
    SELECT run_id, broker, phys_offset, topic, queue_id, queue_offset, msg_id, uniq_key, origin_msg_id,
           real_topic, retry_topic, delay_level, reconsume_times, store_ts, properties, sys_flag, prepared_tx_offset,
           coalesce(nullif(origin_msg_id, ''),
                    min(nullif(origin_msg_id, '')) OVER (PARTITION BY run_id, fallback_key),
                    fallback_key) AS message_key
    FROM (SELECT m.*,
                 concat_ws('|', coalesce(born_host, ''), coalesce(CAST({{unix_millis}}(born_ts) AS STRING), ''),
                           coalesce(CAST(body_crc AS STRING), '')) AS fallback_key
          FROM messages m
          WHERE NOT coalesce(length(uniq_key) > 0, false)) u
),
named AS (
    -- The topic whose name gives the group: a SCHEDULE or TIMER record's REAL_TOPIC, any other's own.
    SELECT /*+ BROADCAST(o) */ k.*, o.owner_group,
           CASE WHEN k.topic IN ('{{schedule_topic}}', '{{timer_topic}}') THEN coalesce(k.real_topic, '')
                ELSE k.topic END AS named_topic
    FROM keyed k
    LEFT JOIN owners o ON o.run_id = k.run_id AND o.topic = k.topic
)
SELECT run_id, broker, phys_offset, topic, queue_id, queue_offset, msg_id, uniq_key,
       origin_msg_id AS rec_origin_msg_id, real_topic, retry_topic, delay_level, reconsume_times, store_ts,
       message_key,
       CASE WHEN topic = '{{schedule_topic}}' THEN 'SCHEDULE'
            WHEN topic = '{{timer_topic}}' THEN 'TIMER'
            -- A transactional message's half and each check copy of it, and its copy discarded
            -- after transactionCheckMax checks (docs/transactions.md): shared, as a PUBLISH is.
            WHEN topic = '{{trans_half_topic}}' THEN 'HALF'
            WHEN topic = '{{trans_check_max_time_topic}}' THEN 'DISCARD'
            WHEN {{starts_with}}(topic, '{{retry_topic_prefix}}') THEN 'RETRY'
            WHEN {{starts_with}}(topic, '{{dlq_topic_prefix}}') THEN 'DLQ'
            -- Re-put to its real topic by the schedule (it keeps DELAY) or by the 5.x timer (which
            -- sets TIMER_DEQUEUE_MS and no DELAY).
            WHEN real_topic = topic AND (delay_level > 0 OR properties['{{prop_delay}}'] IS NOT NULL
                                         OR properties['{{prop_timer_dequeue_ms}}'] IS NOT NULL) THEN 'DELIVER'
            ELSE 'PUBLISH' END AS hop_kind,
       -- A SCHEDULE or TIMER hop belongs to the group of its %RETRY%/%DLQ% REAL_TOPIC (none for a
       -- delayed publish); a %RETRY% topic to the owner the import found, else to the group its
       -- name gives.
       CASE WHEN topic IN ('{{schedule_topic}}', '{{timer_topic}}') THEN {{group_of}}
            ELSE coalesce(owner_group, {{group_of}}) END AS `group`,
       -- What the lineage reads of the properties: the client's reconsume count, a timer recall,
       -- and how many queue offsets an inner batch not unwrapped stands for.
       properties['{{prop_reconsume_time}}'] AS rec_reconsume_time,
       properties['{{prop_timer_del_uniqkey}}'] IS NOT NULL AS recall,
       greatest(coalesce(TRY_CAST(properties['{{prop_inner_num}}'] AS INT), 1), 1) AS inner_num,
       -- Multi-dispatch (LMQ; docs/lineage.md "Fan-out is not a hop"): the queues the record's
       -- INNER_MULTI_DISPATCH lists, and the positions the broker gave it there (one per offset
       -- in INNER_MULTI_QUEUE_OFFSET; none when it did not dispatch). A fan-out, not a hop.
       properties['{{prop_inner_multi_dispatch}}'] AS dispatch_to,
       CAST(CASE WHEN properties['{{prop_inner_multi_queue_offset}}'] IS NULL THEN 0
                 ELSE cardinality(split(properties['{{prop_inner_multi_queue_offset}}'],
                                        '{{multi_dispatch_separator}}')) END AS INT) AS dispatched,
       -- A transaction's records: the check a half copy (or the discarded copy) was made by
       -- (TRANSACTION_CHECK_TIMES, which a commit keeps; 0 for the half itself), and a commit record's back-pointer
       -- (sysFlag COMMIT): the commit-log offset of the copy it commits, on its own broker; -1 in a
       -- run written before commitlog.prepared_tx_offset existed (a commit, its copy unknown).
       CASE WHEN topic IN ('{{trans_half_topic}}', '{{trans_check_max_time_topic}}')
                 OR (coalesce(sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}}
            THEN coalesce(TRY_CAST(properties['{{prop_transaction_check_times}}'] AS INT), 0) END AS tx_check_times,
       CASE WHEN (coalesce(sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}}
            THEN coalesce(prepared_tx_offset, -1) END AS tx_commit_of
FROM named
