"""The remoting POP consumer: a 5.x ``DefaultMQPushConsumer`` the broker serves by POP.

What a 5.3.3 client did on a real broker (docs/rocketmq-5x.md "POP consumption: confirmed"): with
``clientRebalance=false`` and the group in POP mode, every consumer pops every queue of its topics
and the group's POP retry topic ``%RETRY%<group>_<topic>`` (``popShareQueueNum -1``); the listener
gets one message per call; a success is acked, a failure changes the message's invisible time to
the client's ``popDelayLevel`` entry for its reconsume times (a new checkpoint; the broker
revives it as a retry record), and a failure at the client's maximum is acked (no DLQ).

The model pops one queue at a time per consumer: a pop, then its messages one after another,
then the next pop at once; a pop that finds nothing waits for the broker's arrival notice of the
queue (a message topic) or ``POP_IDLE_REPOLL_MS`` (every queue: the broker's long polling is not
woken for a v1 retry topic, apache/rocketmq #6681). Every listener call is one ``consume_attempts``
row. Not modelled: consumer faults (crash, restart, hang; the scenario loader refuses them for a
POP group), orderly POP, the push retry topic ``%RETRY%<group>`` the client also subscribes (it
stays empty), and the real table's give-up rule (the client acks when the message is older than
twice its last delay; the model acks at the maximum).

The same class plays the gRPC consumers served through the proxy (``client: grpc-simple`` or
``grpc-push``; docs/rocketmq-5x.md "gRPC consumer through the proxy: confirmed" and "gRPC
PushConsumer and the group retry policies: confirmed"): the proxy pops for them
(``broker_core.broker.proxy``) and dead-letters a record whose reconsume times reached the
group's ``retryMaxTimes`` + 1 before the client sees it. A SimpleConsumer's failure is no ack (the
message comes back after its invisible duration); a PushConsumer receives with the proxy's 60 s
and changes a failed message's invisible time to its group retry policy's delay for that
delivery attempt (``broker_core.client.retry_policy``). Neither acks a message at a maximum.

A gRPC FIFO consumer (``client: grpc-fifo``, a push consumer of a group that consumes in order;
docs/rocketmq-5x.md "FIFO consumers and batch acks: confirmed") is popped for in order: no
checkpoint, the queue blocked until each record is acked. It retries a failed message itself,
after its retry policy's delay for that attempt, with the delivery attempt counted by the client
(a row's ``reconsume_times`` is that attempt − 1, the record's stays 0; outcome ``LOCAL_RETRY``),
and at ``maxAttempts`` forwards it to the DLQ through the proxy (a send-back with delay level −1,
then the ack; outcome ``SENT_BACK``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from broker_core.broker import proxy
from broker_core.broker.pop import POP_BATCH_MAX, POP_RETRY_QUEUES, PoppedMessage
from broker_core.client.behavior import CONSUME_SUCCESS, Behavior, Listener
from broker_core.client.retry_policy import RetryPolicy
from broker_core.constants import RETRY_MAX_TIMES_DEFAULT
from broker_core.message import PROP_UNIQ_KEY
from broker_core.names import is_retry_topic, pop_retry_topic, validate_group, validate_topic

POP_MODE = "pop"
# consume_attempts outcomes of a POP delivery.
ACKED = "ACKED"  # the listener succeeded: the client acked it
POP_DELAYED = "POP_DELAYED"  # the listener failed: the client changed its invisible time
POP_ACKED_AT_MAX = "POP_ACKED_AT_MAX"  # failed at the client's maximum: acked, never retried again
POP_NOT_ACKED = "POP_NOT_ACKED"  # a gRPC SimpleConsumer's failure: no ack, revived after its invisible time
LOCAL_RETRY = "LOCAL_RETRY"  # a gRPC FIFO consumer's failure below maxAttempts: it consumes the message again
SENT_BACK = "SENT_BACK"  # a gRPC FIFO consumer's failure at maxAttempts: forwarded to the DLQ, then acked
# Which client a POP group is: the remoting push consumer, or a gRPC consumer through the proxy.
CLIENT_REMOTING = "remoting"
CLIENT_GRPC_SIMPLE = "grpc-simple"
CLIENT_GRPC_PUSH = "grpc-push"
CLIENT_GRPC_FIFO = "grpc-fifo"
CLIENTS = (CLIENT_REMOTING, CLIENT_GRPC_SIMPLE, CLIENT_GRPC_PUSH, CLIENT_GRPC_FIFO)
GRPC_CLIENTS = (CLIENT_GRPC_SIMPLE, CLIENT_GRPC_PUSH, CLIENT_GRPC_FIFO)
# The push consumers: they receive with the proxy's invisible time and retry by the group's policy.
GRPC_PUSH_CLIENTS = (CLIENT_GRPC_PUSH, CLIENT_GRPC_FIFO)
POP_INVISIBLE_MS_DEFAULT = 60_000  # DefaultMQPushConsumer.popInvisibleTime
POP_BATCH_NUMS_DEFAULT = 32  # DefaultMQPushConsumer.popBatchNums
# DefaultMQPushConsumerImpl.popDelayLevel (seconds, by reconsume times; the last one repeats).
POP_DELAY_MS_DEFAULT = tuple(s * 1000 for s in (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600,
                                                1200, 1800, 3600, 7200))
POP_IDLE_REPOLL_MS = 10_000  # a pop that found nothing is tried again after this, at the latest
CONSUMER_HOST_PREFIX = "10.0.3."  # POP consumers' client hosts (they are not written to the store)


@dataclass
class PopSettings:
    """A POP group's client settings."""

    group: str
    subscribe: tuple[str, ...]
    max_reconsume_times: int = -1  # -1: 16
    invisible_ms: int = POP_INVISIBLE_MS_DEFAULT
    retry_delays_ms: tuple[int, ...] = POP_DELAY_MS_DEFAULT
    batch_nums: int = POP_BATCH_NUMS_DEFAULT
    client: str = CLIENT_REMOTING
    retry_max_times: int = RETRY_MAX_TIMES_DEFAULT  # gRPC: the subscription group's retryMaxTimes
    retry_policy: RetryPolicy = RetryPolicy()  # grpc-push, grpc-fifo: the group retry policy

    def __post_init__(self) -> None:
        assert self.client in CLIENTS, f"client {self.client!r}"
        assert self.retry_max_times >= 0, f"retry_max_times {self.retry_max_times}"
        validate_group(self.group)
        for topic in self.subscribe:
            validate_topic(topic)
        assert self.retry_delays_ms and all(d > 0 for d in self.retry_delays_ms), self.retry_delays_ms
        assert 1 <= self.batch_nums <= POP_BATCH_MAX, f"batch_nums {self.batch_nums}"

    @property
    def max_times(self) -> int:
        return RETRY_MAX_TIMES_DEFAULT if self.max_reconsume_times == -1 else self.max_reconsume_times

    @property
    def grpc(self) -> bool:
        return self.client in GRPC_CLIENTS

    def delay_ms(self, reconsume_times: int) -> int:
        """The invisible time a failure asks for: the remoting client's ``popDelayLevel`` entry for
        the reconsume times, a gRPC push consumer's retry policy for the delivery attempt (a FIFO
        consumer's wait before it consumes the message again)."""
        if self.client in GRPC_PUSH_CLIENTS:
            return self.retry_policy.next_attempt_delay_ms(reconsume_times + 1)
        return self.retry_delays_ms[min(reconsume_times, len(self.retry_delays_ms) - 1)]

    @property
    def idle_repoll_ms(self) -> int:
        """How long a pop that found nothing waits at most (a gRPC push consumer's receive
        long-polls for the proxy's maximum)."""
        return proxy.PROXY_LONG_POLLING_MS_MAX if self.client in GRPC_PUSH_CLIENTS else POP_IDLE_REPOLL_MS

    @property
    def fifo(self) -> bool:
        return self.client == CLIENT_GRPC_FIFO


class PopConsumer:
    """One POP consumer client: pops each of its queues in turn and consumes what it got."""

    def __init__(self, group: PopConsumerGroup, consumer_id: str):
        self.group = group
        self.sim = group.sim
        self.broker = group.broker
        self.settings = group.settings
        self.consumer_id = consumer_id
        # The listener's timeout only shapes a hang, which a POP group cannot ask for.
        self.listener = Listener(group.behavior, group.streams.stream(f"consumer.{consumer_id}.behavior"),
                                 consume_timeout_ms=group.settings.invisible_ms)
        self.busy: set[tuple[str, int]] = set()  # queues with a pop or a consumption under way
        self.waiting: dict[tuple[str, int], object] = {}  # queues waiting for a message or the repoll

    def start(self) -> None:
        for mq in self.group.queues():
            self._pop(mq)

    def stop(self) -> None:
        for handle in self.waiting.values():
            handle.cancel()
        self.waiting.clear()

    def on_arrival(self, mq: tuple[str, int]) -> None:
        handle = self.waiting.pop(mq, None)
        if handle is not None:
            handle.cancel()
            self._pop(mq)

    def idle(self) -> bool:
        return not self.busy

    def _pop(self, mq: tuple[str, int]) -> None:
        self.waiting.pop(mq, None)
        settings = self.settings
        if not self.broker.running:
            self.waiting[mq] = self.sim.after(settings.idle_repoll_ms, self._pop, mq)
            return
        if settings.fifo:
            popped = [PoppedMessage(r, None) for r in
                      self.broker.pop.pop_orderly(settings.group, mq[0], mq[1], settings.batch_nums)]
        else:
            popped = self.broker.pop.pop(settings.group, mq[0], mq[1], settings.batch_nums, settings.invisible_ms)
        if not popped:
            self.waiting[mq] = self.sim.after(settings.idle_repoll_ms, self._pop, mq)
            return
        if settings.grpc:
            # The proxy's filter: a record at maxAttempts (the broker's retryMaxTimes for the group,
            # + 1) goes to the DLQ; the client never sees it.
            retry_max_times = self.broker.subscription_group(settings.group).retry_max_times
            kept = []
            for message in popped:
                if proxy.goes_to_dlq(message.record, retry_max_times):
                    proxy.forward_to_dlq(self.broker, message, settings.group)
                else:
                    kept.append(message)
            popped = kept
        self.busy.add(mq)
        self._consume(mq, popped, 0)

    def _consume(self, mq: tuple[str, int], popped: list[PoppedMessage], index: int, attempt: int = 1) -> None:
        if index == len(popped):
            self.busy.discard(mq)
            self._pop(mq)
            return
        message = popped[index]
        key = message.record.properties.get(PROP_UNIQ_KEY) or message.record.msg_id
        verdict = self.listener.consume([key])
        start = self.sim.now()
        self.sim.after(verdict.duration_ms, self._finish, mq, popped, index, verdict.status, start, attempt)

    def _finish(self, mq, popped: list[PoppedMessage], index: int, status: str, start_ts: int,
                attempt: int = 1) -> None:
        message = popped[index]
        record, ck = message.record, message.checkpoint
        pop = self.broker.pop
        if self.settings.fifo:
            self._finish_fifo(mq, popped, index, status, start_ts, attempt)
            return
        if not self.broker.running:
            outcome = None  # the request fails; the broker revives the message when it is back
        elif status == CONSUME_SUCCESS:
            pop.ack(ck, record.queue_offset)
            outcome = ACKED
        elif self.settings.client == CLIENT_GRPC_SIMPLE:
            outcome = POP_NOT_ACKED  # no ack: the broker revives it after its invisible duration
        elif self.settings.client == CLIENT_GRPC_PUSH:
            pop.change_invisible_time(ck, record.queue_offset, self.settings.delay_ms(record.reconsume_times))
            outcome = POP_DELAYED  # the client counts attempts; the proxy dead-letters at maxAttempts
        elif record.reconsume_times >= self.settings.max_times:
            pop.ack(ck, record.queue_offset)
            outcome = POP_ACKED_AT_MAX
        else:
            pop.change_invisible_time(ck, record.queue_offset, self.settings.delay_ms(record.reconsume_times))
            outcome = POP_DELAYED
        if outcome is not None:
            self.group.emit_attempt(self, message, status, outcome, start_ts, self.sim.now())
        self._consume(mq, popped, index + 1)

    def _finish_fifo(self, mq, popped: list[PoppedMessage], index: int, status: str, start_ts: int,
                     attempt: int) -> None:
        """A FIFO consumer's result: ack a success; consume a failure again after the policy's
        delay; forward it to the DLQ at maxAttempts (the proxy's send-back, then its ack)."""
        message = popped[index]
        record, settings = message.record, self.settings
        if status != CONSUME_SUCCESS and attempt < proxy.max_attempts(settings.retry_max_times):
            self.group.emit_attempt(self, message, status, LOCAL_RETRY, start_ts, self.sim.now(), attempt - 1)
            self.sim.after(settings.delay_ms(attempt - 1), self._consume, mq, popped, index, attempt + 1)
            return
        if status == CONSUME_SUCCESS:
            outcome = ACKED
        else:
            proxy.forward(self.broker, record, settings.group)
            outcome = SENT_BACK
        self.broker.pop.ack_orderly(settings.group, record.topic, record.queue_id, record.queue_offset)
        self.group.emit_attempt(self, message, status, outcome, start_ts, self.sim.now(), attempt - 1)
        self._consume(mq, popped, index + 1)


class PopConsumerGroup:
    """The POP consumers of one group (every member pops every queue)."""

    def __init__(self, sim, broker, settings: PopSettings, behavior: Behavior, streams, recorder):
        assert broker.pop is not None, "a POP group needs a broker with the 5.x rules"
        self.sim = sim
        self.broker = broker
        self.settings = settings
        self.behavior = behavior
        self.streams = streams
        self.recorder = recorder
        self._members: dict[str, PopConsumer] = {}
        if settings.grpc:
            # The proxy reads maxAttempts from the broker's subscription group (retryMaxTimes + 1):
            # set there before the consumers start, as an admin's createAndUpdateSubscriptionGroupConfig.
            cfg = broker.subscription_group(settings.group)
            assert cfg is not None, f"no subscription group {settings.group}"
            broker.groups.update(dataclasses.replace(cfg, retry_max_times=settings.retry_max_times))
        for topic in settings.subscribe:
            retry = pop_retry_topic(settings.group, topic)
            if broker.topics.get(retry) is None:
                # The revive service creates it on its first retry; created here so the consumers
                # have a queue to pop from the start (same config: one queue, perm 6).
                broker.create_topic(retry, POP_RETRY_QUEUES)
        # Only the message topics wake a waiting pop: the broker's long polling is not woken for
        # a v1 POP retry topic (apache/rocketmq #6681, #9632; seen on 5.3.3).
        self._topics = set(settings.subscribe)
        broker.on_message_arrival(self._on_arrival)

    def queues(self) -> list[tuple[str, int]]:
        """Every queue of the subscribed topics, then each topic's POP retry topic queue 0."""
        out = []
        for topic in self.settings.subscribe:
            out.extend((topic, q) for q in range(self.broker.topic_queue_count(topic) or 0))
        out.extend((pop_retry_topic(self.settings.group, t), 0) for t in self.settings.subscribe)
        return out

    def add_consumer(self, consumer_id: str) -> PopConsumer:
        assert consumer_id not in self._members, f"consumer {consumer_id} already in the group"
        consumer = PopConsumer(self, consumer_id)
        self._members[consumer_id] = consumer
        consumer.start()
        return consumer

    def shutdown(self) -> None:
        for cid in sorted(self._members):
            self._members[cid].stop()

    def _on_arrival(self, topic: str, queue_id: int) -> None:
        if topic in self._topics:
            for cid in sorted(self._members):
                self._members[cid].on_arrival((topic, queue_id))

    def idle(self) -> bool:
        """No member consuming, every queue popped to its end, no checkpoint of the group waiting
        for its revive with an offset unacked."""
        if not all(m.idle() for m in self._members.values()):
            return False
        store, group = self.broker.store, self.settings.group
        for topic, queue_id in self.queues():
            if self.broker.offsets.query(group, topic, queue_id) < store.max_offset(topic, queue_id):
                return False
        return self.broker.pop.unrevived(group) == 0

    def emit_attempt(self, consumer: PopConsumer, message: PoppedMessage, status: str, outcome: str,
                     start_ts: int, end_ts: int, reconsume_times: int | None = None) -> None:
        """One ``consume_attempts`` row; ``reconsume_times`` the client's count when it is not the
        record's (a FIFO consumer's local attempts)."""
        record = message.record
        self.recorder.emit("consume_attempts", {
            "group": self.settings.group, "consumer_id": consumer.consumer_id, "model": "CLUSTERING",
            "queue_topic": record.topic, "queue_id": record.queue_id, "queue_offset": record.queue_offset,
            "msg_id": record.msg_id, "uniq_key": record.properties.get(PROP_UNIQ_KEY),
            "topic": self._origin(record.topic) if is_retry_topic(record.topic) else record.topic,
            "reconsume_times": record.reconsume_times if reconsume_times is None else reconsume_times,
            "start_ts": start_ts, "end_ts": end_ts,
            "status": status, "outcome": outcome, "phys_offset": record.phys_offset})

    def _origin(self, retry_topic: str) -> str:
        """The message topic a POP retry topic of this group stands for (the client resets it)."""
        for topic in self.settings.subscribe:
            if pop_retry_topic(self.settings.group, topic) == retry_topic:
                return topic
        raise AssertionError(f"{retry_topic} is no POP retry topic of {self.settings.group}")
