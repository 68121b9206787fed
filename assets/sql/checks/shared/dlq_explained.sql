-- One row per record in a %DLQ%<group> topic with the way a real broker or client put it there
-- (dlq_reason), or NULL when none explains it (dlq_only_after_max_retries reports those; the
-- dlq_messages table shows the reason), and the record's properties (dlq_messages takes them from
-- dlq_reasons). A SELECT, used as a subquery, inside assets.checks.staged_inputs (it reads
-- RECONSUME_TIME from record_properties).
--
-- The reconsume count: on the send-back path (the broker's consumerSendMsgBack, the 5.x revive)
-- the DLQ record carries the failed delivery's count + 1; on a client's send to %RETRY%
-- (handleRetryAndDLQ: an orderly consumer past its local retries, a client's fallback send) the
-- count travels in the RECONSUME_TIME property and the binary field equals it. Send-backs copy
-- every property, so a RECONSUME_TIME from an earlier client send may ride along stale; it is
-- never larger than the true count, so the larger of the two readings is the count.
-- The maximum is, in order: the record's MAX_RECONSUME_TIMES property; the group's configuration
-- in the run manifest (-1 = the default when consuming concurrently, unlimited when orderly); the
-- largest MAX_RECONSUME_TIMES the group's other records carry; and for an imported store with
-- none of these, the largest count any of the group's DLQ records shows.
--
-- A send-back copies the delivered record, so its DLQ record needs that delivery in its chain (a
-- record of the message at count - 1 before it, on any broker), unless retention removed it
-- (truncated). The reasons:
--   MAX_RECONSUME_TIMES  the broker's send-back or the 5.x revive at the maximum
--   CLIENT_SEND_AT_MAX   a client's own send to %RETRY% at its maximum, diverted by the broker
--                        (an orderly consumer after its local retries; the record carries both
--                        RECONSUME_TIME and the client's MAX_RECONSUME_TIMES)
--   CONSUMER_REQUESTED   a send-back before the maximum: a delay level < 0 (a push consumer's
--                        setDelayLevelWhenNextConsume(-1), the 5.x proxy's forward) or a client of
--                        the group whose own maximum is lower (the send-back header carries it;
--                        4.9.4 stores neither); in a simulation, a delivery of the message the
--                        listener answered with DLQ_REQUESTED.
WITH dlq_records AS (
    SELECT h.run_id, h.message_key, h."group", h.broker, h.phys_offset, h.hop_index,
           c.reconsume_times, c.max_reconsume_times, c.uniq_key, c.topic,
           p.reconsume_time AS client_count,
           greatest(c.reconsume_times - 1, coalesce(p.reconsume_time, 0)) AS reconsumes
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    LEFT JOIN record_properties p ON p.run_id = c.run_id AND p.broker = c.broker AND p.phys_offset = c.phys_offset
    WHERE h.hop_kind = 'DLQ'
),
{{group_maxima_ctes}},
observed AS (
    SELECT run_id, "group", max(reconsumes) AS max_times
    FROM dlq_records
    GROUP BY run_id, "group"
),
simulated AS (
    SELECT DISTINCT run_id FROM runs WHERE source = {{run_source_simulation}}
),
retry_tallies AS (
    -- The RETRY hops and lineage rows of the chains with a DLQ record (grouping only those: every
    -- chain's would cost more than the rest of this together).
    SELECT r.run_id, r.message_key, r."group", count(*) AS retries
    FROM message_hops r
    SEMI JOIN dlq_records d ON d.run_id = r.run_id AND d.message_key = r.message_key AND d."group" = r."group"
    WHERE r.hop_kind = 'RETRY'
    GROUP BY r.run_id, r.message_key, r."group"
),
truncated_chains AS (
    SELECT l.run_id, l.message_key, l."group", bool_or(l.truncated) AS truncated
    FROM message_lineage l
    SEMI JOIN dlq_records d ON d.run_id = l.run_id AND d.message_key = l.message_key AND d."group" = l."group"
    GROUP BY l.run_id, l.message_key, l."group"
),
dlq_properties AS (
    -- The DLQ records' properties maps, for dlq_messages (no check reads them), from a scan of the
    -- records in %DLQ% topics: a filter on topic lets DuckDB decode those records' maps alone, where
    -- a join with the DLQ hops decodes every record's (about 3 CPU-s over 9.9M records). A DLQ hop
    -- on a record of another topic (the lineage's rule writes none) is read by a join of its own,
    -- which costs nothing when it has no row.
    SELECT run_id, broker, phys_offset, properties
    FROM commitlog
    WHERE starts_with(topic, '{{dlq_topic_prefix}}')
    UNION ALL
    SELECT c.run_id, c.broker, c.phys_offset, c.properties
    FROM (SELECT * FROM dlq_records WHERE NOT coalesce(starts_with(topic, '{{dlq_topic_prefix}}'), false)) d
    JOIN commitlog c ON c.run_id = d.run_id AND c.broker = d.broker AND c.phys_offset = d.phys_offset
),
requested AS (
    SELECT DISTINCT a.run_id, a."group", a.uniq_key
    FROM consume_attempts a
    SEMI JOIN dlq_records d ON d.run_id = a.run_id AND d."group" = a."group" AND d.uniq_key = a.uniq_key
    WHERE a.status = '{{dlq_requested_status}}'
),
judged AS (
    SELECT d.*,
           coalesce(CASE WHEN d.max_reconsume_times >= 0 THEN d.max_reconsume_times END,
                    cf.max_times, ca.max_times, o.max_times) AS max_times,
           d.client_count IS NOT NULL AND d.client_count = d.reconsume_times AS client_send,
           coalesce(rt.retries, 0) AS retries,
           EXISTS (SELECT 1 FROM message_hops p
                   WHERE p.run_id = d.run_id AND p.message_key = d.message_key
                     AND (p."group" = d."group" OR p."group" IS NULL) AND p.hop_index < d.hop_index
                     AND p.hop_kind IN ('PUBLISH', 'DELIVER', 'RETRY')
                     AND p.reconsume_times = d.reconsume_times - 1) AS sent_back_from_chain,
           coalesce(tc.truncated, false) AS truncated,
           d.run_id IN (SELECT run_id FROM simulated) AS simulation,
           EXISTS (SELECT 1 FROM requested q
                   WHERE q.run_id = d.run_id AND q."group" = d."group" AND q.uniq_key = d.uniq_key) AS requested
    FROM dlq_records d
    LEFT JOIN configured cf ON cf.run_id = d.run_id AND cf."group" = d."group"
    LEFT JOIN carried ca ON ca.run_id = d.run_id AND ca."group" = d."group"
    LEFT JOIN observed o ON o.run_id = d.run_id AND o."group" = d."group"
    LEFT JOIN retry_tallies rt ON rt.run_id = d.run_id AND rt.message_key = d.message_key AND rt."group" = d."group"
    LEFT JOIN truncated_chains tc ON tc.run_id = d.run_id AND tc.message_key = d.message_key AND tc."group" = d."group"
)
SELECT j.run_id, j.message_key, j."group", j.broker, j.phys_offset, dp.properties, j.reconsumes, j.max_times,
       j.retries, j.client_send,
       CASE
           WHEN j.client_send THEN CASE WHEN j.reconsumes >= j.max_times THEN 'CLIENT_SEND_AT_MAX' END
           WHEN NOT (j.sent_back_from_chain OR j.truncated) THEN NULL
           WHEN j.reconsumes >= j.max_times THEN 'MAX_RECONSUME_TIMES'
           WHEN j.requested OR NOT j.simulation THEN 'CONSUMER_REQUESTED'
       END AS dlq_reason,
       CASE
           WHEN j.client_send THEN 'a client''s send to %RETRY% below its maximum'
           WHEN NOT (j.sent_back_from_chain OR j.truncated)
               THEN 'no delivery at reconsume ' || CAST(j.reconsume_times - 1 AS VARCHAR)
                    || ' in its chain that a send-back could come from'
           ELSE 'no delivery the listener answered with {{dlq_requested_status}}'
       END AS unexplained_because
FROM judged j
LEFT JOIN dlq_properties dp ON dp.run_id = j.run_id AND dp.broker = j.broker AND dp.phys_offset = j.phys_offset
