-- nothing_lost_unexplained: every SEND_OK message has a commit-log record, unless a crash explains it.
-- Counted from the producers' ground truth and the commit log, not from the lineage's LOST rows.
-- A kill -9 (loss_fault_kinds) loses the unflushed tail of the commit log under async flush; under
-- sync flush a SEND_OK message was on disk before the ack. A crash the injector skipped (broker
-- already down) loses nothing.
WITH crashes AS (
    SELECT f.run_id, f.ts FROM faults f
    LEFT JOIN run_manifest m ON m.run_id = f.run_id
    WHERE f.kind IN {{loss_fault_kinds}} AND coalesce(m.flush, 'async') <> 'sync'
      AND NOT coalesce(starts_with(f.detail, 'skipped'), false)
),
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
