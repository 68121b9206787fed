-- The rows of trace_send_ok_stored and the anomalies of its kind (assets/sql/anomalies.sql). A SELECT, used as a subquery.
-- trace_send_ok_stored: every send a client's trace says was stored (SEND_OK, with the offset
-- msgId the broker answered) is a record of the store at that offset, of the same message
-- (traced_sends says which sends the run can judge). A missing record is a message the broker
-- acknowledged and the store does not hold: the store alone cannot tell it was ever sent.
SELECT s.run_id, s.message_key, NULL AS "group",
       'sent SEND_OK by ' || coalesce(s.producer_group, '?') || ' to ' || coalesce(s.store_host, '?')
       || ' at ' || strftime(s.ts, '%Y-%m-%d %H:%M:%S.%g') || ' as ' || s.offset_msg_id || ', but '
       || CASE WHEN c.msg_id IS NULL THEN 'broker ' || s.broker || ' holds no record at that offset'
               ELSE 'the record there is ' || coalesce(c.uniq_key, 'a message without UNIQ_KEY') END AS detail
FROM ({{traced_sends}}) s
LEFT JOIN commitlog c ON c.run_id = s.run_id AND c.broker = s.broker AND upper(c.msg_id) = s.offset_msg_id
WHERE c.msg_id IS NULL OR c.uniq_key IS DISTINCT FROM s.message_key
