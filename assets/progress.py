"""How often a long job may report progress: one throttle for the CLI's lines and the asset logs.

A report is let through at most once per interval of wall time, counted from when the throttle
was made, so a job that finishes within one interval prints nothing and a long one prints a steady,
readable trickle. The broker model reports on simulated time and record counts (it never reads
the wall clock); whoever shows the reports to a person throttles them here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A terminal line may be redrawn this often; a log line (Dagster's event log) is kept rarer, since
# every line is stored.
TERMINAL_PROGRESS_INTERVAL_S = 1.0
LOG_PROGRESS_INTERVAL_S = 5.0


class Throttle:
    """``ready()`` is true at most once per ``interval_s`` seconds of ``clock``."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic):
        assert interval_s > 0, f"a throttle needs a positive interval, got {interval_s}"
        self._interval_s = interval_s
        self._clock = clock
        self._last = clock()

    def ready(self) -> bool:
        """True when a report may go out now (and the next one waits a whole interval)."""
        now = self._clock()
        if now - self._last < self._interval_s:
            return False
        self._last = now
        return True
