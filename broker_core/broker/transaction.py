"""Transactional messages on the broker: half messages, check-backs, commits, rollbacks, op records.

As real 4.9.4 and 5.3.3 brokers store them (docs/transactions.md; the classes named below are
``broker/.../transaction/queue/`` and ``processor/EndTransactionProcessor`` at both tags):

* **prepare** (``TransactionalMessageBridge.parseHalfMessageInner``): a send with
  ``TRAN_MSG=true`` is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC`` and
  ``REAL_QID`` (5.x: ``__transactionId__`` too), its sysFlag's transaction type reset to NOT;
* **end transaction** (``EndTransactionProcessor``): a commit stores a new record in the real
  topic, sysFlag COMMIT, PREPARED_TRANSACTION_OFFSET = the committed copy's commit-log offset, the
  copy's stored property string unchanged; a commit or a rollback then writes an op record
  (4.9.4: at once, one per decision; 5.x: batched, ``TransactionalOpBatchService``);
* **check** (``TransactionalMessageServiceImpl.check``), every ``transactionCheckInterval`` after
  the previous run ended: walk the half queue from the broker's own offset, skip what an op
  record decided, discard a copy checked ``transactionCheckMax`` times to
  ``TRANS_CHECK_MAX_TIME_TOPIC``, stop at a record stored since the run began or younger than
  ``transactionTimeOut``, otherwise copy it with ``TRANSACTION_CHECK_TIMES`` + 1 and ask a
  producer of its group (``CHECK_TRANSACTION_STATE``). The walk's progress is the consumer
  offsets of ``CID_RMQ_SYS_TRANS`` in both queues.

A run with nothing to walk is skipped, as a real run finds nothing: the service runs only while
the half queue holds records it has not passed, at the points of its interval grid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.broker import codes
from broker_core.broker.offsets import grid_at_or_after
from broker_core.clock import EventHandle
from broker_core.constants import (
    PERM_READ,
    PERM_WRITE,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TRANSACTION_CHECK_MAX_DEFAULT,
    TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT,
    TRANSACTION_TIMEOUT_MS_DEFAULT,
)
from broker_core.message import (
    HASHMAP_CAPACITY_DEFAULT,
    PROP_PGROUP,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TAGS,
    PROP_TRAN_MSG,
    PROP_TRANSACTION_CHECK_TIMES,
    PROP_TRANSACTION_ID,
    PROP_UNIQ_KEY,
    PROP_WAIT,
    JavaHashMap,
    java_ordered_properties_string,
)
from broker_core.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_GROUP, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.store.commit_log import java_parse_int
from broker_core.store.transaction_op import (
    OP_BODY_OFFSETS_MAX,
    OP_TAG_REMOVE,
    decode_op_body,
    encode_op_body,
)

HALF_QUEUE_ID = 0  # parseHalfMessageInner: every half goes to queue 0
CHECK_MAX_TIME_QUEUES = 1  # AbstractTransactionalMessageCheckListener.TCMT_QUEUE_NUMS
OP_PULL_NUMS = 32  # op records read at once (OP_MSG_PULL_NUMS, 4.9.4's literal 32)
OP_MSG_MAX_SIZE_BYTES = 4096  # transactionOpMsgMaxSize: a 5.x batch is written once it passes this
OP_CONTEXT_QUEUE_LENGTH = 20_000  # MessageQueueOpContext's queue; a decision past it is written at once
# needSkip: a half older than fileReservedTime (72 h, MessageStoreConfig) is discarded unchecked.
FILE_RESERVED_TIME_MS = 72 * 3600 * 1000
# How long after writing a check copy the producer's answer reaches the broker: the model has no
# network, so one fixed time. Real brokers stored a commit answered to a check 22 to 227 ms after
# the copy (docs/transactions.md); what matters is that it comes after the run's own steps.
CHECK_RESPONSE_MS = 20
# Records one check run looks at before it gives up (the real run stops after 60 s of work,
# MAX_PROCESS_TIME_LIMIT): a bound, never reached by a scenario's queue.
CHECK_RUN_STEPS_MAX = 10_000_000
NOT_TYPE = 0  # MessageSysFlag.TRANSACTION_NOT_TYPE: the producer does not know yet (UNKNOW)
END_TYPES = (NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK)


def _stored(result) -> bool:
    """Whether a put's result means the record is in the commit log."""
    return codes.put_status_response(result.status)[2]


@dataclass(frozen=True)
class TransactionSettings:
    """The broker's transaction settings (BrokerConfig)."""

    check_interval_ms: int
    timeout_ms: int = TRANSACTION_TIMEOUT_MS_DEFAULT
    check_max: int = TRANSACTION_CHECK_MAX_DEFAULT
    op_batch_interval_ms: int = TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT  # 5.x only

    def __post_init__(self):
        assert self.check_interval_ms > 0, f"transactionCheckInterval must be positive: {self.check_interval_ms}"
        assert self.timeout_ms >= 0 and self.check_max >= 1 and self.op_batch_interval_ms > 0, self


@dataclass(frozen=True)
class CheckRequest:
    """CHECK_TRANSACTION_STATE: the copy the broker asks a producer of its group about."""

    producer_group: str
    uniq_key: str | None
    topic: str  # the message's real topic (the broker sends it with REAL_TOPIC as its topic)
    phys_offset: int  # the copy's commit-log offset (commitLogOffset)
    queue_offset: int  # the copy's offset in the half queue (tranStateTableOffset)
    check_times: int  # its TRANSACTION_CHECK_TIMES


Checker = Callable[[CheckRequest], None]


@dataclass
class _OpPull:
    """One read of op records (a PullResult): what was found, and where the next read starts."""

    found: list | None
    next_begin: int


@dataclass
class _Run:
    """One check run's state; a 5.x run that sleeps goes on from here."""

    start_ms: int
    half_offset: int
    op_offset: int
    half_end_at_start: int
    i: int = 0
    new_offset: int = 0
    remove_map: dict[int, int] = field(default_factory=dict)  # half queue offset -> op queue offset
    op_msg_map: dict[int, set[int]] = field(default_factory=dict)  # 5.x: op queue offset -> its halves
    done_op: list[int] = field(default_factory=list)
    pull: _OpPull | None = None
    steps: int = 0


@dataclass
class _OpContext:
    """5.x MessageQueueOpContext: the decisions of one half queue waiting for their op record."""

    last_write_ms: int
    pieces: list[str] = field(default_factory=list)
    total_size: int = 0


class TransactionService:
    """The broker's transactional-message service: prepare, end, check, op records."""

    def __init__(self, broker, settings: TransactionSettings, checkers: dict[str, list[Checker]]):
        self.broker = broker
        self.sim = broker.sim
        self.settings = settings
        self.semantics = broker.semantics
        self._checkers = checkers  # the broker's: producer group -> its producers' check handlers
        self._check_timer: EventHandle | None = None
        self._grid_origin_ms = 0
        self._run: _Run | None = None  # a 5.x run asleep
        self._op_timer: EventHandle | None = None
        self._op_origin_ms = 0
        self._op_contexts: dict[int, _OpContext] = {}
        self._answers_in_flight = 0
        self.started = False
        self.check_runs = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the check service (its first run one interval from now) and, under 5.x rules, the
        op batch service; a restarted broker goes on from the offsets of CID_RMQ_SYS_TRANS."""
        now = self.sim.now()
        self.started = True
        self._grid_origin_ms = now
        self._op_origin_ms = now + self.settings.op_batch_interval_ms
        self._op_contexts = {}
        self._arm_check()

    def stop(self) -> None:
        """Stop both services; decisions waiting for a 5.x batch are lost with the broker's memory."""
        self.started = False
        for timer in (self._check_timer, self._op_timer):
            if timer is not None:
                timer.cancel()
        self._check_timer = self._op_timer = None
        self._run = None
        self._op_contexts = {}

    def pending(self) -> bool:
        """Whether the service still has work: half records its walk has not passed, a run asleep,
        a producer's answer on its way, or decisions waiting for their op record."""
        if self._run is not None or self._answers_in_flight or any(c.pieces for c in self._op_contexts.values()):
            return True
        store = self.broker.store
        return self._half_offset() < store.max_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID)

    # -- prepare ---------------------------------------------------------------------------------

    def prepare(self, fields: dict, props: JavaHashMap):
        """Store a transactional send as a half message (``parseHalfMessageInner``); ``fields`` are
        the send's MessageInner fields, ``props`` the broker's in-memory map of its properties."""
        if self.semantics.half_carries_transaction_id():
            uniq = props.get(PROP_UNIQ_KEY)
            if uniq:
                props.put(PROP_TRANSACTION_ID, uniq)
        props.put(PROP_REAL_TOPIC, fields["topic"])
        props.put(PROP_REAL_QID, str(fields["queue_id"]))
        half = dict(fields, topic=TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID, properties=props,
                    properties_string=props.to_properties_string(
                        trailing_separator=self.semantics.properties_trailing_separator()),
                    sys_flag=fields["sys_flag"] & ~SYSFLAG_TRANSACTION_MASK, delay_level=None)
        result = self.broker.put(half)
        if _stored(result):
            self._arm_check()  # the check service wakes for it, if it was idle
        return result

    # -- end transaction -------------------------------------------------------------------------

    def end_transaction(self, producer_group: str, phys_offset: int, queue_offset: int, kind: int,
                        from_check: bool = False) -> int | None:
        """END_TRANSACTION: commit (re-put to the real topic, then an op record) or roll back (an op
        record) the copy at ``phys_offset``; None for NOT (the producer does not know yet), else
        the response code."""
        assert kind in END_TYPES, f"not a transaction end type: {kind}"
        if kind == NOT_TYPE:
            return None
        record = self.broker.store.look_message_by_offset(phys_offset)
        if record is None or record.topic != TRANS_HALF_TOPIC:
            return codes.SYSTEM_ERROR  # "Find prepared transaction message failed"
        # checkPrepareMessage: the group, the queue offset and the commit-log offset must match.
        if (record.properties.get(PROP_PGROUP) != producer_group or record.queue_offset != queue_offset
                or record.phys_offset != phys_offset):
            return codes.SYSTEM_ERROR
        if kind == SYSFLAG_TRANSACTION_COMMIT:
            result = self.broker.put(self._commit_fields(record))
            code, _remark, stored = codes.put_status_response(result.status)
            if not stored:
                return code
        self._delete_prepare(record)
        return codes.SUCCESS

    def _commit_fields(self, record) -> dict:
        """``endMessageTransaction``: the copy's body, times, hosts and stored property string (the
        map is serialized before REAL_TOPIC, REAL_QID and TRAN_MSG are cleared from it)."""
        stored = java_ordered_properties_string(record.properties, capacity=self.semantics.properties_map_capacity(),
                                                trailing_separator=self.semantics.properties_trailing_separator())
        props = {k: v for k, v in record.properties.items() if k not in (PROP_REAL_TOPIC, PROP_REAL_QID, PROP_TRAN_MSG)}
        props[PROP_WAIT] = "false"
        qid = java_parse_int(record.properties.get(PROP_REAL_QID, ""))
        assert qid is not None, f"half at {record.phys_offset} has no REAL_QID"
        return dict(topic=record.properties[PROP_REAL_TOPIC], queue_id=qid, body=record.body, properties=props,
                    properties_string=stored, flag=record.flag,
                    sys_flag=(record.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | SYSFLAG_TRANSACTION_COMMIT,
                    born_ts=record.born_ts, born_host=record.born_host, store_host=record.store_host,
                    reconsume_times=record.reconsume_times, prepared_tx_offset=record.phys_offset,
                    delay_level=None)

    # -- op records ------------------------------------------------------------------------------

    def _delete_prepare(self, record) -> None:
        """``deletePrepareMessage``: note the decided copy's queue offset in an op record."""
        if not self.semantics.transaction_ops_batched():
            self._write_op(record.queue_id, [record.queue_offset])
            return
        now = self.sim.now()
        ctx = self._op_contexts.get(record.queue_id)
        if ctx is None:
            ctx = self._op_contexts[record.queue_id] = _OpContext(last_write_ms=now)
        piece = f"{record.queue_offset},"
        if len(ctx.pieces) >= OP_CONTEXT_QUEUE_LENGTH:
            # The queue is full: this decision is written at once with whatever is waiting.
            self._write_op(record.queue_id, self._take_batch(ctx, first=[record.queue_offset]))
            return
        ctx.pieces.append(piece)
        ctx.total_size += len(piece)
        if ctx.total_size > OP_MSG_MAX_SIZE_BYTES:
            self._run_op_batch(wakeup=True)  # transactionalOpBatchService.wakeup()
        elif self._op_timer is None:
            self._arm_op_batch()

    def _take_batch(self, ctx: _OpContext, first: list[int] | None = None) -> list[int]:
        """``getOpMessage``: the waiting offsets (after ``first``) until the body passes the maximum."""
        offsets = list(first or ())
        size = sum(len(f"{o},") for o in offsets)
        while ctx.pieces and size < OP_MSG_MAX_SIZE_BYTES and len(offsets) < OP_BODY_OFFSETS_MAX:
            piece = ctx.pieces.pop(0)
            ctx.total_size -= len(piece)
            size += len(piece)
            offsets.append(int(piece[:-1]))
        ctx.last_write_ms = self.sim.now()
        return offsets

    def _arm_op_batch(self) -> None:
        when = grid_at_or_after(self._op_origin_ms, self.settings.op_batch_interval_ms, self.sim.now() + 1)
        self._op_timer = self.sim.at(when, self._run_op_batch)

    def _run_op_batch(self, wakeup: bool = False) -> None:
        """``batchSendOpMessage``: write each queue's waiting decisions as one op record once the
        interval has passed since that queue's last write (or at once past the maximum size)."""
        if self._op_timer is not None:
            self._op_timer.cancel()
            self._op_timer = None
        if not self.started:
            return
        now = self.sim.now()
        if wakeup:
            self._op_origin_ms = now  # the service's next wake-up counts from this run
        interval = self.settings.op_batch_interval_ms
        batches = {}
        for queue_id in sorted(self._op_contexts):
            ctx = self._op_contexts[queue_id]
            if not ctx.pieces or (ctx.total_size < OP_MSG_MAX_SIZE_BYTES and now - ctx.last_write_ms < interval):
                continue
            batches[queue_id] = self._take_batch(ctx)
        for queue_id, offsets in batches.items():
            self._write_op(queue_id, offsets)
        if any(c.pieces for c in self._op_contexts.values()):
            self._arm_op_batch()

    def _write_op(self, queue_id: int, offsets: list[int]) -> None:
        """An op record (``makeOpMessageInner``): ``new Message(op topic, "d", body)``'s properties
        (TAGS, then WAIT=true; no UNIQ_KEY is stored), born and stored by the broker now."""
        props = JavaHashMap(HASHMAP_CAPACITY_DEFAULT)  # the Message's own new HashMap<>()
        props.put(PROP_TAGS, OP_TAG_REMOVE)
        props.put(PROP_WAIT, "true")
        stored = props.to_properties_string(trailing_separator=self.semantics.properties_trailing_separator())
        host = self.broker.config.store_host
        if self.semantics.transaction_ops_batched():
            self.broker.topics.create_in_send_back(TRANS_OP_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        self.broker.put(dict(
            topic=TRANS_OP_HALF_TOPIC, queue_id=queue_id,
            body=encode_op_body(offsets, batched=self.semantics.transaction_ops_batched()),
            properties=props.to_dict(), properties_string=stored, flag=0, sys_flag=0, born_ts=self.sim.now(),
            born_host=host, store_host=host, reconsume_times=0, prepared_tx_offset=0, delay_level=None))

    # -- the check service -----------------------------------------------------------------------

    def _half_offset(self) -> int:
        """Where the walk goes on: CID_RMQ_SYS_TRANS's offset in the half queue, else its minimum."""
        offset = self.broker.offsets.query(TRANS_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        return offset if offset >= 0 else self.broker.store.min_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID)

    def _op_offset(self) -> int:
        offset = self.broker.offsets.query(TRANS_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        return offset if offset >= 0 else self.broker.store.min_offset(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)

    def _arm_check(self) -> None:
        """The next run at the next point of the interval grid, if the half queue has anything to walk."""
        if not self.started or self._check_timer is not None or self._run is not None:
            return
        if self._half_offset() >= self.broker.store.max_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID):
            return
        when = grid_at_or_after(self._grid_origin_ms, self.settings.check_interval_ms, self.sim.now() + 1)
        self._check_timer = self.sim.at(when, self._start_run)

    def _start_run(self) -> None:
        self._check_timer = None
        if not self.started:
            return
        self.check_runs += 1
        # fetchMessageQueues: the half topic is created (1 queue, perm 6) by the first run.
        self.broker.topics.create_in_send_back(TRANS_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        half_offset = self._half_offset()
        run = _Run(start_ms=self.sim.now(), half_offset=half_offset, op_offset=self._op_offset(),
                   half_end_at_start=self.broker.store.max_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID),
                   i=half_offset, new_offset=half_offset)
        run.pull = self._fill_op_remove_map(run, run.op_offset)
        self._walk(run)

    def _resume(self, run: _Run) -> None:
        self._run = None
        if self.started:
            self._walk(run)

    def _walk(self, run: _Run) -> None:
        """The loop of ``check``: one step per half record from ``run.i``; a 5.x sleep suspends it."""
        settings = self.settings
        store = self.broker.store
        while run.steps < CHECK_RUN_STEPS_MAX:
            run.steps += 1
            i = run.i
            if i in run.remove_map:
                op = run.remove_map.pop(i)
                if self.semantics.transaction_ops_batched():
                    halves = run.op_msg_map.get(op)
                    if halves is not None:
                        halves.discard(i)
                        if not halves:
                            del run.op_msg_map[op]
                            run.done_op.append(op)
                else:
                    run.done_op.append(op)
            else:
                low = store.min_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID)
                if i < low:
                    run.i = run.new_offset = low  # OFFSET_TOO_SMALL: on from the queue's start
                    continue
                records = store.get_messages(TRANS_HALF_TOPIC, HALF_QUEUE_ID, i, 1)
                if not records:
                    break  # NO_NEW_MSG
                if i >= run.half_end_at_start and not self.semantics.transaction_check_reads_own_copies():
                    break  # written during this run: not in the consume queue yet (5.x, seen)
                record = records[0]
                check_times, discard = self._need_discard(record)
                now = self.sim.now()
                if discard or now - record.born_ts > FILE_RESERVED_TIME_MS:
                    # needSkip comes after needDiscard counted the check in memory: that count goes along.
                    self._discard(record, None if discard else check_times)
                    run.i = run.new_offset = i + 1
                    continue
                if record.store_ts >= run.start_ms:
                    break  # stored since the run began: checked by a later one
                age = now - record.born_ts
                if 0 <= age < settings.timeout_ms:
                    break  # too young: so is every later half, the walk stops here
                found = run.pull.found if run.pull is not None else None
                need_check = ((found is None and age > settings.timeout_ms)
                              or (found is not None and found[-1].born_ts - run.start_ms > settings.timeout_ms)
                              or age <= -1)
                if not need_check and found is None and self.semantics.transaction_check_sleep_without_op_ms() == 0:
                    # Exactly transactionTimeOut old: 4.9.4 reads again until its clock moves on.
                    need_check = True
                if not need_check:
                    next_begin = run.pull.next_begin if run.pull is not None else run.op_offset
                    run.pull = self._fill_op_remove_map(run, next_begin)
                    sleep = self.semantics.transaction_check_sleep_without_op_ms()
                    if sleep and run.pull.found is None:
                        self._run = run  # SLEEP_WHILE_NO_OP, then the same half again
                        self.sim.after(sleep, self._resume, run)
                        return
                    continue
                copy = self._put_back(record, check_times)
                if copy is None:
                    break  # the copy was not stored: a later run tries again
                self._ask_producer(record, copy, check_times)
            run.i = run.new_offset = i + 1
        self._finish(run)

    def _need_discard(self, record) -> tuple[int, bool]:
        """``needDiscard``: the copy's next check count, and whether it reached the maximum."""
        text = record.properties.get(PROP_TRANSACTION_CHECK_TIMES)
        if text is None:
            return 1, False
        count = java_parse_int(text)
        count = -1 if count is None else count
        if count >= self.settings.check_max:
            return count, True
        return count + 1, False

    def _decoded_map(self, record) -> JavaHashMap:
        """The map the broker decodes from a record's stored properties."""
        return JavaHashMap.from_items(record.properties.items(), self.semantics.properties_map_capacity())

    def _put_back(self, record, check_times: int):
        """``putBackHalfMsgQueue`` / ``renewHalfMessageInner``: a copy at the end of the half queue
        with TRANSACTION_CHECK_TIMES, the record's body, sysFlag, born time and hosts (no flag and
        no reconsume times: the copy's fields are not set). None when the put failed."""
        props = self._decoded_map(record)
        props.put(PROP_TRANSACTION_CHECK_TIMES, str(check_times))
        stored = props.to_properties_string(trailing_separator=self.semantics.properties_trailing_separator())
        result = self.broker.put(dict(
            topic=TRANS_HALF_TOPIC, queue_id=record.queue_id, body=record.body, properties=props.to_dict(),
            properties_string=stored, flag=0, sys_flag=record.sys_flag, born_ts=record.born_ts,
            born_host=record.born_host, store_host=record.store_host, reconsume_times=0, prepared_tx_offset=0,
            delay_level=None))
        return result if _stored(result) else None

    def _discard(self, record, check_times: int | None) -> None:
        """``resolveDiscardMsg``: the record to TRANS_CHECK_MAX_TIME_TOPIC, with its properties as
        stored, or with ``check_times`` when needDiscard had counted one more check in memory."""
        props = self._decoded_map(record)
        if check_times is not None:
            props.put(PROP_TRANSACTION_CHECK_TIMES, str(check_times))
        stored = props.to_properties_string(trailing_separator=self.semantics.properties_trailing_separator())
        self.broker.topics.create_in_send_back(TRANS_CHECK_MAX_TIME_TOPIC, CHECK_MAX_TIME_QUEUES,
                                               PERM_READ | PERM_WRITE)
        self.broker.put(dict(
            topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, body=record.body, properties=props.to_dict(),
            properties_string=stored, flag=record.flag, sys_flag=record.sys_flag, born_ts=record.born_ts,
            born_host=record.born_host, store_host=record.store_host, reconsume_times=record.reconsume_times,
            prepared_tx_offset=0, delay_level=None))

    def _ask_producer(self, record, copy, check_times: int) -> None:
        """``resolveHalfMsg``: send CHECK_TRANSACTION_STATE about the copy to a producer of its group."""
        request = CheckRequest(producer_group=record.properties.get(PROP_PGROUP, ""),
                               uniq_key=record.properties.get(PROP_UNIQ_KEY),
                               topic=record.properties.get(PROP_REAL_TOPIC, ""), phys_offset=copy.phys_offset,
                               queue_offset=copy.queue_offset, check_times=check_times)
        checkers = self._checkers.get(request.producer_group)
        if not checkers:
            return  # no producer of the group is connected: nobody is asked
        checker = checkers[0] if len(checkers) == 1 else \
            checkers[self.broker.rng("broker.transaction_check").randrange(len(checkers))]
        self._answers_in_flight += 1
        self.sim.after(CHECK_RESPONSE_MS, self._deliver_check, checker, request)

    def _deliver_check(self, checker: Checker, request: CheckRequest) -> None:
        self._answers_in_flight -= 1
        checker(request)

    def _fill_op_remove_map(self, run: _Run, offset: int) -> _OpPull:
        """``fillOpRemoveMap``: read op records from ``offset`` into the run's map of decided halves."""
        store = self.broker.store
        records = store.get_messages(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, offset, OP_PULL_NUMS)
        if not records:
            return _OpPull(None, offset)
        batched = self.semantics.transaction_ops_batched()
        for op in records:
            if op.properties.get(PROP_TAGS) != OP_TAG_REMOVE:
                if batched:
                    run.done_op.append(op.queue_offset)
                continue  # "Found a illegal tag in opMessageExt"
            body = decode_op_body(op.body)
            if not batched:
                # 4.9.4 reads the whole body as one long: anything else is -1, which names nothing.
                value = body.offsets[0] if len(body.offsets) == 1 and not body.bad_pieces else -1
                if value < run.half_offset:
                    run.done_op.append(op.queue_offset)
                else:
                    run.remove_map[value] = op.queue_offset
                continue
            named = set()
            for value in body.offsets + (-1,) * len(body.bad_pieces):
                if value < run.half_offset:
                    continue
                run.remove_map[value] = op.queue_offset
                named.add(value)
            if named:
                run.op_msg_map[op.queue_offset] = named
            else:
                run.done_op.append(op.queue_offset)
        return _OpPull(records, offset + len(records))

    def _finish(self, run: _Run) -> None:
        """Commit the walk's progress in both queues, then wait one interval for the next run."""
        offsets = self.broker.offsets
        if run.new_offset != run.half_offset:
            offsets.commit(TRANS_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, run.new_offset)
        new_op = run.op_offset
        for op in sorted(run.done_op):  # calculateOpOffset: the done ones right after it, in a row
            if op != new_op:
                break
            new_op += 1
        if new_op != run.op_offset:
            offsets.commit(TRANS_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, new_op)
        self._grid_origin_ms = self.sim.now()
        self._arm_check()
