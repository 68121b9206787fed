-- retries_within_group_maximum: no (message, group) chain is deeper than its group's maximum
-- reconsume times. The depth is the larger of the lineage's retries (docs/lineage.md: a forked
-- chain's copies are no retries) and the deepest count a RETRY record of the chain carries (the
-- k-th retry carries k: the larger of the header's reconsume times and RECONSUME_TIME). A broker
-- sends a message to the DLQ once its count reaches the maximum, so a deeper chain is an
-- anomaly: a retry past the maximum, or a lineage that counted copies as retries. The maximum is,
-- in order: the group's configuration in the run manifest (-1 = the default when consuming
-- concurrently, unlimited when orderly); the largest MAX_RECONSUME_TIMES the group's records
-- carry; the largest maximum its DLQ records were judged against (dlq_explained); the default.
WITH {{group_maxima_ctes}},
dlq_judged AS (
    SELECT run_id, "group", max(max_times) AS max_times
    FROM ({{dlq_explained}}) d
    GROUP BY run_id, "group"
),
retry_counts AS (
    SELECT h.run_id, h.message_key, h."group",
           max(greatest(c.reconsume_times, coalesce(p.reconsume_time, 0))) AS deepest_retry
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    LEFT JOIN record_properties p ON p.run_id = c.run_id AND p.broker = c.broker AND p.phys_offset = c.phys_offset
    WHERE h.hop_kind = 'RETRY'
    GROUP BY h.run_id, h.message_key, h."group"
),
chains AS (
    SELECT l.run_id, l.message_key, l."group", l.retries, l.forks, r.deepest_retry,
           greatest(l.retries, coalesce(r.deepest_retry, 0)) AS depth,
           coalesce(cf.max_times, ca.max_times, dj.max_times, {{retry_max_times_default}}) AS max_times
    FROM message_lineage l
    LEFT JOIN retry_counts r ON r.run_id = l.run_id AND r.message_key = l.message_key AND r."group" = l."group"
    LEFT JOIN configured cf ON cf.run_id = l.run_id AND cf."group" = l."group"
    LEFT JOIN carried ca ON ca.run_id = l.run_id AND ca."group" = l."group"
    LEFT JOIN dlq_judged dj ON dj.run_id = l.run_id AND dj."group" = l."group"
    WHERE l."group" IS NOT NULL AND l.final_state <> 'LOST'
)
SELECT run_id, message_key, "group",
       CAST(depth AS VARCHAR) || ' retries deep (lineage retries ' || CAST(retries AS VARCHAR)
       || ', deepest RETRY record at reconsume ' || coalesce(CAST(deepest_retry AS VARCHAR), '-')
       || ', ' || CAST(coalesce(forks, 0) AS VARCHAR) || ' forked copies); the group''s maximum is '
       || CAST(max_times AS VARCHAR) AS detail
FROM chains
WHERE depth > max_times
