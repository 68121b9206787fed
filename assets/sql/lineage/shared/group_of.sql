-- The group a topic's name names (the column named_topic): of %RETRY%g and %DLQ%g, g; of a 5.x POP
-- retry topic %RETRY%g+T (v2), g; of any other name, null (names.group_of, names.pop_retry_v2_group).
CASE WHEN {{starts_with}}(named_topic, '{{retry_topic_prefix}}')
     THEN split_part(substr(named_topic, length('{{retry_topic_prefix}}') + 1), '{{pop_retry_v2_separator}}', 1)
     WHEN {{starts_with}}(named_topic, '{{dlq_topic_prefix}}')
     THEN substr(named_topic, length('{{dlq_topic_prefix}}') + 1) END
