"""The one place that builds and checks topic and group names (RocketMQ TopicValidator, MixAll).

Nobody else concatenates ``%RETRY%`` or ``%DLQ%``: call :func:`retry_topic` / :func:`dlq_topic`.
A name that passes :func:`validate_topic` / :func:`validate_group` contains only
``[%|a-zA-Z0-9_-]``, so it can never make the store write outside its directory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from broker_core.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    GROUP_NAME_LENGTH_MAX,
    LMQ_PREFIX,
    POP_RETRY_V1_SEPARATOR,
    POP_RETRY_V2_SEPARATOR,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_GROUP_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
    TOPIC_NAME_LENGTH_MAX,
)
from broker_core.errors import InvalidNameError

_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")

# Transactional messages (docs/transactions.md): the half messages and their check copies, the
# op records that say which were decided, and where a message checked too often is discarded
# (TopicValidator); the broker's own group that walks the first two (MixAll.CID_SYS_RMQ_TRANS).
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANS_GROUP = "CID_RMQ_SYS_TRANS"
# Message trace (docs/client-trace.md): the topic clients write their trace records to by default
# (TopicValidator.RMQ_SYS_TRACE_TOPIC; a broker hosts it with traceTopicEnable=true), and the prefix
# of the cloud channel's per-region topics (TraceConstants.TRACE_TOPIC_PREFIX).
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_DATA_TOPIC_PREFIX = "rmq_sys_TRACE_DATA_"
SYSTEM_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", TRANS_HALF_TOPIC, TRACE_TOPIC,
    TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
})
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a clustering group's failed messages come back (MixAll.getRetryTopic)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after the last retry (MixAll.getDLQTopic)."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def group_of(topic: str) -> str | None:
    """The group a ``%RETRY%``/``%DLQ%`` topic belongs to, or None for any other topic."""
    if is_retry_topic(topic):
        return topic[len(RETRY_GROUP_TOPIC_PREFIX):]
    if is_dlq_topic(topic):
        return topic[len(DLQ_GROUP_TOPIC_PREFIX):]
    return None


def pop_retry_topic(group: str, topic: str) -> str:
    """The v1 POP retry topic ``%RETRY%<group>_<topic>`` the 5.x revive service writes ``group``'s
    retries of ``topic`` to (KeyBuilder.buildPopRetryTopicV1); a retry topic's records stay in it."""
    if is_retry_topic(topic):
        return topic
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}{POP_RETRY_V1_SEPARATOR}{topic}"


def pop_retry_v2_group(topic: str) -> str | None:
    """The group of a 5.x POP retry topic ``%RETRY%<group>+<topic>``, or None for any other name."""
    group = group_of(topic)
    if group is None or not is_retry_topic(topic) or POP_RETRY_V2_SEPARATOR not in group:
        return None
    return group.split(POP_RETRY_V2_SEPARATOR, 1)[0]


@dataclass(frozen=True)
class RetryTopicOwner:
    """Whose a ``%RETRY%`` topic is: the group, the origin topic when the name holds one (a 5.x
    POP retry topic), and whether the name fits more than one (group, topic) the store knows."""

    group: str | None
    origin_topic: str | None = None
    ambiguous: bool = False


def origin_of_retry_topic_property(retry_topic: str | None, group: str | None) -> str | None:
    """The origin topic a record's RETRY_TOPIC property names, for a record of ``group``.

    A push consumer's send-back stores the origin topic itself. The 5.x proxy's send-back of a
    POP message to the DLQ stores the POP retry topic (``%RETRY%<group>_<topic>`` or
    ``%RETRY%<group>+<topic>``), whose topic is the origin (``KeyBuilder.parseNormalTopic(topic,
    group)``). A ``%RETRY%`` name that is not of ``group`` says nothing: None, as for no property."""
    if not retry_topic:
        return None
    if not retry_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return retry_topic
    if not group:
        return None
    for separator in (POP_RETRY_V2_SEPARATOR, POP_RETRY_V1_SEPARATOR):
        prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}{separator}"
        if retry_topic.startswith(prefix) and len(retry_topic) > len(prefix):
            return retry_topic[len(prefix):]
    return None


def retry_topic_owner(topic: str, groups: Iterable[str], topics: Iterable[str]) -> RetryTopicOwner | None:
    """The owner of a ``%RETRY%`` topic, resolved against the groups and topics a store's config
    knows (``subscriptionGroup.json``, ``topics.json``); None for any other topic.

    ``%RETRY%g+T`` (POP, v2) splits at its first '+'. ``%RETRY%X`` is a push group's retry topic
    when X is a known group, and a POP v1 retry topic ``%RETRY%g_T`` for every split of X at a '_'
    into a known group g and a known topic T. One reading is the owner; several are ambiguous
    (group None); none leaves X as the group, as the 4.9.4 rule reads it.
    """
    if not is_retry_topic(topic):
        return None
    rest = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
    if POP_RETRY_V2_SEPARATOR in rest:
        group, origin = rest.split(POP_RETRY_V2_SEPARATOR, 1)
        return RetryTopicOwner(group, origin)
    known_groups, known_topics = set(groups), set(topics)
    readings = [RetryTopicOwner(rest)] if rest in known_groups else []
    readings += [RetryTopicOwner(rest[:i], rest[i + 1:]) for i, ch in enumerate(rest)
                 if ch == "_" and rest[:i] in known_groups and rest[i + 1:] in known_topics]
    if len(readings) > 1:
        return RetryTopicOwner(None, None, ambiguous=True)
    return readings[0] if readings else RetryTopicOwner(rest)


def is_bookkeeping_record(topic: str, real_topic: str | None) -> bool:
    """Whether a 5.x record is the broker's own bookkeeping, never a message hop: a record in an
    ``rmq_sys_*`` topic (POP checkpoints and acks in ``rmq_sys_REVIVE_LOG_*``, broker-member sync)
    other than a message's timer record, a timer record whose real topic is such a topic (a POP
    checkpoint waiting in the wheel), a retry/DLQ record of a broker group (``CID_RMQ_SYS_*``), a
    transaction op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC``: evidence of a decision, no message), or a
    message-trace record (``RMQ_SYS_TRACE_TOPIC``; a cloud region's is an ``rmq_sys_*`` topic)."""
    if topic == TIMER_TOPIC:
        return (real_topic or SYSTEM_TOPIC_PREFIX).startswith(SYSTEM_TOPIC_PREFIX)
    group = group_of(topic)
    return (topic.startswith(SYSTEM_TOPIC_PREFIX) or topic == TRANS_OP_HALF_TOPIC or topic == TRACE_TOPIC
            or (group is not None and group.startswith(SYSTEM_GROUP_PREFIX)))


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


def _is_blank(name: str | None) -> bool:
    return name is None or name.strip() == ""


def validate_topic(topic: str | None) -> str:
    """Return the topic if RocketMQ 4.9.4 accepts it, else raise with RocketMQ's own message."""
    if _is_blank(topic):
        raise InvalidNameError("The specified topic is blank.", where="topic")
    assert topic is not None
    if not _VALID.fullmatch(topic):
        raise InvalidNameError(
            f"The specified topic[{_show(topic)}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$", where="topic")
    if len(topic) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidNameError(
            f"The specified topic is longer than topic max length {TOPIC_NAME_LENGTH_MAX}.",
            where="topic")
    return topic


def validate_group(group: str | None) -> str:
    """Return the group if it is a valid consumer group name, else raise InvalidNameError."""
    if _is_blank(group):
        raise InvalidNameError("the specified group is blank", where="group")
    assert group is not None
    if not _VALID.fullmatch(group):
        raise InvalidNameError(
            f"the specified group[{_show(group)}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$", where="group")
    if len(group) > GROUP_NAME_LENGTH_MAX:
        raise InvalidNameError(
            f"the specified group is longer than group max length {GROUP_NAME_LENGTH_MAX}.",
            where="group")
    # The retry topic built from the group must itself be a storable topic name.
    if len(retry_topic(group)) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidNameError(
            f"the retry topic of group[{_show(group)}] would be longer than {TOPIC_NAME_LENGTH_MAX}",
            where="group")
    return group


def _show(name: str) -> str:
    """A printable, bounded rendering of a hostile name for error messages."""
    shown = name.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= 80 else shown[:77] + "..."


def is_lmq(name: str | None) -> bool:
    """Whether ``name`` is a light message queue's (MixAll.isLmq: it starts with ``%LMQ%``)."""
    return name is not None and name.startswith(LMQ_PREFIX)
