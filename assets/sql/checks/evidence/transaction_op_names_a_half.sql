-- The records transaction_op_names_a_half judges: every transaction op record.
SELECT run_id, count(*) AS judged FROM transaction_ops GROUP BY run_id
