"""The timer wheel's deliveries (5.x ``TimerMessageStore``), for timers inside one roll window.

A record put into ``rmq_sys_wheel_timer`` is taken by the wheel at once (``enqueue``: its write
time, rounded down to the precision, becomes ``TIMER_ENQUEUE_MS``) and delivered when the wheel's
read time has passed its slot: one precision step after ``TIMER_OUT_MS`` (a real 5.3.3 broker
stored its deliveries 1.0 to 1.1 s after it, docs/rocketmq-5x.md). The delivery (``convert`` and
``convertMessage`` @5.3.3) is a new record in ``REAL_TOPIC``/``REAL_QID`` whose property string is
the timer record's map plus ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS`` (``REAL_TOPIC`` and
``REAL_QID`` kept), with the timer record's body, flag, born host and time, store host and
reconsume times. A failed put is tried again one precision step later, as the wheel retries it.

Not modelled: rolls (a timer more than one roll window ahead; the scenario loader refuses one),
timer recall, and the wheel's files (``timerlog``, ``timerwheel``, ``timercheck``), so pending
timers do not survive a broker restart (the loader refuses a restart with timers).
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.broker.semantics import Semantics
from broker_core.clock import EventHandle, Simulator
from broker_core.constants import PROP_TIMER_DEQUEUE_MS, PROP_TIMER_ENQUEUE_MS, PROP_TIMER_OUT_MS
from broker_core.message import PROP_REAL_QID, PROP_REAL_TOPIC, PROP_WAIT, JavaHashMap
from broker_core.store.commit_log import java_parse_int

# A delivery whose put keeps failing is tried again each precision step, at most this often (a
# day of one-second steps); past it the timer is dropped and counted in ``abandoned``.
TIMER_PUT_ATTEMPTS_MAX = 86_400


class TimerService:
    """Delivers the records the broker puts into the timer topic when their slot has passed."""

    def __init__(self, store, sim: Simulator, put: Callable[[dict], object], semantics: Semantics,
                 precision_ms: int, stored: Callable[[object], bool]):
        assert precision_ms > 0, f"timer precision must be positive, got {precision_ms}"
        self.store = store
        self.sim = sim
        self._put = put
        self._stored = stored  # whether a put's result means the record is in the commit log
        self.semantics = semantics
        self.precision_ms = precision_ms
        self._pending: dict[int, EventHandle] = {}  # timer record's phys offset -> its delivery
        self.delivered = 0
        self.abandoned = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def on_put(self, phys_offset: int) -> None:
        """The wheel takes a record just stored in the timer topic (``enqueue``/``doEnqueue``)."""
        now = self.sim.now()
        record = self.store.look_message_by_offset(phys_offset)
        assert record is not None, f"timer record at {phys_offset} cannot be read back"
        out_ms = int(record.properties[PROP_TIMER_OUT_MS])
        enqueue_ms = now // self.precision_ms * self.precision_ms  # currWriteTimeMs
        due = max(out_ms + self.precision_ms, now)
        self._pending[phys_offset] = self.sim.at(due, self._deliver, phys_offset, enqueue_ms, 1)

    def stop(self) -> None:
        """The broker stops: pending deliveries are dropped (the wheel's files are not modelled)."""
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()

    def _deliver(self, phys_offset: int, enqueue_ms: int, attempt: int) -> None:
        self._pending.pop(phys_offset, None)
        record = self.store.look_message_by_offset(phys_offset)
        assert record is not None, f"timer record at {phys_offset} cannot be read back"
        props = JavaHashMap.from_items(record.properties.items(), self.semantics.properties_map_capacity())
        props.put(PROP_TIMER_ENQUEUE_MS, str(enqueue_ms))
        props.put(PROP_TIMER_DEQUEUE_MS, str(self.sim.now()))
        stored = props.to_properties_string(trailing_separator=self.semantics.properties_trailing_separator())
        real_topic = props.get(PROP_REAL_TOPIC)
        real_qid = java_parse_int(props.get(PROP_REAL_QID) or "")
        assert real_topic and real_qid is not None, f"timer record at {phys_offset} has no REAL_TOPIC/REAL_QID"
        # convertMessage clears REAL_TOPIC/REAL_QID from the map after the string was built, and
        # setWaitStoreMsgOK(false); the stored string keeps them all.
        in_memory = {k: v for k, v in props.items() if k not in (PROP_REAL_TOPIC, PROP_REAL_QID)}
        in_memory[PROP_WAIT] = "false"
        result = self._put(dict(
            topic=real_topic, queue_id=real_qid, body=record.body, properties=in_memory,
            properties_string=stored, flag=record.flag, sys_flag=record.sys_flag, born_ts=record.born_ts,
            born_host=record.born_host, store_host=record.store_host,
            reconsume_times=record.reconsume_times, prepared_tx_offset=0, delay_level=None))
        if self._stored(result):
            self.delivered += 1
            return
        if attempt >= TIMER_PUT_ATTEMPTS_MAX:
            self.abandoned += 1
            return
        self._pending[phys_offset] = self.sim.after(self.precision_ms, self._deliver, phys_offset,
                                                    enqueue_ms, attempt + 1)
