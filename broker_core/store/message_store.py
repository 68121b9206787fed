"""The message store: commit log + consume queues + checkpoint behind one API (DefaultMessageStore).

Life cycle, as a broker drives it: ``MessageStore(root, config, clock)`` → ``load()`` (recovery,
normal or abnormal by the ``abort`` file) → ``start()`` (creates ``abort``) → ``put_message`` /
``put_messages`` (a batch send) / ``get_messages`` / ``look_message_by_offset`` … → ``shutdown()``
(flush, checkpoint, remove ``abort``) or ``crash()`` (kill -9: the unflushed tail is lost and
``abort`` stays).

The put path does what 4.9.4's ``DefaultMessageStore.asyncPutMessage`` and
``CommitLog.asyncPutMessage`` do: the size checks, the delay rewrite into SCHEDULE_TOPIC_XXXX (§4.2),
the append with its queue offset, and the consume-queue dispatch. RocketMQ dispatches from a
reput thread; this model dispatches in the put itself, so a stored message is readable at once.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache, partial
from itertools import islice
from pathlib import Path
from typing import NamedTuple
from zlib import crc32

from broker_core import codec, names
from broker_core.constants import (
    BODY_SIZE_BYTES_MAX,
    COMMITLOG_FILE_SIZE_BYTES_DEFAULT,
    CQ_UNIT_SIZE_BYTES,
    CQ_UNITS_PER_FILE_DEFAULT,
    END_FILE_MIN_BLANK_LENGTH_BYTES,
    MESSAGE_DELAY_LEVEL_DEFAULT,
    MESSAGE_MAGIC_CODE_V1,
    NAME_VALUE_SEPARATOR,
    PROP_TIMER_OUT_MS,
    PROPERTIES_LENGTH_BYTES_MAX,
    PROPERTY_SEPARATOR,
    SCHEDULE_TOPIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TIMER_MAX_DELAY_MS,
    TIMER_PRECISION_MS,
    TIMER_TOPIC,
)
from broker_core.delay_levels import deliver_timestamp, parse_delay_levels
from broker_core.errors import BadInputError, CorruptRecordError, CorruptStoreError, StoreStateError
from broker_core.message import (
    HASHMAP_CAPACITY_DEFAULT,
    PROP_DELAY,
    PROP_TAGS,
    JavaHashMap,
    create_message_id,
    delay_rewrite_map,
    properties_to_string,
    string_to_properties,
    tags_code,
)
from broker_core.store import recovery
from broker_core.store.checkpoint import (
    LOCK_FILE_NAME,
    StoreCheckpoint,
    abort_file_exists,
    create_abort_file,
    remove_abort_file,
    write_lock_file,
)
from broker_core.store.commit_log import (
    HOST_CACHE_ENTRIES_MAX,
    CommitLog,
    FieldCache,
    java_parse_int,
    record_tags_code,
)
from broker_core.store.consume_queue import ConsumeQueue, list_consume_queues, pack_cq_unit
from broker_core.store.problem import Problem
from broker_core.store.timer_hook import drop_timer_input, has_timer_input, timer_rewrite

FLUSH_SYNC = "sync"
RECORD_CACHE_ENTRIES_MAX = 65_536  # decoded records kept for pulls; bounded memory (~tens of MiB)
RECORD_CACHE_EVICT_ENTRIES = RECORD_CACHE_ENTRIES_MAX // 16  # dropped at once when the cache is full
FLUSH_ASYNC = "async"
_NO_DISPATCH = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)
# put_message tells them by one bit: the transaction types with 0x4 set are exactly these.
assert all(bool(t & SYSFLAG_TRANSACTION_PREPARED) == (t in _NO_DISPATCH) for t in range(0, 16, 4))
_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_NOT_V6_BITS = ~_V6_BITS
_PROPS_LEN = codec.PROPERTIES_LENGTH


@dataclass
class StoreConfig:
    """MessageStoreConfig, the part this model uses (defaults are RocketMQ's)."""

    commitlog_file_size_bytes: int = COMMITLOG_FILE_SIZE_BYTES_DEFAULT
    cq_units_per_file: int = CQ_UNITS_PER_FILE_DEFAULT
    message_delay_level: str = MESSAGE_DELAY_LEVEL_DEFAULT
    flush: str = FLUSH_ASYNC
    check_crc_on_recover: bool = True
    store_host: str = "127.0.0.1:10911"
    max_message_size: int = BODY_SIZE_BYTES_MAX
    # How the delay rewrite re-serializes a message's properties: HashMap(16) and no trailing
    # separator in 4.9.4, HashMap(128) and a trailing \x02 in 5.x (broker semantics).
    properties_map_capacity: int = HASHMAP_CAPACITY_DEFAULT
    properties_trailing_separator: bool = False
    # 5.x's put hook for timer messages (timerWheelEnable; broker_core/store/timer_hook.py).
    timer_wheel: bool = False
    timer_precision_ms: int = TIMER_PRECISION_MS
    timer_max_delay_ms: int = TIMER_MAX_DELAY_MS

    def validate(self) -> list[int]:
        """Check the settings; return the parsed delay table (ms per level)."""
        if self.flush not in (FLUSH_SYNC, FLUSH_ASYNC):
            raise BadInputError(f"flush must be 'sync' or 'async', got {self.flush!r}", where="flush")
        if self.commitlog_file_size_bytes <= 64:
            raise BadInputError(f"commit-log file size {self.commitlog_file_size_bytes} is too small",
                                where="commitlog_file_size_bytes")
        if self.cq_units_per_file <= 0:
            raise BadInputError(f"cq_units_per_file must be positive, got {self.cq_units_per_file}",
                                where="cq_units_per_file")
        if self.max_message_size <= 0:
            raise BadInputError(f"max_message_size must be positive, got {self.max_message_size}",
                                where="max_message_size")
        return parse_delay_levels(self.message_delay_level)


@dataclass(slots=True)
class MessageInner:
    """What the broker hands the store (MessageExtBrokerInner).

    ``properties`` is the in-memory map (a JavaHashMap keeps Java's order for re-serialization);
    ``properties_string`` is the string to store (None: serialize ``properties``). ``delay_level``
    None means "read DELAY from properties"; the schedule service passes 0 on its re-put because
    RocketMQ clears DELAY in the map but keeps it in the stored string (§4.4). On the delay
    rewrite a JavaHashMap is changed in place (DELAY clamped, REAL_TOPIC and REAL_QID added), as
    the broker's map is; a plain dict is copied into a JavaHashMap first and left alone.
    """

    topic: str
    queue_id: int
    body: bytes
    properties: JavaHashMap | dict
    properties_string: str | None = None
    flag: int = 0
    sys_flag: int = 0
    born_ts: int = 0
    born_host: str = "127.0.0.1:0"
    store_host: str | None = None  # None: the store's configured host
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    delay_level: int | None = None


@dataclass(slots=True)
class MessageBatchInner:
    """What the broker hands the store for a batch send (MessageExtBatch).

    One topic and queue for every message; ``body`` is the client's encoded messages
    (``codec.encode_batch_body``). The batch-level ``properties`` (the request header's, with the
    broker's CLUSTER) are appended to each message's own when it is stored (§1.9). A batch cannot
    be delayed or transactional (``CommitLog.asyncPutMessages``).
    """

    topic: str
    queue_id: int
    body: bytes
    properties: JavaHashMap | dict = field(default_factory=dict)
    properties_string: str | None = None
    sys_flag: int = 0
    born_ts: int = 0
    born_host: str = "127.0.0.1:0"
    store_host: str | None = None  # None: the store's configured host
    reconsume_times: int = 0


class PutStatus(StrEnum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


_PUT_OK = PutStatus.PUT_OK  # a module constant: attribute access on an Enum class is slow (3.11)


class PutResult(NamedTuple):
    """The outcome of a put; the topic and queue are the stored ones (after a delay rewrite)."""

    status: PutStatus
    topic: str
    queue_id: int
    phys_offset: int = -1
    queue_offset: int = -1
    store_ts: int = 0
    total_size: int = 0
    detail: str = ""
    store_host: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + physical offset); "" when nothing was stored."""
        if self.status is not _PUT_OK:
            return ""
        return create_message_id(self.store_host, self.phys_offset)


class BatchPutResult(NamedTuple):
    """The outcome of a batch put: every message stored, in order, or none of them."""

    status: PutStatus
    topic: str
    queue_id: int
    phys_offsets: tuple[int, ...] = ()
    queue_offset: int = -1  # the first message's; the others follow one by one
    store_ts: int = 0  # one store time for the whole batch
    total_size: int = 0  # the bytes of every record together (wroteBytes)
    detail: str = ""
    store_host: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def msg_num(self) -> int:
        return len(self.phys_offsets)

    @property
    def msg_ids(self) -> str:
        """The messages' offset ids joined by ``,`` (AppendMessageResult.getMsgId of a batch)."""
        return ",".join(create_message_id(self.store_host, p) for p in self.phys_offsets)


_SEPARATOR = PROPERTY_SEPARATOR.encode()
_SEPARATOR_CODE = _SEPARATOR[0]
# A properties key as it starts a segment.
_TAGS_KEY = (PROP_TAGS + NAME_VALUE_SEPARATOR).encode()
_TAGS_KEY_LENGTH = len(_TAGS_KEY)


def _last_tags(props: bytes) -> bytes | None:
    """TAGS as ``string2messageProperties`` reads it from a properties string's UTF-8 bytes: the
    value of the last segment whose key (the part before its first \x01) is TAGS, when that value
    is not empty. The key text cannot overlap itself, so each earlier match ends where the one
    just rejected starts, or before."""
    at = props.rfind(_TAGS_KEY)
    while at >= 0:
        if at == 0 or props[at - 1] == _SEPARATOR_CODE:
            value_at = at + _TAGS_KEY_LENGTH
            stop = props.find(_SEPARATOR, value_at)
            value = props[value_at:stop] if stop >= 0 else props[value_at:]
            if value:
                return value
        at = props.rfind(_TAGS_KEY, 0, at)
    return None


@lru_cache(maxsize=4096)
def _tags_code(tags: bytes | None) -> int:
    """``tags_code`` of TAGS found by ``_last_tags``."""
    return tags_code(tags.decode("utf-8")) if tags else 0


# A stored message's result, made from a tuple of every field in one C call: PutResult(...) runs
# Python code, and the store makes one result per message (this saves 525 of the 33,150
# instructions a put executed, counted by bench/store_append).
_stored_result = partial(tuple.__new__, PutResult)


class MessageStore:
    """A RocketMQ 4.9.4 store directory, written and read in RocketMQ's own format."""

    def __init__(self, root: Path | str, config: StoreConfig, clock: Callable[[], int]):
        self.root = Path(root)
        self.config = config
        self.clock = clock
        self.delay_levels = config.validate()
        self.max_delay_level = len(self.delay_levels)
        self.commit_log = CommitLog(self.root, config.commitlog_file_size_bytes, self.delay_levels,
                                    check_crc=config.check_crc_on_recover)
        self.checkpoint: StoreCheckpoint | None = None
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.recovery_report: recovery.RecoveryReport | None = None
        self.load_error: CorruptStoreError | None = None
        self._loaded = False
        self._running = False
        self._lock_fd: int | None = None
        self._sync = config.flush == FLUSH_SYNC
        self._last_store_ts = 0  # store time of the newest record written
        self._last_dispatch_ts = 0  # store time of the newest record put in a consume queue
        # Per stored (topic, queue): the commit-log table key and the queue, built once.
        self._route: dict[str, dict[int, tuple[str, ConsumeQueue]]] = {}
        self._valid_topics: set[str] = set()
        self._fields = FieldCache()
        # Read first by put_message (a dict lookup, no call): the topic-field cache, the host
        # parts of messages stored under the store's own host by born host (_own_hosts), and
        # the others' by (born, store) host.
        self._topic_fields = self._fields.topic_fields
        self._own_host_pairs: dict[str, tuple] = {}
        self._host_pairs = self._fields.host_pairs
        self._max_body = config.max_message_size
        self._store_host = config.store_host
        # The largest record a commit-log file can take (CommitLog.fits_in_a_file).
        self._record_bytes_max = config.commitlog_file_size_bytes - END_FILE_MIN_BLANK_LENGTH_BYTES
        # Decoded records by physical offset, like the page cache a broker reads pulls from:
        # several groups and the schedule read the same fresh records, and decoding dominates a
        # pull. Records handed out are shared and must not be mutated by callers.
        self._record_cache: dict[int, codec.Record] = {}

    # --- life cycle ---------------------------------------------------------------------------

    def load(self) -> bool:
        """Open the files and recover (§3.8); False when the store cannot be loaded.

        A file whose size differs from the configuration fails the load, as in RocketMQ;
        ``load_error`` says which.
        """
        assert not self._running, "load() on a running store"
        self.root.mkdir(parents=True, exist_ok=True)
        last_exit_ok = not abort_file_exists(self.root)
        try:
            self.commit_log.load()
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            skipped: list[str] = []
            for topic, queue_id in list_consume_queues(self.root, skipped):
                cq = self._new_queue(topic, queue_id)
                cq.load()
        except CorruptStoreError as exc:
            self.load_error = exc
            return False
        self._recover(last_exit_ok)
        self.recovery_report.notes.extend(
            f"consumequeue/{name} is not a valid topic name; not loaded" for name in skipped)
        self._loaded = True
        return True

    def _recover(self, last_exit_ok: bool) -> None:
        queues = list(self.queues.values())
        max_phys_of_queues = recovery.recover_consume_queues(queues)
        if not self.commit_log.files.files:
            # No commit log: nothing the queues point at exists (destroyLogics).
            for cq in queues:
                cq.destroy()
            self.recovery_report = recovery.RecoveryReport(
                recovery.RECOVERY_NORMAL if last_exit_ok else recovery.RECOVERY_ABNORMAL)
        else:
            report = recovery.recover_commit_log(self.commit_log, self.checkpoint,
                                                 last_exit_ok=last_exit_ok, dispatch=self._dispatch)
            recovery.truncate_consume_queues(list(self.queues.values()), report.process_offset,
                                             max_phys_of_queues, report)
            self.recovery_report = report
        recovery.rebuild_topic_queue_table(self.commit_log, list(self.queues.values()))

    def start(self) -> None:
        """Take the lock and leave the ``abort`` marker that a clean shutdown removes."""
        assert self._loaded, "start() before a successful load()"
        if self._running:
            return
        write_lock_file(self.root)
        fd = os.open(self.root / LOCK_FILE_NAME, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreStateError("Lock failed, MQ already started", where=str(self.root)) from None
        self._lock_fd = fd
        create_abort_file(self.root)
        self._running = True

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint and remove ``abort`` (a clean exit)."""
        if self._running:
            self.flush()
            remove_abort_file(self.root)
        self._close()

    def crash(self) -> None:
        """kill -9: bytes not yet flushed are lost; ``abort`` and the old checkpoint stay."""
        self.commit_log.crash()
        for cq in self.queues.values():
            cq.crash()
        self._close()

    def _close(self) -> None:
        self._running = False
        self._record_cache.clear()
        self.commit_log.close()
        for cq in self.queues.values():
            cq.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def running(self) -> bool:
        return self._running

    # --- consume queues -----------------------------------------------------------------------

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(self.root, topic, queue_id, self.config.cq_units_per_file)
        self.queues[(topic, queue_id)] = cq
        return cq

    def _own_hosts(self, born_host: str) -> tuple[bytes, bytes, int, struct.Struct, int]:
        """FieldCache.hosts for a message stored under the store's own host, kept by born host."""
        parts = self._fields.hosts(born_host, self._store_host)
        if len(self._own_host_pairs) < HOST_CACHE_ENTRIES_MAX:
            self._own_host_pairs[born_host] = parts
        return parts

    def _queue_route(self, topic: str, queue_id: int) -> tuple[str, ConsumeQueue]:
        queue_routes = self._route.get(topic)
        if queue_routes is None:
            queue_routes = self._route[topic] = {}
        route = queue_routes.get(queue_id)
        if route is None:
            cq = self.queues.get((topic, queue_id)) or self._new_queue(topic, queue_id)
            route = queue_routes[queue_id] = (f"{topic}-{queue_id}", cq)
        return route

    def _dispatch(self, record: codec.Record, tags: int) -> None:
        """CommitLogDispatcherBuildConsumeQueue for a record found by recovery."""
        if record.sys_flag & SYSFLAG_TRANSACTION_MASK in _NO_DISPATCH:
            return
        cq = self.queues.get((record.topic, record.queue_id))
        if cq is None:
            cq = self._new_queue(record.topic, record.queue_id)
        cq.put(record.phys_offset, record.total_size, tags, record.queue_offset)
        self._last_dispatch_ts = record.store_ts
        if self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = record.store_ts

    # --- put ----------------------------------------------------------------------------------

    def _admit_topic(self, topic: str, queue_id: int) -> None:
        """Validate a topic the first time it is put (InvalidNameError before anything touches disk)."""
        names.validate_topic(topic)
        assert isinstance(queue_id, int) and queue_id >= 0, f"bad queue id {queue_id!r}"
        self._valid_topics.add(topic)

    def put_message(self, msg: MessageInner) -> PutResult:
        """Store one message (§4.2 delay rewrite included) and dispatch it to its consume queue."""
        refused = self._refuse_put(msg)
        if refused is not None:
            return refused
        topic, queue_id = msg.topic, msg.queue_id
        props, props_string = msg.properties, msg.properties_string
        # A prepared (0x4) or rolled-back (0xC) transaction message is not dispatched: the two
        # transaction types with bit 0x4 set (_NO_DISPATCH).
        dispatch = not msg.sys_flag & SYSFLAG_TRANSACTION_PREPARED
        level = msg.delay_level
        if level is None:
            text = props.get(PROP_DELAY)
            level = 0 if text is None else java_parse_int(text)
            if level is None:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, topic, queue_id, detail=f"DELAY {text!r} is not an int")
        if self.config.timer_wheel and dispatch and topic != TIMER_TOPIC and has_timer_input(props):
            hooked = self._timer_hook(props, props_string, topic, queue_id, level)
            if isinstance(hooked, PutResult):
                return hooked
            props, props_string, topic, queue_id = hooked
        schedule_level = 0
        if level > 0 and dispatch:
            props_string, topic, queue_id, schedule_level = self._schedule_hook(props, topic, queue_id, level)
        elif props_string is None:
            props_string = properties_to_string(props,
                                                trailing_separator=self.config.properties_trailing_separator)
        props_bytes = props_string.encode()  # UTF-8
        if len(props_bytes) > PROPERTIES_LENGTH_BYTES_MAX:
            return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, topic, queue_id,
                             detail=f"properties of {len(props_bytes)} bytes exceed "
                                    f"{PROPERTIES_LENGTH_BYTES_MAX}")
        appended = self._append_record(msg, topic, queue_id, props_bytes, dispatch)
        if isinstance(appended, PutResult):
            return appended
        cq, phys, size, queue_offset, store_ts, store_host = appended
        if dispatch:
            if schedule_level:
                tags = deliver_timestamp(self.delay_levels, schedule_level, store_ts)
            elif topic == SCHEDULE_TOPIC:
                tags = record_tags_code(topic, string_to_properties(props_string), store_ts,
                                        self.delay_levels)
            else:
                tags = tags_code(props.get(PROP_TAGS))
            self._dispatch_put(cq, phys, size, tags, queue_offset)
            self._last_dispatch_ts = store_ts
        if self._sync:
            self.flush()
        return _stored_result((_PUT_OK, topic, queue_id, phys, queue_offset, store_ts, size, "", store_host))

    def _refuse_put(self, msg: MessageInner) -> PutResult | None:
        """Why the store refuses a message before anything is rewritten (checkMessage), or None."""
        topic = msg.topic
        queue_id = msg.queue_id
        if not self._running:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, topic, queue_id,
                             detail="the store is not running")
        if topic not in self._valid_topics:
            self._admit_topic(topic, queue_id)
        if len(msg.body) > self._max_body:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, topic, queue_id,
                             detail=f"body of {len(msg.body)} bytes exceeds {self.config.max_message_size}")
        props_string = msg.properties_string
        if props_string is not None and len(props_string) > PROPERTIES_LENGTH_BYTES_MAX:
            # DefaultMessageStore.checkMessage counts chars of the string it was handed.
            return PutResult(PutStatus.MESSAGE_ILLEGAL, topic, queue_id,
                             detail=f"properties string of {len(props_string)} chars is too long")
        return None

    def _timer_hook(self, props, props_string: str | None, topic: str, queue_id: int,
                    level: int) -> tuple | PutResult:
        """HookUtils.handleScheduleMessage @5.3.3: a delay level clears the timer; otherwise a
        timer not yet due sends the message into the wheel's topic. Returns the message's
        (properties, properties string, topic, queue id) after the hook, or why it was refused."""
        java_map = (props if isinstance(props, JavaHashMap)
                    else JavaHashMap.from_items(props.items(), self.config.properties_map_capacity))
        if level > 0:
            drop_timer_input(java_map)
            return java_map, props_string, topic, queue_id
        if java_map.get(PROP_TIMER_OUT_MS) is not None:
            return props, props_string, topic, queue_id
        timer = timer_rewrite(java_map, topic, queue_id, self.clock(),
                              precision_ms=self.config.timer_precision_ms,
                              max_delay_ms=self.config.timer_max_delay_ms)
        if timer.refused is not None:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, topic, queue_id, detail=timer.refused)
        if timer.out_ms is None:
            return props, props_string, topic, queue_id
        props_string = java_map.to_properties_string(trailing_separator=self.config.properties_trailing_separator)
        if timer.topic not in self._valid_topics:
            self._admit_topic(timer.topic, timer.queue_id)
        return java_map, props_string, timer.topic, timer.queue_id

    def _schedule_hook(self, props, topic: str, queue_id: int, level: int) -> tuple[str, str, int, int]:
        """The §4.2 rewrite of a delayed message into SCHEDULE_TOPIC_XXXX (a level past the table's
        last is clamped to it). Returns (properties string, topic, queue id, delay level)."""
        clamped = None
        if level > self.max_delay_level:
            level = clamped = self.max_delay_level
        java_map = (props if isinstance(props, JavaHashMap)
                    else JavaHashMap.from_items(props.items(), self.config.properties_map_capacity))
        props_string = delay_rewrite_map(java_map, topic, queue_id, clamped,
                                         trailing_separator=self.config.properties_trailing_separator)
        return props_string, SCHEDULE_TOPIC, level - 1, level

    def _append_record(self, msg: MessageInner, topic: str, queue_id: int, props_bytes: bytes,
                       dispatch: bool) -> tuple | PutResult:
        """Encode the record and append it to the commit log, with its queue offset when it is
        dispatched. Returns (consume queue, physical offset, size, queue offset, store time,
        store host), or why it cannot be stored."""
        body = msg.body
        topic_field = self._topic_fields.get(topic) or self._fields.topic_field(topic)
        store_host = msg.store_host
        if not store_host:
            store_host = self._store_host
            host_parts = self._own_host_pairs.get(msg.born_host) or self._own_hosts(msg.born_host)
        else:
            host_parts = (self._host_pairs.get((msg.born_host, store_host))
                          or self._fields.hosts(msg.born_host, store_host))
        born_field, store_field, v6_bits, header, fixed_size = host_parts
        # The broker sets the V6 bits from the address types before encoding (§1.9).
        sys_flag = (msg.sys_flag & _NOT_V6_BITS) | v6_bits
        size = fixed_size + len(body) + len(topic_field) + len(props_bytes)
        if size > self._record_bytes_max:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, topic, queue_id,
                             detail=f"record of {size} bytes cannot fit a commit-log file")
        store_ts = self.clock()
        queue_routes = self._route.get(topic)
        route = queue_routes.get(queue_id) if queue_routes is not None else None
        if route is None:
            route = self._queue_route(topic, queue_id)
        key, cq = route
        commit_log = self.commit_log
        log_files = commit_log.files
        phys = log_files.wrote_offset
        end = phys + size
        log_tail = log_files.tail
        if log_tail is not None and end + END_FILE_MIN_BLANK_LENGTH_BYTES <= log_files.tail_end:
            # commit_log.reserve's common case inline: the record fits the open buffer with room
            # for the file's end record after it (a call is ~3% of an append; MappedFileQueue).
            queue_offset = 0
            if dispatch:
                table = commit_log.topic_queue_table
                queue_offset = table.get(key, 0)
                table[key] = queue_offset + 1
        else:
            log_tail = None
            phys, queue_offset = commit_log.reserve(size, key, dispatch)
            end = phys + size
        # codec.encode_record's bytes, packed inline: the header struct is codec's (hosts packed,
        # FieldCache.hosts), the fields are in its order. This is the hot path of every run, so it
        # stays inline; tests/broker_core/store/test_put_paths.py holds it (and the batch path
        # below) to codec.encode_record on the same inputs.
        try:
            head = header.pack(size, MESSAGE_MAGIC_CODE_V1, (crc32(body) & 0x7FFFFFFF) if body else 0,
                               queue_id, msg.flag, queue_offset, phys, sys_flag, msg.born_ts,
                               born_field, store_ts, store_field, msg.reconsume_times,
                               msg.prepared_tx_offset, len(body))
        except struct.error as exc:
            if dispatch:
                commit_log.unreserve(key, queue_offset)
            raise BadInputError(f"a message field is out of its Java type's range: {exc}",
                                where=f"topic {topic}") from None
        record = b"".join((head, body, topic_field, _PROPS_LEN.pack(len(props_bytes)), props_bytes))
        if log_tail is not None:
            log_tail += record
            log_files.wrote_offset = end
        else:
            written_at = log_files.append(record)
            assert written_at == phys, f"record reserved at {phys} but written at {written_at}"
        self._last_store_ts = store_ts
        return cq, phys, size, queue_offset, store_ts, store_host

    @staticmethod
    def _dispatch_put(cq: ConsumeQueue, phys: int, size: int, tags: int, queue_offset: int) -> None:
        """Write the record's unit into its consume queue."""
        cq_files = cq.files
        cq_tail = cq_files.tail
        slot = queue_offset * CQ_UNIT_SIZE_BYTES
        slot_end = slot + CQ_UNIT_SIZE_BYTES
        end = phys + size
        if (cq_tail is not None and slot == cq_files.wrote_offset
                and slot_end <= cq_files.tail_end and end > cq.max_physic_offset):
            # ConsumeQueue.put's common case inline: the next slot of the open buffer.
            cq_tail += pack_cq_unit(phys, size, tags)
            cq_files.wrote_offset = slot_end
            cq.max_physic_offset = end
        else:
            cq.put(phys, size, tags, queue_offset)

    def put_messages(self, batch: MessageBatchInner) -> BatchPutResult:
        """Store a batch send (4.9.4 ``asyncPutMessages``): its messages end to end in one file.

        Each message becomes its own record: the batch's topic, queue, sysFlag, hosts, born time
        and reconsume times, the message's own flag and body, its properties with the batch's
        appended, consecutive queue offsets and one store time. A batch that does not fit the
        rest of the file moves whole to the next one (§1.8). Nothing is stored when any message
        is refused.
        """
        topic = batch.topic
        queue_id = batch.queue_id
        if not self._running:
            return BatchPutResult(PutStatus.SERVICE_NOT_AVAILABLE, topic, queue_id,
                                  detail="the store is not running")
        if topic not in self._valid_topics:
            self._admit_topic(topic, queue_id)
        checked = self._check_batch(batch)
        if isinstance(checked, BatchPutResult):
            return checked
        batch_bytes, messages = checked
        store_host = batch.store_host or self._store_host
        born_field, store_field, v6_bits, header, fixed_size = self._fields.hosts(batch.born_host, store_host)
        topic_field = self._fields.topic_field(topic)
        store_ts = self.clock()
        laid_out = self._batch_records(batch, messages, batch_bytes, fixed_size + len(topic_field), store_ts)
        if isinstance(laid_out, BatchPutResult):
            return laid_out
        records, total = laid_out
        key, cq = self._queue_route(topic, queue_id)
        commit_log = self.commit_log
        first_phys, first_queue_offset = commit_log.reserve(total, key, True, len(records))
        phys = first_phys
        queue_offset = first_queue_offset
        parts = []
        units = []
        pack = header.pack
        sys_flag = (batch.sys_flag & _NOT_V6_BITS) | v6_bits
        born_ts = batch.born_ts
        reconsume_times = batch.reconsume_times
        props_len = _PROPS_LEN.pack
        # As put_message: codec's layout packed inline, held to codec.encode_record by a test.
        try:
            for size, flag, body, props_length, own, separator, tags in records:
                parts += (pack(size, MESSAGE_MAGIC_CODE_V1, (crc32(body) & 0x7FFFFFFF) if body else 0,
                               queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_field,
                               store_ts, store_field, reconsume_times, 0, len(body)),
                          body, topic_field, props_len(props_length), own, separator, batch_bytes)
                units.append((phys, size, tags))
                phys += size
                queue_offset += 1
        except struct.error as exc:
            commit_log.unreserve(key, first_queue_offset)
            raise BadInputError(f"a batch field is out of its Java type's range: {exc}",
                                where=f"topic {topic}") from None
        written_at = commit_log.files.append(b"".join(parts))
        assert written_at == first_phys, f"batch reserved at {first_phys} but written at {written_at}"
        self._last_store_ts = store_ts
        cq.put_run(units, first_queue_offset)
        self._last_dispatch_ts = store_ts
        if self._sync:
            self.flush()
        return BatchPutResult(_PUT_OK, topic, queue_id, tuple(u[0] for u in units), first_queue_offset,
                              store_ts, total, "", store_host)

    def _check_batch(self, batch: MessageBatchInner) -> tuple[bytes, list] | BatchPutResult:
        """The batch's own checks: its size, no transaction, no delay, its properties' length,
        a body that decodes to at least one message. Returns (the batch's properties as bytes,
        the messages), or why the batch is refused."""

        def refused(status: PutStatus, detail: str) -> BatchPutResult:
            return BatchPutResult(status, batch.topic, batch.queue_id, detail=detail)

        wire = batch.body
        if len(wire) > self._max_body:
            return refused(PutStatus.MESSAGE_ILLEGAL,
                           f"batch body of {len(wire)} bytes exceeds {self.config.max_message_size}")
        if batch.sys_flag & SYSFLAG_TRANSACTION_MASK:
            return refused(PutStatus.MESSAGE_ILLEGAL, "a batch cannot be part of a transaction")
        props = batch.properties
        delay = props.get(PROP_DELAY)
        if delay is not None:
            level = java_parse_int(delay)
            if level is None:
                return refused(PutStatus.MESSAGE_ILLEGAL, f"DELAY {delay!r} is not an int")
            if level > 0:
                return refused(PutStatus.MESSAGE_ILLEGAL, f"a batch cannot be delayed (DELAY {delay!r})")
        batch_props = batch.properties_string
        if batch_props is None:
            batch_props = properties_to_string(props)
        batch_bytes = batch_props.encode("utf-8")
        if len(batch_bytes) > PROPERTIES_LENGTH_BYTES_MAX:
            return refused(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                           f"batch properties of {len(batch_bytes)} bytes exceed {PROPERTIES_LENGTH_BYTES_MAX}")
        try:
            messages = codec.decode_batch_body(wire)
        except BadInputError as exc:
            return refused(PutStatus.MESSAGE_ILLEGAL, str(exc))
        if not messages:
            return refused(PutStatus.MESSAGE_ILLEGAL, "the batch holds no message")
        return batch_bytes, messages

    def _batch_records(self, batch: MessageBatchInner, messages: list, batch_bytes: bytes, fixed: int,
                       store_ts: int) -> tuple[list[tuple], int] | BatchPutResult:
        """Each message's record: (size, flag, body, properties length, own properties, separator,
        tags code), and the batch's total size; or why a message is refused (``fixed`` is a
        record's size without its body and properties)."""
        topic = batch.topic

        def refused(status: PutStatus, detail: str) -> BatchPutResult:
            return BatchPutResult(status, topic, batch.queue_id, detail=detail)

        batch_length = len(batch_bytes)
        batch_tags = _last_tags(batch_bytes)
        schedule = topic == SCHEDULE_TOPIC
        # Each message's stored properties: its own, a separator when both are non-empty and its
        # own lack a trailing one, then the batch's (MessageExtBatchEncoder.encode,
        # needAppendLastPropertySeparator). The batch's TAGS, coming last, win in the map a
        # dispatch reads. Everything that can refuse a message is settled before the batch is
        # placed.
        records = []
        total = 0
        for flag, body, own in messages:
            separator = _SEPARATOR if own and batch_length and own[-1] != _SEPARATOR_CODE else b""
            props_length = len(own) + len(separator) + batch_length
            if props_length > PROPERTIES_LENGTH_BYTES_MAX:
                return refused(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                               f"message {len(records)}: properties of {props_length} bytes with the "
                               f"batch's exceed {PROPERTIES_LENGTH_BYTES_MAX}")
            size = fixed + len(body) + props_length
            total += size
            if schedule:
                try:
                    tags = record_tags_code(topic, string_to_properties(
                        (own + separator + batch_bytes).decode("utf-8")), store_ts, self.delay_levels)
                except CorruptRecordError as exc:
                    return refused(PutStatus.MESSAGE_ILLEGAL, f"message {len(records)}: {exc.message}")
            else:
                tags = _tags_code(batch_tags or _last_tags(own))
            records.append((size, flag, body, props_length, own, separator, tags))
        if total > self._record_bytes_max:
            return refused(PutStatus.MESSAGE_ILLEGAL,
                           f"batch of {len(records)} records, {total} bytes, cannot fit a commit-log file")
        return records, total

    # --- reads --------------------------------------------------------------------------------

    def look_message_by_offset(self, phys_offset: int, size_hint: int | None = None, *,
                               cache: bool = True) -> codec.Record | None:
        """The record at a physical offset, or None at or past the end of written data.

        ``size_hint`` is the size a consume-queue unit gives for the record
        (``lookMessageByOffset(offset, size)``): it saves reading the size field first, while the
        record's own TOTALSIZE still decides what is decoded. ``cache=False`` is for a record read
        once (the schedule's copy of a delayed message): it is not kept, so it neither evicts
        records that pulls will read again nor grows the heap the garbage collector walks.
        """
        record = self._record_cache.get(phys_offset)
        if record is not None:
            return record
        record = self.commit_log.read_record(phys_offset, size_hint=size_hint)
        return self._cache(phys_offset, record) if cache else record

    def _read_cached(self, phys: int, size: int | None) -> codec.Record | None:
        record = self._record_cache.get(phys)
        if record is not None:
            return record
        return self._cache(phys, self.commit_log.read_record(phys, size))

    def _cache(self, phys: int, record: codec.Record | None) -> codec.Record | None:
        if record is not None:
            cache = self._record_cache
            if len(cache) >= RECORD_CACHE_ENTRIES_MAX:
                # Oldest first (dicts keep insertion order), a slice at a time: removing keys one
                # by one from the front makes every next(iter(cache)) walk the holes left there.
                for old in list(islice(cache, RECORD_CACHE_EVICT_ENTRIES)):
                    del cache[old]
            cache[phys] = record
        return record

    def get_messages(self, topic: str, queue_id: int, offset: int, max_n: int) -> list[codec.Record]:
        """Up to ``max_n`` records of a queue from queue offset ``offset`` (each keeps its offset)."""
        cq = self.queues.get((topic, queue_id))
        if cq is None or max_n <= 0:
            return []
        records = []
        read = self._read_cached
        for phys, size, _tags in cq.units(offset, max_n):
            record = read(phys, size)
            if record is not None:
                records.append(record)
        return records

    def iter_records(self, start: int | None = None) -> Iterator[codec.Record]:
        """Every valid record in physical order from ``start`` (default: the first), BLANKs skipped."""
        if not self.commit_log.files.files:
            return
        begin = self.commit_log.min_offset if start is None else start
        for step in self.commit_log.scan(begin):
            if step.record is None:
                return
            if not isinstance(step.record, codec.Blank):
                yield step.record

    def get_units(self, topic: str, queue_id: int, offset: int, max_n: int) -> list[tuple[int, int, int]]:
        """Up to ``max_n`` consume-queue units (phys_offset, size, tags_code) from ``offset``."""
        cq = self.queues.get((topic, queue_id))
        return cq.units(offset, max_n) if cq is not None else []

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(qid for (t, qid) in self.queues if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _qid) in self.queues})

    @property
    def max_phys_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phys_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed_offset

    # --- flush and check ----------------------------------------------------------------------

    def flush(self) -> int:
        """Write the commit log and the consume queues to disk, then the checkpoint."""
        flushed = self.commit_log.flush()
        for cq in self.queues.values():
            cq.flush()
        cp = self.checkpoint
        if cp is not None:
            if self._last_store_ts:
                cp.physic_msg_timestamp = self._last_store_ts
            if self._last_dispatch_ts:
                cp.logics_msg_timestamp = self._last_dispatch_ts
            cp.flush()
        return flushed

    def rebuild_consume_queues(self) -> int:
        """Throw every consume queue away and build them again from the commit log.

        A repair for a store whose queues were lost or damaged (RocketMQ's equivalent is deleting
        ``consumequeue/`` and restarting). Returns the number of records dispatched.
        """
        assert not self._running, "rebuild the consume queues of a stopped store"
        count = recovery.rebuild_consume_queues(self.commit_log, self.queues, self._dispatch)
        self._route.clear()
        recovery.rebuild_topic_queue_table(self.commit_log, list(self.queues.values()))
        self.flush()
        return count

    def check(self) -> list[Problem]:
        """Post-mortem: every damaged record or queue unit that disagrees with the commit log."""
        return recovery.check_store(self.commit_log, list(self.queues.values()))
