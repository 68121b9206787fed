-- The chains hop_grammar_valid judges: every (message, group) chain with a record.
SELECT run_id, count(*) AS judged FROM message_lineage WHERE final_state <> 'LOST' GROUP BY run_id
