-- The few properties the checks read, one row per commit-log record that carries one of them
-- (most records carry none). A SELECT, staged once per run of the checks and once per warehouse
-- build as the temporary table record_properties (assets.checks.staged_inputs): the properties
-- map is the costliest column to read (decoding it over 9.9M records takes about 3 CPU-s), and
-- each check that read one property from it paid that whole pass again. A check reads a record's
-- properties by its (run_id, broker, phys_offset), which names one record (lineage_matches_commitlog
-- judges that); a record without a row has none of them.
--   reconsume_time           RECONSUME_TIME as an integer (a client's send to %RETRY% carries it)
--   first_pop                whether it carries 1ST_POP_TIME (a 5.x POP revive's retry record)
--   timer_out_ms             TIMER_OUT_MS as an integer (a 5.x timer message's due time)
--   transaction_check_times  TRANSACTION_CHECK_TIMES as an integer (a transactional half's checks)
SELECT run_id, broker, phys_offset,
       TRY_CAST(properties['{{prop_reconsume_time}}'] AS INTEGER) AS reconsume_time,
       properties['{{prop_first_pop_time}}'] IS NOT NULL AS first_pop,
       TRY_CAST(properties['{{prop_timer_out_ms}}'] AS BIGINT) AS timer_out_ms,
       TRY_CAST(properties['{{prop_transaction_check_times}}'] AS INTEGER) AS transaction_check_times
FROM commitlog
WHERE properties['{{prop_reconsume_time}}'] IS NOT NULL
   OR properties['{{prop_first_pop_time}}'] IS NOT NULL
   OR properties['{{prop_timer_out_ms}}'] IS NOT NULL
   OR properties['{{prop_transaction_check_times}}'] IS NOT NULL
