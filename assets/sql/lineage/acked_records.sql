-- The records each group acknowledged (docs/lineage.md, "message_lineage"), where lineage_rows.sql
-- reads a chain's consumption. Reads consume_attempts. Per run, not per message: the DuckDB lineage
-- builds it once for a run it writes in slices.
-- An ACKED delivery counts for the record it names: by offset and, for a record with a
-- UNIQ_KEY, by that key (after a crash a lost record's offset may hold another message). For
-- a record without one the consumer reports the offset msgId, so the offset alone decides;
-- '' stands for "no key" on both sides.
SELECT DISTINCT run_id, `group`, phys_offset AS c_phys,
       coalesce(CASE WHEN nullif(uniq_key, '') IS DISTINCT FROM msg_id THEN nullif(uniq_key, '') END, '')
         AS c_key
FROM consume_attempts
WHERE outcome = 'ACKED'
