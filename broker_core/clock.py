"""Virtual time: a clock and an event queue ordered by ``(time_ms, sequence)``.

Nothing in the broker model reads the wall clock; it is handed a :class:`Simulator` (or any
object with ``now()``). Ties at one millisecond run in the order they were scheduled, so a run is a
pure function of its inputs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from broker_core.constants import SIM_EVENTS_MAX
from broker_core.errors import SimulationLimitError


def _always() -> bool:
    return True


class EventHandle:
    """A scheduled callback; ``cancel()`` makes it a no-op when its time comes."""

    __slots__ = ("time_ms", "seq", "fn", "args", "cancelled")

    def __init__(self, time_ms: int, seq: int, fn: Callable[..., Any], args: tuple):
        self.time_ms = time_ms
        self.seq = seq
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        """Run the callback once, letting go of it first.

        An object that keeps the handle of an event whose arguments hold the object (a delivery
        and its finishing event) would otherwise form a reference cycle that only the garbage
        collector frees; a simulation makes one per delivery, and collecting them cost about a
        fifth of a run (bench/scenario_e2e.py).
        """
        fn, args = self.fn, self.args
        self.fn = self.args = None
        fn(*args)


class Simulator:
    """A discrete-event loop on virtual milliseconds."""

    def __init__(self, start_ms: int = 0, *, events_max: int = SIM_EVENTS_MAX):
        self._now = int(start_ms)
        self._seq = 0
        # Heap entries are (time_ms, seq, handle) tuples: tuple comparison runs in C, and seq is
        # unique, so the handle itself is never compared.
        self._queue: list[tuple[int, int, EventHandle]] = []
        # Events scheduled for the present while it is the present (after(0), at(<= now)): about
        # half of a run's events. They all come after every heap event due now -- those were
        # scheduled before the clock got here, so their seq is lower -- and among themselves in
        # the order they were scheduled, so a FIFO keeps (time_ms, seq) order without the heap.
        self._due: deque[EventHandle] = deque()
        self.events_run = 0
        self.events_max = events_max
        self._stopping = False

    def now(self) -> int:
        """Current virtual time in epoch milliseconds."""
        return self._now

    @property
    def now_ms(self) -> int:
        return self._now

    def at(self, time_ms: int, fn: Callable[..., Any], *args: Any) -> EventHandle:
        """Run ``fn(*args)`` at ``time_ms`` (never in the past: earlier times run now)."""
        time_ms = int(time_ms)
        self._seq += 1
        if time_ms <= self._now:
            handle = EventHandle(self._now, self._seq, fn, args)
            self._due.append(handle)
        else:
            handle = EventHandle(time_ms, self._seq, fn, args)
            heapq.heappush(self._queue, (time_ms, self._seq, handle))
        return handle

    def after(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> EventHandle:
        """Run ``fn(*args)`` ``delay_ms`` from now."""
        assert delay_ms >= 0, f"negative delay {delay_ms}"
        # at(now + delay) without the second call: most events are scheduled from here.
        self._seq += 1
        if not delay_ms:
            handle = EventHandle(self._now, self._seq, fn, args)
            self._due.append(handle)
            return handle
        time_ms = self._now + int(delay_ms)
        handle = EventHandle(time_ms, self._seq, fn, args)
        heapq.heappush(self._queue, (time_ms, self._seq, handle))
        return handle

    def next_time(self) -> int | None:
        """Time of the next live event, or None when the queue is empty."""
        while self._due and self._due[0].cancelled:
            self._due.popleft()
        while self._queue and self._queue[0][2].cancelled:
            heapq.heappop(self._queue)
        if self._due:
            return self._now  # a heap event cannot be earlier than the present
        return self._queue[0][0] if self._queue else None

    def pending(self) -> int:
        return (sum(1 for entry in self._queue if not entry[2].cancelled)
                + sum(1 for handle in self._due if not handle.cancelled))

    def _over_limit(self) -> SimulationLimitError:
        return SimulationLimitError(f"the simulation ran more than {self.events_max} events",
                                    hint="shorten the horizon or lower the message count")

    def step(self) -> bool:
        """Run the next event; False when there is none."""
        # run() owns the ordering rules (the FIFO of events due now against the heap); one event
        # of it is a step.
        before = self.events_run
        self.run(stop=_always)
        return self.events_run > before

    def stop(self) -> None:
        """Make :meth:`run` return after the event that is running (an event calls this)."""
        self._stopping = True

    def run(self, until_ms: int | None = None, stop: Callable[[], bool] | None = None) -> None:
        """Run events in order until the queue is empty, ``until_ms`` is passed, an event calls
        :meth:`stop`, or ``stop()`` (asked after every event) is true."""
        # The one place the ordering rules live (step() is one event of this loop). fire() is
        # inlined: this is the innermost loop of every simulation, and a run executes about ten
        # events per message.
        heappop = heapq.heappop
        horizon = until_ms if until_ms is not None else float("inf")
        due = self._due
        self._stopping = False
        while True:
            queue = self._queue  # jump() may replace the list: never hold it across events
            if due and not (queue and queue[0][0] <= self._now):
                handle = due.popleft()
                if handle.cancelled:
                    continue
                if self._now > horizon:  # a clock jump went past the horizon
                    due.appendleft(handle)
                    break
            elif queue:
                time_ms, _seq, handle = queue[0]
                if handle.cancelled:
                    heappop(queue)
                    continue
                if time_ms > horizon:
                    self._now = max(self._now, until_ms)
                    break
                heappop(queue)
                assert time_ms >= self._now, "time went backwards in the event queue"
                self._now = time_ms
            else:
                break
            self.events_run += 1
            if self.events_run > self.events_max:
                raise self._over_limit()
            fn, args = handle.fn, handle.args
            handle.fn = handle.args = None  # as fire(), inline
            fn(*args)
            if self._stopping or (stop is not None and stop()):
                break

    def jump(self, delta_ms: int) -> None:
        """Shift the clock by ``delta_ms`` (may be negative: a clock fault). Events keep their
        absolute times, so a backward jump delays them and a forward jump makes them due."""
        # Events due at the old present go back into the heap at their time, where the order
        # below decides; the FIFO holds only events scheduled at the new present.
        for handle in self._due:
            heapq.heappush(self._queue, (handle.time_ms, handle.seq, handle))
        self._due.clear()
        self._now = self._now + int(delta_ms)
        if self._queue and delta_ms > 0:
            # Events now in the past run at the new present, in their original order.
            entries = []
            for time_ms, seq, handle in self._queue:
                if time_ms < self._now:
                    handle.time_ms = time_ms = self._now
                entries.append((time_ms, seq, handle))
            heapq.heapify(entries)
            self._queue = entries
