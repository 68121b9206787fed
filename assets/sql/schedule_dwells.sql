-- schedule_dwells (staging): one row per SCHEDULE hop of a run without schedule_deliveries (an
-- imported store) whose delivery the lineage found, with its due time and lateness, read from the
-- store itself: the due time is the record's schedule_units row (the consume-queue unit's tags
-- code: the record's store time plus the delay its level had when it was stored), else its store
-- time plus its broker's delay for the level (runs.delay_levels_ms, the newest table; else the
-- manifest's delay_levels); a hop with none of these has no expected delay and is left out (it is
-- never estimated from the deliveries it would judge). The delivery is the hop's dwell later.
CREATE OR REPLACE TEMP TABLE schedule_dwells AS
WITH levels AS (
    SELECT run_id, broker, generate_subscripts(delay_levels_ms, 1) AS delay_level,
           unnest(delay_levels_ms) AS delay_ms
    FROM runs
    WHERE delay_levels_ms IS NOT NULL
),
measured AS (
    SELECT h.run_id, h.message_key, h."group", h.broker, h.phys_offset, h.delay_level, h.msg_id, h.store_ts,
           h.dwell_ms,
           coalesce(epoch_ms(u.due_ts) - epoch_ms(h.store_ts), l.delay_ms, d.delay_ms) AS expected_ms,
           CASE WHEN u.due_ts IS NOT NULL THEN 'commitlog, due time from the schedule queue'
                ELSE 'commitlog, due time from the broker''s delay table' END AS measured_from
    FROM message_hops h
    LEFT JOIN schedule_units u ON u.run_id = h.run_id AND u.broker = h.broker AND u.phys_offset = h.phys_offset
    LEFT JOIN levels l ON l.run_id = h.run_id AND l.broker = h.broker AND l.delay_level = h.delay_level
    LEFT JOIN delay_levels d ON d.run_id = h.run_id AND d.delay_level = h.delay_level
    WHERE h.hop_kind = 'SCHEDULE' AND h.dwell_ms IS NOT NULL
      AND h.run_id NOT IN (SELECT DISTINCT run_id FROM schedule_deliveries)
)
SELECT *, dwell_ms - expected_ms AS lateness_ms
FROM measured
WHERE expected_ms IS NOT NULL;
