"""Invariants and drifts of a run, each one plain SQL over the warehouse tables.

Every check is a query that returns the offending rows (``run_id, message_key, group, detail``);
no rows means it passes. The same SQL runs on a built warehouse file or on an in-memory DuckDB
holding one run's Parquet (``assets.warehouse.run_views``), which is how the Dagster checks guard
the lineage before anything downstream is built.

Broken invariants are ERROR (blocking: downstream assets do not run); drifts are WARN.
The broker model restates the same rules from the other side (``broker_core/sim``): the same
truth checked twice, by code that shares nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb

from broker_core.message import MSG_ID_OFFSET_HEX_CHARS, OFFSET_MSG_ID_REGEX

# Offending rows kept as evidence in a check's metadata (the count is always complete).
EVIDENCE_ROWS_MAX = 10
# RocketMQ's default maximum of redeliveries before the DLQ (SubscriptionGroupConfig.retryMaxTimes),
# used when a DLQ record carries no MAX_RECONSUME_TIMES property.
RETRY_MAX_TIMES_DEFAULT = 16
# Drift thresholds (WARN). At-least-once delivery duplicates a little around crashes and
# rebalances; more than 1 % of messages consumed twice points at a consumer that cannot commit.
DUPLICATE_RATE_MAX = 0.01
# The schedule service polls every level every 100 ms; a p99 lateness above 1 s is a stalled level.
LATENESS_P99_MS_MAX = 1_000

ERROR = "ERROR"
WARN = "WARN"

# Check names (stable: tests, the UI and the demo refer to them).
HOP_GRAMMAR = "hop_grammar_valid"
NO_UNEXPLAINED_LOSS = "nothing_lost_unexplained"
DLQ_AFTER_MAX_RETRIES = "dlq_only_after_max_retries"
NO_EARLY_DELIVERY = "no_delivery_before_due_time"
ORIGIN_STABLE = "origin_and_retry_topic_stable"
LINEAGE_MATCHES_COMMITLOG = "lineage_matches_commitlog"
DUPLICATE_RATE = "duplicate_rate_below_max"
LATENESS_P99 = "delay_lateness_p99_below_max"

# Hop kinds as one letter each, so a chain becomes a string a regular expression can judge.
_HOP_LETTERS = ("CASE h.hop_kind WHEN 'PUBLISH' THEN 'P' WHEN 'SCHEDULE' THEN 'S' "
                "WHEN 'DELIVER' THEN 'D' WHEN 'RETRY' THEN 'R' WHEN 'DLQ' THEN 'Q' ELSE '?' END")
# The grammar of a journey, judged in two parts.
# Shared hops: a PUBLISH (repeated when a producer's retried send was stored twice), or a delayed
# publish's SCHEDULE -> DELIVER (a lone SCHEDULE while it waits).
# A group's hops: real -> (SCHEDULE -> RETRY)* -> (SCHEDULE | DLQ)?, per branch. A message
# delivered twice to a group (a consumer crash or rebalance before the offset was committed, a
# schedule re-delivery after a broker crash) may fail twice and start two retry branches; the
# broker stamps each branch with ORIGIN_MESSAGE_ID (the record it was sent back from, or the
# UNIQ_KEY on a client's fallback send), so a branch is the group's hops sharing one.
# A DLQ may come through the schedule: in 4.9.4 a client's send to %RETRY% that the broker turns
# into a DLQ keeps its DELAY (handleRetryAndDLQ, ROCKETMQ_SPEC.md section 5.3).
SHARED_GRAMMAR_REGEX = r"^(P+|SD?)$"
BRANCH_GRAMMAR_REGEX = r"^(SR)*(S|S?Q)?$"
# After a kill -9 the schedule service resumes from its last flushed delay offsets and puts some
# records again, so a crashed run may repeat a DELIVER hop.
SHARED_GRAMMAR_AFTER_CRASH_REGEX = r"^(P+|SD*)$"
# A message delivered twice from one record (a crash before the offset was committed) fails and is
# sent back twice, with the same ORIGIN_MESSAGE_ID: two retry sequences interleave in one branch.
# Where that can happen (the run crashed, or the group was delivered one record more than once)
# a branch need only be an interleaving of valid sequences: it starts with SCHEDULE or DLQ and
# never holds more RETRY hops than SCHEDULE hops before them.
CRASH_FAULT_KINDS = ("broker_crash", "torn_write")

# A kill -9 (broker_crash, torn_write) loses the unflushed tail of the commit log under async
# flush; under sync flush a SEND_OK message was on disk before the ack. A crash the injector
# skipped (broker already down) loses nothing.
LOSS_FAULT_KINDS = ("broker_crash", "torn_write")
_CRASHES = f"""
    SELECT f.run_id, f.ts FROM faults f
    LEFT JOIN run_manifest m ON m.run_id = f.run_id
    WHERE f.kind IN {LOSS_FAULT_KINDS!r} AND coalesce(m.flush, 'async') <> 'sync'
      AND NOT coalesce(starts_with(f.detail, 'skipped'), false)
"""

# Brokers whose commit log starts past offset 0: retention deleted their oldest files before the
# import (runs.first_offset, one runs row per broker; null for a simulation). cut_brokers lists
# every broker of a run that has such a broker, with its first offset written as the 16 upper-case
# hex digits an offset msgId ends with ('' for a log from 0): fixed-width hex orders as the number
# does, so an ORIGIN_MESSAGE_ID is compared with it as text and nothing is cast. host_cuts says,
# for a record on `broker` whose ORIGIN_MESSAGE_ID starts with store host `host`, the first offset
# of the broker that host names: the broker itself when its records have that host, else the first
# by name among those whose records have it. A host no broker has names the record's own broker.
ORIGIN_CUTS_CTES = f"""
cut_brokers AS (
    SELECT run_id, broker,
           max(CASE WHEN first_offset > 0 THEN printf('%0{MSG_ID_OFFSET_HEX_CHARS}X', first_offset)
                    ELSE '' END) AS first_offset_hex,
           list_distinct(flatten(list(coalesce(msg_id_hosts, []::VARCHAR[])))) AS hosts
    FROM runs
    WHERE broker IS NOT NULL
      AND run_id IN (SELECT run_id FROM runs WHERE first_offset > 0)
    GROUP BY run_id, broker
),
host_cuts AS (
    SELECT o.run_id, o.broker, t.host,
           arg_min(t.first_offset_hex, (t.broker <> o.broker, t.broker)) AS first_offset_hex
    FROM cut_brokers o
    JOIN (SELECT run_id, broker, first_offset_hex, unnest(hosts) AS host FROM cut_brokers) t
      ON t.run_id = o.run_id
    GROUP BY o.run_id, o.broker, t.host
),
cut_runs AS (
    SELECT DISTINCT run_id FROM cut_brokers
)"""


def origin_cut_joins(record: str) -> str:
    """SQL: the joins that give the record alias ``record`` (run_id, broker, origin_msg_id) the
    ``own_cut`` and ``host_cut`` rows :func:`names_a_removed_record` reads (ORIGIN_CUTS_CTES)."""
    host = (f"upper(substr({record}.origin_msg_id, 1, "
            f"greatest(length({record}.origin_msg_id) - {MSG_ID_OFFSET_HEX_CHARS}, 0)))")
    return (f"LEFT JOIN cut_brokers own_cut ON own_cut.run_id = {record}.run_id "
            f"AND own_cut.broker = {record}.broker "
            f"LEFT JOIN host_cuts host_cut ON host_cut.run_id = {record}.run_id "
            f"AND host_cut.broker = {record}.broker AND host_cut.host = {host}")


def names_a_removed_record(origin: str, uniq_key: str) -> str:
    """SQL: the ORIGIN_MESSAGE_ID ``origin`` is an offset msgId below the first offset of the
    broker it names (after :func:`origin_cut_joins`), so the record it names was deleted by
    retention. A value equal to the record's UNIQ_KEY (a client's fallback send) is not an offset
    msgId, though it has as many digits."""
    return (f"coalesce(regexp_full_match({origin}, '{OFFSET_MSG_ID_REGEX}') "
            f"AND {origin} IS DISTINCT FROM {uniq_key} "
            f"AND upper(right({origin}, {MSG_ID_OFFSET_HEX_CHARS})) "
            f"< coalesce(host_cut.first_offset_hex, own_cut.first_offset_hex), false)")


_CHAIN_HOPS = """
    SELECT l.run_id, l.message_key, l."group", h.hop_kind, h.hop_index, h.store_ts, h.broker, h.phys_offset
    FROM message_lineage l
    JOIN message_hops h
      ON h.run_id = l.run_id AND h.message_key = l.message_key
     AND (h."group" IS NULL OR h."group" = l."group")
    WHERE l.final_state <> 'LOST'
"""

# Judged with hash aggregates; the ordered hop lists that explain a failure are built for the
# failing chains only (ordered aggregates and windows over every hop cost several times more).
# Shared hops are judged by counts: P+ is "every hop a PUBLISH"; SD? / SD* is "the first hop (in
# hop order) a SCHEDULE, the only one, and every other hop a DELIVER" (at most one without a crash),
# which is what the regular expressions above say.
_HOP_ORDER = "hop_index, store_ts, broker, phys_offset"
HOP_GRAMMAR_SQL = f"""
WITH crashed AS (
    SELECT DISTINCT run_id FROM faults WHERE kind IN {CRASH_FAULT_KINDS!r}
),
{ORIGIN_CUTS_CTES},
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
           CASE WHEN hop_kind = 'SCHEDULE' THEN hop_index END AS schedule_index,
           CASE WHEN hop_kind = 'DELIVER' THEN hop_index END AS first_deliver_index,
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
           min(h.hop_index) FILTER (WHERE h.hop_kind = 'SCHEDULE') AS schedule_index,
           min(h.hop_index) FILTER (WHERE h.hop_kind = 'DELIVER') AS first_deliver_index,
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
    SELECT h.run_id, h.message_key, arg_min({_HOP_LETTERS}, ({_HOP_ORDER})) AS first_letter
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
           coalesce(c.origin_msg_id, '') AS branch, {_HOP_LETTERS} AS letter
    FROM message_hops h
    LEFT JOIN (SELECT run_id, broker, phys_offset, origin_msg_id FROM commitlog WHERE origin_msg_id IS NOT NULL) c
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
               -- A delayed publish whose SCHEDULE retention deleted: its DELIVER alone.
               OR (s.delivers = s.n AND (s.n = 1 OR s.run_id IN (SELECT run_id FROM crashed))
                   AND s.run_id IN (SELECT run_id FROM cut_runs)))
),
shared_kinds AS (
    SELECT h.run_id, h.message_key, string_agg(h.hop_kind, ' > ' ORDER BY {_HOP_ORDER}) AS kinds
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
    FROM commitlog c
    JOIN cut_runs r ON r.run_id = c.run_id
    JOIN message_hops h ON h.run_id = c.run_id AND h.broker = c.broker AND h.phys_offset = c.phys_offset
    {origin_cut_joins("c")}
    WHERE c.origin_msg_id IS NOT NULL
      AND {names_a_removed_record("c.origin_msg_id", "c.uniq_key")}
),
head_removed AS (
    -- Messages of a cut run whose first hops are not in the commit log (what the lineage marks
    -- truncated, read again from the hops): no shared hop is left, the first shared hop is a
    -- DELIVER (its SCHEDULE is gone), or a record names one retention deleted.
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
),
branches AS (
    -- A branch of a message whose head was deleted may start after its first SCHEDULE: it is
    -- judged with that SCHEDULE put back (head_restored), so only its start is forgiven.
    SELECT *, 'S' || letters AS restored_letters,
           starts_with(letters, 'R')
           AND EXISTS (SELECT 1 FROM head_removed t
                       WHERE t.run_id = b.run_id AND t.message_key = b.message_key) AS head_restored
    FROM (SELECT h.run_id, h.message_key, h."group", h.branch,
                 string_agg(h.letter, '' ORDER BY {_HOP_ORDER}) AS letters
          FROM group_hops h
          SEMI JOIN branch_shapes s
            ON s.run_id = h.run_id AND s.message_key IS NOT DISTINCT FROM h.message_key
           AND s."group" = h."group" AND s.branch = h.branch AND NOT s.in_order
          GROUP BY h.run_id, h.message_key, h."group", h.branch) b
),
branch_misfits AS (
    SELECT * EXCLUDE (letters, restored_letters),
           CASE WHEN head_restored THEN restored_letters ELSE letters END AS letters
    FROM branches
    WHERE NOT regexp_full_match(CASE WHEN head_restored THEN restored_letters ELSE letters END,
                                '{BRANCH_GRAMMAR_REGEX}')
),
misfit_steps AS (
    SELECT h.run_id, h.message_key, h."group", h.branch, h.hop_kind, h.hop_index, h.store_ts, h.broker, h.phys_offset,
           sum(CASE WHEN h.letter = 'R' THEN 1 ELSE 0 END) OVER w
               - sum(CASE WHEN h.letter = 'S' THEN 1 ELSE 0 END) OVER w AS retries_ahead
    FROM group_hops h
    SEMI JOIN branch_misfits m
      ON m.run_id = h.run_id AND m.message_key IS NOT DISTINCT FROM h.message_key
     AND m."group" = h."group" AND m.branch = h.branch
    WINDOW w AS (PARTITION BY h.run_id, h.message_key, h."group", h.branch
                 ORDER BY {_HOP_ORDER} ROWS UNBOUNDED PRECEDING)
),
misfit_kinds AS (
    SELECT run_id, message_key, "group", branch,
           string_agg(hop_kind, ' > ' ORDER BY {_HOP_ORDER}) AS kinds,
           max(retries_ahead) AS retries_ahead
    FROM misfit_steps
    GROUP BY run_id, message_key, "group", branch
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
    SELECT b.*, k.kinds, k.retries_ahead - CASE WHEN b.head_restored THEN 1 ELSE 0 END AS retries_ahead,
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
       'shared hops ' || s.kinds || ' are not PUBLISH or SCHEDULE -> DELIVER' AS detail
FROM shared_kinds s
UNION ALL
SELECT run_id, message_key, "group",
       'branch ' || CASE WHEN branch = '' THEN '(no ORIGIN_MESSAGE_ID)' ELSE branch END || ': '
       || kinds || ' is not (SCHEDULE -> RETRY)* -> DLQ?'
       || CASE WHEN interleaving_allowed THEN ' nor an interleaving of such sequences' ELSE '' END
FROM judged
WHERE NOT interleaving_allowed OR retries_ahead > 0 OR letters[1] NOT IN ('S', 'Q')
UNION ALL
SELECT b.run_id, b.message_key, b."group", 'group hops without a real record before them'
FROM (SELECT DISTINCT run_id, message_key, "group" FROM branch_shapes) b
WHERE NOT EXISTS (SELECT 1 FROM shared s WHERE s.run_id = b.run_id AND s.message_key = b.message_key)
  AND b.run_id NOT IN (SELECT run_id FROM cut_runs)
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
"""

# Counted from the producers' ground truth and the commit log, not from the lineage's LOST rows.
NO_UNEXPLAINED_LOSS_SQL = f"""
WITH crashes AS ({_CRASHES}),
missing AS (
    SELECT p.run_id, p.uniq_key, p.topic, p.send_ts
    FROM produced p
    WHERE p.status = 'SEND_OK'
      AND NOT EXISTS (SELECT 1 FROM commitlog c WHERE c.run_id = p.run_id AND c.uniq_key = p.uniq_key)
)
SELECT m.run_id, m.uniq_key AS message_key, NULL AS "group",
       'SEND_OK to ' || coalesce(m.topic, '?') || ' at '
       || coalesce(strftime(m.send_ts, '%Y-%m-%dT%H:%M:%S.%g'), '?')
       || ' has no commit-log record and no broker_crash under async flush after it' AS detail
FROM missing m
WHERE NOT EXISTS (SELECT 1 FROM crashes c WHERE c.run_id = m.run_id AND c.ts >= m.send_ts)
"""

# The broker sends a message to the DLQ when the failed delivery's reconsume times reached the
# group's maximum. On the send-back path the DLQ record carries that count + 1; on a client's
# send to %RETRY% (handleRetryAndDLQ) the count travels in the RECONSUME_TIME property, which the
# stored record keeps, and the binary field is not incremented. Send-backs copy every property, so
# a RECONSUME_TIME from an earlier client send may ride along stale; it is never larger than the
# true count, so the larger of the two readings is the count. The maximum is, in order: the record's
# MAX_RECONSUME_TIMES property; the group's configuration in the run manifest (-1 = 16 when
# consuming concurrently, unlimited when orderly); the largest MAX_RECONSUME_TIMES the group's
# other records carry; and for an imported store with none of these, the largest count any of the
# group's DLQ records shows (one configuration per group, so every DLQ record should show it).
ORDERLY_MAX_RECONSUME_TIMES = 2**31 - 1
DLQ_AFTER_MAX_RETRIES_SQL = f"""
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
                WHEN lower(mode) = 'orderly' THEN {ORDERLY_MAX_RECONSUME_TIMES}
                ELSE {RETRY_MAX_TIMES_DEFAULT} END AS max_times
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
"""

NO_EARLY_DELIVERY_SQL = """
SELECT run_id, uniq_key AS message_key, NULL AS "group",
       'level ' || CAST(delay_level AS VARCHAR) || ' delivered ' || CAST(-lateness_ms AS VARCHAR)
       || ' ms before its due time (msgId ' || coalesce(delivered_msg_id, '?') || ')' AS detail
FROM schedule_deliveries
WHERE lateness_ms < 0 OR delivered_ts < due_ts
"""

# RETRY_TOPIC is set once, at the first send-back, and copied onwards: one value per chain.
# ORIGIN_MESSAGE_ID is set once per branch and names the message itself: its UNIQ_KEY (a client's
# fallback send) or the offset msgId of one of its real records (PUBLISH or DELIVER) that was sent back,
# which in an imported store may lie below the commit log's first offset (deleted by retention).
ORIGIN_STABLE_SQL = f"""
WITH {ORIGIN_CUTS_CTES},
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
    SELECT DISTINCT s.run_id, s.message_key, s."group", s.origin_msg_id
    FROM suspect_records s
    {origin_cut_joins("s")}
    WHERE s.origin_msg_id IS NOT NULL AND s.origin_msg_id IS DISTINCT FROM s.uniq_key
      AND NOT {names_a_removed_record("s.origin_msg_id", "s.uniq_key")}
),
real_ids AS (
    SELECT DISTINCT run_id, message_key, "group", msg_id
    FROM suspect_records
    WHERE hop_kind IN ('PUBLISH', 'DELIVER')
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
"""

LINEAGE_MATCHES_COMMITLOG_SQL = """
WITH offset_hashes AS (
    -- How many commit-log records and hop rows name each (run, broker, offset), in one aggregate
    -- over both keyed by the triple's 64-bit hash (an integer key costs about half the values). A
    -- hash that is not named by one record and one hop row is looked at again by value below. A
    -- fault is missed only where two different triples hash alike and their faults cancel (a
    -- record without a hop row and a hop row without a record: a 2^-64 chance a pair).
    SELECT k, count(*) FILTER (WHERE record) AS records, count(*) FILTER (WHERE NOT record) AS n
    FROM (SELECT hash(run_id, broker, phys_offset) AS k, true AS record FROM commitlog
          UNION ALL
          SELECT hash(run_id, broker, phys_offset), false FROM message_hops)
    GROUP BY k
),
offsets AS (
    -- Every (run, broker, offset) of those hashes, and every one with a NULL, counted by value.
    SELECT run_id, broker, phys_offset,
           count(*) FILTER (WHERE record) AS records, count(*) FILTER (WHERE NOT record) AS n
    FROM (SELECT run_id, broker, phys_offset, true AS record FROM commitlog
          WHERE hash(run_id, broker, phys_offset) IN (SELECT k FROM offset_hashes WHERE records <> 1 OR n <> 1)
             OR run_id IS NULL OR broker IS NULL OR phys_offset IS NULL
          UNION ALL
          SELECT run_id, broker, phys_offset, false FROM message_hops
          WHERE hash(run_id, broker, phys_offset) IN (SELECT k FROM offset_hashes WHERE records <> 1 OR n <> 1)
             OR run_id IS NULL OR broker IS NULL OR phys_offset IS NULL)
    GROUP BY run_id, broker, phys_offset
),
odd AS (
    -- Records no hop row names, offsets in more than one hop row, hop rows with no record. A NULL
    -- run, broker or offset matches nothing (the aggregate groups NULLs together; a join would not).
    SELECT run_id, broker, phys_offset, n,
           records > 0 AND (n = 0 OR run_id IS NULL OR broker IS NULL OR phys_offset IS NULL) AS unhopped,
           n > 0 AND (records = 0 OR run_id IS NULL OR broker IS NULL OR phys_offset IS NULL) AS orphan
    FROM offsets
    WHERE records = 0 OR n <> 1 OR run_id IS NULL OR broker IS NULL OR phys_offset IS NULL
),
unhopped AS (
    -- Their records and hop rows are looked up for those offsets only; the IN lists keep the few
    -- odd offsets on the build side of the joins.
    SELECT c.run_id, c.uniq_key, c.broker, c.phys_offset, c.topic
    FROM (SELECT * FROM commitlog
          WHERE phys_offset IN (SELECT phys_offset FROM odd WHERE unhopped) OR phys_offset IS NULL) c
    SEMI JOIN odd o
      ON o.run_id IS NOT DISTINCT FROM c.run_id AND o.broker IS NOT DISTINCT FROM c.broker
     AND o.phys_offset IS NOT DISTINCT FROM c.phys_offset AND o.unhopped
),
odd_hops AS (
    -- The message a hop row of such an offset names.
    SELECT o.run_id, o.broker, o.phys_offset, o.n, o.orphan, min(h.message_key) AS message_key
    FROM (SELECT * FROM odd WHERE n > 1 OR orphan) o
    JOIN (SELECT * FROM message_hops
          WHERE phys_offset IN (SELECT phys_offset FROM odd WHERE n > 1 OR orphan) OR phys_offset IS NULL) h
      ON h.run_id IS NOT DISTINCT FROM o.run_id AND h.broker IS NOT DISTINCT FROM o.broker
     AND h.phys_offset IS NOT DISTINCT FROM o.phys_offset
    GROUP BY o.run_id, o.broker, o.phys_offset, o.n, o.orphan
),
hop_tallies AS (
    SELECT run_id, message_key, "group", count(*) AS n
    FROM message_hops
    GROUP BY run_id, message_key, "group"
),
chain_sizes AS (
    -- A chain's hops are its message's shared hops plus its group's.
    SELECT l.run_id, l.message_key, l."group", l.hops, coalesce(s.n, 0) + coalesce(g.n, 0) AS counted
    FROM message_lineage l
    LEFT JOIN hop_tallies s
      ON s.run_id = l.run_id AND s.message_key = l.message_key AND s."group" IS NULL
    LEFT JOIN hop_tallies g
      ON g.run_id = l.run_id AND g.message_key = l.message_key AND g."group" = l."group"
)
SELECT run_id, uniq_key AS message_key, NULL AS "group",
       'commit-log record at ' || coalesce(broker, '?') || '@' || CAST(phys_offset AS VARCHAR)
       || ' (' || topic || ') is in no hop row' AS detail
FROM unhopped
UNION ALL
SELECT run_id, message_key, NULL,
       'commit-log record at ' || coalesce(broker, '?') || '@' || CAST(phys_offset AS VARCHAR) || ' is in '
       || CAST(n AS VARCHAR) || ' hop rows'
FROM odd_hops
WHERE n > 1
UNION ALL
SELECT run_id, message_key, NULL,
       'hop row at ' || coalesce(broker, '?') || '@' || CAST(phys_offset AS VARCHAR) || ' has no commit-log record'
FROM odd_hops
WHERE orphan
UNION ALL
SELECT run_id, message_key, "group",
       'lineage says ' || CAST(hops AS VARCHAR) || ' hops, message_hops holds ' || CAST(counted AS VARCHAR)
FROM chain_sizes
WHERE hops <> counted
"""

DUPLICATE_RATE_SQL = f"""
SELECT run_id, NULL AS message_key, "group",
       CAST(duplicated AS VARCHAR) || ' of ' || CAST(enqueue_success AS VARCHAR)
       || ' messages consumed more than once (' || CAST(round(100.0 * duplicated / enqueue_success, 2) AS VARCHAR)
       || ' % > {DUPLICATE_RATE_MAX * 100:g} %)' AS detail
FROM delivery_accounting
WHERE enqueue_success > 0 AND duplicated / enqueue_success > {DUPLICATE_RATE_MAX}
"""

LATENESS_P99_SQL = f"""
SELECT run_id, NULL AS message_key, NULL AS "group",
       'delay level ' || CAST(delay_level AS VARCHAR) || ': p99 lateness ' || CAST(lateness_p99_ms AS VARCHAR)
       || ' ms > {LATENESS_P99_MS_MAX} ms over ' || CAST(deliveries AS VARCHAR) || ' deliveries' AS detail
FROM delay_accuracy
WHERE lateness_p99_ms > {LATENESS_P99_MS_MAX}
"""


@dataclass(frozen=True)
class Check:
    """One check: a name, the asset it judges, what it means, how bad a failure is, and its SQL."""

    name: str
    asset: str
    description: str
    severity: str
    sql: str


@dataclass(frozen=True)
class CheckOutcome:
    """A check's verdict with its evidence: how many rows offend and the first few of them."""

    check: Check
    violations: int
    examples: tuple[dict, ...]

    @property
    def passed(self) -> bool:
        return self.violations == 0

    @property
    def blocking(self) -> bool:
        return self.check.severity == ERROR

    def metadata(self) -> dict:
        keys = [e["message_key"] for e in self.examples if e.get("message_key")]
        return {
            "violations": self.violations,
            "first_offending_keys": ", ".join(keys) if keys else "(none)",
            "evidence": [f"{e.get('group') or '-'} {e.get('message_key') or '-'}: {e['detail']}"
                         for e in self.examples],
        }


INVARIANTS: tuple[Check, ...] = (
    Check(HOP_GRAMMAR, "lineage/message_hops",
          "Every (message, group) chain reads real -> (SCHEDULE -> RETRY)* -> DLQ?, a delayed publish "
          "starting SCHEDULE -> DELIVER, with hop_index 0..n-1; where retention deleted a chain's "
          "first hops (runs.first_offset > 0) it may start later, and truncated says so.",
          ERROR, HOP_GRAMMAR_SQL),
    Check(NO_UNEXPLAINED_LOSS, "lineage/message_lineage",
          "Every SEND_OK message has a commit-log record, unless a broker_crash under async flush "
          "after its send explains the loss.", ERROR, NO_UNEXPLAINED_LOSS_SQL),
    Check(DLQ_AFTER_MAX_RETRIES, "lineage/message_lineage",
          "A message reaches %DLQ%<group> only after the group's maximum reconsume times.",
          ERROR, DLQ_AFTER_MAX_RETRIES_SQL),
    Check(NO_EARLY_DELIVERY, "lineage/message_hops",
          "No delayed message leaves SCHEDULE_TOPIC_XXXX before its due time (lateness_ms >= 0).",
          ERROR, NO_EARLY_DELIVERY_SQL),
    Check(ORIGIN_STABLE, "lineage/message_hops",
          "ORIGIN_MESSAGE_ID and RETRY_TOPIC never change along a chain.", ERROR, ORIGIN_STABLE_SQL),
    Check(LINEAGE_MATCHES_COMMITLOG, "lineage/message_hops",
          "Every commit-log record is in exactly one hop row, every hop row is a commit-log record, "
          "and each lineage row's hop count matches its hops.", ERROR, LINEAGE_MATCHES_COMMITLOG_SQL),
)

DRIFTS: tuple[Check, ...] = (
    Check(DUPLICATE_RATE, "audit/delivery_accounting",
          f"At most {DUPLICATE_RATE_MAX:.0%} of a group's messages are consumed more than once.",
          WARN, DUPLICATE_RATE_SQL),
    Check(LATENESS_P99, "audit/delay_accuracy",
          f"Every delay level's p99 lateness is at most {LATENESS_P99_MS_MAX} ms.", WARN, LATENESS_P99_SQL),
)

ALL_CHECKS: tuple[Check, ...] = INVARIANTS + DRIFTS
CHECKS_BY_NAME = {c.name: c for c in ALL_CHECKS}


def run_check(con: duckdb.DuckDBPyConnection, check: Check, run_id: str | None = None) -> CheckOutcome:
    """Run one check on a connection holding the warehouse tables, for one run or all of them."""
    # One pass: the window count carries the total on each of the first rows.
    query = (f"SELECT run_id, message_key, \"group\", detail, count(*) OVER () AS violations "
             f"FROM ({check.sql}) AS v WHERE ?::VARCHAR IS NULL OR run_id = ?::VARCHAR "
             f"ORDER BY run_id, {_EVIDENCE_ORDER} LIMIT {EVIDENCE_ROWS_MAX}")
    return _outcome(check, con.execute(query, [run_id, run_id]).fetchall())


# The order evidence rows are listed in, within a run.
_EVIDENCE_ORDER = 'message_key NULLS LAST, "group" NULLS FIRST, detail'


def _outcome(check: Check, rows: list[tuple]) -> CheckOutcome:
    """A verdict from its first rows (run_id, message_key, group, detail, violations)."""
    examples = tuple({"run_id": r[0], "message_key": r[1], "group": r[2], "detail": r[3]} for r in rows)
    return CheckOutcome(check, rows[0][4] if rows else 0, examples)


def run_checks(con: duckdb.DuckDBPyConnection, checks: Iterable[Check] = ALL_CHECKS,
               run_id: str | None = None) -> list[CheckOutcome]:
    return [run_check(con, c, run_id) for c in checks]


def run_checks_per_run(con: duckdb.DuckDBPyConnection, run_ids: Sequence[str],
                       checks: Iterable[Check] = ALL_CHECKS) -> dict[str, list[CheckOutcome]]:
    """Every check once over all runs, its verdict split by run: {run_id: outcomes in check order}.

    The same verdicts as ``run_checks(con, checks, run_id)`` for each run, at the cost of one
    evaluation per check: a filter on a check's result does not reach into its CTEs, so checking
    run by run would evaluate every check over every run once per run.
    """
    verdicts: dict[str, list[CheckOutcome]] = {r: [] for r in run_ids}
    for check in checks:
        query = (f"SELECT run_id, message_key, \"group\", detail, "
                 f"count(*) OVER (PARTITION BY run_id) AS violations "
                 f"FROM ({check.sql}) AS v "
                 f"QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY {_EVIDENCE_ORDER}) "
                 f"<= {EVIDENCE_ROWS_MAX} "
                 f"ORDER BY run_id, {_EVIDENCE_ORDER}")
        by_run: dict[str, list] = {}
        for row in con.execute(query).fetchall():
            by_run.setdefault(row[0], []).append(row)
        for run_id in run_ids:
            verdicts[run_id].append(_outcome(check, by_run.get(run_id, [])))
    return verdicts


def checks_for(asset: str, checks: Sequence[Check] = ALL_CHECKS) -> list[Check]:
    return [c for c in checks if c.asset == asset]
