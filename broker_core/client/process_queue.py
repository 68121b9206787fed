"""The client's copy of a pulled queue (RocketMQ ``ProcessQueue``) and the pulled-message view.

The process queue holds every pulled message that is not yet consumed, keyed by queue offset. Its
``remove_message`` returns the offset the consumer may commit: the smallest offset still in
flight, or one past the largest pulled offset when nothing is left. That rule is why one slow
message holds back a queue's committed offset, and why a crash redelivers every message behind it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from broker_core import names
from broker_core.constants import SYSFLAG_COMPRESSED
from broker_core.message import (
    PROP_MAX_OFFSET,
    PROP_MIN_OFFSET,
    PROP_RETRY_TOPIC,
    PROP_UNIQ_KEY,
)

MIB_BYTES = 1024 * 1024
MAX_SPAN_NONE = 0

MessageQueue = tuple[str, int]  # (topic, queue_id): one broker in the model


@dataclass(slots=True)
class PulledMessage:
    """A message as the push consumer holds it (MessageExt): stored fields plus client state.

    ``topic`` starts as the queue's topic and becomes RETRY_TOPIC for a retry message once
    resetRetryTopic ran; ``queue_topic`` keeps where it was pulled from. ``reconsume_times`` is
    the client's copy, raised locally when a send-back fails.
    """

    queue_topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    body: bytes
    properties: dict[str, str]
    reconsume_times: int = 0
    msg_id: str = ""  # offset message id (32 hex)
    born_ts: int = 0
    store_ts: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_host: str = ""
    topic: str = ""
    consume_start_ts: int | None = None  # CONSUME_START_TIME, set when a delivery starts
    attempts: int = field(default=0)  # deliveries of this copy to the listener
    expired: bool = False  # cleanExpiredMsg sent it back while the current delivery ran

    def __post_init__(self) -> None:
        if not self.topic:
            self.topic = self.queue_topic

    @property
    def uniq_key(self) -> str:
        """The client message id (UNIQ_KEY); the offset id when a producer did not set one."""
        return self.properties.get(PROP_UNIQ_KEY) or self.msg_id

    @property
    def client_msg_id(self) -> str:
        """MessageClientExt.getMsgId(): the UNIQ_KEY when present, else the offset id."""
        return self.uniq_key

    @classmethod
    def from_record(cls, record, min_offset: int | None = None,
                    max_offset: int | None = None) -> PulledMessage:
        """Wrap a decoded commit-log record as pulled (PullAPIWrapper.processPullResult)."""
        props = dict(record.properties)
        # processPullResult stamps the queue's bounds on every pulled message; a fallback
        # send-back copies them into the stored retry message, as a 4.9.4 client does.
        if min_offset is not None:
            props[PROP_MIN_OFFSET] = str(min_offset)
        if max_offset is not None:
            props[PROP_MAX_OFFSET] = str(max_offset)
        return cls(queue_topic=record.topic, queue_id=record.queue_id,
                   queue_offset=record.queue_offset, phys_offset=record.phys_offset,
                   body=_consumer_body(record), properties=props,
                   reconsume_times=record.reconsume_times, msg_id=record.msg_id,
                   born_ts=record.born_ts, store_ts=record.store_ts, flag=record.flag,
                   sys_flag=record.sys_flag, born_host=record.born_host)

    def reset_retry_topic(self, group: str) -> None:
        """resetRetryAndNamespace: a %RETRY%group message shows the listener its original topic."""
        if self.queue_topic == names.retry_topic(group):
            original = self.properties.get(PROP_RETRY_TOPIC)
            if original:
                self.topic = original


class ProcessQueue:
    """Pulled, unconsumed messages of one queue, ordered by queue offset."""

    def __init__(self) -> None:
        self._msgs: dict[int, PulledMessage] = {}
        self._keys: list[int] = []  # sorted offsets of _msgs
        self._consuming_orderly: dict[int, PulledMessage] = {}
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.consuming = False
        self.dropped = False
        self.locked = True  # the model has one broker and no lock races: an owner holds its lock
        self.last_consume_ts = 0

    # --- pulled messages in -------------------------------------------------------------------

    def put_messages(self, msgs: list[PulledMessage]) -> bool:
        """Add newly pulled messages; True when an orderly consume should be dispatched."""
        for msg in msgs:
            off = msg.queue_offset
            if off not in self._msgs:
                self._msgs[off] = msg
                bisect.insort(self._keys, off)
                self.msg_count += 1
                self.msg_size += len(msg.body)
                self.queue_offset_max = off  # only a newly cached offset moves the max
        dispatch = False
        if self._msgs and not self.consuming:
            dispatch = True
            self.consuming = True
        return dispatch

    # --- concurrent consumption -----------------------------------------------------------------

    def remove_message(self, msgs: list[PulledMessage]) -> int:
        """Remove consumed messages; the offset that may be committed, or -1 when empty before."""
        result = -1
        if self._msgs:
            result = self.queue_offset_max + 1
            for msg in msgs:
                if self._msgs.pop(msg.queue_offset, None) is not None:
                    del self._keys[bisect.bisect_left(self._keys, msg.queue_offset)]
                    self.msg_count -= 1
                    self.msg_size -= len(msg.body)
            if self._msgs:
                result = self._keys[0]
        return result

    def contains(self, msg: PulledMessage) -> bool:
        return self._msgs.get(msg.queue_offset) is msg

    def head(self) -> PulledMessage | None:
        """The message with the smallest offset still held (cleanExpiredMsg looks only here)."""
        return self._msgs[self._keys[0]] if self._keys else None

    def max_span(self) -> int:
        """Offset distance between the first and last held message (consumeConcurrentlyMaxSpan)."""
        return self._keys[-1] - self._keys[0] if self._keys else MAX_SPAN_NONE

    def offsets(self) -> list[int]:
        return list(self._keys)

    def cached_size_mib(self) -> int:
        """fillProcessQueueInfo's cachedMsgSizeInMiB."""
        return self.msg_size // MIB_BYTES

    # --- orderly consumption ------------------------------------------------------------------

    def take_messages(self, n: int) -> list[PulledMessage]:
        """Move up to ``n`` head messages into the orderly consuming map."""
        offsets = self._keys[:n]
        del self._keys[:n]
        taken = []
        for off in offsets:
            msg = self._msgs.pop(off)
            self._consuming_orderly[off] = msg
            taken.append(msg)
        if not taken:
            self.consuming = False
        return taken

    def commit(self) -> int:
        """Finish the orderly batch; the offset after it, or -1 when nothing was being consumed."""
        if not self._consuming_orderly:
            return -1
        offset = max(self._consuming_orderly) + 1
        self.msg_count -= len(self._consuming_orderly)
        self.msg_size -= sum(len(m.body) for m in self._consuming_orderly.values())
        self._consuming_orderly.clear()
        return offset

    def make_message_to_consume_again(self, msgs: list[PulledMessage]) -> None:
        """Put a suspended orderly batch back at the head of the queue."""
        for msg in msgs:
            self._consuming_orderly.pop(msg.queue_offset, None)
            self._msgs[msg.queue_offset] = msg
            bisect.insort(self._keys, msg.queue_offset)

    def rollback(self) -> None:
        self.make_message_to_consume_again(list(self._consuming_orderly.values()))

    def in_flight_orderly(self) -> int:
        return len(self._consuming_orderly)

    def is_empty(self) -> bool:
        return not self._msgs and not self._consuming_orderly


def _consumer_body(record) -> bytes:
    """The body the listener sees: MessageDecoder inflates a compressed body on pull."""
    return record.decompressed_body() if record.sys_flag & SYSFLAG_COMPRESSED else record.body
