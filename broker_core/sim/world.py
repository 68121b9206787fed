"""The simulated world: one broker, its topics, producers and consumer groups on the virtual clock.

:class:`World` turns a :class:`~broker_core.sim.scenario.Scenario` into running objects and drives
the :class:`~broker_core.clock.Simulator` until the horizon, or earlier once every message is
terminal for every group (all sent, every group idle, nothing waiting in the schedule topic or
the timer wheel).
Everything random comes from ``Streams(scenario.seed)``, one named stream per subsystem, so a run
is a pure function of (scenario, seed, code version).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_core.broker.broker import Broker, BrokerConfig
from broker_core.broker.proxy import PROXY_INVISIBLE_MS_DEFAULT
from broker_core.client.behavior import Behavior
from broker_core.client.consumer_group import ConsumerGroup, ConsumerSettings
from broker_core.client.pop_consumer import GRPC_PUSH_CLIENTS, PopConsumerGroup, PopSettings
from broker_core.client.producer import Producer
from broker_core.client.transaction_producer import TransactionListener, TransactionProducer, answers_of
from broker_core.clock import Simulator
from broker_core.constants import PROP_TIMER_DELAY_MS
from broker_core.message import UniqKeyGenerator
from broker_core.rng import Streams
from broker_core.sim.faults import FaultInjector
from broker_core.sim.scenario import POP_MODE, ProducerSpec, Scenario, consumer_id

# 2026-01-01T00:00:00Z: every run starts at the same simulated instant, so runs are reproducible.
SIM_EPOCH_MS = 1_767_225_600_000
# How often the world asks "is every message terminal?" and reports progress (simulated time).
# Asking walks every consumer's queues; every 5 s costs a few simulated seconds at the end of a
# run and almost nothing per check (profiled: at 1 s it was an eighth of a run's time).
TERMINAL_CHECK_INTERVAL_MS = 5000
PROGRESS_INTERVAL_MS = 10_000
# A terminal state must hold this long before the run stops: offsets get persisted (every 5 s)
# and a consumer that just went idle gets one more pull, so the tables end in a settled state.
TERMINAL_SETTLE_MS = 10_000
PRODUCER_HOST_PREFIX = "10.0.1."  # producers' born hosts: 10.0.1.<n>:<port>
PRODUCER_PORT_BASE = 50_000
PID_MAX = 65_535
CLASSLOADER_HASH_MAX = 2**31 - 1
BODY_FILL_BYTE = b"."

Progress = Callable[[int, int], None]  # (simulated ms since the start, records written so far)


@dataclass
class ProducerDriver:
    """Sends one producer spec's messages at its rate, one simulator event per message."""

    world: World
    index: int
    spec: ProducerSpec
    client: object
    sent: int = 0

    def start(self, at_ms: int) -> None:
        if self.spec.messages > 0:
            self.world.sim.at(at_ms, self._send_next)

    def _send_next(self) -> None:
        spec, i = self.spec, self.sent
        tags = spec.tags[i % len(spec.tags)] if spec.tags else None
        level = self.world.pick_delay_level(self.index, spec.delay_weights)
        timer_ms = self.world.pick_timer_ms(self.index, spec.timer_weights)
        body = _body(self.index, i, spec.body_size)
        # Message.setDelayTimeMs (5.x clients): the broker's wheel holds the message until then.
        extra = {PROP_TIMER_DELAY_MS: str(timer_ms)} if timer_ms > 0 else None
        recall = timer_ms > 0 and self.world.pick_recall(self.index, spec.recall_fraction)
        if spec.transaction_weights:
            decision = self.world.pick_transaction(self.index, spec.transaction_weights)
            self.client.send_in_transaction(spec.topic, body, tags=tags, keys=f"p{self.index}-{i}",
                                            delay_level=level, answers=answers_of(decision))
        else:
            self.client.send(spec.topic, body, tags=tags, keys=f"p{self.index}-{i}", delay_level=level,
                             properties=extra, recall=recall)
        self.sent += 1
        self.world.messages_sent += 1
        if self.sent < spec.messages:
            # The i-th message leaves at start + floor(i / rate): exact, no drift from rounding.
            due = self.start_ms + int(self.sent * 1000 / spec.rate_per_s)
            self.world.sim.at(due, self._send_next)

    @property
    def start_ms(self) -> int:
        return self.world.start_ms + self.spec.start_ms

    @property
    def done(self) -> bool:
        return self.sent >= self.spec.messages


def _body(producer: int, index: int, size: int) -> bytes:
    """A body unique per message (so its CRC tells messages apart) padded to ``size`` bytes."""
    head = f"p{producer}-m{index}|".encode()
    if len(head) >= size:
        return head[:size]
    return head + BODY_FILL_BYTE * (size - len(head))


class World:
    """Builds the broker, topics, groups and producers of a scenario and runs them."""

    def __init__(self, scenario: Scenario, store_root: str | Path, recorder, *,
                 progress: Progress | None = None):
        self.scenario = scenario
        self.recorder = recorder
        self.progress = progress
        self.start_ms = SIM_EPOCH_MS
        self.sim = Simulator(SIM_EPOCH_MS)
        self.streams = Streams(scenario.seed)
        self.messages_sent = 0
        self.end_reason = "horizon"
        self._terminal_since: int | None = None
        self._done = False
        b = scenario.broker
        self.broker_config = BrokerConfig(
            name=b.name, cluster=b.cluster, store_host=b.store_host,
            message_delay_level=b.message_delay_level,
            commitlog_file_size_bytes=b.commitlog_file_size_bytes,
            cq_units_per_file=b.cq_units_per_file, flush=b.flush, semantics=b.semantics,
            timer_roll_window_slot=b.timer_roll_window_slot,
            transaction_check_interval_ms=b.transaction_check_interval_ms,
            transaction_timeout_ms=b.transaction_timeout_ms, transaction_check_max=b.transaction_check_max,
            transaction_op_batch_interval_ms=b.transaction_op_batch_interval_ms)
        self.broker = Broker(Path(store_root), self.broker_config, self.sim,
                             self.streams.fork("broker"), recorder)
        self.broker.start()
        for topic in scenario.topics:
            self.broker.create_topic(topic.name, topic.queues)
        self.groups = {}
        # One listener per transactional producer group, shared by its producers (any of them may
        # be asked about a message of the group).
        self.transaction_listeners: dict[str, TransactionListener] = {}
        if scenario.groups:
            self._build_groups()
        ids = self.streams.stream("producer.ids")
        self.drivers: list[ProducerDriver] = []
        for i, spec in enumerate(scenario.producers):
            self.drivers.append(self._driver(i, spec, Producer, UniqKeyGenerator, ids))
        for d in self.drivers:
            d.start(self.start_ms + d.spec.start_ms)
        self.faults = FaultInjector(self)
        self.faults.schedule(scenario.faults)
        self.sim.at(self.start_ms + TERMINAL_CHECK_INTERVAL_MS, self._check_terminal)
        if progress is not None:
            self.sim.at(self.start_ms + PROGRESS_INTERVAL_MS, self._report)

    def _build_groups(self) -> None:
        for g in self.scenario.groups:
            self.broker.subscription_group(g.name)
            if g.mode == POP_MODE:
                self.groups[g.name] = self._pop_group(g)
                continue
            settings = ConsumerSettings(group=g.name, subscribe=tuple(g.subscribe), model=g.model,
                                        mode=g.mode, max_reconsume_times=g.max_reconsume_times,
                                        consume_timeout_ms=g.consume_timeout_ms)
            group = ConsumerGroup(self.sim, self.broker, settings, _behavior(g.behavior),
                                  self.streams.fork(f"group.{g.name}"), self.recorder)
            for i in range(g.consumers):
                group.add_consumer(consumer_id(g.name, i))
            self.groups[g.name] = group

    def _pop_group(self, g):
        """A 5.x POP group (the scenario loader allows one only under the 5.x rules)."""
        extra = {}
        if g.invisible_ms is not None:
            extra["invisible_ms"] = g.invisible_ms
        if g.retry_delays_ms:
            extra["retry_delays_ms"] = g.retry_delays_ms
        if g.client in GRPC_PUSH_CLIENTS:
            extra["invisible_ms"] = PROXY_INVISIBLE_MS_DEFAULT  # the client asks for auto renewal
        settings = PopSettings(group=g.name, subscribe=tuple(g.subscribe),
                               max_reconsume_times=g.max_reconsume_times, client=g.client,
                               retry_max_times=g.retry_max_times, retry_policy=g.retry_policy, **extra)
        # The scenario loader refuses a hang for a POP group: its hang probability is 0.
        group = PopConsumerGroup(self.sim, self.broker, settings, _behavior(g.behavior),
                                 self.streams.fork(f"group.{g.name}"), self.recorder)
        for i in range(g.consumers):
            group.add_consumer(consumer_id(g.name, i))
        return group

    def _driver(self, index: int, spec: ProducerSpec, producer_cls, keygen_cls, ids) -> ProducerDriver:
        ip = f"{PRODUCER_HOST_PREFIX}{index % 250 + 1}"
        pid = ids.randrange(1, PID_MAX + 1)
        loader = ids.randrange(CLASSLOADER_HASH_MAX)
        extra = {}
        if spec.transaction_weights:
            producer_cls = TransactionProducer
            listener = self.transaction_listeners.get(spec.producer_group)
            if listener is None:
                listener = TransactionListener(spec.producer_group, self.sim, self.recorder)
                self.transaction_listeners[spec.producer_group] = listener
            extra["listener"] = listener
        client = producer_cls(self.sim, self.broker, self.streams.fork(f"producer.{index}"),
                              producer_group=spec.producer_group,
                              born_host=f"{ip}:{PRODUCER_PORT_BASE + index}",
                              uniq_keys=keygen_cls(ip, pid, loader), recorder=self.recorder,
                              send_mode=spec.send, **extra)
        return ProducerDriver(self, index, spec, client)

    def add_burst(self, topic: str, messages: int, rate_per_s: float) -> None:
        """A burst fault: an extra producer sending ``messages`` to ``topic`` from now on."""
        index = len(self.drivers)
        spec = ProducerSpec(topic=topic, messages=messages, rate_per_s=rate_per_s,
                            start_ms=self.sim.now() - self.start_ms)
        driver = self._driver(index, spec, Producer, UniqKeyGenerator,
                              self.streams.stream("producer.ids.burst"))
        self.drivers.append(driver)
        driver.start(self.sim.now())

    def pick_recall(self, producer: int, fraction: float) -> bool:
        """Whether a timer message is recalled, from the producer's own stream (a scenario without
        recalls draws nothing: its runs stay as they were)."""
        if fraction <= 0:
            return False
        return self.streams.stream(f"producer.{producer}.recall").random() < fraction

    def pick_transaction(self, producer: int, weights: tuple[tuple[str, float], ...]) -> str:
        """A transactional message's decision, from the producer's own stream (drawn only for a
        transactional producer: other runs stay as they were)."""
        if len(weights) == 1:
            return weights[0][0]
        rng = self.streams.stream(f"producer.{producer}.transaction")
        return rng.choices([d for d, _ in weights], weights=[w for _, w in weights])[0]

    def pick_timer_ms(self, producer: int, weights: tuple[tuple[int, float], ...]) -> int:
        """A message's timer (0: none), from the producer's own stream: adding timers to one
        producer leaves every other draw of the run as it was."""
        if len(weights) == 1:
            return weights[0][0]
        rng = self.streams.stream(f"producer.{producer}.timer")
        return rng.choices([ms for ms, _ in weights], weights=[w for _, w in weights])[0]

    def pick_delay_level(self, producer: int, weights: tuple[tuple[int, float], ...]) -> int:
        if len(weights) == 1:
            return weights[0][0]
        rng = self.streams.stream(f"producer.{producer}.delay")
        levels = [lv for lv, _ in weights]
        return rng.choices(levels, weights=[w for _, w in weights])[0]

    # --- running ---------------------------------------------------------------------------------

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.scenario.horizon_ms

    def all_sent(self) -> bool:
        return all(d.done for d in self.drivers) and not self.faults.pending_bursts()

    def terminal(self) -> bool:
        """Every message sent, every group idle, nothing waiting in the schedule topic or the timer wheel."""
        if not self.all_sent() or self.faults.active():
            return False
        if not self.broker.running:
            return False
        # The schedule first: it is a dict scan, where a group's idle test walks its members and
        # reallocates its queues, and through the long delay levels it is what keeps a run going.
        schedule = self.broker.schedule
        if schedule is not None and schedule.pending_levels():
            return False
        # A 5.x timer message still in the wheel (it may roll for days) is not delivered yet.
        timer = self.broker.timer
        if timer is not None and timer.pending_messages:
            return False
        # A half message not yet decided, checked or discarded (or a decision waiting for its op).
        transactions = self.broker.transactions
        if transactions is not None and transactions.pending():
            return False
        return all(g.idle() for g in self.groups.values())

    def _check_terminal(self) -> None:
        now = self.sim.now()
        if self.terminal():
            if self._terminal_since is None:
                self._terminal_since = now
            elif now - self._terminal_since >= TERMINAL_SETTLE_MS:
                self.end_reason = "terminal"
                self._done = True
                self.sim.stop()
                return
        else:
            self._terminal_since = None
        self.sim.at(now + TERMINAL_CHECK_INTERVAL_MS, self._check_terminal)

    def _report(self) -> None:
        assert self.progress is not None
        self.progress(self.sim.now() - self.start_ms, self.recorder.total)
        if not self._done:
            self.sim.at(self.sim.now() + PROGRESS_INTERVAL_MS, self._report)

    def run(self) -> None:
        """Run to the horizon or until every message is terminal, then shut the broker down."""
        self.sim.run(until_ms=self.end_ms)
        if self.progress is not None:
            self.progress(self.sim.now() - self.start_ms, self.recorder.total)
        for group in self.groups.values():
            stop = getattr(group, "shutdown", None)
            if stop is not None:
                stop()  # persists consumer offsets, as a clean client shutdown does
        if self.broker.running:
            self.broker.shutdown()


def _behavior(spec):
    """The listener behaviour of a scenario group's ``behavior`` settings."""
    return Behavior(consume_time_ms=spec.consume_time_ms, fail_probability=spec.fail_probability,
                    exception_probability=spec.exception_probability,
                    return_null_probability=spec.return_null_probability,
                    hang_probability=spec.hang_probability, poison_fraction=spec.poison_fraction,
                    dlq_probability=spec.dlq_probability)
