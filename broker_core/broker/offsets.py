"""Broker-side consumer offsets (ConsumerOffsetManager 4.9.4) and their periodic persistence.

Clients commit offsets into memory; the broker writes ``consumerOffset.json`` every 5 s after a
10 s initial delay and on a clean shutdown, so a crash loses the commits since the last write.

The timer runs on a fixed grid (start + 10 s + k * 5 s) like BrokerController's scheduled executor,
but only when something changed since the last write: an idle broker schedules no events, and
skipping a write that would not change the file is unobservable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.clock import EventHandle, Simulator
from broker_core.constants import OFFSET_PERSIST_INITIAL_DELAY_MS, OFFSET_PERSIST_INTERVAL_MS
from broker_core.store.config_files import (
    TOPIC_GROUP_SEPARATOR,
    load_consumer_offsets,
    save_consumer_offsets,
    split_topic_group,
)

Emit = Callable[[str, dict], None]


def grid_at_or_after(origin_ms: int, period_ms: int, t_ms: int) -> int:
    """The first point of the grid ``origin + k * period`` (k >= 0) at or after ``t_ms``."""
    assert period_ms > 0, f"grid period must be positive, got {period_ms}"
    if t_ms <= origin_ms:
        return origin_ms
    steps = -(-(t_ms - origin_ms) // period_ms)
    return origin_ms + steps * period_ms


class ConsumerOffsets:
    """``topic@group -> {queueId: next offset}`` with lazy, grid-aligned persistence."""

    def __init__(self, config_dir: Path, sim: Simulator, emit: Emit):
        self.config_dir = Path(config_dir)
        self.sim = sim
        self._emit = emit
        self.table: dict[str, dict[int, int]] = {}
        self._grid_origin_ms = 0
        self._timer: EventHandle | None = None
        self._dirty = False
        self.persist_count = 0

    def load(self) -> None:
        """Read consumerOffset.json; each restored entry is reported as a RESTORE event."""
        self.table = {k: dict(v) for k, v in load_consumer_offsets(self.config_dir).items()}
        now = self.sim.now()
        for key in sorted(self.table):
            topic, group = split_topic_group(key)
            for queue_id in sorted(self.table[key]):
                self._row(group, topic, queue_id, self.table[key][queue_id], now, "RESTORE")

    def start(self) -> None:
        self._grid_origin_ms = self.sim.now() + OFFSET_PERSIST_INITIAL_DELAY_MS
        self._dirty = False

    def stop(self) -> None:
        """Forget the pending timer (shutdown persists explicitly; a crash persists nothing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def on_clock_jump(self, delta_ms: int) -> None:
        """The persist timer runs on monotonic time: its grid moves with a wall-clock jump."""
        self._grid_origin_ms += delta_ms
        if self._timer is not None:
            self._timer.cancel()
            when = grid_at_or_after(self._grid_origin_ms, OFFSET_PERSIST_INTERVAL_MS, self.sim.now() + 1)
            self._timer = self.sim.at(when, self._on_timer)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """commitOffset: the client's new next-offset for a queue (kept in memory until persisted)."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        self.table.setdefault(key, {})[queue_id] = offset
        self._row(group, topic, queue_id, offset, self.sim.now(), "UPDATE")
        self._dirty = True
        if self._timer is None:
            # The tick at this very millisecond may already have run: take the next one.
            when = grid_at_or_after(self._grid_origin_ms, OFFSET_PERSIST_INTERVAL_MS, self.sim.now() + 1)
            self._timer = self.sim.at(when, self._on_timer)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """queryOffset: the committed offset, or -1 when the group never committed this queue."""
        return self.table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id, -1)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty:
            self.persist()

    def persist(self) -> None:
        """Write consumerOffset.json and report every entry written as a PERSIST event."""
        save_consumer_offsets(self.config_dir, self.table)
        self._dirty = False
        self.persist_count += 1
        now = self.sim.now()
        for key in sorted(self.table):
            topic, group = split_topic_group(key)
            for queue_id in sorted(self.table[key]):
                self._row(group, topic, queue_id, self.table[key][queue_id], now, "PERSIST")

    def _row(self, group: str, topic: str, queue_id: int, offset: int, ts: int, event: str) -> None:
        self._emit("consumer_offsets", {"group": group, "topic": topic, "queue_id": queue_id,
                                        "offset": offset, "ts": ts, "event": event})
