"""Async commit-log flushing (FlushRealTimeService 4.9.4) on the virtual clock.

With ``flush: async`` a put only reaches the page cache; RocketMQ's flush thread writes it to disk
every 500 ms once at least 4 pages (16 KiB) are dirty, and everything at least every 10 s. A
kill -9 loses what was not flushed. With ``flush: sync`` the store flushes inside each put and
this service does nothing.

Like the other periodic timers here, the timer only exists while something is unflushed: it is
set for the first 500 ms grid point where the Java thread would flush (the next tick once 16 KiB
are dirty, else the tick that reaches the 10 s thorough-flush deadline).
"""

from __future__ import annotations

from broker_core.broker.offsets import grid_at_or_after
from broker_core.clock import EventHandle, Simulator

FLUSH_INTERVAL_COMMITLOG_MS = 500  # MessageStoreConfig.flushIntervalCommitLog
OS_PAGE_SIZE_BYTES = 4096  # MappedFile.OS_PAGE_SIZE
FLUSH_LEAST_PAGES = 4  # flushCommitLogLeastPages: flush only when this many pages are dirty
FLUSH_THOROUGH_INTERVAL_MS = 10_000  # flushCommitLogThoroughInterval: then flush whatever is dirty


class FlushService:
    """Flushes a store's commit log and consume queues when RocketMQ's flush thread would."""

    def __init__(self, store, sim: Simulator, *, enabled: bool):
        self.store = store
        self.sim = sim
        self.enabled = enabled
        self._origin_ms = sim.now()
        self._last_thorough_ms = sim.now()
        self._timer: EventHandle | None = None
        self.flushes = 0

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def on_clock_jump(self, delta_ms: int) -> None:
        """The flush thread waits on monotonic time: its grid and deadline move with the clock."""
        self._origin_ms += delta_ms
        self._last_thorough_ms += delta_ms
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self.after_put()

    def after_put(self) -> None:
        """Make sure a flush is due at the right tick for what is now unflushed."""
        if not self.enabled:
            return
        now = self.sim.now()
        timer = self._timer
        if timer is not None and timer.time_ms - now < FLUSH_INTERVAL_COMMITLOG_MS:
            # The pending flush is at the first tick from now (timers sit on the grid, or at
            # now after a clock jump): no amount of dirty data can bring it earlier.
            return
        dirty = self.store.max_phys_offset - self.store.flushed_offset
        if dirty <= 0:
            return
        if dirty >= FLUSH_LEAST_PAGES * OS_PAGE_SIZE_BYTES:
            want = grid_at_or_after(self._origin_ms, FLUSH_INTERVAL_COMMITLOG_MS, now)
        else:
            want = grid_at_or_after(self._origin_ms, FLUSH_INTERVAL_COMMITLOG_MS,
                                    max(now, self._last_thorough_ms + FLUSH_THOROUGH_INTERVAL_MS))
        if self._timer is not None:
            if self._timer.time_ms <= want:
                return
            self._timer.cancel()
        self._timer = self.sim.at(want, self._flush)

    def _flush(self) -> None:
        self._timer = None
        now = self.sim.now()
        dirty = self.store.max_phys_offset - self.store.flushed_offset
        if now >= self._last_thorough_ms + FLUSH_THOROUGH_INTERVAL_MS:
            self._last_thorough_ms = now
        if dirty > 0:
            self.store.flush()
            self.flushes += 1
