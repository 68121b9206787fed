"""SEND_MESSAGE as RocketMQ 4.9.4 handles it (``SendMessageProcessor.asyncSendMessage``).

The checks run in the broker's order: topic name, not-allowed-send topics, topic lookup or
auto-creation, queue id range; then ``handleRetryAndDLQ`` for ``%RETRY%`` topics; then the
properties (CLUSTER added, WAIT stripped from the stored string but kept in the map) and the put.
What 5.x does differently (MSG_REGION and TRACE_ON added, WAIT kept, ``DELAY=-1`` on a DLQ
diversion, ``>`` for the DLQ test) is asked of ``broker.semantics``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core.broker import codes
from broker_core.broker.semantics import RETRY_QUEUE_RANDOM_BOUND
from broker_core.constants import (
    DLQ_QUEUES,
    PERM_READ,
    PERM_WRITE,
    PROP_TIMER_OUT_MS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSFLAG_MULTI_TAGS,
    TIMER_TOPIC,
    TOPIC_QUEUES_DEFAULT,
)
from broker_core.errors import InvalidNameError
from broker_core.message import (
    PROP_REAL_TOPIC,
    PROP_TRAN_MSG,
    PROP_UNIQ_KEY,
    broker_receive_properties,
    java_ordered_properties_string,
)
from broker_core.names import dlq_topic, group_of, is_not_allowed_send_topic, is_retry_topic, validate_topic

TOPIC_FILTER_MULTI_TAG = "MULTI_TAG"
NOT_DELAYED_DELAY = "-1"  # a DELAY the store never schedules (what 5.x writes on a DLQ send)


@dataclass
class SendRequest:
    """A producer's SEND_MESSAGE: header fields plus the client's property map (insertion order)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_ts: int = 0
    born_host: str = "127.0.0.1:0"
    producer_group: str = ""
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    unit_mode: bool = False
    default_topic_queue_nums: int = TOPIC_QUEUES_DEFAULT


@dataclass(frozen=True)
class RecallHandle:
    """``RecallMessageHandle.HandleV1`` (the model keeps its fields, not its base64 text)."""

    topic: str
    broker_name: str
    timestamp_ms: int
    uniq_key: str


def recall_handle(broker, phys_offset: int) -> RecallHandle | None:
    """The handle a send of the record at ``phys_offset`` answers with
    (``SendMessageProcessor.attachRecallHandle``): only a message the timer hook put into the
    wheel (``TIMER_OUT_MS`` and a ``REAL_TOPIC`` that is not a retry topic)."""
    record = broker.store.look_message_by_offset(phys_offset)
    if record is None or record.topic != TIMER_TOPIC:
        return None
    out_ms, real_topic = record.properties.get(PROP_TIMER_OUT_MS), record.properties.get(PROP_REAL_TOPIC)
    uniq_key = record.properties.get(PROP_UNIQ_KEY)
    if out_ms is None or real_topic is None or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or not uniq_key:
        return None
    return RecallHandle(real_topic, broker.config.name, int(out_ms) + 1, uniq_key)


@dataclass
class SendResponse:
    """The broker's answer; msg_id and the offsets are set only when the record was stored."""

    code: int
    remark: str = ""
    msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    phys_offset: int | None = None
    topic: str | None = None
    recall_handle: RecallHandle | None = None  # a 5.x timer message's (broker_core/broker/recall.py)

    @property
    def ok(self) -> bool:
        return self.code == codes.SUCCESS


def client_wire_properties(properties: dict[str, str]) -> str:
    """The property string a Java client sends: its ``HashMap`` serialized in Java order."""
    return java_ordered_properties_string(properties)


def send_message(broker, req: SendRequest) -> SendResponse:
    """Store a producer's message, or say why not, with 4.9.4's codes and remarks."""
    # msgCheck: the name, then the topics a client may never write to.
    try:
        validate_topic(req.topic)
    except InvalidNameError as exc:
        return SendResponse(codes.SYSTEM_ERROR, exc.message)
    if is_not_allowed_send_topic(req.topic):
        return SendResponse(codes.NO_PERMISSION, f"Sending message to topic[{req.topic}] is forbidden.")
    topics = broker.topics
    topic_cfg = topics.get(req.topic)
    if topic_cfg is None:
        topic_cfg = topics.create_in_send(req.topic, req.default_topic_queue_nums)
        if topic_cfg is None and is_retry_topic(req.topic):
            topic_cfg = topics.create_in_send_back(req.topic, 1, PERM_READ | PERM_WRITE)
        if topic_cfg is None:
            return SendResponse(codes.TOPIC_NOT_EXIST,
                                f"topic[{req.topic}] not exist, apply first please!")
    valid_ids = max(topic_cfg.write_queue_nums, topic_cfg.read_queue_nums)
    if req.queue_id >= valid_ids:
        return SendResponse(codes.SYSTEM_ERROR,
                            f"request queueId[{req.queue_id}] is illegal, {topic_cfg} "
                            f"Producer: {req.born_host}")
    topic, queue_id = req.topic, req.queue_id
    diverted_to_dlq = False
    if queue_id < 0:
        queue_id = broker.rng("broker.queue_select").randrange(RETRY_QUEUE_RANDOM_BOUND) \
            % topic_cfg.write_queue_nums

    # handleRetryAndDLQ (§5.3): a client send to %RETRY%group may be diverted to %DLQ%group.
    if is_retry_topic(topic):
        group = group_of(topic)
        group_cfg = broker.groups.find(group)
        if group_cfg is None:
            return SendResponse(codes.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group not exist, {group}")
        max_times = (req.max_reconsume_times if req.max_reconsume_times is not None
                     else group_cfg.retry_max_times)
        if broker.semantics.dlq_on_retry_topic_send(req.reconsume_times, max_times):
            topic = dlq_topic(group)
            diverted_to_dlq = True
            queue_id = 0  # nextInt(99999999) % DLQ_NUMS_PER_GROUP, always 0
            topic_cfg = topics.create_in_send_back(topic, DLQ_QUEUES, broker.semantics.dlq_perm())
            # 4.9.4 writes DELAY=0 into a map that the client's properties then replace, so a
            # client DELAY survives and the DLQ copy is first parked in SCHEDULE_TOPIC_XXXX.
    sys_flag = req.sys_flag
    if topic_cfg.topic_filter_type == TOPIC_FILTER_MULTI_TAG:
        sys_flag |= SYSFLAG_MULTI_TAGS

    wire = client_wire_properties(req.properties)
    semantics = broker.semantics
    stored, props = broker_receive_properties(
        wire, broker.config.cluster, capacity=semantics.properties_map_capacity(),
        added=semantics.send_added_properties(),
        dlq_delay=(NOT_DELAYED_DELAY if diverted_to_dlq and not semantics.dlq_send_keeps_client_delay()
                   else None),
        strip_wait=semantics.strip_wait_from_stored_properties(),
        trailing_separator=semantics.properties_trailing_separator())
    fields = dict(
        topic=topic, queue_id=queue_id, body=req.body, properties=props, properties_string=stored,
        flag=req.flag, sys_flag=sys_flag, born_ts=req.born_ts, born_host=req.born_host,
        store_host=broker.config.store_host, reconsume_times=req.reconsume_times,
        prepared_tx_offset=0, delay_level=None)
    half = (props.get(PROP_TRAN_MSG) or "").lower() == "true"  # Boolean.parseBoolean(TRAN_MSG)
    if half:
        result = broker.transactions.prepare(fields, props)  # a half message (docs/transactions.md)
    else:
        result = broker.put(fields)
    code, remark, stored_ok = codes.put_status_response(result.status)
    if not stored_ok:
        return SendResponse(code, remark)
    handle = None
    if result.topic == TIMER_TOPIC:
        handle = recall_handle(broker, result.phys_offset)
    # A half's answer names the queue the producer chose and the half's offsets (the response
    # header's queueId is the request's).
    return SendResponse(code, remark, msg_id=result.msg_id, queue_id=queue_id if half else result.queue_id,
                        queue_offset=result.queue_offset, phys_offset=result.phys_offset,
                        topic=result.topic, recall_handle=handle)
