"""Client-side send-back: how a push consumer returns a failed message to the broker.

Concurrent consumers first ask the broker to re-put the stored message (CONSUMER_SEND_MSG_BACK,
``DefaultMQPushConsumerImpl.sendMessageBack``); when that call fails for any reason the client
sends a new message to ``%RETRY%<group>`` itself through its inner producer (§6.3 step 3). Orderly
consumers never call the broker's send-back: at their max they send to ``%RETRY%<group>``
directly and the broker's ``handleRetryAndDLQ`` routes the copy to ``%DLQ%<group>`` (§6.7).
"""

from __future__ import annotations

from broker_core import names
from broker_core.client.producer import SUCCESS
from broker_core.constants import RETRY_DELAY_LEVEL_BASE
from broker_core.errors import RetryAuditError
from broker_core.message import (
    PROP_DELAY,
    PROP_MAX_RECONSUME_TIMES,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
    PROP_TRAN_MSG,
)

# consume_attempts outcomes written by the send-back paths.
SENT_BACK = "SENT_BACK"  # the broker re-put the message (CONSUMER_SEND_MSG_BACK succeeded)
SENT_BACK_BY_CLIENT = "SENT_BACK_BY_CLIENT"  # the client's own send to %RETRY%group succeeded


def retry_properties(msg, *, reconsume_time: int, max_reconsume_times: int,
                     origin_after_copy: bool = False) -> dict[str, str]:
    """The property map of a client-built retry message (fallback and orderly send-back).

    Every property of the consumed message is kept (UNIQ_KEY included, so the copy keeps its
    message key), then RETRY_TOPIC, RECONSUME_TIME, MAX_RECONSUME_TIMES and DELAY = 3 +
    reconsumeTimes are set and TRAN_MSG is cleared.

    ORIGIN_MESSAGE_ID: the concurrent fallback (``DefaultMQPushConsumerImpl.sendMessageBack``) sets
    it on the new message *before* ``MessageAccessor.setProperties`` replaces the whole map with the
    consumed message's, so a message's first client-side send-back there carries none; the orderly
    send-back (``origin_after_copy``) sets it after the copy, to the message's own ORIGIN_MESSAGE_ID
    or else its msgId (the UNIQ_KEY). Both are what a real 4.9.4 client and broker wrote
    (docs/decisions.md). From 5.4 the concurrent fallback sets it after the copy too
    (``Semantics.fallback_sets_origin_message_id``).
    """
    props = dict(msg.properties)
    if origin_after_copy and not (props.get(PROP_ORIGIN_MESSAGE_ID) or "").strip():
        props[PROP_ORIGIN_MESSAGE_ID] = msg.client_msg_id
    props[PROP_RETRY_TOPIC] = msg.topic
    props[PROP_RECONSUME_TIME] = str(reconsume_time)
    props[PROP_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    props.pop(PROP_TRAN_MSG, None)
    props[PROP_DELAY] = str(RETRY_DELAY_LEVEL_BASE + msg.reconsume_times)
    return props


class SendBack:
    """The send-back paths of one consumer, with the group's fault knobs applied."""

    def __init__(self, consumer):
        self.consumer = consumer
        self.group = consumer.group
        self.settings = consumer.group.settings
        self.calls = 0
        self.broker_failures = 0
        self.fallback_failures = 0

    def concurrent(self, msg, delay_level: int, max_reconsume_times: int) -> str | None:
        """sendMessageBack: the outcome (SENT_BACK / SENT_BACK_BY_CLIENT) or None when both fail.

        ``delay_level`` goes to the broker only: the fallback send always asks for level
        3 + reconsumeTimes, so a DLQ request (-1) whose send-back fails becomes a plain retry, as
        in the 4.9.4 and 5.3.3 clients.
        """
        self.calls += 1
        group = self.group
        if self._broker_send_back(msg, delay_level, max_reconsume_times):
            return SENT_BACK
        self.broker_failures += 1
        # Fallback: a normal send of a new message to %RETRY%group (any exception above).
        if group.draw_fault(group.fallback_failure_probability):
            self.fallback_failures += 1
            return None
        props = retry_properties(msg, reconsume_time=msg.reconsume_times + 1,
                                 max_reconsume_times=max_reconsume_times,
                                 origin_after_copy=group.broker.semantics.fallback_sets_origin_message_id())
        if self._client_send(msg, props):
            return SENT_BACK_BY_CLIENT
        self.fallback_failures += 1
        return None

    def orderly(self, msg, max_reconsume_times: int) -> bool:
        """ConsumeMessageOrderlyService.sendMessageBack: True when the send to %RETRY% succeeded."""
        self.calls += 1
        group = self.group
        if group.draw_fault(group.fallback_failure_probability):
            self.fallback_failures += 1
            return False
        # 4.9.4 writes RECONSUME_TIME = reconsumeTimes (5.1.1+ adds one): the client runs the
        # broker's release, so the broker's semantics answer for it.
        reconsume_time = group.broker.semantics.orderly_send_back_reconsume_time(msg.reconsume_times)
        props = retry_properties(msg, reconsume_time=reconsume_time,
                                 max_reconsume_times=max_reconsume_times, origin_after_copy=True)
        ok = self._client_send(msg, props)
        if not ok:
            self.fallback_failures += 1
        return ok

    def _client_send(self, msg, props: dict[str, str]) -> bool:
        """The inner producer's sync send to %RETRY%group; a client-side check failing (e.g. an
        empty body) is an exception the caller logs, i.e. a failed send."""
        try:
            outcome = self.consumer.inner_producer.send_properties(
                names.retry_topic(self.settings.group), msg.body, props, mode="sync",
                flag=msg.flag)
        except RetryAuditError:
            return False
        return outcome.ok

    def _broker_send_back(self, msg, delay_level: int, max_reconsume_times: int) -> bool:
        """CONSUMER_SEND_MSG_BACK; False on a fault, a broker error or an unreachable broker."""
        group = self.group
        if group.draw_fault(group.send_back_failure_probability):
            return False
        try:
            response = group.broker.consumer_send_msg_back(
                msg.phys_offset, self.settings.group, delay_level, msg.client_msg_id, msg.topic,
                max_reconsume_times)
        except RetryAuditError:
            return False
        return int(response.code) == SUCCESS
