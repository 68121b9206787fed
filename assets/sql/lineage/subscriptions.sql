-- The subscriptions (docs/lineage.md, "message_lineage"): the groups lineage_rows.sql fans a
-- message's chains out to, and a LOST send's. Reads consume_attempts, consumer_offsets, records
-- (records.sql) and pop_evidence. Per run, not per message: the DuckDB lineage builds it once for
-- a run it writes in slices.
-- (run_id, group, topic) a group is known to consume: deliveries (the message's topic and the
-- queue's), committed offsets, the RETRY_TOPIC of the group's own %RETRY%/%DLQ% records, and
-- the topics a POP group popped (its checkpoints: the only witness of a POP group that never
-- failed a message on a store whose offsets are in RocksDB). Retry, DLQ and schedule topics
-- are never subscriptions.
SELECT DISTINCT run_id, `group`, topic
FROM (SELECT run_id, `group`, {{explode}}({{array}}(topic, queue_topic)) AS topic FROM consume_attempts
      UNION ALL
      SELECT run_id, `group`, topic FROM consumer_offsets
      UNION ALL
      SELECT run_id, {{group_of}} AS `group`, nullif(retry_topic, '') AS topic
      FROM (SELECT run_id, topic AS named_topic, retry_topic FROM records) r
      UNION ALL
      SELECT run_id, `group`, topic FROM pop_evidence WHERE kind = 'ck') s
WHERE `group` IS NOT NULL AND topic IS NOT NULL AND NOT {{starts_with}}(`group`, '{{system_group_prefix}}')
  AND NOT ({{starts_with}}(topic, '{{retry_topic_prefix}}') OR {{starts_with}}(topic, '{{dlq_topic_prefix}}')
           OR topic = '{{schedule_topic}}' OR {{starts_with}}(topic, '{{system_topic_prefix}}'))
