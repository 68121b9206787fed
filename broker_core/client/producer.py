"""The producer model: RocketMQ 4.9.4 ``DefaultMQProducer`` send paths on the virtual clock.

Sync sends make up to 1 + ``retryTimesWhenSendFailed`` (2) attempts inside a 3000 ms budget and
retry a broker error only when its code is one of the six ``retryResponseCodes``; a remoting
failure (broker down, timeout) is always retried. Async sends make one attempt and resend at most
twice, but only after a remoting failure: a broker error code in an async response is final.
Oneway sends make one attempt and ignore the result. Queues are chosen round-robin per topic
(``selectOneMessageQueue``); with one broker in the model "avoid the last broker" picks any queue.

A send happens within one simulator event; ``send_latency_ms`` (a fault knob) is charged against
the budget so that a slow broker makes the producer time out, and an attempt that times out may
still have been stored (the duplicate a real client produces by retrying).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from broker_core import names

# RemotingCommand response codes (ResponseCode, 4.9.4): one definition, shared with the broker.
from broker_core.broker.codes import (
    FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT,
    NO_BUYER_ID,
    NO_PERMISSION,
    NOT_IN_CURRENT_UNIT,
    SERVICE_NOT_AVAILABLE,
    SLAVE_NOT_AVAILABLE,
    SUCCESS,
    SYSTEM_ERROR,
    TOPIC_NOT_EXIST,
)
from broker_core.constants import (
    BODY_SIZE_BYTES_MAX,
    COMPRESS_BODY_OVER_BYTES,
    COMPRESS_ZLIB_LEVEL,
    RETRY_QUEUES_DEFAULT,
    SEND_MSG_TIMEOUT_MS,
    SEND_RETRY_TIMES_ASYNC,
    SEND_RETRY_TIMES_SYNC,
    SYSFLAG_COMPRESSED,
    SYSFLAG_TRANSACTION_PREPARED,
    TOPIC_QUEUES_DEFAULT,
)
from broker_core.errors import BadInputError, RetryAuditError
from broker_core.message import (
    PROP_DELAY,
    PROP_KEYS,
    PROP_MAX_RECONSUME_TIMES,
    PROP_RECONSUME_TIME,
    PROP_TAGS,
    PROP_TRAN_MSG,
    PROP_UNIQ_KEY,
    PROP_WAIT,
)

# DefaultMQProducer.retryResponseCodes in 4.9.4 (5.x adds SYSTEM_BUSY and GO_AWAY).
RETRY_RESPONSE_CODES = frozenset({TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR,
                                  NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT})
# Codes processSendResponse turns into a SendResult (stored, but not SEND_OK) rather than an error.
STORED_RESPONSE_CODES = frozenset({SUCCESS, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
                                   SLAVE_NOT_AVAILABLE})

SEND_MODES = ("sync", "async", "oneway")
SEND_OK = "SEND_OK"
SEND_FAILED = "FAILED"
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # MixAll.CLIENT_INNER_PRODUCER_GROUP
QUEUE_INDEX_START_MAX = 2**31  # ThreadLocalIndex starts at a random non-negative int
FAILED_KEYS_MAX = 1_000_000
RESPONSE_WAIT_OVERSHOOT_MS = 1  # a response wait that times out returns just after its deadline  # bound on the failed-key list kept for loss accounting


@dataclass
class SendOutcome:
    """What one logical send ended with, after every attempt."""

    ok: bool
    code: int | None = None  # the last broker response code (None: no response)
    remark: str = ""
    attempts: int = 0
    queue_id: int = -1
    msg_id: str = ""
    phys_offset: int = -1
    queue_offset: int = -1
    stored_on_timeout: list[int] = field(default_factory=list)  # phys offsets of timed-out puts
    recall_handle: object | None = None  # a 5.x timer message's (SendResult.getRecallHandle)


class Producer:
    """A producer client: ``send`` returns the message's UNIQ_KEY whatever the outcome."""

    def __init__(self, sim, broker, streams, *, producer_group: str, born_host: str, uniq_keys,
                 recorder, send_mode: str = "sync", send_timeout_ms: int = SEND_MSG_TIMEOUT_MS,
                 send_latency_ms: int = 0, record_produced: bool = True):
        assert send_mode in SEND_MODES, f"unknown send mode {send_mode!r}"
        self.sim = sim
        self.broker = broker
        self.producer_group = producer_group
        self.born_host = born_host
        self.uniq_keys = uniq_keys
        self.recorder = recorder
        self.send_mode = send_mode
        self.send_timeout_ms = send_timeout_ms
        self.send_latency_ms = send_latency_ms  # fault knob: time one request/response takes
        self.record_produced = record_produced
        self._rng = streams.stream(f"producer.{producer_group}.{born_host}.queue")
        self._queue_index: dict[str, int] = {}
        self.sent_ok = 0
        self.send_failed = 0
        self.failed_uniq_keys: list[str] = []
        self.attempts_total = 0

    # --- public API -----------------------------------------------------------------------------

    def send(self, topic: str, body: bytes, *, tags: str | None = None, keys: str | None = None,
             delay_level: int = 0, properties: dict[str, str] | None = None, recall: bool = False) -> str:
        """Send one message in this producer's mode; returns its UNIQ_KEY. ``recall``: a timer
        message is recalled as soon as the send answers with its handle (``recallMessage``)."""
        names.validate_topic(topic)
        if names.is_not_allowed_send_topic(topic):
            raise BadInputError(f"Sending message to topic[{topic}] is forbidden.", where="topic")
        props: dict[str, str] = {}
        # new Message(topic, tags, keys, body): TAGS, KEYS, then WAIT=true.
        if tags:
            props[PROP_TAGS] = tags
        if keys:
            props[PROP_KEYS] = keys
        props[PROP_WAIT] = "true"
        props.update(properties or {})
        if delay_level > 0:
            props[PROP_DELAY] = str(delay_level)
        uniq_key = props.get(PROP_UNIQ_KEY) or self.uniq_keys.next(self.sim.now())
        props[PROP_UNIQ_KEY] = uniq_key
        outcome = self.send_properties(topic, body, props, mode=self.send_mode)
        if outcome.ok:
            self.sent_ok += 1
        else:
            self.send_failed += 1
            if len(self.failed_uniq_keys) < FAILED_KEYS_MAX:
                self.failed_uniq_keys.append(uniq_key)
        if recall and outcome.ok and outcome.recall_handle is not None:
            self.recall(topic, outcome.recall_handle)
        if self.record_produced:
            self.recorder.emit("produced", {
                "uniq_key": uniq_key, "topic": topic, "queue_id": outcome.queue_id,
                "delay_level": delay_level, "send_ts": self.sim.now(),
                "status": SEND_OK if outcome.ok else SEND_FAILED, "msg_id": outcome.msg_id,
                "phys_offset": outcome.phys_offset, "attempts": outcome.attempts})
        return uniq_key

    def recall(self, topic: str, handle) -> bool:
        """``recallMessage(topic, handle)`` (5.3.2+ clients): whether the broker wrote the recall
        record. One attempt; a broker that is down or refuses leaves the timer to run."""
        try:
            return self.broker.recall_message(topic, handle, producer_group=self.producer_group,
                                              born_host=self.born_host).ok
        except RetryAuditError:
            return False

    def send_properties(self, topic: str, body: bytes, props: dict[str, str], *,
                        mode: str = "sync", flag: int = 0) -> SendOutcome:
        """Send a message whose property map is already built (also the client's send-back path)."""
        assert mode in SEND_MODES, f"unknown send mode {mode!r}"
        if body is None or len(body) == 0:
            raise BadInputError("the message body length is zero", where=f"topic {topic}")
        if len(body) > BODY_SIZE_BYTES_MAX:
            raise BadInputError(
                f"the message body size over max value, MAX: {BODY_SIZE_BYTES_MAX}",
                where=f"topic {topic}")
        sys_flag = 0
        if len(body) > COMPRESS_BODY_OVER_BYTES:
            # tryToCompressMessage: bodies over 4 KiB go out zlib-compressed with the sysFlag bit.
            body = zlib.compress(body, COMPRESS_ZLIB_LEVEL)
            sys_flag |= SYSFLAG_COMPRESSED
        if (props.get(PROP_TRAN_MSG) or "").lower() == "true":
            sys_flag |= SYSFLAG_TRANSACTION_PREPARED  # sendKernelImpl: a transaction's half
        if mode == "sync":
            return self._send_sync(topic, body, props, flag, sys_flag)
        if mode == "async":
            return self._send_async(topic, body, props, flag, sys_flag)
        outcome = self._attempt(topic, body, props, flag, sys_flag, self.send_timeout_ms)[0]
        outcome.attempts = 1
        return outcome

    # --- send loops -----------------------------------------------------------------------------

    def _send_sync(self, topic, body, props, flag, sys_flag) -> SendOutcome:
        """sendDefaultImpl(SYNC): up to 3 attempts, retryable codes only, inside the budget."""
        elapsed = 0
        last = SendOutcome(ok=False, remark="no attempt made")
        attempts = 0
        stored_on_timeout: list[int] = []
        for _ in range(1 + SEND_RETRY_TIMES_SYNC):
            if elapsed > self.send_timeout_ms:
                last.remark = "sendDefaultImpl call timeout"
                break
            outcome, retry, cost = self._attempt(topic, body, props, flag, sys_flag,
                                                 self.send_timeout_ms - elapsed)
            attempts += 1
            elapsed += cost
            stored_on_timeout.extend(outcome.stored_on_timeout)
            last = outcome
            if outcome.ok or not retry:
                break
        last.attempts = attempts
        last.stored_on_timeout = stored_on_timeout
        return last

    def _send_async(self, topic, body, props, flag, sys_flag) -> SendOutcome:
        """Async: one attempt, resent through onExceptionImpl only after a remoting failure."""
        attempts = 0
        stored_on_timeout: list[int] = []
        outcome = SendOutcome(ok=False)
        for _ in range(1 + SEND_RETRY_TIMES_ASYNC):
            outcome, _retry, _cost = self._attempt(topic, body, props, flag, sys_flag,
                                                   self.send_timeout_ms)
            attempts += 1
            stored_on_timeout.extend(outcome.stored_on_timeout)
            # A response that arrived (even an error code) is final: processSendResponse
            # exceptions call onExceptionImpl with needRetry=false.
            if outcome.ok or outcome.code is not None:
                break
        outcome.attempts = attempts
        outcome.stored_on_timeout = stored_on_timeout
        return outcome

    def _attempt(self, topic, body, props, flag, sys_flag,
                 remaining_ms: int) -> tuple[SendOutcome, bool, int]:
        """One request: (outcome, whether a sync send may retry it, virtual ms it cost)."""
        from broker_core.broker.send import SendRequest  # imported late: the broker package is big

        self.attempts_total += 1
        queue_id = self.select_queue(topic)
        reconsume_times = 0
        max_reconsume_times = None
        if names.is_retry_topic(topic):
            # sendKernelImpl copies these two properties into the request header for a retry
            # topic; the stored properties keep them (the string was built before clearing).
            reconsume_times = int(props.get(PROP_RECONSUME_TIME, "0") or 0)
            if props.get(PROP_MAX_RECONSUME_TIMES):
                max_reconsume_times = int(props[PROP_MAX_RECONSUME_TIMES])
        request = SendRequest(topic=topic, queue_id=queue_id, body=body, properties=dict(props),
                              flag=flag, sys_flag=sys_flag, born_ts=self.sim.now(),
                              born_host=self.born_host, producer_group=self.producer_group,
                              reconsume_times=reconsume_times,
                              max_reconsume_times=max_reconsume_times)
        try:
            response = self.broker.send_message(request)
        except RetryAuditError as exc:
            # The broker is unreachable or refused the connection: a RemotingException.
            return (SendOutcome(ok=False, code=None, remark=str(exc), queue_id=queue_id),
                    True, min(self.send_latency_ms, max(remaining_ms, 0)))
        if self.send_latency_ms > remaining_ms:
            # RemotingTimeoutException: the client gave up, whatever the broker did.
            stored = [response.phys_offset] if response.code in STORED_RESPONSE_CODES else []
            # The wait ends just past the deadline, so the budget is spent: no further attempt.
            return (SendOutcome(ok=False, code=None, remark="wait response timeout",
                                queue_id=queue_id, stored_on_timeout=stored),
                    True, max(remaining_ms, 0) + RESPONSE_WAIT_OVERSHOOT_MS)
        code = int(response.code)
        if code in STORED_RESPONSE_CODES:
            return (SendOutcome(ok=True, code=code, remark=response.remark or "",
                                queue_id=response.queue_id, msg_id=response.msg_id or "",
                                phys_offset=response.phys_offset, queue_offset=response.queue_offset,
                                recall_handle=response.recall_handle),
                    False, self.send_latency_ms)
        return (SendOutcome(ok=False, code=code, remark=response.remark or "", queue_id=queue_id),
                code in RETRY_RESPONSE_CODES, self.send_latency_ms)

    def select_queue(self, topic: str) -> int:
        """selectOneMessageQueue: the next queue of ``topic`` in round-robin order."""
        count = self.broker.topic_queue_count(topic) or 0
        if count <= 0:
            # No route yet: 4.9.4 builds one from TBW102 with defaultTopicQueueNums queues
            # (1 for a retry topic, which the broker creates on first use).
            count = RETRY_QUEUES_DEFAULT if names.is_retry_topic(topic) else TOPIC_QUEUES_DEFAULT
        index = self._queue_index.get(topic)
        if index is None:
            index = self._rng.randrange(QUEUE_INDEX_START_MAX)
        index += 1
        self._queue_index[topic] = index
        return index % count
