-- The half copies an op record decided (a commit's or a rollback's): their queue offsets in the half
-- queue of the op record's queue id, on its broker (docs/transactions.md), where lineage_rows.sql
-- reads a rolled-back message. Reads transaction_ops. Per run, not per message: the DuckDB lineage
-- builds it once for a run it writes in slices.
SELECT DISTINCT run_id, broker, queue_id, half_offset
FROM (SELECT run_id, broker, queue_id, {{explode}}(half_queue_offsets) AS half_offset FROM transaction_ops) o
