-- The sends nothing_lost_unexplained judges: a producer's SEND_OK (a simulation's ground truth; an
-- imported store holds only what was stored, so it has none).
SELECT run_id, count(*) AS judged FROM produced WHERE status = 'SEND_OK' GROUP BY run_id
