"""One RocketMQ 4.9.4 broker on the virtual clock: store, topics, groups, offsets, scheduler.

The :class:`Broker` owns a :class:`MessageStore` under ``root`` and the broker-module state that
RocketMQ keeps in ``<root>/config``: topics.json, subscriptionGroup.json (written on change),
consumerOffset.json (every 5 s and on shutdown) and delayOffset.json (every 10 s and on
shutdown). ``crash()`` is a kill -9: nothing is persisted and ``start()`` recovers from disk.

Every put (client sends, send-backs, schedule re-puts) goes through :meth:`Broker.put`, where the
world's put-failure knob applies and consumers waiting on a queue are told a message arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_core.broker import codes
from broker_core.broker.flush import FlushService
from broker_core.broker.groups import GroupTable
from broker_core.broker.offsets import ConsumerOffsets
from broker_core.broker.pop import PopService
from broker_core.broker.recall import recall_message
from broker_core.broker.schedule import ScheduleService
from broker_core.broker.semantics import RandomSource, Semantics, semantics_for
from broker_core.broker.send import SendRequest, SendResponse, send_message
from broker_core.broker.send_back import consumer_send_msg_back
from broker_core.broker.timer import TimerService
from broker_core.broker.topics import TopicTable
from broker_core.broker.transaction import Checker, TransactionService, TransactionSettings
from broker_core.clock import Simulator
from broker_core.codec import Record
from broker_core.constants import (
    COMMITLOG_FILE_SIZE_BYTES_DEFAULT,
    CQ_UNITS_PER_FILE_DEFAULT,
    MESSAGE_DELAY_LEVEL_DEFAULT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    TIMER_PRECISION_MS,
    TIMER_ROLL_WINDOW_SLOT_DEFAULT,
    TIMER_ROLL_WINDOW_SLOT_MAX,
    TIMER_ROLL_WINDOW_SLOT_MIN,
    TIMER_TOPIC,
    TRANSACTION_CHECK_MAX_DEFAULT,
    TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT,
    TRANSACTION_TIMEOUT_MS_DEFAULT,
)
from broker_core.delay_levels import parse_delay_levels
from broker_core.errors import BadInputError, StoreStateError
from broker_core.names import validate_topic
from broker_core.rng import Streams
from broker_core.store.message_store import MessageInner, MessageStore, PutStatus, StoreConfig

CONFIG_DIR_NAME = "config"
# The status a failed put reports when the world's put-failure fault fires: the page-cache
# flow-control status a busy 4.9.4 store returns (mapped to SYSTEM_ERROR for the client).
INJECTED_PUT_FAILURE_STATUS = "OS_PAGECACHE_BUSY"
# Put statuses after which the record is in the commit log (4.9.4's sendOK).
_STORED_STATUSES = ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
_PUT_OK = PutStatus.PUT_OK  # the usual status, checked by identity before its name is looked up

__all__ = ["Broker", "BrokerConfig", "PullResult", "SendRequest", "SendResponse"]


@dataclass
class BrokerConfig:
    """What a scenario can set about one broker (names, store layout, version semantics)."""

    name: str = "broker-a"
    cluster: str = "DefaultCluster"
    store_host: str = "10.0.0.1:10911"
    message_delay_level: str = MESSAGE_DELAY_LEVEL_DEFAULT
    commitlog_file_size_bytes: int = COMMITLOG_FILE_SIZE_BYTES_DEFAULT
    cq_units_per_file: int = CQ_UNITS_PER_FILE_DEFAULT
    flush: str = "async"
    semantics: str = "4.9"
    auto_create_topic: bool = True
    auto_create_subscription_group: bool = True
    schedule_async_deliver: bool = False
    timer_roll_window_slot: int = TIMER_ROLL_WINDOW_SLOT_DEFAULT  # timerRollWindowSlot (5.x rules)
    # transactionCheckInterval (None: the release's default), transactionTimeOut, transactionCheckMax,
    # transactionOpBatchInterval (5.x rules)
    transaction_check_interval_ms: int | None = None
    transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS_DEFAULT
    transaction_check_max: int = TRANSACTION_CHECK_MAX_DEFAULT
    transaction_op_batch_interval_ms: int = TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT


@dataclass
class PullResult:
    """PULL_MESSAGE's answer, in the client's statuses (FOUND, NO_NEW_MSG, ...)."""

    status: str
    records: list[Record]
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class _FailedPut:
    """The put result of an injected failure: nothing was stored."""

    status: str
    msg_id: None = None
    queue_id: None = None
    queue_offset: None = None
    phys_offset: None = None
    topic: None = None


class Broker:
    """A broker: send, send-back, pull, offsets and the delay scheduler over one message store."""

    def __init__(self, root: Path, config: BrokerConfig, sim: Simulator, streams: Streams,
                 recorder=None):
        if config.schedule_async_deliver:
            raise BadInputError("enableScheduleAsyncDeliver is not modelled; only the default "
                                "sync delivery is", where="broker.schedule_async_deliver")
        if not TIMER_ROLL_WINDOW_SLOT_MIN <= config.timer_roll_window_slot <= TIMER_ROLL_WINDOW_SLOT_MAX:
            raise BadInputError(f"timerRollWindowSlot {config.timer_roll_window_slot} is outside "
                                f"{TIMER_ROLL_WINDOW_SLOT_MIN}..{TIMER_ROLL_WINDOW_SLOT_MAX}: the broker "
                                f"would use {TIMER_ROLL_WINDOW_SLOT_MAX} instead",
                                where="broker.timer_roll_window_slot")
        self.root = Path(root)
        self.config = config
        self.sim = sim
        self.streams = streams
        self.recorder = recorder
        self.semantics: Semantics = semantics_for(config.semantics)
        self.levels_ms = parse_delay_levels(config.message_delay_level)
        self.config_dir = self.root / CONFIG_DIR_NAME
        self.put_failure_probability = 0.0
        self.running = False
        self.store: MessageStore | None = None
        self.topics = TopicTable(self.config_dir, cluster=config.cluster, broker_name=config.name,
                                 auto_create=config.auto_create_topic, now_ms=sim.now)
        self.groups = GroupTable(self.config_dir, auto_create=config.auto_create_subscription_group,
                                 now_ms=sim.now)
        self.offsets = ConsumerOffsets(self.config_dir, sim, self._emit)
        self.schedule: ScheduleService | None = None
        self.timer: TimerService | None = None  # 5.x rules only
        self.pop: PopService | None = None  # 5.x rules only
        self.transactions: TransactionService | None = None
        # The producers each transactional producer group has connected (checks go to one of
        # them); they stay connected across a broker restart.
        self.transaction_checkers: dict[str, list[Checker]] = {}
        self.flusher: FlushService | None = None
        self._arrival_listeners: list[Callable[[str, int], None]] = []
        self.puts = 0

    # -- plumbing --------------------------------------------------------------------------------

    def _emit(self, table: str, row: dict) -> None:
        if self.recorder is not None:
            self.recorder.emit(table, row)

    def rng(self, name: str) -> RandomSource:
        """The broker's seeded stream ``name`` (e.g. broker.put_failure, broker.send_back)."""
        return self.streams.stream(name)

    def transaction_settings(self) -> TransactionSettings:
        c = self.config
        interval = c.transaction_check_interval_ms or self.semantics.transaction_check_interval_ms_default()
        return TransactionSettings(check_interval_ms=interval, timeout_ms=c.transaction_timeout_ms,
                                   check_max=c.transaction_check_max,
                                   op_batch_interval_ms=c.transaction_op_batch_interval_ms)

    def store_config(self) -> StoreConfig:
        return StoreConfig(commitlog_file_size_bytes=self.config.commitlog_file_size_bytes,
                           cq_units_per_file=self.config.cq_units_per_file,
                           message_delay_level=self.config.message_delay_level,
                           flush=self.config.flush, store_host=self.config.store_host,
                           properties_map_capacity=self.semantics.properties_map_capacity(),
                           properties_trailing_separator=self.semantics.properties_trailing_separator(),
                           timer_wheel=self.semantics.timer_wheel())

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Load (recovering after a crash) and start: store, configs, offsets, scheduler."""
        assert not self.running, "broker already running"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.store = MessageStore(self.root, self.store_config(), self.sim.now)
        if not self.store.load():
            assert self.store.load_error is not None
            raise self.store.load_error
        self.store.start()
        self.flusher = FlushService(self.store, self.sim, enabled=self.config.flush != "sync")
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.offsets.start()
        self.schedule = ScheduleService(self.store, self.sim, self.config_dir, self.levels_ms,
                                        self.put, self._emit, semantics=self.semantics)
        self.schedule.load()
        self.schedule.start()
        if self.semantics.timer_wheel():
            self.timer = TimerService(self.store, self.sim, self.put, self.semantics, TIMER_PRECISION_MS,
                                      self._stored, self.config.timer_roll_window_slot)
        if self.semantics.pop_consumption():
            self.pop = PopService(self)
        self.transactions = TransactionService(self, self.transaction_settings(), self.transaction_checkers)
        self.transactions.start()
        self.running = True

    def shutdown(self) -> None:
        """Clean stop: persist delay offsets and consumer offsets, then shut the store down."""
        if not self.running:
            return
        self.running = False
        assert self.schedule is not None and self.store is not None
        self.schedule.stop()
        self.schedule.persist()
        if self.timer is not None:
            self.timer.stop()
        if self.pop is not None:
            self.pop.stop()
        assert self.transactions is not None
        self.transactions.stop()
        self.offsets.stop()
        self.offsets.persist()
        assert self.flusher is not None
        self.flusher.stop()
        self.store.shutdown()

    def crash(self) -> None:
        """kill -9: timers stop, nothing is persisted, the store loses what was not flushed."""
        if not self.running:
            return
        self.running = False
        assert self.schedule is not None and self.store is not None
        self.schedule.stop()
        if self.timer is not None:
            self.timer.stop()
        if self.pop is not None:
            self.pop.stop()
        assert self.transactions is not None
        self.transactions.stop()
        self.offsets.stop()
        assert self.flusher is not None
        self.flusher.stop()
        self.store.crash()

    def on_clock_jump(self, delta_ms: int) -> None:
        """Tell the broker's periodic timers the wall clock was moved (call after ``sim.jump``).

        Java's timers wait on monotonic time while deliver times are wall-clock, so a jump moves
        every poll grid by ``delta_ms`` and makes the scheduler re-check its heads at once.
        """
        if not self.running:
            return
        assert self.schedule is not None and self.flusher is not None
        self.schedule.on_clock_jump(delta_ms)
        self.offsets.on_clock_jump(delta_ms)
        self.flusher.on_clock_jump(delta_ms)

    def _require_running(self) -> None:
        if not self.running:
            raise StoreStateError(f"broker {self.config.name} is not running", where=str(self.root))

    # -- topics and groups -----------------------------------------------------------------------

    def create_topic(self, name: str, queues: int = 4, perm: int = PERM_READ | PERM_WRITE):
        """Admin create/update of a topic (written to topics.json); the name must be valid."""
        validate_topic(name)
        return self.topics.create(name, queues, perm)

    def topic_queue_count(self, topic: str) -> int:
        return self.topics.queue_count(topic)

    def subscription_group(self, group: str):
        """The group's config, auto-created with RocketMQ's defaults when allowed."""
        return self.groups.find(group)

    # -- the put path ----------------------------------------------------------------------------

    def put(self, fields: dict):
        """Store one message (MessageInner fields); the single door every write goes through."""
        assert self.store is not None
        p = self.put_failure_probability
        if p > 0.0 and self.rng("broker.put_failure").random() < p:
            return _FailedPut(INJECTED_PUT_FAILURE_STATUS)
        result = self.store.put_message(MessageInner(**fields))
        if self._stored(result):
            self.puts += 1
            assert self.flusher is not None
            self.flusher.after_put()
            if result.topic == SCHEDULE_TOPIC:
                assert self.schedule is not None
                self.schedule.on_put(result.queue_id)
            elif result.topic == TIMER_TOPIC and self.timer is not None:
                self.timer.on_put(result.phys_offset)
            for listener in list(self._arrival_listeners):
                listener(result.topic, result.queue_id)
        return result

    @staticmethod
    def _stored(result) -> bool:
        """Whether a put's result means the record is in the commit log (4.9.4's sendOK)."""
        status = getattr(result, "status", None)
        return status is _PUT_OK or (status is not None and codes.status_name(status) in _STORED_STATUSES)

    def on_message_arrival(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(topic, queue_id)`` after every stored message (long-polling consumers)."""
        self._arrival_listeners.append(callback)

    # -- requests --------------------------------------------------------------------------------

    def send_message(self, req: SendRequest) -> SendResponse:
        """SEND_MESSAGE (asyncSendMessage 4.9.4); a broker that is down raises StoreStateError,
        as a client's connection to a killed broker fails (RemotingConnectException)."""
        self._require_running()
        return send_message(self, req)

    def recall_message(self, topic: str, handle, *, producer_group: str, born_host: str) -> SendResponse:
        """RECALL_MESSAGE (5.3.2+): write a recall record for the timer message of ``handle``
        (broker_core/broker/recall.py); raises when the broker is down."""
        self._require_running()
        return recall_message(self, topic, handle, producer_group=producer_group, born_host=born_host)

    def register_transaction_checker(self, producer_group: str, checker: Checker) -> None:
        """A producer of ``producer_group`` the broker can send transaction checks to (its heartbeat)."""
        self.transaction_checkers.setdefault(producer_group, []).append(checker)

    def end_transaction(self, producer_group: str, phys_offset: int, queue_offset: int, kind: int,
                        from_check: bool = False) -> int | None:
        """END_TRANSACTION (EndTransactionProcessor): commit or roll back the half copy at
        ``phys_offset``; raises when the broker is down (the client's oneway request is lost)."""
        self._require_running()
        assert self.transactions is not None
        return self.transactions.end_transaction(producer_group, phys_offset, queue_offset, kind, from_check)

    def consumer_send_msg_back(self, offset: int, group: str, delay_level: int,
                               origin_msg_id: str | None = None, origin_topic: str | None = None,
                               max_reconsume_times: int | None = None) -> SendResponse:
        """CONSUMER_SEND_MSG_BACK (asyncConsumerSendMsgBack 4.9.4); raises when the broker is down."""
        self._require_running()
        return consumer_send_msg_back(self, offset, group, delay_level, origin_msg_id,
                                      origin_topic, max_reconsume_times)

    def pull_message(self, group: str, topic: str, queue_id: int, offset: int,
                     max_n: int) -> PullResult:
        """PULL_MESSAGE: up to ``max_n`` records from ``offset`` (DefaultMessageStore.getMessage)."""
        self._require_running()
        assert self.store is not None
        assert max_n > 0, f"max_n must be positive, got {max_n}"
        low = self.store.min_offset(topic, queue_id)
        high = self.store.max_offset(topic, queue_id)
        if high == 0:
            # NO_MESSAGE_IN_QUEUE: an empty queue; a non-zero offset is moved back to 0.
            status = "NO_NEW_MSG" if offset == 0 else "OFFSET_ILLEGAL"
            return PullResult(status, [], 0, low, high)
        if offset < low:
            return PullResult("OFFSET_ILLEGAL", [], low, low, high)  # OFFSET_TOO_SMALL
        if offset == high:
            return PullResult("NO_NEW_MSG", [], offset, low, high)  # OFFSET_OVERFLOW_ONE
        if offset > high:
            # OFFSET_OVERFLOW_BADLY: nextOffsetCorrection sends the client to min when it is 0.
            return PullResult("OFFSET_ILLEGAL", [], low if low == 0 else high, low, high)
        records = list(self.store.get_messages(topic, queue_id, offset, max_n))
        if not records:
            return PullResult("NO_MATCHED_MSG", [], offset + 1, low, high)
        next_begin = records[-1].queue_offset + 1
        return PullResult("FOUND", records, next_begin, low, high)

    # -- consumer offsets ------------------------------------------------------------------------

    def update_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET, a oneway request: lost without error when the broker is down."""
        if self.running:
            self.offsets.commit(group, topic, queue_id, offset)

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """QUERY_CONSUMER_OFFSET: the committed offset; -1 when none (or the broker is down, as
        RemoteBrokerOffsetStore.readOffset answers a failed query)."""
        if not self.running:
            return -1
        return self.offsets.query(group, topic, queue_id)
