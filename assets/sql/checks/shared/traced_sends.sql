-- The sends a client's trace says were stored (Pub records with success, SEND_OK), that the run
-- can judge (the rows trace_send_ok_stored judges): one offset msgId (a batch send's list of them
-- is not judged) naming a broker of the run (runs.msg_id_hosts), at an offset retention has not
-- deleted (at or past the broker's first_offset), sent before the broker's last stored record
-- (ts + cost_ms <= runs.sim_end_ts: the store was read after the send was answered; without a
-- store time the send is not judged). The client's clock is the trace's, the broker's the
-- store's: they are assumed to agree to within the send's own time. Columns run_id, message_key,
-- producer_group, store_host, offset_msg_id, ts, broker. A SELECT, used as a subquery.
SELECT t.run_id, t.msg_id AS message_key, t."group" AS producer_group, t.store_host,
       upper(t.offset_msg_id) AS offset_msg_id, t.ts, r.broker
FROM (SELECT DISTINCT run_id, msg_id, "group", store_host, offset_msg_id, ts, cost_ms
      FROM client_trace
      WHERE trace_type = 'Pub' AND success AND {{regexp_like}}(offset_msg_id, '{{offset_msg_id_regex}}')) t
JOIN (SELECT run_id, broker, first_offset, sim_end_ts, unnest(msg_id_hosts) AS host FROM runs) r
  ON r.run_id = t.run_id
 AND upper(left(t.offset_msg_id, length(t.offset_msg_id) - {{msg_id_offset_hex_chars}})) = upper(r.host)
WHERE t.ts + to_milliseconds(coalesce(t.cost_ms, 0)) <= r.sim_end_ts
  AND upper(right(t.offset_msg_id, {{msg_id_offset_hex_chars}}))
      >= lpad(upper(to_hex(coalesce(r.first_offset, 0))), {{msg_id_offset_hex_chars}}, '0')
