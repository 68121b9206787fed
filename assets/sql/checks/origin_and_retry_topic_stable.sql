-- origin_and_retry_topic_stable: ORIGIN_MESSAGE_ID and RETRY_TOPIC never change along a chain.
-- RETRY_TOPIC is set once, at the first send-back, and copied onwards: one value per chain.
-- ORIGIN_MESSAGE_ID is set once per branch and names the message itself: its UNIQ_KEY, or the
-- offset msgId of one of its real records (PUBLISH or DELIVER) that was sent back, or of one of its
-- RETRY records that carries none itself: a 4.9.x client's fallback send (after the broker refused
-- a send-back) replaces the new message's properties with the consumed one's and so drops the
-- ORIGIN_MESSAGE_ID it had just set, and the broker's next send-back names the retry record it
-- re-puts. The record named may lie below the commit log's first offset in an imported store
-- (deleted by retention).
WITH records AS (
    -- What origin_cuts_ctes reads of the commit log.
    SELECT run_id, broker, phys_offset, msg_id FROM commitlog
),
{{origin_cuts_ctes}},
message_proofs AS (
    -- Both rules are judged first from one summary per message over its hops' commit-log records,
    -- which proves most messages sound; the rest are judged from per-message and per-group
    -- summaries, which name a few suspects; only the suspects are matched with the lineage's
    -- chains (listing every chain's records is the join that costs the most). Lists are sorted,
    -- so a failure reads the same in every run.
    -- A message is sound in every chain when all its records hold at most one RETRY_TOPIC, and
    -- every ORIGIN_MESSAGE_ID other than its UNIQ_KEY is one value that is the msgId of one of its
    -- shared real records (PUBLISH or DELIVER: in every chain). The least and greatest of its
    -- shared real msgIds are such msgIds. Values are compared by their 64-bit hashes (integer
    -- aggregates cost a fraction of string ones): a message passes on hashes only if its values
    -- pass, or two different values of one message hash alike (a 2^-64 chance a pair); a message
    -- not proved sound is judged on the values themselves.
    SELECT h.run_id, h.message_key,
           min(hash(c.retry_topic)) FILTER (WHERE c.retry_topic IS NOT NULL) AS topic_lo,
           max(hash(c.retry_topic)) FILTER (WHERE c.retry_topic IS NOT NULL) AS topic_hi,
           min(hash(c.origin_msg_id)) FILTER (WHERE c.origin_msg_id IS NOT NULL
                                                AND c.origin_msg_id IS DISTINCT FROM c.uniq_key) AS claim_lo,
           max(hash(c.origin_msg_id)) FILTER (WHERE c.origin_msg_id IS NOT NULL
                                                AND c.origin_msg_id IS DISTINCT FROM c.uniq_key) AS claim_hi,
           min(hash(c.msg_id)) FILTER (WHERE c.msg_id IS NOT NULL AND h."group" IS NULL
                                         AND h.hop_kind IN ('PUBLISH', 'DELIVER')) AS real_lo,
           max(hash(c.msg_id)) FILTER (WHERE c.msg_id IS NOT NULL AND h."group" IS NULL
                                         AND h.hop_kind IN ('PUBLISH', 'DELIVER')) AS real_hi
    FROM message_hops h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    GROUP BY h.run_id, h.message_key
),
unproved AS (
    SELECT run_id, message_key
    FROM message_proofs
    WHERE NOT coalesce((topic_lo IS NULL OR topic_lo = topic_hi)
                       AND (claim_lo IS NULL OR (claim_lo = claim_hi AND claim_lo IN (real_lo, real_hi))),
                       false)
),
suspect_records AS (
    -- The records of the messages not proved sound (a record without a message key is in no
    -- chain), with the commit-log fields read here. The IN list keeps the few suspects on the
    -- build side of the joins (a semi join alone lets the planner hash every hop row instead).
    SELECT h.run_id, h.message_key, h."group", h.hop_kind, h.broker, c.msg_id, c.uniq_key, c.origin_msg_id,
           c.retry_topic
    FROM (SELECT * FROM message_hops WHERE message_key IN (SELECT message_key FROM unproved)) h
    JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    SEMI JOIN unproved u ON u.run_id = h.run_id AND u.message_key = h.message_key
),
topic_ranges AS (
    SELECT run_id, message_key, "group", min(retry_topic) AS lo, max(retry_topic) AS hi
    FROM suspect_records
    WHERE retry_topic IS NOT NULL
    GROUP BY run_id, message_key, "group"
),
topic_suspects AS (
    -- More than one distinct RETRY_TOPIC along a chain is min <> max over its records: a message
    -- whose shared hops disagree fails in every chain (group NULL here), a group whose hops
    -- disagree with each other or with the shared hops fails in its own chain.
    SELECT run_id, message_key, NULL AS "group"
    FROM topic_ranges
    WHERE "group" IS NULL AND lo <> hi
    UNION ALL
    SELECT g.run_id, g.message_key, g."group"
    FROM topic_ranges g
    LEFT JOIN topic_ranges s ON s.run_id = g.run_id AND s.message_key = g.message_key AND s."group" IS NULL
    WHERE g."group" IS NOT NULL AND least(s.lo, g.lo) <> greatest(s.hi, g.hi)
),
changed_topics AS (
    SELECT DISTINCT l.run_id, l.message_key, l."group"
    FROM message_lineage l
    JOIN topic_suspects t ON t.run_id = l.run_id AND t.message_key = l.message_key
    WHERE l.final_state <> 'LOST' AND (t."group" IS NULL OR t."group" = l."group")
),
topics AS (
    SELECT t.run_id, t.message_key, t."group", string_agg(DISTINCT r.retry_topic, ',' ORDER BY r.retry_topic) AS topics
    FROM changed_topics t
    JOIN suspect_records r
      ON r.run_id = t.run_id AND r.message_key = t.message_key AND (r."group" IS NULL OR r."group" = t."group")
    GROUP BY t.run_id, t.message_key, t."group"
),
claims AS (
    -- ORIGIN_MESSAGE_IDs other than the message's UNIQ_KEY, per message and hop group, except
    -- those naming a record below its broker's first offset (deleted by retention before the import).
    SELECT DISTINCT c.run_id, c.message_key, c."group", c.origin_msg_id
    FROM suspect_records c
    {{origin_cut_joins}}
    WHERE c.origin_msg_id IS NOT NULL AND c.origin_msg_id IS DISTINCT FROM c.uniq_key
      AND NOT {{names_a_removed_record}}
),
real_ids AS (
    SELECT DISTINCT run_id, message_key, "group", msg_id
    FROM suspect_records
    WHERE hop_kind IN ('PUBLISH', 'DELIVER') OR (hop_kind = 'RETRY' AND origin_msg_id IS NULL)
),
claim_suspects AS (
    -- A claim matched by a real record among the message's shared hops or its own group's is
    -- matched in every chain that holds it; the others are judged chain by chain below.
    SELECT c.*
    FROM claims c
    WHERE NOT EXISTS (SELECT 1 FROM real_ids o
                      WHERE o.run_id = c.run_id AND o.message_key = c.message_key AND o.msg_id = c.origin_msg_id
                        AND (o."group" IS NULL OR o."group" IS NOT DISTINCT FROM c."group"))
),
chains AS (
    SELECT DISTINCT l.run_id, l.message_key, l."group"
    FROM message_lineage l
    SEMI JOIN claim_suspects c ON c.run_id = l.run_id AND c.message_key = l.message_key
    WHERE l.final_state <> 'LOST'
),
foreign_origins AS (
    SELECT l.run_id, l.message_key, l."group", string_agg(DISTINCT c.origin_msg_id, ',' ORDER BY c.origin_msg_id) AS origins
    FROM chains l
    JOIN claim_suspects c
      ON c.run_id = l.run_id AND c.message_key = l.message_key AND (c."group" IS NULL OR c."group" = l."group")
    WHERE NOT EXISTS (SELECT 1 FROM real_ids o
                      WHERE o.run_id = l.run_id AND o.message_key = l.message_key
                        AND (o."group" IS NULL OR o."group" = l."group") AND o.msg_id = c.origin_msg_id)
    GROUP BY l.run_id, l.message_key, l."group"
)
SELECT run_id, message_key, "group", 'RETRY_TOPIC changes along the chain: ' || topics AS detail
FROM topics
UNION ALL
SELECT run_id, message_key, "group",
       'ORIGIN_MESSAGE_ID ' || origins || ' is neither the UNIQ_KEY nor a real record of the message'
FROM foreign_origins
