"""Recalling a 5.x timer message before it is due (``RecallMessageProcessor`` @5.3.3).

A send that put a message into the timer wheel answers with a recall handle
(``SendMessageProcessor.attachRecallHandle``; ``broker_core.broker.send`` builds it): the real
topic, the broker's name, the message's ``TIMER_OUT_MS`` + 1 ("consider of floor") and its UNIQ_KEY. ``recallMessage(topic, handle)``
makes the broker write a **recall record**: body ``"0"``, TAGS ``_RECALL_TAG_``, the recalled
message's UNIQ_KEY, ``TIMER_DEL_UNIQKEY`` (``Semantics.timer_delete_key``), ``TIMER_DELIVER_MS`` =
the handle's time, ``BORN_TIMESTAMP`` (now), an empty ``TRACE_CONTEXT`` and ``PGROUP``, in a
default ``HashMap`` (``setTags`` makes it), born at the client's address. Its put goes through
the timer hook like any timer message, so it lands in ``rmq_sys_wheel_timer`` with the recalled
message's ``TIMER_OUT_MS``: in the same slot, where the wheel drops both
(``broker_core.broker.timer``). A real 5.3.3 broker wrote such a record and never delivered the
message (docs/rocketmq-5x.md, "Record forms: confirmed"); the broker refuses a recall unless
``recallMessageEnable``, which the model's 5.x broker has on.
"""

from __future__ import annotations

from broker_core.broker import codes
from broker_core.broker.send import RecallHandle, SendResponse
from broker_core.constants import (
    PROP_BORN_TIMESTAMP,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DELIVER_MS,
    PROP_TRACE_CONTEXT,
    RECALL_BODY,
    RECALL_TAG,
    TIMER_MAX_DELAY_MS,
)
from broker_core.message import PROP_PGROUP, PROP_TAGS, PROP_UNIQ_KEY, JavaHashMap


def recall_message(broker, topic: str, handle: RecallHandle, *, producer_group: str,
                   born_host: str) -> SendResponse:
    """RECALL_MESSAGE: write the recall record, or answer why not with the broker's code."""
    if broker.timer is None:
        return SendResponse(codes.NO_PERMISSION, "recall failed, operation is forbidden")
    if broker.topics.get(topic) is None:
        return SendResponse(codes.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
    if topic != handle.topic:
        return SendResponse(codes.ILLEGAL_OPERATION, "recall failed, topic not match")
    if handle.broker_name != broker.config.name:
        return SendResponse(codes.ILLEGAL_OPERATION, "recall failed, broker service not available")
    now = broker.sim.now()
    if not 0 < handle.timestamp_ms - now < TIMER_MAX_DELAY_MS:
        return SendResponse(codes.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
    props = JavaHashMap()  # setTags: a default HashMap, then the puts in buildMessage's order
    props.put(PROP_TAGS, RECALL_TAG)
    props.put(PROP_TIMER_DEL_UNIQKEY, broker.semantics.timer_delete_key(handle.topic, handle.uniq_key))
    props.put(PROP_UNIQ_KEY, handle.uniq_key)
    props.put(PROP_TIMER_DELIVER_MS, str(handle.timestamp_ms))
    props.put(PROP_BORN_TIMESTAMP, str(now))
    props.put(PROP_TRACE_CONTEXT, "")
    props.put(PROP_PGROUP, producer_group)
    result = broker.put(dict(
        topic=handle.topic, queue_id=0, body=RECALL_BODY, properties=props, flag=0, sys_flag=0,
        born_ts=now, born_host=born_host, store_host=broker.config.store_host, reconsume_times=0,
        prepared_tx_offset=0, delay_level=None))
    if not broker._stored(result):
        return SendResponse(codes.SYSTEM_ERROR, "recall failed, execute error")
    return SendResponse(codes.SUCCESS, msg_id=handle.uniq_key, queue_id=result.queue_id,
                        queue_offset=result.queue_offset, phys_offset=result.phys_offset, topic=result.topic)
