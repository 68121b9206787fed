"""POP checkpoints and acks of a RocketMQ 5.x store, decoded from their commit-log records.

A 5.x broker serving a group by POP writes its own bookkeeping into the commit log (observed on a
real 5.3.3 broker, docs/rocketmq-5x.md "POP consumption: confirmed"):

* a **checkpoint** (tag ``ck``) per popped batch of one queue: the group (``c``), the topic popped
  (``t``: the message topic or the group's POP retry topic), the queue (``q``), the first offset
  (``so``) and the offsets popped as differences from it (``d``), the pop time (``pt``), the
  invisible time (``it``) and the revive time (``reviveTime`` = pt + it);
* an **ack** (tag ``ack``) per acknowledged offset (``ao``), naming the checkpoint it acks by its
  pop time and first offset (``pt``, ``so``); a batch ack (tag ``bAck``) lists its offsets (``aol``).

Each one is written twice: first to the timer topic ``rmq_sys_wheel_timer`` (``REAL_TOPIC`` = the
revive topic ``rmq_sys_REVIVE_LOG_<cluster>``), then, when the timer fires, to the revive topic.
The body is fastjson of PopCheckPoint / AckMsg. Nothing here is a message: these records are
evidence of what a group popped, for how long, and what it acknowledged.

``retry_topic_names`` gives the POP retry topic names the revive service builds for a checkpoint
of a message topic (v1 ``%RETRY%<group>_<topic>`` and v2 ``%RETRY%<group>+<topic>``): a
checkpoint names its group exactly, so it resolves those names without guessing where the group
ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from broker_core import names
from broker_core.constants import (
    POP_RETRY_V1_SEPARATOR,
    POP_RETRY_V2_SEPARATOR,
    RETRY_GROUP_TOPIC_PREFIX,
    TIMER_TOPIC,
)
from broker_core.errors import CorruptRecordError

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC + the cluster name
TAG_CHECKPOINT = "ck"  # PopAckConstants.CK_TAG
TAG_ACK = "ack"  # PopAckConstants.ACK_TAG
TAG_BATCH_ACK = "bAck"  # PopAckConstants.BATCH_ACK_TAG
POP_KINDS = (TAG_CHECKPOINT, TAG_ACK, TAG_BATCH_ACK)
# Where the record was: waiting in the timer, or put into the revive topic when the timer fired.
STAGE_TIMER = "timer"
STAGE_REVIVE = "revive"
# An in-flight pop of the POP KV service (kvStore/, broker_core.store.pop_kv): a checkpoint with no record.
STAGE_KV = "kv"
POP_BODY_BYTES_MAX = 1 << 20  # a checkpoint lists at most a batch of offsets; more is not a POP body


@dataclass(frozen=True)
class PopRecord:
    """One decoded checkpoint or ack."""

    kind: str  # ck | ack | bAck
    group: str
    topic: str
    queue_id: int
    start_offset: int
    offsets: tuple[int, ...]  # a checkpoint's popped offsets; the acked offset(s) of an ack
    pop_ts_ms: int
    invisible_ms: int | None  # checkpoints only
    revive_ts_ms: int | None  # checkpoints only
    broker_name: str | None


def is_revive_topic(topic: str | None) -> bool:
    return bool(topic) and topic.startswith(REVIVE_TOPIC_PREFIX)


def pop_stage(topic: str, real_topic: str | None) -> str | None:
    """Where a record of POP bookkeeping is (``timer`` or ``revive``), or None for any other record."""
    if is_revive_topic(topic):
        return STAGE_REVIVE
    if topic == TIMER_TOPIC and is_revive_topic(real_topic):
        return STAGE_TIMER
    return None


def _field(doc: dict, key: str, kind: type, where: str):
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CorruptRecordError(f"POP body field {key!r} is {value!r}, not a {kind.__name__}", where=where)
    return value


def decode_pop_body(tag: str | None, body: bytes, where: str) -> PopRecord:
    """The checkpoint or ack a POP bookkeeping record's body holds; ``tag`` is the record's TAGS.

    Raises CorruptRecordError (with ``where``) for an unknown tag or a body that is not the JSON
    the broker writes."""
    if tag not in POP_KINDS:
        raise CorruptRecordError(f"POP record tag {tag!r} is none of {', '.join(POP_KINDS)}", where=where)
    if len(body) > POP_BODY_BYTES_MAX:
        raise CorruptRecordError(f"POP body of {len(body)} bytes exceeds {POP_BODY_BYTES_MAX}", where=where)
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptRecordError(f"POP body is not JSON: {exc}", where=where) from None
    if not isinstance(doc, dict):
        raise CorruptRecordError(f"POP body is {type(doc).__name__}, not an object", where=where)
    group = _field(doc, "c", str, where)
    topic = _field(doc, "t", str, where)
    queue_id = _field(doc, "q", int, where)
    start = _field(doc, "so", int, where)
    pop_ts = _field(doc, "pt", int, where)
    broker_name = doc.get("bn") if isinstance(doc.get("bn"), str) else None
    if tag == TAG_CHECKPOINT:
        invisible = _field(doc, "it", int, where)
        diffs = doc.get("d")
        if diffs is None:  # an old checkpoint without the list: n offsets from so
            count = _field(doc, "n", int, where)
            diffs = list(range(count))
        if not isinstance(diffs, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in diffs):
            raise CorruptRecordError(f"POP checkpoint offsets 'd' are {diffs!r}, not a list of integers", where=where)
        revive = doc.get("reviveTime")
        revive = revive if isinstance(revive, int) and not isinstance(revive, bool) else pop_ts + invisible
        return PopRecord(tag, group, topic, queue_id, start, tuple(start + d for d in diffs), pop_ts, invisible,
                         revive, broker_name)
    if tag == TAG_BATCH_ACK:
        acked = doc.get("aol")
        if not isinstance(acked, list) or not all(isinstance(o, int) and not isinstance(o, bool) for o in acked):
            raise CorruptRecordError(f"POP batch ack offsets 'aol' are {acked!r}, not a list of integers",
                                     where=where)
        offsets = tuple(acked)
    else:
        offsets = (_field(doc, "ao", int, where),)
    return PopRecord(tag, group, topic, queue_id, start, offsets, pop_ts, None, None, broker_name)


def retry_topic_names(group: str, topic: str) -> tuple[str, str] | None:
    """The POP retry topic names (v1, v2) the revive service builds for a checkpoint of ``topic``
    popped by ``group`` (KeyBuilder.buildPopRetryTopic); None when ``topic`` is already a retry
    topic (its retries stay in it)."""
    if names.is_retry_topic(topic):
        return None
    return (f"{RETRY_GROUP_TOPIC_PREFIX}{group}{POP_RETRY_V1_SEPARATOR}{topic}",
            f"{RETRY_GROUP_TOPIC_PREFIX}{group}{POP_RETRY_V2_SEPARATOR}{topic}")
