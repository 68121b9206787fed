-- dlq_messages: one row per (message, group) with a record in the %DLQ%<group> topic, with what a
-- resender or an on-call engineer needs: how many DLQ records the message has there (dlq_copies:
-- more than one when its chain forked, docs/lineage.md "forks"), the one a resend uses (the first
-- DLQ copy by store order: store time, broker, physical offset; the dlq_* columns and the record's
-- own fields are that copy's), where it came from (origin topic and message id), how often it was
-- retried, every property it carries, and the last failed delivery the group saw. A 5.x proxy's
-- DLQ record carries the POP retry topic %RETRY%<group>_<topic> as RETRY_TOPIC and that retry
-- record's msgId as ORIGIN_MESSAGE_ID (it sends back the retry record): when retry_topics knows the
-- topic's origin, the origin topic and msgId are the lineage's (the topic and its published record).
-- dlq_reason says how the record got there (MAX_RECONSUME_TIMES, CLIENT_SEND_AT_MAX,
-- CONSUMER_REQUESTED; NULL when nothing explains it, which dlq_only_after_max_retries reports),
-- with the maximum it was judged against (dlq_reasons: the shared fragment dlq_explained has the rules).
CREATE OR REPLACE TABLE dlq_messages AS
WITH dlq_records AS (
    SELECT run_id, message_key, "group", broker, phys_offset,
           row_number() OVER (PARTITION BY run_id, message_key, "group"
                              ORDER BY store_ts, broker, phys_offset) AS copy_rank,
           count(*) OVER (PARTITION BY run_id, message_key, "group") AS dlq_copies
    FROM message_hops
    WHERE hop_kind = 'DLQ'
),
dlq_hops AS (
    -- The copy a resend uses: the first by store order.
    SELECT run_id, message_key, "group", broker, phys_offset, dlq_copies
    FROM dlq_records
    WHERE copy_rank = 1
),
dlq_chains AS (
    -- The lineage rows of the DLQ hops only: a semi join probes message_lineage once, where a
    -- plain join would hash every lineage row.
    SELECT l.run_id, l.message_key, l."group", l.origin_topic, l.origin_msg_id, l.retries,
           l.first_store_ts, l.path, l.forks
    FROM message_lineage l
    SEMI JOIN dlq_hops h ON h.run_id = l.run_id AND h.message_key = l.message_key AND h."group" = l."group"
),
dlq_keys AS (
    SELECT DISTINCT h.run_id, h."group", c.uniq_key
    FROM dlq_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
),
pop_origins AS (
    SELECT run_id, broker, retry_topic, "group", any_value(origin_topic) AS origin_topic
    FROM retry_topics
    WHERE origin_topic IS NOT NULL
    GROUP BY run_id, broker, retry_topic, "group"
),
explained AS (
    -- Every DLQ hop's record is in dlq_reasons (the same hops joined with the same commit log),
    -- with its properties: taken from there, the commit log's properties map (the costliest column
    -- to decode) is not read again.
    SELECT run_id, "group", broker, phys_offset, dlq_reason, max_times, properties
    FROM dlq_reasons e
),
failures AS (
    -- The last delivery that did not end in CONSUME_SUCCESS, per group and message (of the DLQ
    -- records' messages only).
    SELECT run_id, "group", uniq_key,
           arg_max(status, end_ts) AS last_status,
           arg_max(outcome, end_ts) AS last_outcome,
           arg_max(consumer_id, end_ts) AS last_consumer_id,
           arg_max(reconsume_times, end_ts) AS last_reconsume_times,
           max(end_ts) AS last_failure_ts,
           count(*) AS failed_deliveries
    FROM consume_attempts a
    SEMI JOIN dlq_keys k ON k.run_id = a.run_id AND k."group" = a."group" AND k.uniq_key = a.uniq_key
    WHERE status <> 'CONSUME_SUCCESS'
    GROUP BY run_id, "group", uniq_key
)
SELECT h.run_id,
       h."group",
       h.message_key,
       c.uniq_key,
       c.msg_id AS dlq_msg_id,
       c.broker AS dlq_broker,
       c.phys_offset AS dlq_phys_offset,
       c.topic AS dlq_topic,
       CAST(h.dlq_copies AS INTEGER) AS dlq_copies,
       CASE WHEN p.retry_topic IS NOT NULL THEN coalesce(l.origin_topic, p.origin_topic)
            ELSE coalesce(c.retry_topic, l.origin_topic) END AS origin_topic,
       CASE WHEN p.retry_topic IS NOT NULL THEN coalesce(l.origin_msg_id, c.origin_msg_id)
            ELSE coalesce(c.origin_msg_id, l.origin_msg_id) END AS origin_msg_id,
       l.retries,
       c.reconsume_times,
       c.max_reconsume_times,
       e.dlq_reason,
       e.max_times AS dlq_max_reconsume_times,
       c.tags,
       c.keys,
       c.body_size,
       c.body_crc,
       c.born_ts,
       l.first_store_ts,
       c.store_ts AS dlq_store_ts,
       l.path,
       l.forks,
       e.properties,
       f.failed_deliveries,
       f.last_status,
       f.last_outcome,
       f.last_consumer_id,
       f.last_failure_ts,
       CASE WHEN f.last_status IS NOT NULL
            THEN f.last_status || ' (' || f.last_outcome || ') at reconsume '
                 || CAST(f.last_reconsume_times AS VARCHAR) || ' on ' || coalesce(f.last_consumer_id, '?')
       END AS last_failure
FROM dlq_hops h
JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
LEFT JOIN dlq_chains l
       ON l.run_id = h.run_id AND l.message_key = h.message_key AND l."group" = h."group"
LEFT JOIN pop_origins p
       ON p.run_id = c.run_id AND p.broker = c.broker AND p.retry_topic = c.retry_topic AND p."group" = h."group"
LEFT JOIN explained e
       ON e.run_id = h.run_id AND e."group" = h."group" AND e.broker = h.broker AND e.phys_offset = h.phys_offset
LEFT JOIN failures f
       ON f.run_id = h.run_id AND f."group" = h."group" AND f.uniq_key = c.uniq_key
ORDER BY h.run_id, h."group", c.store_ts, c.broker, c.phys_offset;
