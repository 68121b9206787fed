"""Consumer groups: settings, membership, rebalance and the fault knobs of a group's clients.

A :class:`ConsumerGroup` owns the :class:`~broker_core.client.push_consumer.PushConsumer` objects
of one group. Whenever a member starts, stops or crashes, and every 20 s as RocketMQ's
``RebalanceService`` does, it reallocates the subscribed queues (``%RETRY%<group>`` included in
clustering mode) with AllocateMessageQueueAveragely: first every member drops (and persists) the
queues it loses, then every member picks up its new ones from the broker's committed offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core import names
from broker_core.client.behavior import Behavior
from broker_core.client.push_consumer import BROADCASTING, CLUSTERING, RUNNING, PushConsumer
from broker_core.client.rebalance import assign_broadcasting, assign_clustering
from broker_core.constants import (
    CONSUME_MESSAGE_BATCH_MAX_SIZE_DEFAULT,
    CONSUME_TIMEOUT_MS_DEFAULT,
    PULL_BATCH_SIZE_DEFAULT,
    PULL_THRESHOLD_FOR_QUEUE_DEFAULT,
    RETRY_QUEUES_DEFAULT,
    SUSPEND_CURRENT_QUEUE_MS_DEFAULT,
)

__all__ = ["Behavior", "ConsumerGroup", "ConsumerSettings", "PushConsumer"]

MODES = ("concurrently", "orderly")
MODELS = (CLUSTERING, BROADCASTING)
CONSUME_THREAD_MAX_DEFAULT = 20  # consumeThreadMax
CONSUME_THREAD_MAX_LIMIT = 1000  # checkConfig's upper bound
PULL_BATCH_SIZE_MAX = 1024  # checkConfig: pullBatchSize in 1..1024
CONSUME_MESSAGE_BATCH_MAX_SIZE_MAX = 1024
PULL_THRESHOLD_FOR_QUEUE_MAX = 65535
REBALANCE_INTERVAL_MS = 20_000  # RebalanceService waitInterval (rocketmq.client.rebalance.waitInterval)
CONSUMER_HOST_PREFIX = "10.0.2."  # consumers' client hosts: 10.0.2.<n>:<port>
CONSUMER_PORT_BASE = 60_000
HOSTS_PER_SUBNET = 250


@dataclass
class ConsumerSettings:
    """A push consumer group's configuration (DefaultMQPushConsumer fields the model uses)."""

    group: str
    subscribe: list[str] | tuple[str, ...] = field(default_factory=list)
    model: str = CLUSTERING
    mode: str = "concurrently"
    max_reconsume_times: int = -1  # -1: 16 concurrently, unlimited orderly
    consume_timeout_ms: int = CONSUME_TIMEOUT_MS_DEFAULT
    pull_batch_size: int = PULL_BATCH_SIZE_DEFAULT
    consume_message_batch_max_size: int = CONSUME_MESSAGE_BATCH_MAX_SIZE_DEFAULT
    consume_thread_max: int = CONSUME_THREAD_MAX_DEFAULT
    pull_threshold_for_queue: int = PULL_THRESHOLD_FOR_QUEUE_DEFAULT
    suspend_current_queue_ms: int = SUSPEND_CURRENT_QUEUE_MS_DEFAULT
    # A 4.9.4 pull carries the memory offset and the broker commits it (commitOffset flag);
    # turn off to leave only the 5 s persist (the window a crash then loses).
    commit_offset_on_pull: bool = True

    def __post_init__(self) -> None:
        names.validate_group(self.group)
        self.model = str(self.model).upper()
        self.mode = str(self.mode).lower()
        self.subscribe = tuple(self.subscribe)
        for topic in self.subscribe:
            names.validate_topic(topic)
        assert self.model in MODELS, f"unknown message model {self.model!r}"
        assert self.mode in MODES, f"unknown consume mode {self.mode!r}"
        assert self.max_reconsume_times >= -1, f"max_reconsume_times {self.max_reconsume_times}"
        assert self.consume_timeout_ms > 0, f"consume_timeout_ms {self.consume_timeout_ms}"
        assert 1 <= self.pull_batch_size <= PULL_BATCH_SIZE_MAX, \
            f"pull_batch_size {self.pull_batch_size} outside 1..{PULL_BATCH_SIZE_MAX}"
        assert 1 <= self.consume_message_batch_max_size <= CONSUME_MESSAGE_BATCH_MAX_SIZE_MAX, \
            f"consume_message_batch_max_size {self.consume_message_batch_max_size}"
        assert 1 <= self.consume_thread_max <= CONSUME_THREAD_MAX_LIMIT, \
            f"consume_thread_max {self.consume_thread_max} outside 1..{CONSUME_THREAD_MAX_LIMIT}"
        assert 1 <= self.pull_threshold_for_queue <= PULL_THRESHOLD_FOR_QUEUE_MAX, \
            f"pull_threshold_for_queue {self.pull_threshold_for_queue}"


class ConsumerGroup:
    """The consumers of one group, their rebalance, and the group's send-back fault knobs."""

    def __init__(self, sim, broker, settings: ConsumerSettings, behavior: Behavior, streams,
                 recorder):
        self.sim = sim
        self.broker = broker
        self.settings = settings
        self.behavior = behavior  # shared by every member: a fault may change it mid-run
        self.streams = streams
        self.recorder = recorder
        self.send_back_failure_probability = 0.0  # CONSUMER_SEND_MSG_BACK fails (fault knob)
        self.fallback_failure_probability = 0.0  # the client's own send to %RETRY% fails too
        self._fault_rng = streams.stream("send_back.faults")
        self._members: dict[str, PushConsumer] = {}
        self._hosts_used = 0
        self._quiet = False  # set while the whole group shuts down: no rebalance in between
        self.rebalances = 0
        if settings.model == CLUSTERING:
            # The broker creates the retry topic on the group's first heartbeat.
            cfg = broker.subscription_group(settings.group)
            queues = int(getattr(cfg, "retry_queue_nums", RETRY_QUEUES_DEFAULT) or 0)
            if queues > 0 and (broker.topic_queue_count(self.retry_topic) or 0) == 0:
                broker.create_topic(self.retry_topic, queues)
        # Arrival notices matter only for the topics this group reads (the broker's long-polling
        # holds requests per topic and queue, so others never wake it).
        self._topics = frozenset(settings.subscribe) | (
            {self.retry_topic} if settings.model == CLUSTERING else frozenset())
        broker.on_message_arrival(self._on_arrival)
        self.sim.after(REBALANCE_INTERVAL_MS, self._rebalance_tick)

    # --- membership -----------------------------------------------------------------------------

    @property
    def retry_topic(self) -> str:
        return names.retry_topic(self.settings.group)

    @property
    def consumers(self) -> list[PushConsumer]:
        """Every member (running, crashed or shut down), in the order they were added."""
        return list(self._members.values())

    def consumer(self, consumer_id: str) -> PushConsumer:
        return self._members[consumer_id]

    def add_consumer(self, consumer_id: str) -> PushConsumer:
        """Create, start and rebalance in a new consumer."""
        assert consumer_id not in self._members, f"consumer {consumer_id} already in the group"
        n = self._hosts_used % HOSTS_PER_SUBNET + 1
        host = f"{CONSUMER_HOST_PREFIX}{n}:{CONSUMER_PORT_BASE + self._hosts_used}"
        self._hosts_used += 1
        consumer = PushConsumer(self, consumer_id, host)
        self._members[consumer_id] = consumer
        consumer.start()
        return consumer

    def remove_consumer(self, consumer_id: str) -> None:
        """Clean shutdown of one consumer (offsets persisted); the others take its queues."""
        consumer = self._members.pop(consumer_id)
        consumer.shutdown()  # persists, then the remaining members rebalance

    def crash_consumer(self, consumer_id: str) -> None:
        """kill -9 of one consumer: no offsets persisted, in-flight deliveries lost."""
        self._members[consumer_id].crash()

    def restart_consumer(self, consumer_id: str) -> None:
        """Start a crashed (or shut down) member again; it rejoins the rebalance."""
        consumer = self._members[consumer_id]
        if consumer.state != RUNNING:
            consumer.start()

    def shutdown(self) -> None:
        """Shut every member down cleanly (end of a run): persist offsets, no rebalance."""
        self._quiet = True
        for cid in sorted(self._members):
            self._members[cid].shutdown()

    # --- rebalance ------------------------------------------------------------------------------

    def member_changed(self) -> None:
        """A member started or stopped: the broker tells the others and everyone rebalances."""
        if not self._quiet:
            self.rebalance()

    def running_ids(self) -> list[str]:
        return sorted(cid for cid, c in self._members.items() if c.state == RUNNING)

    def queues_by_topic(self) -> dict[str, int]:
        topics = list(self.settings.subscribe)
        if self.settings.model == CLUSTERING:
            topics.append(self.retry_topic)
        counts = {}
        for topic in topics:
            count = self.broker.topic_queue_count(topic) or 0
            if count > 0:
                counts[topic] = count
        return counts

    def rebalance(self) -> None:
        """Reallocate queues among running members: releases first, then acquisitions."""
        self.rebalances += 1
        ids = self.running_ids()
        queues = self.queues_by_topic()
        if self.settings.model == CLUSTERING:
            assignment = assign_clustering(ids, queues)
        else:
            assignment = assign_broadcasting(ids, queues)
        for cid in ids:
            self._members[cid].release_queues(set(assignment[cid]))
        for cid in ids:
            self._members[cid].acquire_queues(assignment[cid])

    def balanced(self) -> bool:
        """Every running member holds exactly the queues the allocation gives it."""
        ids = self.running_ids()
        queues = self.queues_by_topic()
        assign = assign_clustering if self.settings.model == CLUSTERING else assign_broadcasting
        wanted = assign(ids, queues)
        return all(wanted[cid] == self._members[cid].assigned() for cid in ids)

    def _rebalance_tick(self) -> None:
        """RebalanceService: every 20 s, pick up new queues and queues that were let go."""
        if self._quiet:
            return
        if not self.balanced():
            self.rebalance()
        self.sim.after(REBALANCE_INTERVAL_MS, self._rebalance_tick)

    def _on_arrival(self, topic: str, queue_id: int) -> None:
        if topic not in self._topics:
            return
        for member in self._members.values():
            if member.state == RUNNING:
                member.on_arrival(topic, queue_id)

    # --- faults and state -------------------------------------------------------------------------

    def draw_fault(self, probability: float) -> bool:
        """True with ``probability`` (no draw at all when the knob is off)."""
        return probability > 0.0 and self._fault_rng.random() < probability

    def idle(self) -> bool:
        """Some member runs and none has work: nothing in flight, no local retries pending,
        every assigned queue drained with its committed offset at the end."""
        ids = self.running_ids()
        return bool(ids) and all(self._members[cid].idle() for cid in ids) and self.balanced()
