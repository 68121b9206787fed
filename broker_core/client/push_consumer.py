"""The push consumer model: RocketMQ 4.9.4 ``DefaultMQPushConsumer`` on the virtual clock.

One :class:`PushConsumer` pulls its assigned queues (long polling: an idle queue waits for the
broker's arrival notice, or 15 s, and never busy-polls), keeps the pulled messages in a
:class:`~broker_core.client.process_queue.ProcessQueue` per queue, and hands them to a thread pool
of ``consume_thread_max`` slots (a counter and a FIFO backlog). Concurrent consumption sends a
failed message back (broker, then the client's own send, then a local retry after 5 s); orderly
consumption suspends the queue for 1 s and retries locally until the max, then sends the message
to ``%RETRY%<group>`` where the broker diverts it to the DLQ. Offsets are committed in memory
(increase-only for concurrent consumption), carried on each pull and persisted to the broker every
5 s (10 s after start) and on shutdown; a crash loses what was committed since.

Every delivery to the listener becomes one ``consume_attempts`` row.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from broker_core.client.behavior import (
    CONSUME_SUCCESS,
    DLQ_REQUESTED,
    DLQ_REQUESTED_DELAY_LEVEL,
    Listener,
    Verdict,
)
from broker_core.client.offset_store import (
    READ_FROM_STORE,
    LocalOffsetStore,
    MessageQueue,
    RemoteBrokerOffsetStore,
)
from broker_core.client.process_queue import ProcessQueue, PulledMessage
from broker_core.client.producer import INNER_PRODUCER_GROUP, Producer
from broker_core.client.send_back import SENT_BACK_BY_CLIENT, SendBack
from broker_core.constants import (
    CLEAN_EXPIRED_DELAY_LEVEL,
    CLEAN_EXPIRED_MSGS_PER_PASS_MAX,
    OFFSET_PERSIST_INITIAL_DELAY_MS,
    OFFSET_PERSIST_INTERVAL_MS,
    ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED,
    RETRY_MAX_TIMES_DEFAULT,
    SEND_BACK_LOCAL_RETRY_MS,
    SUSPEND_CURRENT_QUEUE_MS_MAX,
    SUSPEND_CURRENT_QUEUE_MS_MIN,
)
from broker_core.errors import RetryAuditError
from broker_core.message import PROP_CONSUME_START_TIME, PROP_RECONSUME_TIME

CREATED, RUNNING, SHUT_DOWN, CRASHED = "CREATED", "RUNNING", "SHUT_DOWN", "CRASHED"
CLUSTERING, BROADCASTING = "CLUSTERING", "BROADCASTING"

# consume_attempts outcomes decided here (the send-back ones live in send_back.py).
ACKED = "ACKED"
LOCAL_RETRY = "LOCAL_RETRY"  # re-run by this client after 5 s (concurrent) or 1 s (orderly)
DROPPED = "DROPPED"  # broadcasting failure, or a result discarded because the queue was dropped
EXPIRED = "EXPIRED"  # cleanExpiredMsg sent it back (level 3) while this delivery was running
LOST_IN_CRASH = "LOST_IN_CRASH"  # the consumer died with the delivery in flight

# DefaultMQPushConsumerImpl / PullMessageService timings.
PULL_DELAY_FLOW_CONTROL_MS = 50  # PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
PULL_DELAY_EXCEPTION_MS = 3000  # PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
LONG_POLL_SUSPEND_MS = 15_000  # BROKER_SUSPEND_MAX_TIME_MILLIS: how long the broker holds a pull
CONSUME_CONCURRENTLY_MAX_SPAN = 2000  # consumeConcurrentlyMaxSpan
PULL_THRESHOLD_SIZE_FOR_QUEUE_BYTES = 100 * 1024 * 1024  # pullThresholdSizeForQueue (100 MiB)
ORDERLY_CONSUME_CONTINUOUSLY_MS_MAX = 60_000  # rocketmq.client.maxTimeConsumeContinuously
ORDERLY_RESUBMIT_DELAY_MS = 10  # submitConsumeRequestLater after a full continuous slot
OFFSET_ILLEGAL_FIX_DELAY_MS = 10_000  # executeTaskLater(..., 10000) on OFFSET_ILLEGAL


@dataclass(slots=True)
class Delivery:
    """One listener call in flight: its messages, when it started and what it will return."""

    seq: int
    msgs: list[PulledMessage]
    reconsume_at_start: list[int]
    mq: MessageQueue
    pq: ProcessQueue
    start_ts: int
    verdict: Verdict
    slot_start_ts: int
    handle: object = None


class PushConsumer:
    """One consumer client of a group; created and driven by its ConsumerGroup."""

    def __init__(self, group, consumer_id: str, born_host: str):
        self.group = group
        self.sim = group.sim
        self.broker = group.broker
        self.settings = group.settings
        self.recorder = group.recorder
        self.consumer_id = consumer_id
        self.born_host = born_host
        self.state = CREATED
        self.epoch = 0  # bumped on every stop: callbacks of an older life are ignored
        s = self.settings
        self.clustering = s.model == CLUSTERING
        self.orderly = s.mode == "orderly"
        # Only a concurrent clustering listener has a ConsumeConcurrentlyContext whose delay
        # level reaches a send-back (the scenario loader refuses dlq_probability elsewhere).
        dlq = group.behavior.dlq_probability > 0.0
        assert not dlq or (self.clustering and not self.orderly), \
            f"group {s.group}: dlq_probability needs a concurrent clustering consumer"
        self.listener = Listener(group.behavior,
                                 group.streams.stream(f"consumer.{consumer_id}.behavior"),
                                 s.consume_timeout_ms, group.streams.stream(f"consumer.{consumer_id}.dlq"))
        if self.clustering:
            self.offset_store = RemoteBrokerOffsetStore(self.broker, s.group)
        else:
            # Broadcasting offsets live in each consumer's own file; the consumer_offsets table
            # has no consumer column, so their persists are not recorded there.
            self.offset_store = LocalOffsetStore()
        self.inner_producer = Producer(self.sim, self.broker,
                                       group.streams.fork(f"consumer.{consumer_id}.inner"),
                                       producer_group=INNER_PRODUCER_GROUP, born_host=born_host,
                                       uniq_keys=None, recorder=self.recorder,
                                       record_produced=False)
        self.send_back = SendBack(self)
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        self.next_offset: dict[MessageQueue, int] = {}
        self.waiting: dict[MessageQueue, object] = {}  # long-polling pulls held by the broker
        self.pull_events: dict[MessageQueue, object] = {}  # pulls scheduled on the clock
        self.in_flight: dict[int, Delivery] = {}
        self.resubmits: dict[int, object] = {}  # local retries / orderly suspends pending
        self.busy = 0
        self.backlog: deque = deque()
        self._seq = 0
        self.deliveries = 0

    # --- settings-derived values --------------------------------------------------------------

    @property
    def max_reconsume_times(self) -> int:
        """getMaxReconsumeTimes: -1 means 16 (concurrent) or Integer.MAX_VALUE (orderly)."""
        value = self.settings.max_reconsume_times
        if value != -1:
            return value
        return ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED if self.orderly else RETRY_MAX_TIMES_DEFAULT

    @property
    def suspend_ms(self) -> int:
        return min(max(self.settings.suspend_current_queue_ms, SUSPEND_CURRENT_QUEUE_MS_MIN),
                   SUSPEND_CURRENT_QUEUE_MS_MAX)

    def _live(self, epoch: int) -> bool:
        return self.state == RUNNING and epoch == self.epoch

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start (or restart after a crash or shutdown) and join the group's rebalance."""
        assert self.state != RUNNING, f"consumer {self.consumer_id} is already running"
        self.state = RUNNING
        self.epoch += 1
        self.sim.after(OFFSET_PERSIST_INITIAL_DELAY_MS, self._persist_tick, self.epoch)
        if not self.orderly:
            # cleanExpiredMsg runs with initial delay = period = consumeTimeout.
            self.sim.after(self.settings.consume_timeout_ms, self._clean_expired_tick, self.epoch)
        self.group.member_changed()

    def shutdown(self) -> None:
        """Clean stop: drop the queues, persist offsets, leave the group (others rebalance)."""
        if self.state != RUNNING:
            return
        for pq in self.pqs.values():
            pq.dropped = True
        # Deliveries already running finish on their own (their results are discarded because
        # their queue is dropped); nothing new starts.
        self.offset_store.persist_all(sorted(self.pqs))
        self._stop(SHUT_DOWN)
        self.group.member_changed()

    def crash(self) -> None:
        """kill -9: in-flight deliveries are lost, memory offsets are gone, nothing is persisted."""
        if self.state != RUNNING:
            return
        now = self.sim.now()
        for seq in sorted(self.in_flight):
            d = self.in_flight[seq]
            d.handle.cancel()
            for msg, times in zip(d.msgs, d.reconsume_at_start, strict=True):
                self._emit_attempt(d, msg, times, d.verdict.status, LOST_IN_CRASH, now)
        self.in_flight.clear()
        for pq in self.pqs.values():
            pq.dropped = True
        self.offset_store.clear_memory()
        self._stop(CRASHED)
        self.group.member_changed()

    def _stop(self, state: str) -> None:
        self.state = state
        self.epoch += 1
        for handle in list(self.pull_events.values()) + list(self.waiting.values()) + \
                list(self.resubmits.values()):
            handle.cancel()
        self.pull_events.clear()
        self.waiting.clear()
        self.resubmits.clear()
        self.backlog.clear()
        if state == CRASHED:
            self.busy = 0
        self.pqs.clear()
        self.next_offset.clear()

    # --- rebalance ----------------------------------------------------------------------------

    def assigned(self) -> list[MessageQueue]:
        return sorted(self.pqs)

    def release_queues(self, keep: set[MessageQueue]) -> None:
        """Drop every queue not in ``keep``: mark its process queue dropped, persist its offset."""
        for mq in sorted(self.pqs):
            if mq in keep:
                continue
            pq = self.pqs.pop(mq)
            pq.dropped = True
            for table in (self.pull_events, self.waiting):
                handle = table.pop(mq, None)
                if handle is not None:
                    handle.cancel()
            self.next_offset.pop(mq, None)
            if self._broker_up():
                self.offset_store.persist(mq)
            self.offset_store.remove_offset(mq)

    def acquire_queues(self, mqs: list[MessageQueue]) -> None:
        """Start pulling every queue of ``mqs`` not held yet, from its stored offset."""
        for mq in mqs:
            if mq in self.pqs:
                continue
            if self.clustering and not self._broker_up():
                continue  # computePullFromWhere failed: the next rebalance (20 s) tries again
            self.offset_store.remove_offset(mq)  # removeDirtyOffset
            offset = self.offset_store.read_offset(mq, READ_FROM_STORE)
            if offset < 0:
                # CONSUME_FROM_LAST_OFFSET on a queue the group never committed: a 4.9.4 broker
                # answers 0 while the queue's first message is still on disk (every model run).
                offset = 0
            self.recorder.emit("consumer_offsets", {
                "group": self.settings.group, "topic": mq[0], "queue_id": mq[1],
                "offset": offset, "ts": self.sim.now(), "event": "RESTORE"})
            self.pqs[mq] = ProcessQueue()
            self.next_offset[mq] = offset
            self._schedule_pull(mq, 0)

    # --- pulling ------------------------------------------------------------------------------

    def _broker_up(self) -> bool:
        return bool(getattr(self.broker, "running", True))

    def _schedule_pull(self, mq: MessageQueue, delay_ms: int) -> None:
        old = self.pull_events.pop(mq, None)
        if old is not None:
            old.cancel()
        self.pull_events[mq] = self.sim.after(delay_ms, self._pull, mq, self.epoch)

    def on_arrival(self, topic: str, queue_id: int) -> None:
        """The broker stored a message in (topic, queue_id): wake a pull held there."""
        handle = self.waiting.pop((topic, queue_id), None)
        if handle is not None:
            handle.cancel()
            # Never pull inside the broker's put: the held request answers on the next event.
            self._schedule_pull((topic, queue_id), 0)

    def _long_poll_timeout(self, mq: MessageQueue, epoch: int) -> None:
        if self._live(epoch) and self.waiting.pop(mq, None) is not None:
            self._pull(mq, epoch)

    def _pull(self, mq: MessageQueue, epoch: int) -> None:
        if not self._live(epoch):
            return
        self.pull_events.pop(mq, None)
        pq = self.pqs.get(mq)
        if pq is None or pq.dropped:
            return
        s = self.settings
        if pq.msg_count > s.pull_threshold_for_queue or \
                pq.msg_size > PULL_THRESHOLD_SIZE_FOR_QUEUE_BYTES:
            self._schedule_pull(mq, PULL_DELAY_FLOW_CONTROL_MS)
            return
        if not self.orderly and pq.max_span() > CONSUME_CONCURRENTLY_MAX_SPAN:
            self._schedule_pull(mq, PULL_DELAY_FLOW_CONTROL_MS)
            return
        offset = self.next_offset[mq]
        try:
            if self.clustering and s.commit_offset_on_pull:
                # The pull request carries the memory offset (commitOffset flag) when it is > 0.
                if self.offset_store.read_memory(mq) > 0 and self._broker_up():
                    self.offset_store.persist(mq)
            result = self.broker.pull_message(s.group, mq[0], mq[1], offset, s.pull_batch_size)
        except RetryAuditError:
            self._schedule_pull(mq, PULL_DELAY_EXCEPTION_MS)
            return
        status = getattr(result.status, "name", result.status)
        if status == "FOUND":
            self.next_offset[mq] = result.next_begin_offset
            msgs = [PulledMessage.from_record(r, result.min_offset, result.max_offset)
                    for r in result.records]
            if msgs:
                dispatch = pq.put_messages(msgs)
                self._submit(msgs, pq, mq, dispatch)
            else:
                self._correct_tags_offset(mq, pq)
            self._schedule_pull(mq, 0)
        elif status in ("NO_NEW_MSG", "NO_MATCHED_MSG"):
            self.next_offset[mq] = result.next_begin_offset
            self._correct_tags_offset(mq, pq)
            if status == "NO_MATCHED_MSG":
                self._schedule_pull(mq, 0)
            else:
                self.waiting[mq] = self.sim.after(LONG_POLL_SUSPEND_MS, self._long_poll_timeout,
                                                  mq, epoch)
        else:
            # OFFSET_ILLEGAL (e.g. the broker lost its tail in a crash): the process queue is
            # dropped at once (running results are discarded); 10 s later the suggested offset
            # is committed and persisted and the queue removed, and the next rebalance takes it
            # up again from there. With a minimum offset of 0 the broker suggests 0: the whole
            # queue is consumed again, as a 4.9.4 client does.
            self.next_offset[mq] = result.next_begin_offset
            pq.dropped = True
            self._resubmit_later(OFFSET_ILLEGAL_FIX_DELAY_MS, self._fix_illegal_offset, mq, pq,
                                 result.next_begin_offset)

    def _fix_illegal_offset(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if self.pqs.get(mq) is not pq:
            return  # rebalanced away meanwhile
        self.offset_store.update_offset(mq, offset, increase_only=False)
        if not self.clustering or self._broker_up():
            self.offset_store.persist(mq)
        del self.pqs[mq]
        self.next_offset.pop(mq, None)
        for table in (self.pull_events, self.waiting):
            handle = table.pop(mq, None)
            if handle is not None:
                handle.cancel()

    def _correct_tags_offset(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """correctTagsOffset: with nothing cached, the next offset is as good as committed."""
        if pq.msg_count == 0:
            self.offset_store.update_offset(mq, self.next_offset[mq], increase_only=True)

    # --- the consume thread pool ----------------------------------------------------------------

    def _submit(self, msgs: list[PulledMessage], pq: ProcessQueue, mq: MessageQueue,
                dispatch: bool) -> None:
        """submitConsumeRequest: batches for concurrent consumption, one loop per queue orderly."""
        if self.orderly:
            if dispatch:
                self._pool_submit(self._consume_orderly, pq, mq, self.sim.now(), self.epoch)
            return
        size = self.settings.consume_message_batch_max_size
        for i in range(0, len(msgs), size):
            self._pool_submit(self._consume_concurrently, msgs[i:i + size], pq, mq, self.epoch)

    def _pool_submit(self, fn, *args) -> None:
        self.backlog.append((fn, args))
        self._drain()

    def _drain(self) -> None:
        """Start backlog tasks while a thread is free; a task that returns False freed its slot."""
        while self.backlog and self.busy < self.settings.consume_thread_max:
            fn, args = self.backlog.popleft()
            self.busy += 1
            if not fn(*args):
                self.busy -= 1

    def _release(self) -> None:
        assert self.busy > 0, f"consumer {self.consumer_id} released a thread it did not hold"
        self.busy -= 1
        if self.state == RUNNING:
            self._drain()

    def _deliver(self, msgs: list[PulledMessage], pq: ProcessQueue, mq: MessageQueue,
                 slot_start_ts: int, finish) -> None:
        """Call the listener: resetRetryTopic, CONSUME_START_TIME, then the verdict's duration.

        Only the concurrent service stamps CONSUME_START_TIME into the message's properties (for
        its consume-timeout scan); 4.9.4's ConsumeMessageOrderlyService does not, so a message an
        orderly client sends back carries none (seen on real 4.9.4 clients, docs/conformance.md).
        """
        now = self.sim.now()
        start_time = str(now)
        group = self.settings.group
        for msg in msgs:
            msg.reset_retry_topic(group)
            msg.consume_start_ts = now
            if not self.orderly:
                msg.properties[PROP_CONSUME_START_TIME] = start_time
            msg.expired = False
            msg.attempts += 1
        verdict = self.listener.consume([m.uniq_key for m in msgs])
        d = Delivery(self._next_seq(), msgs, [m.reconsume_times for m in msgs], mq, pq, now,
                     verdict, slot_start_ts)
        d.handle = self.sim.after(verdict.duration_ms, finish, d)
        self.in_flight[d.seq] = d
        self.deliveries += 1

    # --- concurrent consumption ---------------------------------------------------------------

    def _consume_concurrently(self, msgs, pq, mq, epoch) -> bool:
        if not self._live(epoch) or pq.dropped:
            return False
        self._deliver(msgs, pq, mq, self.sim.now(), self._finish_concurrently)
        return True

    def _finish_concurrently(self, d: Delivery) -> None:
        """processConsumeResult: ack, send back, fall back, or keep for a local retry."""
        if self.in_flight.pop(d.seq, None) is None:
            return
        now, status = self.sim.now(), d.verdict.status
        outcomes: list[str] = []
        local: list[PulledMessage] = []
        if d.pq.dropped:
            outcomes = [DROPPED] * len(d.msgs)
        elif status == CONSUME_SUCCESS:
            outcomes = [ACKED] * len(d.msgs)
        elif not self.clustering:
            outcomes = [DROPPED] * len(d.msgs)  # broadcasting logs and drops a failure
        else:
            # The context's delayLevelWhenNextConsume: 0 lets the broker pick 3 + reconsume times;
            # -1 (DLQ_REQUESTED) makes the broker store the copy in %DLQ%group at once.
            level = DLQ_REQUESTED_DELAY_LEVEL if status == DLQ_REQUESTED else 0
            for msg in d.msgs:
                how = self.send_back.concurrent(msg, level, self.max_reconsume_times)
                if how is None:
                    local.append(msg)
                    outcomes.append(LOCAL_RETRY)
                else:
                    outcomes.append(how)
        for msg, times, outcome in zip(d.msgs, d.reconsume_at_start, outcomes, strict=True):
            self._emit_attempt(d, msg, times, status, EXPIRED if msg.expired else outcome, now)
        if not d.pq.dropped:
            for msg in local:
                msg.reconsume_times += 1
            done = [m for m in d.msgs if not any(m is x for x in local)] if local else d.msgs
            offset = d.pq.remove_message(done)
            if offset >= 0:
                self.offset_store.update_offset(d.mq, offset, increase_only=True)
            if local:
                self._resubmit_later(SEND_BACK_LOCAL_RETRY_MS, self._resubmit_concurrently,
                                     local, d.pq, d.mq)
        self._release()

    def _resubmit_later(self, delay_ms: int, fn, *args) -> None:
        seq = self._next_seq()
        self.resubmits[seq] = self.sim.after(delay_ms, self._run_resubmit, seq, self.epoch, fn,
                                             args)

    def _run_resubmit(self, seq: int, epoch: int, fn, args) -> None:
        if self.resubmits.pop(seq, None) is None or not self._live(epoch):
            return
        fn(*args)

    def _resubmit_concurrently(self, msgs, pq, mq) -> None:
        self._submit(msgs, pq, mq, True)

    def _clean_expired_tick(self, epoch: int) -> None:
        if not self._live(epoch):
            return
        for mq in sorted(self.pqs):
            self._clean_expired(self.pqs[mq])
        self.sim.after(self.settings.consume_timeout_ms, self._clean_expired_tick, epoch)

    def _clean_expired(self, pq: ProcessQueue) -> None:
        """cleanExpiredMsg: send back (level 3) up to 16 expired heads; commit nothing."""
        now, timeout = self.sim.now(), self.settings.consume_timeout_ms
        for _ in range(min(pq.msg_count, CLEAN_EXPIRED_MSGS_PER_PASS_MAX)):
            head = pq.head()
            if head is None or head.consume_start_ts is None or \
                    now - head.consume_start_ts <= timeout:
                break
            if self.send_back.concurrent(head, CLEAN_EXPIRED_DELAY_LEVEL,
                                         self.max_reconsume_times) is None:
                continue  # "send expired msg exception": the next round looks again
            head.expired = True
            if pq.head() is head:
                pq.remove_message([head])

    # --- orderly consumption ------------------------------------------------------------------

    def _consume_orderly(self, pq, mq, slot_start_ts, epoch) -> bool:
        if not self._live(epoch) or pq.dropped:
            return False
        msgs = pq.take_messages(self.settings.consume_message_batch_max_size)
        if not msgs:
            return False
        self._deliver(msgs, pq, mq, slot_start_ts, self._finish_orderly)
        return True

    def _finish_orderly(self, d: Delivery) -> None:
        """ConsumeMessageOrderlyService.processConsumeResult with autoCommit."""
        if self.in_flight.pop(d.seq, None) is None:
            return
        now, status, pq = self.sim.now(), d.verdict.status, d.pq
        if pq.dropped:
            for msg, times in zip(d.msgs, d.reconsume_at_start, strict=True):
                self._emit_attempt(d, msg, times, status, DROPPED, now)
            self._release()
            return
        outcomes: list[str] = []
        suspend = False
        if status == CONSUME_SUCCESS:
            outcomes = [ACKED] * len(d.msgs)
        else:
            limit = self.max_reconsume_times
            for msg in d.msgs:  # checkReconsumeTimes
                if msg.reconsume_times >= limit:
                    msg.properties[PROP_RECONSUME_TIME] = str(msg.reconsume_times)
                    if self.send_back.orderly(msg, limit):
                        outcomes.append(SENT_BACK_BY_CLIENT)
                        continue
                suspend = True
                msg.reconsume_times += 1
                outcomes.append(LOCAL_RETRY)
        for msg, times, outcome in zip(d.msgs, d.reconsume_at_start, outcomes, strict=True):
            self._emit_attempt(d, msg, times, status, outcome, now)
        if suspend:
            pq.make_message_to_consume_again(d.msgs)
            self._release()
            self._resubmit_later(self.suspend_ms, self._resubmit_orderly, pq, d.mq)
            return
        offset = pq.commit()
        if offset >= 0:
            self.offset_store.update_offset(d.mq, offset, increase_only=False)
        if now - d.slot_start_ts < ORDERLY_CONSUME_CONTINUOUSLY_MS_MAX:
            # The same thread keeps consuming this queue while it has messages.
            if self._consume_orderly(pq, d.mq, d.slot_start_ts, self.epoch):
                return
            self._release()
            return
        self._release()
        self._resubmit_later(ORDERLY_RESUBMIT_DELAY_MS, self._resubmit_orderly, pq, d.mq)

    def _resubmit_orderly(self, pq, mq) -> None:
        self._pool_submit(self._consume_orderly, pq, mq, self.sim.now(), self.epoch)

    # --- offsets and rows -----------------------------------------------------------------------

    def _persist_tick(self, epoch: int) -> None:
        if not self._live(epoch):
            return
        if not self.clustering or self._broker_up():
            self.offset_store.persist_all(sorted(self.pqs))
        self.sim.after(OFFSET_PERSIST_INTERVAL_MS, self._persist_tick, epoch)

    def _emit_attempt(self, d: Delivery, msg: PulledMessage, reconsume_times: int, status: str,
                      outcome: str, end_ts: int) -> None:
        self.recorder.emit("consume_attempts", {
            "group": self.settings.group, "consumer_id": self.consumer_id,
            "model": self.settings.model, "queue_topic": msg.queue_topic,
            "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "msg_id": msg.msg_id,
            "uniq_key": msg.uniq_key, "topic": msg.topic, "reconsume_times": reconsume_times,
            "start_ts": d.start_ts, "end_ts": end_ts, "status": status, "outcome": outcome,
            "phys_offset": msg.phys_offset})

    # --- state for the world's terminal check -----------------------------------------------------

    def idle(self) -> bool:
        """Nothing in flight or pending, every queue waiting at its end with the offset there."""
        if self.state != RUNNING:
            return True
        if self.in_flight or self.backlog or self.resubmits or self.pull_events:
            return False
        for mq, pq in self.pqs.items():
            if mq not in self.waiting or not pq.is_empty():
                return False
            if self.offset_store.read_memory(mq) != self.next_offset[mq]:
                return False
        return True
