"""The delay-level scheduler (ScheduleMessageService 4.9.4, sync delivery) on the virtual clock.

Each delay level ``L`` has a consume queue ``SCHEDULE_TOPIC_XXXX/L-1`` whose units carry the
deliver timestamp as tagsCode. In RocketMQ one timer per level starts ``FIRST_DELAY_TIME``
after start and then re-runs every ``DELAY_FOR_A_WHILE`` (100 ms); each run delivers every due
unit from the level's offset, re-putting the message to its real topic (``messageTimeup``).

Here a level runs only when it has work, at the point of that same poll grid where the Java timer
would first find its head unit due: ``origin + k * 100 ms`` with ``origin = start + 1000 ms``.
Skipping the empty polls in between changes nothing observable (a poll that finds nothing due
does nothing), so a 6 h run with one delayed message costs a handful of events, not 216 000.
A level with nothing to deliver holds no event; a put into its queue wakes it.

Sync delivery never skips: a failed put retries the same unit 100 ms later, forever.
``delayOffset.json`` holds, per level, the CQ offset after the last delivered unit; it is written
on the 10 s grid (after a 10 s initial delay) when it changed, and on shutdown. A crash loses the
deliveries since the last write, so they are delivered again after restart (duplicates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_core.broker import codes
from broker_core.broker.offsets import grid_at_or_after
from broker_core.broker.semantics import SEMANTICS_4_9, Semantics
from broker_core.clock import EventHandle, Simulator
from broker_core.constants import (
    DELAY_OFFSET_FLUSH_INTERVAL_MS,
    SCHEDULE_DELAY_FOR_A_PERIOD_MS,
    SCHEDULE_DELAY_FOR_A_WHILE_MS,
    SCHEDULE_FIRST_DELAY_MS,
    SCHEDULE_TOPIC,
    SCHEDULE_UNKNOWN_LEVEL_DELAY_MS,
)
from broker_core.delay_levels import level_to_queue_id as delay_level_to_queue_id
from broker_core.delay_levels import queue_id_to_level as queue_id_to_delay_level
from broker_core.message import (
    PROP_DELAY,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_UNIQ_KEY,
    PROP_WAIT,
    java_ordered_properties_string,
)
from broker_core.names import TRANS_HALF_TOPIC
from broker_core.store.commit_log import java_parse_int
from broker_core.store.config_files import load_delay_offsets, save_delay_offsets
from broker_core.store.message_store import PutStatus

Emit = Callable[[str, dict], None]
_PUT_OK = PutStatus.PUT_OK  # a module constant: attribute access on an Enum class is slow
# Units read from a level's consume queue at once; bounds the batch, not the deliveries of a run.
DELIVER_BATCH_UNITS_MAX = 1024


def correct_deliver_timestamp(levels_ms: list[int], level: int, now_ms: int, deliver_ts: int) -> int:
    """``correctDeliverTimestamp``: a deliver time more than one level delay ahead means now."""
    delay = levels_ms[level - 1] if 1 <= level <= len(levels_ms) else SCHEDULE_UNKNOWN_LEVEL_DELAY_MS
    return now_ms if deliver_ts > now_ms + delay else deliver_ts


def message_timeup(record, semantics: Semantics = SEMANTICS_4_9) -> dict:
    """``messageTimeup``: the fields of the re-put that brings a delayed record to its real topic.

    The stored property string is built BEFORE DELAY is cleared from the map, so the re-put
    keeps DELAY, REAL_TOPIC and REAL_QID (a 4.9.4 quirk the fixture store shows); the map
    without DELAY is what keeps the store from delaying it again. Returns MessageInner kwargs.
    """
    # Java re-serializes the map it decoded from the record: a fresh HashMap filled in the
    # stored string's order. Its iteration order depends only on the key sequence, which
    # java_ordered_properties_string looks up instead of re-hashing every key.
    # 5.x's messageTimeUp is the same code over its own map and serializer (HashMap(128), a
    # trailing separator: BR/schedule/ScheduleMessageService.messageTimeUp @5.3.3).
    stored = java_ordered_properties_string(
        record.properties, capacity=semantics.properties_map_capacity(),
        trailing_separator=semantics.properties_trailing_separator())
    # The re-put's in-memory map: only TAGS (the tags code) and the absence of DELAY (no second
    # delay) are read from it, never its order, so a plain dict stands for the HashMap here.
    props = dict(record.properties)
    props[PROP_WAIT] = "false"  # setWaitStoreMsgOK(false): the map only, after the string
    props.pop(PROP_DELAY, None)
    real_topic = props.get(PROP_REAL_TOPIC)
    qid_text = props.get(PROP_REAL_QID)
    real_qid = None if qid_text is None else java_parse_int(qid_text)  # Integer.parseInt
    if real_topic is None or real_qid is None:
        raise ValueError(f"schedule record at {record.phys_offset} has no usable REAL_TOPIC/REAL_QID")
    return dict(topic=real_topic, queue_id=real_qid, body=record.body, properties=props,
                properties_string=stored, flag=record.flag, sys_flag=record.sys_flag,
                born_ts=record.born_ts, born_host=record.born_host, store_host=record.store_host,
                reconsume_times=record.reconsume_times,
                # A fresh MessageExtBrokerInner: preparedTransactionOffset is never set, so 0 even
                # when the schedule copy carries one (a committed transaction message sent delayed).
                prepared_tx_offset=0, delay_level=0)


@dataclass
class _Level:
    """One level's timer state: its offset, its pending run, failed puts so far."""

    level: int
    offset: int = 0  # where the next run starts (DeliverDelayedMessageTimerTask.offset)
    handle: EventHandle | None = None
    attempts: int = 0  # puts tried so far for the unit at ``offset`` (retried until one succeeds)


class ScheduleService:
    """Moves due messages out of SCHEDULE_TOPIC_XXXX; one lazily-woken timer per level.

    ``put(inner_kwargs) -> put_result_or_None`` stores a message through the broker (so the
    put-failure knob and arrival notifications apply); a result whose status is not PUT_OK is
    a failed delivery.
    """

    def __init__(self, store, sim: Simulator, config_dir: Path, levels_ms: list[int],
                 put: Callable[[dict], object], emit: Emit, semantics: Semantics = SEMANTICS_4_9):
        assert levels_ms, "at least one delay level is needed"
        self.semantics = semantics
        self.store = store
        self.sim = sim
        self.config_dir = Path(config_dir)
        self.levels_ms = list(levels_ms)
        self._put = put
        self._emit = emit
        self.offset_table: dict[int, int] = {}
        self._levels = {lv: _Level(lv) for lv in range(1, len(levels_ms) + 1)}
        self._origin_ms = 0
        self._persist_origin_ms = 0
        self._persist_timer: EventHandle | None = None
        self._dirty = False
        self.started = False
        self.runs = 0  # level runs, for the idle-cost property
        self._running_level: int | None = None  # a put into the level being run must not arm it twice
        self.persist_count = 0

    @property
    def max_delay_level(self) -> int:
        return len(self.levels_ms)

    # -- load / persist --------------------------------------------------------------------------

    def load(self) -> None:
        """Read delayOffset.json, then clamp each offset into its CQ (correctDelayOffset)."""
        self.offset_table = dict(load_delay_offsets(self.config_dir))
        self.correct_delay_offset()

    def correct_delay_offset(self) -> None:
        """``correctDelayOffset``: clamp each level's stored offset into [cq.min, cq.max].

        Java's ``findConsumeQueue`` creates a missing queue, so a level without one counts as an
        empty queue (min = max = 0); levels outside the delay table are left alone.
        """
        for level in range(1, self.max_delay_level + 1):
            offset = self.offset_table.get(level)
            if offset is None:
                continue
            low, high = self._bounds(level)
            self.offset_table[level] = min(max(offset, low), high)

    def persist(self) -> None:
        save_delay_offsets(self.config_dir, self.offset_table)
        self._dirty = False
        self.persist_count += 1

    def _update_offset(self, level: int, offset: int) -> None:
        self.offset_table[level] = offset
        self._dirty = True
        if self._persist_timer is None:
            # The tick at this very millisecond may already have run: take the next one.
            when = grid_at_or_after(self._persist_origin_ms, DELAY_OFFSET_FLUSH_INTERVAL_MS,
                                    self.sim.now() + 1)
            self._persist_timer = self.sim.at(when, self._on_persist_timer)

    def _on_persist_timer(self) -> None:
        self._persist_timer = None
        if self._dirty and self.started:
            self.persist()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every level's timer FIRST_DELAY_TIME from now at its stored offset."""
        now = self.sim.now()
        self._origin_ms = now + SCHEDULE_FIRST_DELAY_MS
        self._persist_origin_ms = now + DELAY_OFFSET_FLUSH_INTERVAL_MS
        self.started = True
        for level, state in self._levels.items():
            state.offset = self.offset_table.get(level, 0)
            state.attempts = 0
            self._arm(state)

    def stop(self) -> None:
        """Cancel every pending run and the persist timer (the caller decides whether to persist)."""
        self.started = False
        for state in self._levels.values():
            if state.handle is not None:
                state.handle.cancel()
                state.handle = None
        if self._persist_timer is not None:
            self._persist_timer.cancel()
            self._persist_timer = None

    def on_put(self, queue_id: int) -> None:
        """A unit was added to SCHEDULE_TOPIC_XXXX/queue_id: wake that level if it is idle."""
        state = self._levels.get(queue_id_to_delay_level(queue_id))
        if (state is not None and self.started and state.handle is None
                and state.level != self._running_level):
            self._arm(state)

    def on_clock_jump(self, delta_ms: int) -> None:
        """The wall clock moved by ``delta_ms``: the poll grid (monotonic in Java) moves with it,
        and every waiting level re-checks its head at the next poll. After a backward jump a head
        now more than one level delay away is delivered at once (correctDeliverTimestamp), as a
        real broker does; otherwise it waits for its due time on the new clock."""
        self._origin_ms += delta_ms
        self._persist_origin_ms += delta_ms
        if self._persist_timer is not None:
            self._persist_timer.cancel()
            self._persist_timer = None
            self._dirty = True
            self._persist_timer = self.sim.at(
                grid_at_or_after(self._persist_origin_ms, DELAY_OFFSET_FLUSH_INTERVAL_MS,
                                 self.sim.now() + 1), self._on_persist_timer)
        if not self.started:
            return
        for state in self._levels.values():
            if state.handle is not None:
                state.handle.cancel()
                state.handle = None
                self._arm(state)

    def pending_levels(self) -> list[int]:
        return [lv for lv, st in self._levels.items() if st.handle is not None]

    # -- a level's run ----------------------------------------------------------------------------

    def _has_cq(self, level: int) -> bool:
        return (SCHEDULE_TOPIC, delay_level_to_queue_id(level)) in self.store.queues

    def _bounds(self, level: int) -> tuple[int, int]:
        qid = delay_level_to_queue_id(level)
        return self.store.min_offset(SCHEDULE_TOPIC, qid), self.store.max_offset(SCHEDULE_TOPIC, qid)

    def _unit(self, level: int, offset: int) -> tuple[int, int, int] | None:
        units = self.store.get_units(SCHEDULE_TOPIC, delay_level_to_queue_id(level), offset, 1)
        return units[0] if units else None

    def _grid(self, t_ms: int) -> int:
        return grid_at_or_after(self._origin_ms, SCHEDULE_DELAY_FOR_A_WHILE_MS, t_ms)

    def _arm(self, state: _Level) -> None:
        """Schedule the level's next run at the first grid point where its head unit is due."""
        assert state.handle is None, f"level {state.level} already has a pending run"
        if not self._has_cq(state.level):
            return  # no queue yet: the first put creates it and wakes the level
        low, high = self._bounds(state.level)
        if state.offset < low:
            state.offset = low
        elif state.offset > high:
            state.offset = high
        if state.offset >= high:
            return  # nothing to deliver: idle until a put wakes the level
        unit = self._unit(state.level, state.offset)
        first = self._grid(self.sim.now())
        if unit is None:
            when = self._grid(self.sim.now() + 1)  # unreadable unit: poll again, never in a loop
        else:
            deliver = correct_deliver_timestamp(self.levels_ms, state.level, first, unit[2])
            when = self._grid(max(first, deliver))
        state.handle = self.sim.at(when, self._run, state)

    def _rearm_after(self, state: _Level, delay_ms: int) -> None:
        state.handle = self.sim.at(self.sim.now() + delay_ms, self._run, state)

    def _run(self, state: _Level) -> None:
        """``executeOnTimeup``: deliver every due unit from the level's offset, in order."""
        state.handle = None
        if not self.started:
            return
        self.runs += 1
        self._running_level = state.level
        try:
            self._deliver_due(state)
        finally:
            self._running_level = None
        if state.handle is None and self.started:
            self._arm(state)  # idle unless a unit arrived meanwhile (_arm checks)

    def _due_units(self, level: int, offset: int, high: int) -> Iterator[tuple[int, int, int]]:
        """The level's units from ``offset`` up to ``high``, read a batch at a time.

        ScheduleMessageService takes the level's consume queue as one buffer from the offset
        (``getIndexBuffer``) and walks its units; reading one unit per delivery would cost a read
        per message here.
        """
        qid = delay_level_to_queue_id(level)
        while offset < high:
            batch = self.store.get_units(SCHEDULE_TOPIC, qid, offset,
                                         min(high - offset, DELIVER_BATCH_UNITS_MAX))
            if not batch:
                return
            yield from batch
            offset += len(batch)

    def _deliver_due(self, state: _Level) -> None:
        if not self._has_cq(state.level):
            return
        now = self.sim.now()
        offset = state.offset
        low, high = self._bounds(state.level)
        offset = max(offset, low)
        levels_ms = self.levels_ms
        look = self.store.look_message_by_offset
        for phys, size, tags_code in self._due_units(state.level, offset, high):
            deliver = correct_deliver_timestamp(levels_ms, state.level, now, tags_code)
            if deliver > now:
                state.offset = offset
                state.handle = self.sim.at(self._grid(deliver), self._run, state)
                return
            record = look(phys, size, cache=False)  # read once: not kept for pulls
            if record is None:
                offset += 1  # the message is gone (e.g. cleaned): skipped, offset not stored
                state.attempts = 0
                continue
            try:
                inner = message_timeup(record, self.semantics)
            except ValueError:
                # Java's run() catches the parse error and tries the same unit again later.
                state.offset = offset
                self._rearm_after(state, SCHEDULE_DELAY_FOR_A_PERIOD_MS)
                return
            if inner["topic"] == TRANS_HALF_TOPIC:
                offset += 1  # "[BUG] the real topic of schedule msg is ... discard the msg"
                state.attempts = 0
                continue
            state.attempts += 1
            result = self._put(inner)
            status = getattr(result, "status", None)
            if status is not _PUT_OK and (status is None or codes.status_name(status) != "PUT_OK"):
                state.offset = offset
                self._rearm_after(state, SCHEDULE_DELAY_FOR_A_WHILE_MS)
                return
            self._update_offset(state.level, offset + 1)
            self._emit("schedule_deliveries", {
                "delay_level": state.level,
                "schedule_queue_offset": offset,
                "schedule_msg_id": record.msg_id,
                "delivered_msg_id": result.msg_id,
                "real_topic": inner["topic"],
                "scheduled_store_ts": record.store_ts,
                "due_ts": tags_code,
                "delivered_ts": now,
                "lateness_ms": now - tags_code,
                "put_attempts": state.attempts,
                "uniq_key": record.properties.get(PROP_UNIQ_KEY),
            })
            state.attempts = 0
            offset += 1
        state.offset = offset
