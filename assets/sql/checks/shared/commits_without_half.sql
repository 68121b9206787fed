-- Commit records whose back-pointer (prepared_tx_offset: the commit-log offset, on the commit's
-- own broker, of the half copy it commits) names no half copy of the same message (the rows of
-- transaction_commit_names_its_half and the COMMIT_WITHOUT_HALF anomalies), unless retention
-- deleted it (the offset is below the broker's first_offset). A run written before the column
-- existed (prepared_tx_offset null) says nothing. A SELECT, used as a subquery.
SELECT c.run_id, c.message_key, NULL AS "group",
       'commit at ' || c.broker || '@' || CAST(c.phys_offset AS VARCHAR) || ' points at offset '
       || coalesce(CAST(c.prepared_tx_offset AS VARCHAR), 'null') || ', '
       || CASE WHEN t.phys_offset IS NULL THEN 'where the commit log holds no record'
               ELSE 'a ' || t.topic || ' record of ' || coalesce(t.uniq_key, 'no UNIQ_KEY') END
       || ', not a half copy of it' AS detail
FROM ({{tx_commits}}) c
LEFT JOIN commitlog t ON t.run_id = c.run_id AND t.broker = c.broker AND t.phys_offset = c.prepared_tx_offset
LEFT JOIN (SELECT run_id, broker, max(first_offset) AS first_offset FROM runs WHERE broker IS NOT NULL
           GROUP BY run_id, broker) r ON r.run_id = c.run_id AND r.broker = c.broker
WHERE c.prepared_tx_offset IS NOT NULL
  AND NOT coalesce(t.topic = '{{trans_half_topic}}' AND t.uniq_key IS NOT DISTINCT FROM c.uniq_key, false)
  AND NOT coalesce(c.prepared_tx_offset < r.first_offset, false)
