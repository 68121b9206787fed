-- True when the hop alias c is a transaction's commit whose back-pointer (tx_commit_of: the
-- commit-log offset, on its own broker, of the half copy it commits) is below that broker's first
-- offset (after origin_cut_joins): retention deleted the half. Compared as fixed-width hex text,
-- as names_a_removed_record compares an offset msgId.
coalesce(c.tx_commit_of >= 0 AND lpad(hex(c.tx_commit_of), {{msg_id_offset_hex_chars}}, '0') < own_cut.first_offset_hex, false)
