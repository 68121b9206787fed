-- message_lineage (broker_core.export.schema.MESSAGE_LINEAGE), in its written order. Reads
-- lineage_rows (lineage_rows.sql), which Spark keeps before this sort: a range sort samples its
-- input first, and would otherwise run the joins that make the rows once per sampling pass.
SELECT *
FROM lineage_rows
ORDER BY run_id ASC NULLS FIRST, message_key ASC NULLS FIRST, `group` ASC NULLS FIRST
