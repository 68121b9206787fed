-- The joins that give the record alias c (run_id, broker, origin_msg_id) the own_cut and host_cut
-- rows names_a_removed_record reads (origin_cuts_ctes): the cut of its own broker, and the cut of
-- the broker its ORIGIN_MESSAGE_ID's store host names; and the restored record it names, if the
-- run holds one (restored_records).
LEFT JOIN cut_brokers own_cut ON own_cut.run_id = c.run_id AND own_cut.broker = c.broker
LEFT JOIN host_cuts host_cut ON host_cut.run_id = c.run_id AND host_cut.broker = c.broker
      AND host_cut.host = upper(substr(c.origin_msg_id, 1, greatest(length(c.origin_msg_id) - {{msg_id_offset_hex_chars}}, 0)))
LEFT JOIN restored_records restored ON restored.run_id = c.run_id AND restored.msg_id = upper(c.origin_msg_id)
