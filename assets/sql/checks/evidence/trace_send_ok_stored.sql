-- The sends trace_send_ok_stored judges: each SEND_OK a client's trace holds that names a broker of
-- the run, past its retention and before its last record (traced_sends).
SELECT run_id, count(*) AS judged FROM ({{traced_sends}}) s GROUP BY run_id
