-- lineage_matches_commitlog: every commit-log record is in exactly one hop row, every hop row is a
-- commit-log record, and each lineage row's hop count matches its hops. The broker's bookkeeping
-- records (5.x: rmq_sys_* topics, POP checkpoints in the timer) are in no hop row, and must not be.
-- A 5.x inner batch the import unwrapped (inner_messages) is its messages, not one record: as many
-- hop rows at its offset as it has messages, each message's UNIQ_KEY named by one of them.
WITH unwrapped AS (
    SELECT DISTINCT run_id, broker, phys_offset FROM inner_messages
),
message_records AS (
    -- An anti join (NOT EXISTS would first list every record's distinct offset, for nothing when
    -- no batch was unwrapped).
    SELECT c.run_id, c.broker, c.phys_offset, c.uniq_key, c.topic FROM commitlog c
    ANTI JOIN unwrapped u ON u.run_id = c.run_id AND u.broker = c.broker AND u.phys_offset = c.phys_offset
    WHERE NOT ({{bookkeeping_record}})
),
record_hops AS (
    -- The hop rows of records: those at an unwrapped batch's offset are its messages' (below).
    SELECT h.* FROM message_hops h
    WHERE NOT EXISTS (SELECT 1 FROM unwrapped u
                      WHERE u.run_id = h.run_id AND u.broker = h.broker AND u.phys_offset = h.phys_offset)
),
inner_hops AS (
    SELECT h.run_id, h.broker, h.phys_offset, h.message_key FROM message_hops h SEMI JOIN unwrapped u
      ON u.run_id = h.run_id AND u.broker = h.broker AND u.phys_offset = h.phys_offset
),
inner_counts AS (
    -- Per unwrapped batch: its messages and the hop rows at its offset.
    SELECT run_id, broker, phys_offset, count(*) FILTER (WHERE message) AS messages,
           count(*) FILTER (WHERE NOT message) AS n
    FROM (SELECT run_id, broker, phys_offset, true AS message FROM inner_messages
          UNION ALL
          SELECT run_id, broker, phys_offset, false FROM inner_hops)
    GROUP BY ALL
),
inner_unnamed AS (
    -- A message of an unwrapped batch whose UNIQ_KEY no hop row at the batch's offset names.
    SELECT i.run_id, i.broker, i.phys_offset, i.uniq_key, i.topic FROM inner_messages i
    WHERE i.uniq_key IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM inner_hops h
                      WHERE h.run_id = i.run_id AND h.broker = i.broker AND h.phys_offset = i.phys_offset
                        AND h.message_key = i.uniq_key)
),
bookkeeping_hops AS (
    SELECT h.run_id, h.message_key, h.broker, h.phys_offset
    FROM message_hops h
    SEMI JOIN (SELECT c.run_id, c.broker, c.phys_offset FROM commitlog c WHERE {{bookkeeping_record}}) c
      ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
),
offset_hashes AS (
    -- How many commit-log records and hop rows name each (run, broker, offset), in one aggregate
    -- over both keyed by the triple's 64-bit hash (an integer key costs about half the values). A
    -- hash that is not named by one record and one hop row is looked at again by value below. A
    -- fault is missed only where two different triples hash alike and their faults cancel (a
    -- record without a hop row and a hop row without a record: a 2^-64 chance a pair).
    SELECT k, count(*) FILTER (WHERE record) AS records, count(*) FILTER (WHERE NOT record) AS n
    FROM (SELECT hash(run_id, broker, phys_offset) AS k, true AS record FROM message_records
          UNION ALL
          SELECT hash(run_id, broker, phys_offset), false FROM record_hops)
    GROUP BY k
),
offsets AS (
    -- Every (run, broker, offset) of those hashes, and every one with a NULL, counted by value.
    SELECT run_id, broker, phys_offset,
           count(*) FILTER (WHERE record) AS records, count(*) FILTER (WHERE NOT record) AS n
    FROM (SELECT run_id, broker, phys_offset, true AS record FROM message_records
          WHERE hash(run_id, broker, phys_offset) IN (SELECT k FROM offset_hashes WHERE records <> 1 OR n <> 1)
             OR run_id IS NULL OR broker IS NULL OR phys_offset IS NULL
          UNION ALL
          SELECT run_id, broker, phys_offset, false FROM record_hops
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
    FROM (SELECT * FROM message_records
          WHERE phys_offset IN (SELECT phys_offset FROM odd WHERE unhopped) OR phys_offset IS NULL) c
    SEMI JOIN odd o
      ON o.run_id IS NOT DISTINCT FROM c.run_id AND o.broker IS NOT DISTINCT FROM c.broker
     AND o.phys_offset IS NOT DISTINCT FROM c.phys_offset AND o.unhopped
),
odd_hops AS (
    -- The message a hop row of such an offset names.
    SELECT o.run_id, o.broker, o.phys_offset, o.n, o.orphan, min(h.message_key) AS message_key
    FROM (SELECT * FROM odd WHERE n > 1 OR orphan) o
    JOIN (SELECT * FROM record_hops
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
SELECT run_id, NULL, NULL,
       'inner batch at ' || coalesce(broker, '?') || '@' || CAST(phys_offset AS VARCHAR) || ' holds '
       || CAST(messages AS VARCHAR) || ' messages, ' || CAST(n AS VARCHAR) || ' hop rows are at its offset'
FROM inner_counts
WHERE messages <> n
UNION ALL
SELECT run_id, uniq_key, NULL,
       'inner message ' || uniq_key || ' of the batch at ' || coalesce(broker, '?') || '@'
       || CAST(phys_offset AS VARCHAR) || ' (' || topic || ') is in no hop row'
FROM inner_unnamed
UNION ALL
SELECT run_id, message_key, NULL,
       'bookkeeping record at ' || coalesce(broker, '?') || '@' || CAST(phys_offset AS VARCHAR) || ' is a hop row'
FROM bookkeeping_hops
UNION ALL
SELECT run_id, message_key, "group",
       'lineage says ' || CAST(hops AS VARCHAR) || ' hops, message_hops holds ' || CAST(counted AS VARCHAR)
FROM chain_sizes
WHERE hops <> counted
