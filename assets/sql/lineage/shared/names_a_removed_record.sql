-- True when the record alias c's ORIGIN_MESSAGE_ID is an offset msgId below the first offset of
-- the broker it names (after origin_cut_joins), so the record it names was deleted by retention,
-- and the run does not hold that record all the same (a tiered store's copy, restored_records).
-- A value equal to the record's UNIQ_KEY (a client's fallback send) is not an offset msgId,
-- though it has as many digits.
coalesce({{regexp_like}}(c.origin_msg_id, '{{offset_msg_id_regex}}')
         AND c.origin_msg_id IS DISTINCT FROM c.uniq_key
         AND upper(right(c.origin_msg_id, {{msg_id_offset_hex_chars}}))
             < coalesce(host_cut.first_offset_hex, own_cut.first_offset_hex)
         AND restored.msg_id IS NULL, false)
