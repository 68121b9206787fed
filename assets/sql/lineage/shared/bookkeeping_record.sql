-- Whether the commit-log record c is the broker's own bookkeeping, never a message hop (5.x): a
-- record in an rmq_sys_* topic other than a message's timer record, a timer record whose real
-- topic is such a topic (a POP checkpoint waiting in the wheel), or a retry/DLQ record of a broker
-- group (CID_RMQ_SYS_*), a transaction op record (RMQ_SYS_TRANS_OP_HALF_TOPIC: evidence of a
-- decision, read from transaction_ops), or a message-trace record (RMQ_SYS_TRACE_TOPIC, or
-- rmq_sys_TRACE_DATA_*: the clients' evidence, read into client_trace). names.is_bookkeeping_record says the same in Python (for
-- the broker model); the lineage leaves these records out and the check lineage_matches_commitlog
-- counts them out.
CASE WHEN c.topic = '{{timer_topic}}'
     THEN {{starts_with}}(coalesce(c.real_topic, '{{system_topic_prefix}}'), '{{system_topic_prefix}}')
     ELSE {{starts_with}}(c.topic, '{{system_topic_prefix}}')
          OR {{starts_with}}(c.topic, '{{retry_topic_prefix}}{{system_group_prefix}}')
          OR {{starts_with}}(c.topic, '{{dlq_topic_prefix}}{{system_group_prefix}}')
          OR c.topic = '{{trans_op_half_topic}}' OR c.topic = '{{trace_topic}}' END
