-- hop_grammar_valid: every (message, group) chain reads as a journey may.
-- The grammar of a journey, judged in two parts.
-- Shared hops: a PUBLISH (repeated when a producer's retried send was stored twice), or a delayed
-- publish's SCHEDULE -> DELIVER (a lone SCHEDULE while it waits), or a 5.x timer message's
-- TIMER+ -> DELIVER: its record in rmq_sys_wheel_timer and every roll of it, then the put to its
-- real topic (TIMER+ alone while it waits; after a crash the timer may put it twice), or a
-- transactional message's HALF+ -> DISCARD? -> PUBLISH*: its half and check copies, the copy
-- discarded after the last check, the commit (a message committed at its last check may be both
-- discarded and committed; a 5.x broker may commit twice, which transaction_committed_once
-- reports).
-- A group's hops: real -> (SCHEDULE -> RETRY)* -> (SCHEDULE | DLQ)?, per branch. A 5.x POP
-- group's retries are written by the broker's revive service straight into the POP retry topic,
-- with no SCHEDULE and no ORIGIN_MESSAGE_ID, each with 1ST_POP_TIME (letter O): their branch is
-- real -> RETRY+ (a gRPC consumer's DLQ after them names the last one as its ORIGIN_MESSAGE_ID,
-- so it is a branch of its own). A message
-- delivered twice to a group (a consumer crash or rebalance before the offset was committed, a
-- schedule re-delivery after a broker crash) may fail twice and start two retry branches; the
-- broker stamps each branch with ORIGIN_MESSAGE_ID (the record it was sent back from, or the
-- UNIQ_KEY on a client's fallback send), so a branch is the group's hops sharing one.
-- A DLQ may come through the schedule: in 4.9.4 a client's send to %RETRY% that the broker turns
-- into a DLQ keeps its DELAY (handleRetryAndDLQ, §5.3 of docs/rocketmq-references.md).
-- After a kill -9 the schedule service resumes from its last flushed delay offsets and puts some
-- records again, so a crashed run may repeat a DELIVER hop.
-- A message delivered twice from one record (a crash before the offset was committed) fails and is
-- sent back twice, with the same ORIGIN_MESSAGE_ID: two retry sequences interleave in one branch.
-- Where that can happen (the run crashed, or the group was delivered one record more than once)
-- a branch need only be an interleaving of valid sequences: it starts with SCHEDULE or DLQ and
-- never holds more RETRY hops than SCHEDULE hops before them, not counting a RETRY that repeats an
-- earlier one of the branch (same level and reconsume times: a restarted broker re-put its
-- schedule record again), and each later SCHEDULE follows a RETRY it can have been sent back from.
-- An imported store is judged as a crashed run: it records neither its consumers' deliveries nor
-- its broker's restarts, so a record sent back twice (a consumer killed with a record in flight)
-- and a schedule record re-put after a kill -9 are possible and nothing else can show them
-- (docs/decisions.md, "An imported store may have crashed").
--
-- Judged with hash aggregates; the ordered hop lists that explain a failure are built for the
-- failing chains only (ordered aggregates and windows over every hop cost several times more).
-- Shared hops are judged by counts, not matched: P+ is "every hop a PUBLISH"; SD? / SD* is "the
-- first hop (in hop order) a SCHEDULE, the only one, and every other hop a DELIVER" (at most one
-- without a crash), which is what ^(P+|SD?)$ and, after a crash, ^(P+|SD*)$ say (a test holds the
-- two to each other). A branch is matched against branch_grammar_regex where its counts do not
-- settle it.
WITH crashed AS (
    SELECT DISTINCT run_id FROM faults WHERE kind IN {{crash_fault_kinds}}
    UNION
    SELECT DISTINCT run_id FROM runs WHERE source = {{run_source_import}}
),
records AS (
    -- What origin_cuts_ctes reads of the commit log.
    SELECT run_id, broker, phys_offset, msg_id FROM commitlog
),
{{origin_cuts_ctes}},
shared_repeated AS (
    -- Hashes of the messages with more than one shared hop (an aggregate on one integer costs a
    -- fraction of one on the values; the hops of one message share a hash).
    SELECT hash(run_id, message_key) AS k
    FROM message_hops
    WHERE "group" IS NULL
    GROUP BY k
    HAVING count(*) > 1
),
shared AS (
    -- A message's shared hops, counted by kind, with the hop_index range its chains start from.
    -- A message whose hash no other shared hop has has one, read off that row; only the others
    -- are grouped.
    SELECT run_id, message_key,
           CAST(1 AS BIGINT) AS n,
           CAST(CASE WHEN hop_kind = 'PUBLISH' THEN 1 ELSE 0 END AS BIGINT) AS publishes,
           CAST(CASE WHEN hop_kind = 'SCHEDULE' THEN 1 ELSE 0 END AS BIGINT) AS schedules,
           CAST(CASE WHEN hop_kind = 'DELIVER' THEN 1 ELSE 0 END AS BIGINT) AS delivers,
           CAST(CASE WHEN hop_kind = 'TIMER' THEN 1 ELSE 0 END AS BIGINT) AS timers,
           CASE WHEN hop_kind = 'TIMER' THEN hop_index END AS last_timer_index,
           CASE WHEN hop_kind = 'SCHEDULE' THEN hop_index END AS schedule_index,
           CASE WHEN hop_kind = 'DELIVER' THEN hop_index END AS first_deliver_index,
           CAST(CASE WHEN hop_kind = 'HALF' THEN 1 ELSE 0 END AS BIGINT) AS halves,
           CAST(CASE WHEN hop_kind = 'DISCARD' THEN 1 ELSE 0 END AS BIGINT) AS discards,
           CASE WHEN hop_kind = 'HALF' THEN hop_index END AS last_half_index,
           CASE WHEN hop_kind <> 'HALF' THEN hop_index END AS first_decided_index,
           CAST(CASE WHEN hop_index IS NULL THEN 0 ELSE 1 END AS BIGINT) AS indexed,
           hop_index AS first_index, hop_index AS last_index
    FROM message_hops
    WHERE "group" IS NULL AND hash(run_id, message_key) NOT IN (SELECT k FROM shared_repeated)
    UNION ALL
    SELECT h.run_id, h.message_key,
           count(*) AS n,
           count(*) FILTER (WHERE h.hop_kind = 'PUBLISH') AS publishes,
           count(*) FILTER (WHERE h.hop_kind = 'SCHEDULE') AS schedules,
           count(*) FILTER (WHERE h.hop_kind = 'DELIVER') AS delivers,
           count(*) FILTER (WHERE h.hop_kind = 'TIMER') AS timers,
           max(h.hop_index) FILTER (WHERE h.hop_kind = 'TIMER') AS last_timer_index,
           min(h.hop_index) FILTER (WHERE h.hop_kind = 'SCHEDULE') AS schedule_index,
           min(h.hop_index) FILTER (WHERE h.hop_kind = 'DELIVER') AS first_deliver_index,
           count(*) FILTER (WHERE h.hop_kind = 'HALF') AS halves,
           count(*) FILTER (WHERE h.hop_kind = 'DISCARD') AS discards,
           max(h.hop_index) FILTER (WHERE h.hop_kind = 'HALF') AS last_half_index,
           min(h.hop_index) FILTER (WHERE h.hop_kind <> 'HALF') AS first_decided_index,
           count(h.hop_index) AS indexed, min(h.hop_index) AS first_index, max(h.hop_index) AS last_index
    FROM message_hops h
    WHERE h."group" IS NULL AND hash(h.run_id, h.message_key) IN (SELECT k FROM shared_repeated)
    GROUP BY h.run_id, h.message_key
),
shared_order AS (
    -- Whether a lone SCHEDULE comes before every DELIVER in hop order, where hop_index alone
    -- tells (NULL where it does not: a tie on hop_index or a hop without one).
    SELECT *,
           CASE WHEN delivers = 0 THEN true
                WHEN indexed = n AND schedule_index < first_deliver_index THEN true
                WHEN indexed = n AND schedule_index > first_deliver_index THEN false
           END AS schedule_first
    FROM shared
),
tied_orders AS (
    -- The first hop of the messages hop_index leaves undecided, from the whole order (building
    -- that row key for every shared hop costs about a tenth of the check).
    SELECT h.run_id, h.message_key, arg_min({{hop_letter}}, ({{hop_order}})) AS first_letter
    FROM message_hops h
    WHERE h."group" IS NULL
      AND (h.message_key IN (SELECT message_key FROM shared_order
                             WHERE schedules = 1 AND delivers = n - 1 AND schedule_first IS NULL)
           OR h.message_key IS NULL)
    GROUP BY h.run_id, h.message_key
),
group_hops AS (
    -- A group's hops with their branch (the record's ORIGIN_MESSAGE_ID): only these need the
    -- commit log, and only its records that carry one.
    SELECT h.run_id, h.message_key, h."group", h.hop_kind, h.hop_index, h.store_ts, h.broker, h.phys_offset,
           h.delay_level, h.reconsume_times, coalesce(c.origin_msg_id, '') AS branch,
           CASE WHEN h.hop_kind = 'RETRY' AND coalesce(c.pop_retry, false) THEN 'O' ELSE {{hop_letter}} END AS letter
    FROM message_hops h
    LEFT JOIN (SELECT c.run_id, c.broker, c.phys_offset, c.origin_msg_id, coalesce(p.first_pop, false) AS pop_retry
               FROM commitlog c
               LEFT JOIN record_properties p ON p.run_id = c.run_id AND p.broker = c.broker AND p.phys_offset = c.phys_offset
               WHERE c.origin_msg_id IS NOT NULL OR p.first_pop) c
      ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
    WHERE h."group" IS NOT NULL
),
shared_misfits AS (
    SELECT s.run_id, s.message_key
    FROM shared_order s
    LEFT JOIN tied_orders t ON t.run_id = s.run_id AND t.message_key IS NOT DISTINCT FROM s.message_key
    WHERE NOT (s.publishes = s.n
               OR (s.schedules = 1 AND s.delivers = s.n - 1
                   AND coalesce(s.schedule_first, t.first_letter = 'S', false)
                   AND (s.n <= 2 OR s.run_id IN (SELECT run_id FROM crashed)))
               -- A timer message: TIMER+ -> DELIVER (every TIMER before the DELIVER), TIMER+ while
               -- it waits; two DELIVERs only after a crash.
               OR (s.timers >= 1 AND s.timers + s.delivers = s.n AND s.indexed = s.n
                   AND (s.delivers = 0
                        OR (s.last_timer_index < s.first_deliver_index
                            AND (s.delivers = 1 OR s.run_id IN (SELECT run_id FROM crashed)))))
               -- A transaction: HALF+ -> DISCARD? -> PUBLISH* (every HALF first).
               OR (s.halves >= 1 AND s.discards <= 1 AND s.halves + s.discards + s.publishes = s.n
                   AND s.indexed = s.n AND coalesce(s.last_half_index < s.first_decided_index, true))
               -- A delayed publish whose SCHEDULE retention deleted: its DELIVER alone.
               OR (s.delivers = s.n AND (s.n = 1 OR s.run_id IN (SELECT run_id FROM crashed))
                   AND s.run_id IN (SELECT run_id FROM cut_runs)))
),
shared_kinds AS (
    SELECT h.run_id, h.message_key, string_agg(h.hop_kind, ' > ' ORDER BY {{hop_order}}) AS kinds
    FROM message_hops h
    JOIN shared_misfits m ON m.run_id = h.run_id AND m.message_key IS NOT DISTINCT FROM h.message_key
    WHERE h."group" IS NULL
    GROUP BY h.run_id, h.message_key
),
branch_shapes AS (
    -- What a hash aggregate tells of a branch without ordering its hops. A branch whose hop_index
    -- values are distinct and contiguous, with every SCHEDULE an even number of steps from its
    -- first hop, every RETRY an odd number, and at most one DLQ, as its last hop, reads
    -- (SCHEDULE -> RETRY)* -> (SCHEDULE | SCHEDULE? -> DLQ)?; only the others are listed in order.
    SELECT run_id, message_key, "group", branch,
           indexed = n AND last_index - first_index + 1 = n AND distinct_indexes = n AND others = 0
           AND CASE WHEN first_index % 2 = 0 THEN s_odd = 0 AND r_even = 0 ELSE s_even = 0 AND r_odd = 0 END
           AND (dlqs = 0 OR (dlqs = 1 AND last_letter = 'Q')) AS in_order
    FROM (SELECT run_id, message_key, "group", branch,
                 count(*) AS n, count(hop_index) AS indexed,
                 min(hop_index) AS first_index, max(hop_index) AS last_index,
                 -- Distinct hop_index values, as bits (an index past 62 leaves the branch to the list).
                 bit_count(bit_or(CASE WHEN hop_index BETWEEN 0 AND 62 THEN 1::UBIGINT << hop_index END))
                     AS distinct_indexes,
                 count(*) FILTER (WHERE letter = 'S' AND hop_index % 2 = 0) AS s_even,
                 count(*) FILTER (WHERE letter = 'S' AND hop_index % 2 = 1) AS s_odd,
                 count(*) FILTER (WHERE letter = 'R' AND hop_index % 2 = 0) AS r_even,
                 count(*) FILTER (WHERE letter = 'R' AND hop_index % 2 = 1) AS r_odd,
                 count(*) FILTER (WHERE letter = 'Q') AS dlqs,
                 count(*) FILTER (WHERE letter NOT IN ('S', 'R', 'Q')) AS others,
                 arg_max(letter, hop_index) AS last_letter
          FROM group_hops
          GROUP BY run_id, message_key, "group", branch)
),
names_removed AS (
    -- Messages of a cut run with a record whose ORIGIN_MESSAGE_ID names a record retention deleted.
    SELECT DISTINCT h.run_id, h.message_key
    -- Or a transaction's commit whose back-pointer names a half copy retention deleted.
    FROM (SELECT *, CASE WHEN (coalesce(sys_flag, 0) & {{sysflag_transaction_mask}}) = {{sysflag_transaction_commit}}
                         THEN prepared_tx_offset END AS tx_commit_of
          FROM commitlog) c
    JOIN cut_runs r ON r.run_id = c.run_id
    JOIN message_hops h ON h.run_id = c.run_id AND h.broker = c.broker AND h.phys_offset = c.phys_offset
    {{origin_cut_joins}}
    WHERE (c.origin_msg_id IS NOT NULL AND {{names_a_removed_record}})
       OR (c.tx_commit_of IS NOT NULL AND {{commits_a_removed_record}})
),
gapped AS (
    -- The hops of the branches their counts leave unsettled, each with gap_s: a RETRY whose
    -- SCHEDULE retention deleted. That SCHEDULE was stored on the RETRY's broker before it, after
    -- the branch's previous hop there; when the branch's previous hop is no SCHEDULE and that
    -- broker's log starts past where the SCHEDULE was (past the previous hop, when that is on the
    -- same broker; for the branch's first hop, past the message's last shared hop on that broker;
    -- else past 0), it is put back. A tiered store's import brings back RETRY records
    -- below the first offset, never their SCHEDULE records (the tier does not keep them).
    SELECT h.*,
           coalesce(h.letter = 'R' AND coalesce(h.prev_letter, '') <> 'S'
                    AND cut.first_offset > CASE WHEN h.prev_broker = h.broker THEN h.prev_offset
                                                WHEN h.prev_letter IS NULL THEN coalesce(sh.shared_offset, 0)
                                                ELSE 0 END,
                    false) AS gap_s
    FROM (SELECT g.*, lag(g.letter) OVER w AS prev_letter, lag(g.broker) OVER w AS prev_broker,
                 lag(g.phys_offset) OVER w AS prev_offset
          FROM group_hops g
          SEMI JOIN branch_shapes s
            ON s.run_id = g.run_id AND s.message_key IS NOT DISTINCT FROM g.message_key
           AND s."group" = g."group" AND s.branch = g.branch AND NOT s.in_order
          WINDOW w AS (PARTITION BY g.run_id, g.message_key, g."group", g.branch
                       ORDER BY g.hop_index, g.store_ts, g.broker, g.phys_offset)) h
    LEFT JOIN (SELECT run_id, broker, max(first_offset) AS first_offset
               FROM runs WHERE broker IS NOT NULL GROUP BY run_id, broker) cut
      ON cut.run_id = h.run_id AND cut.broker = h.broker
    -- A branch's first hop follows the message's shared hops: the last of them on its broker (of
    -- the messages listed here only: none when every branch is in order).
    LEFT JOIN (SELECT m.run_id, m.message_key, m.broker, max(m.phys_offset) AS shared_offset
               FROM message_hops m
               SEMI JOIN branch_shapes s
                 ON s.run_id = m.run_id AND s.message_key IS NOT DISTINCT FROM m.message_key AND NOT s.in_order
               WHERE m."group" IS NULL GROUP BY m.run_id, m.message_key, m.broker) sh
      ON sh.run_id = h.run_id AND sh.message_key IS NOT DISTINCT FROM h.message_key AND sh.broker = h.broker
),
head_removed AS (
    -- Messages of a cut run whose first hops are not in the commit log (what the lineage marks
    -- truncated, read again from the hops): no shared hop is left, the first shared hop is a
    -- DELIVER (its SCHEDULE is gone), a record names one retention deleted, or a RETRY's SCHEDULE
    -- was deleted (gapped; the lineage reads it along the group's chain, this along its branch).
    SELECT DISTINCT b.run_id, b.message_key
    FROM branch_shapes b
    WHERE b.run_id IN (SELECT run_id FROM cut_runs)
      AND NOT EXISTS (SELECT 1 FROM shared s WHERE s.run_id = b.run_id AND s.message_key = b.message_key)
    UNION
    SELECT s.run_id, s.message_key
    FROM shared_order s
    WHERE s.run_id IN (SELECT run_id FROM cut_runs) AND s.delivers > 0 AND s.first_deliver_index = s.first_index
    UNION
    SELECT run_id, message_key FROM names_removed
    UNION
    SELECT DISTINCT run_id, message_key FROM gapped WHERE gap_s
),
branches AS (
    -- A branch of a message whose head was deleted may start after its first SCHEDULE: it is
    -- judged with that SCHEDULE put back (head_restored), so only its start is forgiven; so is
    -- each SCHEDULE gapped puts back.
    SELECT *, 'S' || letters AS restored_letters,
           starts_with(letters, 'R')
           AND EXISTS (SELECT 1 FROM head_removed t
                       WHERE t.run_id = b.run_id AND t.message_key = b.message_key) AS head_restored
    FROM (SELECT h.run_id, h.message_key, h."group", h.branch,
                 string_agg(CASE WHEN h.gap_s THEN 'S' ELSE '' END || h.letter, '' ORDER BY {{hop_order}}) AS letters
          FROM gapped h
          GROUP BY h.run_id, h.message_key, h."group", h.branch) b
),
branch_misfits AS (
    SELECT * EXCLUDE (letters, restored_letters),
           CASE WHEN head_restored THEN restored_letters ELSE letters END AS letters
    FROM branches
    WHERE NOT regexp_full_match(CASE WHEN head_restored THEN restored_letters ELSE letters END,
                                '{{branch_grammar_regex}}')
),
misfit_hops AS (
    -- A RETRY hop that repeats an earlier RETRY of its branch (same level, same reconsume times)
    -- is a second delivery of one schedule record, or of two interleaved ones.
    SELECT h.*,
           h.letter = 'R' AND row_number() OVER (PARTITION BY h.run_id, h.message_key, h."group", h.branch,
                                                              h.letter, h.delay_level, h.reconsume_times
                                                 ORDER BY {{hop_order}}) > 1 AS repeated
    FROM gapped h
    SEMI JOIN branch_misfits m
      ON m.run_id = h.run_id AND m.message_key IS NOT DISTINCT FROM h.message_key
     AND m."group" = h."group" AND m.branch = h.branch
),
misfit_steps AS (
    SELECT h.run_id, h.message_key, h."group", h.branch, h.hop_kind, h.hop_index, h.store_ts, h.broker, h.phys_offset,
           sum(CASE WHEN h.letter = 'R' THEN 1 ELSE 0 END) OVER w
               - sum(CASE WHEN h.letter = 'S' OR h.gap_s THEN 1 ELSE 0 END) OVER w AS retries_ahead,
           sum(CASE WHEN h.letter = 'R' AND NOT h.repeated THEN 1 ELSE 0 END) OVER w
               - sum(CASE WHEN h.letter = 'S' OR h.gap_s THEN 1 ELSE 0 END) OVER w AS first_retries_ahead
    FROM misfit_hops h
    WINDOW w AS (PARTITION BY h.run_id, h.message_key, h."group", h.branch
                 ORDER BY {{hop_order}} ROWS UNBOUNDED PRECEDING)
),
orphan_sends AS (
    -- In an interleaving each SCHEDULE after the branch's first send-backs (reconsume times k above
    -- the branch's least) was sent back from a RETRY of k - 1 before it. (One RETRY record may be
    -- sent back more than once: a crash can lose the offset that committed it, and the broker
    -- hands it out again.) A SCHEDULE the schedule delivered straight into the DLQ (the next hop of
    -- the branch, of the same reconsume times) is a send past the max, which an orderly client
    -- makes from any record it retried locally (its RETRY, or the message's own record handed to it
    -- again after a crash lost the committed offset): it needs no RETRY of k - 1. A SCHEDULE at
    -- count 0 is a client's own send that lost its count (RETRY_COUNT_LOST: no send-back writes
    -- count 0), from a record of any count; it needs no RETRY before it, and is not the branch's
    -- least count either, so the sends before it need no RETRY of count 0.
    SELECT s.run_id, s.message_key, s."group", s.branch, count(*) AS orphans
    FROM (SELECT h.*,
                 min(h.reconsume_times) FILTER (WHERE h.letter = 'S' AND h.reconsume_times > 0)
                     OVER (PARTITION BY h.run_id, h.message_key, h."group", h.branch) AS first_times,
                 lead(h.letter) OVER w AS next_letter,
                 lead(h.reconsume_times) OVER w AS next_times
          FROM misfit_hops h
          WINDOW w AS (PARTITION BY h.run_id, h.message_key, h."group", h.branch ORDER BY {{hop_order}})) s
    WHERE s.letter = 'S' AND s.reconsume_times > s.first_times
      AND NOT EXISTS (SELECT 1 FROM misfit_hops r
                      WHERE r.run_id = s.run_id AND r.message_key IS NOT DISTINCT FROM s.message_key
                        AND r."group" = s."group" AND r.branch = s.branch AND r.letter = 'R'
                        AND r.reconsume_times = s.reconsume_times - 1 AND r.hop_index < s.hop_index)
      AND NOT (s.next_letter IS NOT DISTINCT FROM 'Q' AND s.next_times IS NOT DISTINCT FROM s.reconsume_times)
    GROUP BY s.run_id, s.message_key, s."group", s.branch
),
misfit_kinds AS (
    SELECT k.*, coalesce(o.orphans, 0) AS orphans
    FROM (SELECT run_id, message_key, "group", branch,
                 string_agg(hop_kind, ' > ' ORDER BY {{hop_order}}) AS kinds,
                 max(retries_ahead) AS retries_ahead,
                 max(first_retries_ahead) AS first_retries_ahead
          FROM misfit_steps
          GROUP BY run_id, message_key, "group", branch) k
    LEFT JOIN orphan_sends o
      ON o.run_id = k.run_id AND o.message_key IS NOT DISTINCT FROM k.message_key
     AND o."group" = k."group" AND o.branch = k.branch
),
redelivered AS (
    -- Messages a group got from one record more than once, among the misfits' only.
    SELECT DISTINCT r.run_id, r."group", r.uniq_key
    FROM consume_attempts r
    SEMI JOIN branch_misfits b ON b.run_id = r.run_id AND b."group" = r."group" AND b.message_key = r.uniq_key
    GROUP BY r.run_id, r."group", r.uniq_key, r.queue_topic, r.queue_id, r.queue_offset, r.consumer_id
    HAVING count(*) FILTER (WHERE r.outcome NOT IN ('LOCAL_RETRY')) > 1
),
judged AS (
    -- A restored SCHEDULE comes before every hop of its branch: one retry fewer ahead everywhere.
    -- Where the broker may have re-put a schedule record (a crash), repeated RETRY hops are not
    -- counted.
    SELECT b.*, k.kinds, k.orphans,
           CASE WHEN b.run_id IN (SELECT run_id FROM crashed) THEN k.first_retries_ahead
                ELSE k.retries_ahead END
           - CASE WHEN b.head_restored THEN 1 ELSE 0 END AS retries_ahead,
           b.run_id IN (SELECT run_id FROM crashed)
           OR EXISTS (SELECT 1 FROM redelivered r WHERE r.run_id = b.run_id AND r."group" = b."group"
                                                    AND r.uniq_key = b.message_key) AS interleaving_allowed
    FROM branch_misfits b
    JOIN misfit_kinds k
      ON k.run_id = b.run_id AND k.message_key IS NOT DISTINCT FROM b.message_key
     AND k."group" = b."group" AND k.branch = b.branch
),
group_tallies AS (
    -- Per (message, group): its group's hops.
    SELECT run_id, message_key, "group",
           count(hop_index) AS n, min(hop_index) AS first_index, max(hop_index) AS last_index
    FROM message_hops
    WHERE "group" IS NOT NULL AND message_key IS NOT NULL
    GROUP BY run_id, message_key, "group"
),
copied AS (
    -- Hashes of the (run, message, group) keys more than one lineage row lists: an aggregate on
    -- one integer costs about half the one on the three values. Rows of one key share a hash.
    SELECT hash(run_id, message_key, "group") AS k
    FROM message_lineage
    WHERE final_state <> 'LOST'
    GROUP BY k
    HAVING count(*) > 1
),
listed AS (
    -- Per (message, group): the lineage rows listing it. A key whose hash no other row has is
    -- listed once; the keys of the other hashes are counted by value.
    SELECT run_id, message_key, "group", 1 AS copies
    FROM message_lineage
    WHERE final_state <> 'LOST' AND hash(run_id, message_key, "group") NOT IN (SELECT k FROM copied)
    UNION ALL
    SELECT run_id, message_key, "group", count(*)
    FROM message_lineage
    WHERE final_state <> 'LOST' AND hash(run_id, message_key, "group") IN (SELECT k FROM copied)
    GROUP BY run_id, message_key, "group"
),
chains AS (
    -- A chain is its message's shared hops plus its group's; a lineage row listed twice counts
    -- its hops twice (as joining every copy to its hops would). (Counting the lineage rows apart
    -- from the hops and joining the two costs less than one aggregate over both.)
    SELECT l.run_id, l.message_key, l."group",
           l.copies * (coalesce(s.indexed, 0) + coalesce(g.n, 0)) AS n,
           least(s.first_index, g.first_index) AS first_index,
           greatest(s.last_index, g.last_index) AS last_index
    FROM listed l
    LEFT JOIN shared s ON s.run_id = l.run_id AND s.message_key = l.message_key
    LEFT JOIN group_tallies g ON g.run_id = l.run_id AND g.message_key = l.message_key AND g."group" = l."group"
)
SELECT s.run_id, s.message_key, NULL AS "group",
       'shared hops ' || s.kinds || ' are not PUBLISH, SCHEDULE -> DELIVER, TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH'
       AS detail
FROM shared_kinds s
UNION ALL
SELECT run_id, message_key, "group",
       'branch ' || CASE WHEN branch = '' THEN '(no ORIGIN_MESSAGE_ID)' ELSE branch END || ': '
       || kinds || ' is not (SCHEDULE -> RETRY)* -> DLQ?'
       || CASE WHEN interleaving_allowed THEN ' nor an interleaving of such sequences' ELSE '' END
FROM judged
WHERE NOT interleaving_allowed OR retries_ahead > 0 OR orphans > 0 OR letters[1] NOT IN ('S', 'Q')
UNION ALL
SELECT b.run_id, b.message_key, b."group", 'group hops without a real record before them'
FROM (SELECT DISTINCT run_id, message_key, "group" FROM branch_shapes) b
ANTI JOIN shared s ON s.run_id = b.run_id AND s.message_key = b.message_key
WHERE b.run_id NOT IN (SELECT run_id FROM cut_runs)
UNION ALL
-- The lineage's truncated against head_removed, each side from its own few rows: a filter on
-- truncated (Parquet statistics skip the row groups without one), and a join from head_removed
-- (empty outside cut runs, so message_lineage is not even read).
SELECT l.run_id, l.message_key, l."group", 'truncated, but its first hop is in the commit log'
FROM message_lineage l
WHERE l.truncated AND l.final_state <> 'LOST'
  AND NOT EXISTS (SELECT 1 FROM head_removed t WHERE t.run_id = l.run_id AND t.message_key = l.message_key)
UNION ALL
SELECT l.run_id, l.message_key, l."group",
       'not truncated, but its first hops are before the commit log''s first offset'
FROM head_removed t
JOIN message_lineage l ON l.run_id = t.run_id AND l.message_key = t.message_key
WHERE NOT l.truncated AND l.final_state <> 'LOST'
UNION ALL
SELECT run_id, message_key, "group",
       CASE WHEN n = 0 THEN 'no hops'
            ELSE 'hop_index runs ' || CAST(first_index AS VARCHAR) || '..' || CAST(last_index AS VARCHAR)
                 || ' over ' || CAST(n AS VARCHAR) || ' hops' END
FROM chains
WHERE n = 0 OR first_index <> 0 OR last_index <> n - 1
