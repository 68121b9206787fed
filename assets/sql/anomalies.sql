-- anomalies: one row per thing an operator should look at, by kind:
--   DUPLICATE_CONSUME  a group consumed one message successfully more than once (per consumer
--                      when broadcasting): at-least-once delivery showing, e.g. after a crash
--   LOST               a SEND_OK message with no commit-log record; the detail says whether a
--                      broker_crash under async flush after the send explains it
--   EARLY_DELIVERY     delivered before the due time (never allowed): the rows of
--                      no_delivery_before_due_time (the shared fragment early_deliveries)
--   LATE_DELIVERY      delivered more than late_delivery_ms_threshold after the due time
--                      (schedule_deliveries; for an import, schedule_dwells)
--   DLQ_UNEXPLAINED    a DLQ record no way of a real broker or client explains: the rows of
--                      dlq_only_after_max_retries (dlq_reasons: the shared fragment dlq_explained)
--   STORE_DAMAGE       damage found while reading an imported store
--   FAILOVER_CUT       a record of a 5.x controller-mode broker's old master that the failover cut
--                      (failover_cut): e.g. a consumer's send-back the master acknowledged before
--                      its slave had it, so the group's retry of the message is gone
--   REVIVE_LOST        5.x POP: the revive service passed the checkpoint of a record a group
--                      popped and never acked, and wrote no retry of it: the message is stuck
--   TRANSACTION_PAST_CHECK_MAX, COMMIT_WITHOUT_HALF, OP_WITHOUT_HALF, COMMITTED_TWICE
--                      a transaction checked past the maximum undecided, a commit whose
--                      back-pointer names no half copy of it, an op record deciding a half the
--                      store never had, a message committed twice: the rows of the transaction
--                      checks (their shared fragments)
--   SENT_NOT_STORED, FAILURE_NOT_RETRIED, DECISION_NOT_STORED
--                      what a client's message trace says and the store does not show: a SEND_OK
--                      with no record at its offset, a failed consume nothing retried, a
--                      commit or rollback the store does not hold: the rows of the trace checks
--   RETRY_COUNT_LOST   a group's retry record whose reconsume count is 0: a client's own send of
--                      the retry (after the broker refused its send-back) failed once and its
--                      producer sent it again without RECONSUME_TIME (cleared on the first try),
--                      so the broker counts the message's retries from 0 again: it can be
--                      retried past the group's maximum, and its chain's counts repeat
--   LMQ_REDELIVERED    a multi-dispatched message at more than one position of one LMQ queue: its
--                      retry records were dispatched there again (lmq_deliveries), so a reader of
--                      the queue gets it more than once
CREATE OR REPLACE TABLE anomalies AS
WITH dup_acks AS (
    SELECT * FROM consume_acks WHERE n > 1
),
dup_attempts AS (
    -- The deliveries of the duplicated messages only: the IN list keeps the few duplicates on the
    -- build side of the joins below (decorrelated, they would hash every delivery).
    SELECT * FROM consume_attempts
    WHERE uniq_key IN (SELECT uniq_key FROM dup_acks) OR uniq_key IS NULL
),
duplicates AS (
    -- Why a message was consumed again, most specific cause first: the consume timeout sent it
    -- back while it ran; the schedule delivered it twice (delay offsets not persisted before a
    -- restart); a crash or restart lost offsets committed in memory only (the offset window);
    -- otherwise a rebalance handed its queue over before the offset was committed.
    -- The consumer list is an ordered aggregate: built for the duplicates only.
    SELECT a.*,
           (SELECT string_agg(DISTINCT c.consumer_id, ',' ORDER BY c.consumer_id)
            FROM dup_attempts c
            WHERE c.run_id IS NOT DISTINCT FROM a.run_id AND c."group" IS NOT DISTINCT FROM a."group"
              AND c.uniq_key IS NOT DISTINCT FROM a.uniq_key
              AND c.status = 'CONSUME_SUCCESS' AND c.outcome IN ('ACKED', 'EXPIRED')
              AND CASE WHEN upper(c.model) = 'BROADCASTING' THEN c.consumer_id ELSE '' END
                  IS NOT DISTINCT FROM a.receiver) AS consumers,
           CASE
               WHEN EXISTS (SELECT 1 FROM dup_attempts c
                            WHERE c.run_id = a.run_id AND c."group" = a."group"
                              AND c.uniq_key = a.uniq_key AND c.outcome = 'EXPIRED')
                   THEN 'consume timeout: sent back while still running'
               WHEN (SELECT count(*) FROM message_hops h
                     WHERE h.run_id = a.run_id AND h.message_key = a.uniq_key
                       AND h.hop_kind = 'DELIVER') > 1
                   THEN 'schedule offset window: the delayed message was delivered twice'
               WHEN EXISTS (SELECT 1 FROM faults f
                            WHERE f.run_id = a.run_id AND f.ts <= a.last_ok_ts
                              AND f.kind IN ('consumer_crash', 'consumer_restart', 'broker_crash',
                                             'broker_restart', 'torn_write', 'consumer_hang'))
                   THEN 'offset window: ' || (SELECT f.kind || ' ' || f.target || ' at '
                                                     || strftime(f.ts, '%Y-%m-%dT%H:%M:%S.%g')
                                              FROM faults f
                                              WHERE f.run_id = a.run_id AND f.ts <= a.last_ok_ts
                                                AND f.kind IN ('consumer_crash', 'consumer_restart',
                                                               'broker_crash', 'broker_restart',
                                                               'torn_write', 'consumer_hang')
                                              ORDER BY f.ts DESC LIMIT 1)
               ELSE 'offset window: a rebalance handed the queue over before its offset was committed'
           END AS cause
    FROM dup_acks a
),
crashes AS (
    -- kill -9 loses the unflushed tail only under async flush (run_manifest; imports: unknown).
    SELECT f.run_id, f.ts, f.kind
    FROM faults f
    LEFT JOIN run_manifest m ON m.run_id = f.run_id
    WHERE f.kind IN ('broker_crash', 'torn_write') AND coalesce(m.flush, 'async') <> 'sync'
      AND NOT coalesce(starts_with(f.detail, 'skipped'), false)
),
lost AS (
    SELECT l.run_id, l.message_key, l."group", p.send_ts,
           (SELECT min(c.ts) FROM crashes c WHERE c.run_id = l.run_id AND c.ts >= p.send_ts) AS crash_ts
    FROM message_lineage l
    LEFT JOIN produced p ON p.run_id = l.run_id AND p.uniq_key = l.message_key AND p.status = 'SEND_OK'
    WHERE l.final_state = 'LOST'
),
off_time AS (
    SELECT * FROM schedule_deliveries
    WHERE lateness_ms > {{late_delivery_ms_threshold}}
),
hop_of_delivery AS (
    -- Only the hops of the deliveries listed: grouping every hop by msgId costs far more.
    SELECT run_id, msg_id, any_value(message_key) AS message_key, any_value("group") AS "group"
    FROM message_hops
    WHERE hop_kind IN ('DELIVER', 'RETRY')
      AND msg_id IN (SELECT delivered_msg_id FROM off_time)
    GROUP BY run_id, msg_id
),
awaiting AS (
    -- RETRYING rows with invisible_until: the chain ends at a record popped under a checkpoint
    -- that is not acked, with no retry after it (docs/data-contract.md, message_lineage). Few.
    SELECT run_id, message_key, "group", invisible_until
    FROM message_lineage
    WHERE final_state = 'RETRYING' AND invisible_until IS NOT NULL
),
awaiting_revive AS (
    -- Their consumable records; the IN list keeps the few on the build side (as dup_attempts).
    SELECT l.*, h.broker, h.topic, h.queue_id, c.queue_offset
    FROM awaiting l
    JOIN message_hops h ON h.run_id = l.run_id AND h.message_key = l.message_key
                       AND (h."group" = l."group" OR h."group" IS NULL)
                       AND h.hop_kind IN ('PUBLISH', 'DELIVER', 'RETRY')
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    WHERE h.message_key IN (SELECT message_key FROM awaiting)
),
revive_passed AS (
    -- That checkpoint's record in the revive topic, and the revive service's committed offset on
    -- its revive queue (group CID_RMQ_SYS_REVIVE_GROUP, consumerOffset.json). The service reads a
    -- queue from its committed offset + 1 and commits a checkpoint's own offset once it has put
    -- the retry (PopReviveService.mergeAndRevive): a committed offset at or past the checkpoint
    -- with no retry record means the broker dropped the revive (a put that threw, or the topic or
    -- group gone: docs/rocketmq-5x.md, "Revives the broker dropped").
    SELECT a.*, rc.topic AS revive_topic, rc.queue_id AS revive_queue, rc.queue_offset AS ck_offset,
           max_by(o."offset", o.ts) AS committed
    FROM awaiting_revive a
    JOIN pop_evidence e ON e.run_id = a.run_id AND e.broker = a.broker AND e.stage = 'revive'
                       AND e.kind = 'ck' AND e."group" = a."group" AND e.topic = a.topic
                       AND e.queue_id = a.queue_id AND e.revive_ts = a.invisible_until
                       AND list_contains(e.offsets, a.queue_offset)
    JOIN commitlog rc ON rc.run_id = e.run_id AND rc.broker = e.broker AND rc.phys_offset = e.phys_offset
    JOIN consumer_offsets o ON o.run_id = rc.run_id AND o.broker = rc.broker
                           AND o."group" = 'CID_RMQ_SYS_REVIVE_GROUP' AND o.topic = rc.topic
                           AND o.queue_id = rc.queue_id
    GROUP BY ALL
    HAVING max_by(o."offset", o.ts) >= rc.queue_offset
)
SELECT run_id, 'DUPLICATE_CONSUME' AS kind, uniq_key AS message_key, "group",
       'consumed successfully ' || CAST(n AS VARCHAR) || ' times by ' || consumers
       || '; cause: ' || cause AS detail
FROM duplicates
UNION ALL
SELECT run_id, 'LOST', message_key, "group",
       CASE WHEN crash_ts IS NOT NULL
            THEN 'sent ' || strftime(send_ts, '%Y-%m-%dT%H:%M:%S.%g') || ', explained by a crash at '
                 || strftime(crash_ts, '%Y-%m-%dT%H:%M:%S.%g') || ' (async flush: unflushed tail lost)'
            ELSE 'sent ' || coalesce(strftime(send_ts, '%Y-%m-%dT%H:%M:%S.%g'), '?')
                 || ', no broker_crash under async flush explains it'
       END
FROM lost
UNION ALL
SELECT s.run_id, 'LATE_DELIVERY',
       coalesce(h.message_key, s.uniq_key), h."group",
       'level ' || CAST(s.delay_level AS VARCHAR) || ' to ' || coalesce(s.real_topic, '?')
       || ', lateness ' || CAST(s.lateness_ms AS VARCHAR) || ' ms (delivered msgId '
       || coalesce(s.delivered_msg_id, '?') || ')'
FROM off_time s
LEFT JOIN hop_of_delivery h ON h.run_id = s.run_id AND h.msg_id = s.delivered_msg_id
UNION ALL
SELECT run_id, 'LATE_DELIVERY', message_key, "group",
       'level ' || CAST(delay_level AS VARCHAR) || ', lateness ' || CAST(lateness_ms AS VARCHAR)
       || ' ms (SCHEDULE msgId ' || coalesce(msg_id, '?') || '; ' || measured_from || ')'
FROM schedule_dwells
WHERE lateness_ms > {{late_delivery_ms_threshold}}
UNION ALL
SELECT run_id, 'EARLY_DELIVERY', message_key, "group", detail
FROM ({{early_deliveries}}) e
UNION ALL
SELECT run_id, 'DLQ_UNEXPLAINED', message_key, "group",
       'in the DLQ after ' || CAST(reconsumes AS VARCHAR) || ' reconsumes; the maximum is '
       || CAST(max_times AS VARCHAR) || ', and ' || unexplained_because
FROM dlq_reasons d
WHERE dlq_reason IS NULL
UNION ALL
SELECT run_id, 'STORE_DAMAGE', NULL, NULL,
       kind || ' in ' || coalesce(broker || ':', '') || coalesce(file_name, '?') || ' at offset '
       || coalesce(CAST("offset" AS VARCHAR), '?') || ': ' || coalesce(detail, '')
FROM store_problems
UNION ALL
SELECT run_id, 'FAILOVER_CUT', uniq_key,
       CASE WHEN starts_with(topic, '%RETRY%') THEN substr(topic, 8)
            WHEN starts_with(topic, '%DLQ%') THEN substr(topic, 6)
            WHEN starts_with(real_topic, '%RETRY%') THEN substr(real_topic, 8) END,
       topic || ':' || CAST(queue_id AS VARCHAR) || '@' || CAST(queue_offset AS VARCHAR) || ' at offset '
       || CAST(phys_offset AS VARCHAR) || ' of ' || broker || ', written by ' || coalesce(store_host, '?')
       || ' and held by the ' || role || ' only: past offset ' || CAST(cut_offset AS VARCHAR)
       || ', where its epochs leave the new master''s, so the failover cut it'
FROM failover_cut
UNION ALL
SELECT run_id, 'REVIVE_LOST', message_key, "group",
       'popped from ' || broker || ' ' || topic || ':' || CAST(queue_id AS VARCHAR) || '@'
       || CAST(queue_offset AS VARCHAR) || ', invisible until '
       || strftime(invisible_until, '%Y-%m-%dT%H:%M:%S.%g') || '; the revive service committed '
       || revive_topic || ':' || CAST(revive_queue AS VARCHAR) || ' to ' || CAST(committed AS VARCHAR)
       || ' (its checkpoint is at ' || CAST(ck_offset AS VARCHAR) || ') and wrote no retry'
FROM revive_passed
UNION ALL
SELECT run_id, 'TRANSACTION_PAST_CHECK_MAX', message_key, "group", detail FROM ({{transactions_past_check_max}}) t
UNION ALL
SELECT run_id, 'COMMIT_WITHOUT_HALF', message_key, "group", detail FROM ({{commits_without_half}}) t
UNION ALL
SELECT run_id, 'OP_WITHOUT_HALF', message_key, "group", detail FROM ({{ops_without_half}}) t
UNION ALL
SELECT run_id, 'COMMITTED_TWICE', message_key, "group", detail FROM ({{commits_repeated}}) t
UNION ALL
SELECT run_id, 'SENT_NOT_STORED', message_key, "group", detail FROM ({{traced_sends_not_stored}}) t
UNION ALL
SELECT run_id, 'FAILURE_NOT_RETRIED', message_key, "group", detail FROM ({{traced_failures_not_retried}}) t
UNION ALL
SELECT run_id, 'DECISION_NOT_STORED', message_key, "group", detail FROM ({{traced_decisions_not_stored}}) t
UNION ALL
SELECT run_id, 'LMQ_REDELIVERED', message_key, NULL,
       broker || ' ' || dispatch_queue || ' holds it ' || CAST(count(*) AS VARCHAR) || ' times, at offsets '
       || string_agg(CAST(dispatch_offset AS VARCHAR) || ' (' || coalesce(hop_kind, '?') || ')', ', ' ORDER BY dispatch_offset)
       || ': its retry records carry INNER_MULTI_DISPATCH and were dispatched again; a reader of the queue gets it '
       || CAST(count(*) AS VARCHAR) || ' times'
FROM lmq_deliveries
WHERE deliveries_in_queue > 1
GROUP BY run_id, message_key, broker, dispatch_queue
UNION ALL
SELECT run_id, 'RETRY_COUNT_LOST', message_key, "group",
       broker || ' ' || topic || ' at physical offset ' || CAST(phys_offset AS VARCHAR)
       || ' (hop ' || CAST(hop_index AS VARCHAR) || ') carries reconsume times 0: a resent retry lost its count, '
       || 'and the broker counts this message''s retries from 0 again'
FROM message_hops
WHERE hop_kind = 'RETRY' AND reconsume_times = 0 AND "group" IS NOT NULL
ORDER BY 1, 2, 3, 4;
