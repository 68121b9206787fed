"""CONSUMER_SEND_MSG_BACK as RocketMQ 4.9.4 handles it (``asyncConsumerSendMsgBack``, §5.2).

5.x (``AbstractSendMessageProcessor.consumerSendMsgBack`` @5.3.3) runs the same steps; where it
differs (the retry queue draw, the store host, the property map) ``broker.semantics`` answers.

A consumer hands a failed message back by its commit-log offset. The broker looks the record up,
decides retry or DLQ, and stores a copy: ``%RETRY%group`` through SCHEDULE_TOPIC_XXXX at level
``3 + reconsumeTimes`` (or the level asked for), or ``%DLQ%group`` with ``DELAY=0`` once the record
is out of retries or the level asked for is below 0 (a listener's ``setDelayLevelWhenNextConsume(-1)``,
the proxy's forward), with ``reconsumeTimes + 1`` either way. The copy's
properties are the looked-up record's, re-parsed into a Java ``HashMap`` and re-serialized in
its iteration order, so the stored bytes match a 4.9.4 broker's.
"""

from __future__ import annotations

from broker_core.broker import codes
from broker_core.broker.send import SendResponse
from broker_core.broker.topics import is_writeable
from broker_core.constants import DLQ_QUEUES, PERM_READ, PERM_WRITE, RETRY_DELAY_LEVEL_BASE
from broker_core.errors import InvalidNameError
from broker_core.message import properties_to_string, send_back_map
from broker_core.names import dlq_topic, retry_topic, validate_group


def consumer_send_msg_back(broker, offset: int, group: str, delay_level: int,
                           origin_msg_id: str | None = None, origin_topic: str | None = None,
                           max_reconsume_times: int | None = None) -> SendResponse:
    """Store a retry (or dead-letter) copy of the record at ``offset`` for ``group``.

    ``origin_msg_id`` / ``origin_topic`` are carried by the request header but, as in 4.9.4,
    not used to build the copy (the record itself decides everything).
    """
    semantics = broker.semantics
    try:
        # 4.9.4 does not check the group here; the model does, before any config is created,
        # so a hostile group name can never become a topic or a config entry.
        validate_group(group)
    except InvalidNameError as exc:
        return SendResponse(codes.SUBSCRIPTION_GROUP_NOT_EXIST, exc.message)
    group_cfg = broker.groups.find(group)
    if group_cfg is None:
        return SendResponse(codes.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
    if group_cfg.retry_queue_nums <= 0:
        # 4.9.4 answers SUCCESS and stores nothing: the message is dropped on purpose.
        return SendResponse(codes.SUCCESS)

    new_topic = retry_topic(group)
    queue_id = semantics.retry_queue_id(broker.rng("broker.send_back"), group_cfg.retry_queue_nums)
    topic_cfg = broker.topics.create_in_send_back(new_topic, group_cfg.retry_queue_nums,
                                                  PERM_READ | PERM_WRITE)
    if not is_writeable(topic_cfg.perm):
        return SendResponse(codes.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")

    record = broker.store.look_message_by_offset(offset)
    if record is None:
        return SendResponse(codes.SYSTEM_ERROR, f"look message by offset failed, {offset}")

    max_times = max_reconsume_times if max_reconsume_times is not None else group_cfg.retry_max_times
    if semantics.dlq_on_send_back(record.reconsume_times, max_times, delay_level):
        new_topic = dlq_topic(group)
        queue_id = 0  # nextInt(99999999) % DLQ_NUMS_PER_GROUP, always 0
        broker.topics.create_in_send_back(new_topic, DLQ_QUEUES, semantics.dlq_perm())
        level = 0
    else:
        level = delay_level if delay_level != 0 else RETRY_DELAY_LEVEL_BASE + record.reconsume_times

    props = send_back_map(properties_to_string(record.properties), original_topic=record.topic,
                          delay_level=level, offset_msg_id=record.msg_id, wait=False,
                          capacity=semantics.properties_map_capacity())
    store_host = (record.store_host if semantics.send_back_store_host_from_message()
                  else broker.config.store_host)
    result = broker.put(dict(
        topic=new_topic, queue_id=queue_id, body=record.body, properties=props,
        properties_string=properties_to_string(
            props, trailing_separator=semantics.properties_trailing_separator()),
        flag=record.flag, sys_flag=record.sys_flag,
        born_ts=record.born_ts, born_host=record.born_host, store_host=store_host,
        reconsume_times=record.reconsume_times + 1, prepared_tx_offset=0, delay_level=None))
    code, remark = codes.send_back_response(result.status)
    if code != codes.SUCCESS:
        return SendResponse(code, remark)
    return SendResponse(code, remark, msg_id=result.msg_id, queue_id=result.queue_id,
                        queue_offset=result.queue_offset, phys_offset=result.phys_offset,
                        topic=result.topic)
