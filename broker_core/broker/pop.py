"""The 5.x broker's POP service: pops, checkpoints, acks, changes of invisible time and revives.

What a real 5.3.3 broker wrote for a remoting POP consumer (docs/rocketmq-5x.md "POP
consumption: confirmed"; ``PopMessageProcessor``, ``AckMessageProcessor``,
``ChangeInvisibleTimeProcessor`` and ``PopReviveService`` @5.3.3, the defaults
``enablePopBufferMerge=false``, ``enableRetryTopicV2=false``, ``reviveQueueNum=8``):

* a **pop** of one queue hands out the records from the group's offset on and moves that offset
  at once (a POP group's committed offset does not say a record was consumed); it writes one
  **checkpoint** (tag ``ck``) for the batch, put into the revive topic
  ``rmq_sys_REVIVE_LOG_<cluster>`` queue r with ``TIMER_DELIVER_MS`` = pop time + invisible time
  − 1000, so the put hook stores it in ``rmq_sys_wheel_timer`` first and the wheel delivers it to
  the revive topic;
* an **ack** (tag ``ack``) of one offset goes the same way, with ``TIMER_DELIVER_MS`` = the
  checkpoint's pop time + invisible time;
* a **change of invisible time** (the remoting client's failure) writes a new checkpoint of that
  one offset (pop time now, the client's delay as invisible time), then an ack of the old one;
* the **revive service** reads a checkpoint whose revive time passed (2 to 3 s after it, as
  observed) and writes each offset that has no ack to ``%RETRY%<group>_<topic>`` queue 0: the
  message's properties plus ``1ST_POP_TIME`` (the checkpoint's pop time, kept when already
  there), reconsume times + 1, born host = store host = this broker. No DLQ: a remoting POP
  client acks a message at its maximum.

An **orderly pop** (the proxy's, for a gRPC FIFO consumer; docs/rocketmq-5x.md "FIFO consumers and
batch acks: confirmed") hands out the records from the group's offset on and writes nothing: no
checkpoint, no ack record (the order is kept in ``consumerOrderInfo.json``). The queue stays
blocked for the group until each record handed out is acked; an ack commits the offset past it.

The revive service decides from the acks it was given, in memory (it does not read the revive
topic back), and pending revives do not survive a broker stop; the scenario loader refuses a
restart or crash with POP groups. Not modelled: the remoting client's orderly POP (it never calls
its listener), an orderly pop's invisible time running out (the queue unblocks, the records are
handed out again), buffer merge, batch acks, the KV service, the v2 retry topic name, and the
revive topic's own consumer offsets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from broker_core.constants import (
    PERM_READ,
    PERM_WRITE,
    PROP_FIRST_POP_TIME,
    PROP_ORIGIN_GROUP,
    PROP_TIMER_DELIVER_MS,
)
from broker_core.message import PROP_TAGS, PROP_UNIQ_KEY, JavaHashMap
from broker_core.names import pop_retry_topic, validate_group, validate_topic
from broker_core.store.pop import REVIVE_TOPIC_PREFIX, TAG_ACK, TAG_CHECKPOINT

REVIVE_QUEUES = 8  # BrokerConfig.reviveQueueNum
POP_RETRY_QUEUES = 1  # the v1 POP retry topic is created with one queue, perm 6 (seen on 5.3.3)
POP_BATCH_MAX = 32  # PopMessageRequestHeader.maxMsgNums is at most 32 (PopMessageProcessor)
# A 5.3.3 client's popInvisibleTime must be within [5000, 300000] ms; a change of invisible time
# (the client's retry delay) is not bounded so, the model takes 1 ms to a day.
POP_INVISIBLE_MS_MIN = 5_000
POP_INVISIBLE_MS_MAX = 300_000
POP_RETRY_DELAY_MS_MAX = 86_400_000
# The checkpoint waits in the wheel one second less than its invisible time (PopMessageProcessor:
# ck.getReviveTime() - PopAckConstants.ackTimeInterval).
CHECKPOINT_TIMER_LEAD_MS = 1_000
# When the revive service wrote a retry, after the checkpoint's revive time: 2.0 to 3.0 s on a
# real 5.3.3 broker (docs/rocketmq-5x.md); drawn from the broker's seeded stream "broker.pop_revive".
REVIVE_LATENCY_MS_MIN = 2_000
REVIVE_LATENCY_MS_SPAN = 1_000


def revive_topic(cluster: str) -> str:
    """``rmq_sys_REVIVE_LOG_<cluster>`` (PopAckConstants.buildClusterReviveTopic)."""
    return REVIVE_TOPIC_PREFIX + cluster


def _fastjson(doc: dict) -> bytes:
    """fastjson's form of a POJO: keys sorted, no spaces."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class Checkpoint:
    """One checkpoint (PopCheckPoint): a batch of offsets of one queue popped at ``pop_ts_ms``."""

    group: str
    topic: str
    queue_id: int
    start_offset: int
    offsets: tuple[int, ...]
    pop_ts_ms: int
    invisible_ms: int
    revive_qid: int
    broker_name: str
    acked: set[int] = field(default_factory=set)
    revived: bool = False

    @property
    def revive_ts_ms(self) -> int:
        return self.pop_ts_ms + self.invisible_ms

    def body(self) -> bytes:
        return _fastjson({"bm": 0, "bn": self.broker_name, "c": self.group,
                          "d": [o - self.start_offset for o in self.offsets], "it": self.invisible_ms,
                          "n": len(self.offsets), "pt": self.pop_ts_ms, "q": self.queue_id,
                          "reviveTime": self.revive_ts_ms, "ro": 0, "so": self.start_offset, "t": self.topic})

    def uniq_key(self) -> str:
        return (f"{self.topic}@{self.queue_id}@{self.start_offset}@{self.group}@{self.pop_ts_ms}"
                f"@{self.broker_name}@{TAG_CHECKPOINT}")

    def ack_body(self, offset: int) -> bytes:
        return _fastjson({"ao": offset, "bn": self.broker_name, "c": self.group, "pt": self.pop_ts_ms,
                          "q": self.queue_id, "so": self.start_offset, "t": self.topic})

    def ack_uniq_key(self, offset: int) -> str:
        return f"{self.topic}@{self.queue_id}@{offset}@{self.group}@{self.pop_ts_ms}@{self.broker_name}@{TAG_ACK}"


@dataclass(frozen=True)
class PoppedMessage:
    """A record handed out by a pop, with the checkpoint it was popped under."""

    record: object  # codec.Record
    checkpoint: Checkpoint


class PopService:
    """Serves POP requests of one broker and revives what was not acked in time."""

    def __init__(self, broker):
        assert broker.semantics.pop_consumption(), "POP is served under the 5.x rules only"
        self.broker = broker
        self.revive_topic = revive_topic(broker.config.cluster)
        self._pops = 0  # ckMessageNumber: the revive queue is the pop count modulo reviveQueueNum
        self._handles: dict[int, object] = {}  # checkpoint serial -> its pending revive event
        self._serial = 0
        self._unrevived: dict[str, list[Checkpoint]] = {}  # group -> checkpoints whose revive is ahead
        self.checkpoints = 0
        self.acks = 0
        self.revived = 0
        # (group, topic, queue id) -> the offsets an orderly pop handed out and not acked yet
        self._orderly: dict[tuple[str, str, int], set[int]] = {}

    # -- requests --------------------------------------------------------------------------------

    def pop(self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int) -> list[PoppedMessage]:
        """POP_MESSAGE of one queue: up to ``max_nums`` records from the group's offset, one
        checkpoint for them; an empty list when the queue has nothing new (no checkpoint)."""
        validate_group(group)
        validate_topic(topic)
        assert 0 < max_nums <= POP_BATCH_MAX, f"max_nums {max_nums} outside 1..{POP_BATCH_MAX}"
        assert POP_INVISIBLE_MS_MIN <= invisible_ms <= POP_INVISIBLE_MS_MAX, f"invisible time {invisible_ms} ms"
        broker = self.broker
        store = broker.store
        revive_qid = self._pops % REVIVE_QUEUES
        self._pops += 1
        start = max(broker.offsets.query(group, topic, queue_id), store.min_offset(topic, queue_id), 0)
        if start >= store.max_offset(topic, queue_id):
            return []
        records = list(store.get_messages(topic, queue_id, start, max_nums))
        if not records:
            return []
        broker.offsets.commit(group, topic, queue_id, records[-1].queue_offset + 1)
        ck = Checkpoint(group, topic, queue_id, records[0].queue_offset,
                        tuple(r.queue_offset for r in records), broker.sim.now(), invisible_ms, revive_qid,
                        broker.config.name)
        self._write_checkpoint(ck)
        return [PoppedMessage(r, ck) for r in records]

    def pop_orderly(self, group: str, topic: str, queue_id: int, max_nums: int) -> list:
        """An orderly POP_MESSAGE of one queue: up to ``max_nums`` records from the group's offset,
        none while records it handed out before are not acked; no checkpoint, no offset move."""
        validate_group(group)
        validate_topic(topic)
        assert 0 < max_nums <= POP_BATCH_MAX, f"max_nums {max_nums} outside 1..{POP_BATCH_MAX}"
        key = (group, topic, queue_id)
        if self._orderly.get(key):
            return []
        store = self.broker.store
        start = max(self.broker.offsets.query(group, topic, queue_id), store.min_offset(topic, queue_id), 0)
        if start >= store.max_offset(topic, queue_id):
            return []
        records = list(store.get_messages(topic, queue_id, start, max_nums))
        self._orderly[key] = {r.queue_offset for r in records}
        return records

    def ack_orderly(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """ACK_MESSAGE of a record an orderly pop handed out: its offset committed past it."""
        held = self._orderly.get((group, topic, queue_id), set())
        assert offset in held, f"offset {offset} of {topic}:{queue_id} is not held by {group}"
        held.discard(offset)
        if self.broker.offsets.query(group, topic, queue_id) <= offset:
            self.broker.offsets.commit(group, topic, queue_id, offset + 1)

    def ack(self, ck: Checkpoint, offset: int) -> None:
        """ACK_MESSAGE of one offset of a checkpoint."""
        assert offset in ck.offsets, f"offset {offset} is not in the checkpoint of {ck.offsets}"
        ck.acked.add(offset)
        self._put_bookkeeping(TAG_ACK, ck.ack_uniq_key(offset), ck.ack_body(offset), ck.revive_qid,
                              ck.revive_ts_ms)
        self.acks += 1

    def change_invisible_time(self, ck: Checkpoint, offset: int, invisible_ms: int) -> Checkpoint:
        """CHANGE_MESSAGE_INVISIBLETIME: a new checkpoint of ``offset`` alone, then the ack of the old."""
        assert offset in ck.offsets, f"offset {offset} is not in the checkpoint of {ck.offsets}"
        assert 0 < invisible_ms <= POP_RETRY_DELAY_MS_MAX, f"invisible time {invisible_ms} ms"
        new = Checkpoint(ck.group, ck.topic, ck.queue_id, offset, (offset,), self.broker.sim.now(), invisible_ms,
                         ck.revive_qid, ck.broker_name)
        self._write_checkpoint(new)
        self.ack(ck, offset)
        return new

    def unrevived(self, group: str) -> int:
        """How many of ``group``'s checkpoints have an offset without an ack and are not revived yet."""
        waiting = [ck for ck in self._unrevived.get(group, ()) if not ck.revived]
        self._unrevived[group] = waiting
        return sum(1 for ck in waiting if not ck.acked.issuperset(ck.offsets))

    def stop(self) -> None:
        """The broker stops: pending revives are dropped (kept in memory only)."""
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    # -- records ---------------------------------------------------------------------------------

    def _write_checkpoint(self, ck: Checkpoint) -> None:
        self._put_bookkeeping(TAG_CHECKPOINT, ck.uniq_key(), ck.body(), ck.revive_qid,
                              ck.revive_ts_ms - CHECKPOINT_TIMER_LEAD_MS)
        self.checkpoints += 1
        self._unrevived.setdefault(ck.group, []).append(ck)
        latency = REVIVE_LATENCY_MS_MIN + self.broker.rng("broker.pop_revive").randrange(REVIVE_LATENCY_MS_SPAN)
        self._serial += 1
        self._handles[self._serial] = self.broker.sim.at(ck.revive_ts_ms + latency, self._revive, ck, self._serial)

    def _put_bookkeeping(self, tag: str, uniq_key: str, body: bytes, revive_qid: int, deliver_ms: int) -> None:
        """A checkpoint or ack, put into the revive topic with a deliver time: the put hook holds it
        in the timer topic until then (both copies are in the store)."""
        broker = self.broker
        if broker.topics.get(self.revive_topic) is None:
            broker.topics.create(self.revive_topic, REVIVE_QUEUES, PERM_READ | PERM_WRITE)
        now = broker.sim.now()
        # An ack after its checkpoint's revive time is already due: the put hook stores it in the
        # revive topic at once, as a real broker's timer hook does.
        props = JavaHashMap.from_items([(PROP_TAGS, tag), (PROP_UNIQ_KEY, uniq_key),
                                        (PROP_TIMER_DELIVER_MS, str(deliver_ms))],
                                       broker.semantics.properties_map_capacity())
        result = broker.put(dict(topic=self.revive_topic, queue_id=revive_qid, body=body, properties=props,
                                 born_ts=now, born_host=broker.config.store_host,
                                 store_host=broker.config.store_host))
        assert broker._stored(result), f"POP {tag} record not stored: {getattr(result, 'status', result)}"

    def _revive(self, ck: Checkpoint, serial: int) -> None:
        """PopReviveService: each offset of a checkpoint without an ack becomes a retry record."""
        self._handles.pop(serial, None)
        if not self.broker.running or ck.revived:
            return
        ck.revived = True
        broker = self.broker
        store = broker.store
        retry = pop_retry_topic(ck.group, ck.topic)
        for offset in ck.offsets:
            if offset in ck.acked:
                continue
            records = store.get_messages(ck.topic, ck.queue_id, offset, 1)
            if not records or records[0].queue_offset != offset:
                continue  # the record is gone (expired files are not modelled; kept for safety)
            record = records[0]
            if broker.topics.get(retry) is None:
                broker.topics.create(retry, POP_RETRY_QUEUES, PERM_READ | PERM_WRITE)
            # reviveRetry: setTags makes the new record's map (a default HashMap: 16 slots), then
            # putAll copies the popped record's map (decoded into HashMap(128)) in its order.
            source = JavaHashMap.from_items(record.properties.items(), broker.semantics.properties_map_capacity())
            props = JavaHashMap()
            if source.get(PROP_TAGS) is not None:
                props.put(PROP_TAGS, source.get(PROP_TAGS))
            for key, value in source.items():
                props.put(key, value)
            if props.get(PROP_FIRST_POP_TIME) is None:
                props.put(PROP_FIRST_POP_TIME, str(ck.pop_ts_ms))
            if broker.semantics.pop_revive_origin_group():
                props.put(PROP_ORIGIN_GROUP, ck.group)
            result = broker.put(dict(
                topic=retry, queue_id=0, body=record.body, properties=props,
                properties_string=props.to_properties_string(
                    trailing_separator=broker.semantics.properties_trailing_separator()),
                flag=record.flag, sys_flag=record.sys_flag, born_ts=record.born_ts,
                born_host=broker.config.store_host, store_host=broker.config.store_host,
                reconsume_times=record.reconsume_times + 1, prepared_tx_offset=0, delay_level=0))
            if broker._stored(result):
                self.revived += 1
