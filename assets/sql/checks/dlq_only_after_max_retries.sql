-- dlq_only_after_max_retries: a message reaches %DLQ%<group> only after the group's maximum.
-- The broker sends a message to the DLQ when the failed delivery's reconsume times reached the
-- group's maximum. On the send-back path the DLQ record carries that count + 1; on a client's
-- send to %RETRY% (handleRetryAndDLQ) the count travels in the RECONSUME_TIME property, which the
-- stored record keeps, and the binary field is not incremented. Send-backs copy every property, so
-- a RECONSUME_TIME from an earlier client send may ride along stale; it is never larger than the
-- true count, so the larger of the two readings is the count. The maximum is, in order: the record's
-- MAX_RECONSUME_TIMES property; the group's configuration in the run manifest (-1 = the default
-- when consuming concurrently, unlimited when orderly); the largest MAX_RECONSUME_TIMES the group's
-- other records carry; and for an imported store with none of these, the largest count any of the
-- group's DLQ records shows (one configuration per group, so every DLQ record should show it).
WITH dlq_records AS (
    SELECT h.run_id, h.message_key, h."group", c.max_reconsume_times,
           greatest(c.reconsume_times - 1, coalesce(TRY_CAST(c.properties['RECONSUME_TIME'] AS INTEGER), 0))
               AS reconsumes
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    WHERE h.hop_kind = 'DLQ'
),
configured AS (
    SELECT run_id, "group",
           CASE WHEN max_reconsume_times >= 0 THEN max_reconsume_times
                WHEN lower(mode) = 'orderly' THEN {{orderly_max_reconsume_times}}
                ELSE {{retry_max_times_default}} END AS max_times
    FROM run_groups
),
carried AS (
    SELECT h.run_id, h."group", max(c.max_reconsume_times) AS max_times
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    WHERE h."group" IS NOT NULL AND c.max_reconsume_times >= 0
    GROUP BY h.run_id, h."group"
),
observed AS (
    SELECT run_id, "group", max(reconsumes) AS max_times
    FROM dlq_records
    GROUP BY run_id, "group"
),
dlq AS (
    SELECT d.*,
           coalesce(CASE WHEN d.max_reconsume_times >= 0 THEN d.max_reconsume_times END,
                    cf.max_times, ca.max_times, o.max_times) AS max_times,
           (SELECT count(*) FROM message_hops r
             WHERE r.run_id = d.run_id AND r.message_key = d.message_key AND r."group" = d."group"
               AND r.hop_kind = 'RETRY') AS retries
    FROM dlq_records d
    LEFT JOIN configured cf ON cf.run_id = d.run_id AND cf."group" = d."group"
    LEFT JOIN carried ca ON ca.run_id = d.run_id AND ca."group" = d."group"
    LEFT JOIN observed o ON o.run_id = d.run_id AND o."group" = d."group"
)
SELECT run_id, message_key, "group",
       'in the DLQ after ' || CAST(reconsumes AS VARCHAR) || ' reconsumes ('
       || CAST(retries AS VARCHAR) || ' retry hops); the maximum is ' || CAST(max_times AS VARCHAR) AS detail
FROM dlq
WHERE reconsumes < max_times
