-- The records lineage_matches_commitlog judges: every commit-log record.
SELECT run_id, count(*) AS judged FROM commitlog GROUP BY run_id
