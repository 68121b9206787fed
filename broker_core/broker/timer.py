"""The timer wheel's rolls and deliveries (5.x ``TimerMessageStore``).

A record put into ``rmq_sys_wheel_timer`` is taken by the wheel at once (``enqueue``/``doEnqueue``
@5.3.3): the wheel's write time, the time rounded down to the precision, becomes the record's
enqueue time. The record waits in a slot and is dequeued when the wheel's read time has passed
that slot: one precision step after it (a real 5.3.3 broker stored its deliveries 1.0 to 1.1 s
after ``TIMER_OUT_MS``, docs/rocketmq-5x.md). Which slot:

* ``TIMER_OUT_MS`` when the due time is less than one roll window (``timerRollWindowSlot`` x
  precision) ahead of the write time; the dequeue is then the **delivery**;
* otherwise the record is marked to **roll** and parked one window ahead, or half a window
  (``slots / 2``, integer division) when what would be left after one window is under a third of
  a window (``slots / 3``) "to give enough time to the next roll". Its dequeue puts a new record
  into the timer topic (same queue), which the wheel takes again: a message rolls until its due
  time is within one window;
* a record whose ``TIMER_OUT_MS`` is already before the write time is not enqueued: it is put at
  once with ``TIMER_ENQUEUE_MS`` = ``Long.MAX_VALUE`` (``putMessageToTimerWheel``; only a roll can
  come to this, with a window of a few slots).

Each dequeue (``convert`` and ``convertMessage`` @5.3.3) copies the record read back: its
property map gets ``TIMER_ENQUEUE_MS`` (the record's enqueue time), for a roll ``TIMER_ROLL_TIMES``
(1, or the record's + 1), and ``TIMER_DEQUEUE_MS`` (now), and keeps ``REAL_TOPIC``/``REAL_QID``
in the stored string; the body, flag, born host and time, store host and reconsume times are the
record's. A roll goes to the record's own topic and queue; a delivery to ``REAL_TOPIC``/
``REAL_QID``, so the delivery of a message that rolled carries the last roll's count. A failed put
is tried again one precision step later.

A **recall record** (``TIMER_DEL_UNIQKEY``, broker_core/broker/recall.py) waits in its slot as any
record; the wheel gathers a slot's recall records before its messages (``dequeue`` @5.3.3:
``deleteList``), drops a message of that slot whose delete key is among them, and never puts a
recall record, whether its dequeue is a delivery or a roll. So a recall only catches the record in
its own slot: a timer that rolls is recalled only when the recall was taken in the same second
as the record it would meet (a later one lands in another roll slot and is lost, and the message
is delivered).

Not modelled: the give-up after three failed puts
(``timerEnableRetryUntilSuccess`` off), and the wheel's files (``timerlog``, ``timerwheel``,
``timercheck``), so pending timers do not survive a broker restart (the loader refuses a restart
with timers).
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.broker.semantics import Semantics
from broker_core.clock import EventHandle, Simulator
from broker_core.constants import (
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DEQUEUE_MS,
    PROP_TIMER_ENQUEUE_MS,
    PROP_TIMER_OUT_MS,
    PROP_TIMER_ROLL_TIMES,
    TIMER_ENQUEUE_MS_NEVER,
    TIMER_ROLL_WINDOW_SLOT_MAX,
    TIMER_ROLL_WINDOW_SLOT_MIN,
)
from broker_core.message import PROP_REAL_QID, PROP_REAL_TOPIC, PROP_UNIQ_KEY, PROP_WAIT, JavaHashMap
from broker_core.names import is_bookkeeping_record
from broker_core.store.commit_log import java_parse_int

# A dequeue whose put keeps failing is tried again each precision step, at most this often (a
# day of one-second steps); past it the timer is dropped and counted in ``abandoned``.
TIMER_PUT_ATTEMPTS_MAX = 86_400


def wheel_slot_ms(out_ms: int, write_ms: int, precision_ms: int, roll_window_slots: int) -> tuple[int, bool]:
    """The slot a record due at ``out_ms`` waits in when the wheel takes it at ``write_ms``, and
    whether its dequeue is a roll (``doEnqueue`` @5.3.3)."""
    window_ms = roll_window_slots * precision_ms
    if out_ms - write_ms < window_ms:
        return out_ms, False
    if out_ms - write_ms - window_ms < roll_window_slots // 3 * precision_ms:
        return write_ms + roll_window_slots // 2 * precision_ms, True
    return write_ms + window_ms, True


class TimerService:
    """Rolls and delivers the records the broker puts into the timer topic when their slot has passed."""

    def __init__(self, store, sim: Simulator, put: Callable[[dict], object], semantics: Semantics,
                 precision_ms: int, stored: Callable[[object], bool], roll_window_slots: int):
        assert precision_ms > 0, f"timer precision must be positive, got {precision_ms}"
        assert TIMER_ROLL_WINDOW_SLOT_MIN <= roll_window_slots <= TIMER_ROLL_WINDOW_SLOT_MAX, \
            f"roll window of {roll_window_slots} slots is one the broker would replace"
        self.store = store
        self.sim = sim
        self._put = put
        self._stored = stored  # whether a put's result means the record is in the commit log
        self.semantics = semantics
        self.precision_ms = precision_ms
        self.roll_window_slots = roll_window_slots
        self._pending: dict[int, EventHandle] = {}  # timer record's phys offset -> its dequeue
        # The pending records of messages (not the broker's POP checkpoints and acks).
        self._pending_messages: set[int] = set()
        # (slot, delete key) of every recall record taken: a message dequeued from that slot with
        # that key is dropped.
        self._deletes: set[tuple[int, str]] = set()
        self.delivered = 0
        self.rolled = 0
        self.abandoned = 0
        self.recalled = 0  # messages dropped by a recall record of their slot

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def pending_messages(self) -> int:
        """Messages waiting in the wheel (to roll or be delivered); bookkeeping records aside."""
        return len(self._pending_messages)

    def on_put(self, phys_offset: int) -> None:
        """The wheel takes a record just stored in the timer topic (``enqueue``/``doEnqueue``)."""
        now = self.sim.now()
        record = self.store.look_message_by_offset(phys_offset)
        assert record is not None, f"timer record at {phys_offset} cannot be read back"
        out_ms = int(record.properties[PROP_TIMER_OUT_MS])
        if not is_bookkeeping_record(record.topic, record.properties.get(PROP_REAL_TOPIC)):
            self._pending_messages.add(phys_offset)
        write_ms = now // self.precision_ms * self.precision_ms  # currWriteTimeMs
        if out_ms < write_ms:
            # Its slot has passed: put at once, marked as never enqueued (not a roll, whatever it was).
            self._pending[phys_offset] = self.sim.at(now, self._dequeue, phys_offset, TIMER_ENQUEUE_MS_NEVER,
                                                     False, 1)
            return
        slot_ms, roll = wheel_slot_ms(out_ms, write_ms, self.precision_ms, self.roll_window_slots)
        delete_key = record.properties.get(PROP_TIMER_DEL_UNIQKEY)
        if delete_key is not None:
            self._deletes.add((slot_ms, delete_key))
        # The read time passes the slot once the write time is past it: one precision step later.
        self._pending[phys_offset] = self.sim.at(slot_ms + self.precision_ms, self._dequeue, phys_offset,
                                                 write_ms, roll, 1, slot_ms)

    def stop(self) -> None:
        """The broker stops: pending dequeues are dropped (the wheel's files are not modelled)."""
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
        self._pending_messages.clear()

    def _dequeue(self, phys_offset: int, enqueue_ms: int, roll: bool, attempt: int,
                 slot_ms: int | None = None) -> None:
        self._pending.pop(phys_offset, None)
        self._pending_messages.discard(phys_offset)
        record = self.store.look_message_by_offset(phys_offset)
        assert record is not None, f"timer record at {phys_offset} cannot be read back"
        if record.properties.get(PROP_TIMER_DEL_UNIQKEY) is not None:
            return  # a recall record is never put (doPut: PUT_NO_RETRY; a roll slot's: deleteList)
        if slot_ms is not None and self._deleted(record, slot_ms):
            self.recalled += 1
            return
        props = JavaHashMap.from_items(record.properties.items(), self.semantics.properties_map_capacity())
        props.put(PROP_TIMER_ENQUEUE_MS, str(enqueue_ms))
        if roll:
            times = props.get(PROP_TIMER_ROLL_TIMES)
            before = 0 if times is None else java_parse_int(times)
            assert before is not None, f"timer record at {phys_offset} has TIMER_ROLL_TIMES {times!r}"
            props.put(PROP_TIMER_ROLL_TIMES, str(before + 1))
        props.put(PROP_TIMER_DEQUEUE_MS, str(self.sim.now()))
        stored = props.to_properties_string(trailing_separator=self.semantics.properties_trailing_separator())
        if roll:
            # convertMessage with needRoll: the record's own topic and queue, REAL_* kept in the map.
            topic, queue_id = record.topic, record.queue_id
            in_memory = dict(props.items())
        else:
            topic = props.get(PROP_REAL_TOPIC)
            queue_id = java_parse_int(props.get(PROP_REAL_QID) or "")
            assert topic and queue_id is not None, f"timer record at {phys_offset} has no REAL_TOPIC/REAL_QID"
            # convertMessage clears REAL_TOPIC/REAL_QID from the map after the string was built.
            in_memory = {k: v for k, v in props.items() if k not in (PROP_REAL_TOPIC, PROP_REAL_QID)}
        in_memory[PROP_WAIT] = "false"  # setWaitStoreMsgOK(false); the stored string keeps WAIT as it was
        result = self._put(dict(
            topic=topic, queue_id=queue_id, body=record.body, properties=in_memory,
            properties_string=stored, flag=record.flag, sys_flag=record.sys_flag, born_ts=record.born_ts,
            born_host=record.born_host, store_host=record.store_host,
            reconsume_times=record.reconsume_times, prepared_tx_offset=0, delay_level=None))
        if self._stored(result):
            if roll:
                self.rolled += 1
            else:
                self.delivered += 1
            return
        if attempt >= TIMER_PUT_ATTEMPTS_MAX:
            self.abandoned += 1
            return
        self._pending[phys_offset] = self.sim.after(self.precision_ms, self._dequeue, phys_offset,
                                                    enqueue_ms, roll, attempt + 1, None)
        if not is_bookkeeping_record(record.topic, record.properties.get(PROP_REAL_TOPIC)):
            self._pending_messages.add(phys_offset)

    def _deleted(self, record, slot_ms: int) -> bool:
        """Whether a recall record taken into the same slot names this message
        (``buildDeleteKey(getRealTopic(msg), uniqueKey)``)."""
        uniq_key = record.properties.get(PROP_UNIQ_KEY)
        real_topic = record.properties.get(PROP_REAL_TOPIC)
        if uniq_key is None or real_topic is None:
            return False
        return (slot_ms, self.semantics.timer_delete_key(real_topic, uniq_key)) in self._deletes
