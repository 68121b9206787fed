"""The progress throttle the CLI and the asset logs share."""

from __future__ import annotations

from assets.progress import Throttle


class _Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_report_goes_out_at_most_once_per_interval_counted_from_the_start():
    """Nothing within the first interval (a short job prints nothing), then one report per interval."""
    clock = _Clock()
    throttle = Throttle(1.0, clock)
    seen = []
    for now in (100.0, 100.5, 100.99, 101.0, 101.5, 101.99, 102.0, 105.0, 105.1):
        clock.now = now
        seen.append(throttle.ready())
    assert seen == [False, False, False, True, False, False, True, True, False]
