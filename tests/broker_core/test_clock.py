"""The virtual clock runs events in (time, sequence) order and never reads the wall clock."""

import gc
import weakref

import pytest

from broker_core.clock import Simulator
from broker_core.errors import SimulationLimitError


def test_events_run_in_time_then_schedule_order():
    """Events at the same millisecond run in the order they were scheduled."""
    sim = Simulator(start_ms=1000)
    seen = []
    sim.at(1005, seen.append, "b")
    sim.at(1001, seen.append, "a")
    sim.at(1005, seen.append, "c")
    sim.after(0, seen.append, "now")
    sim.run()
    assert seen == ["now", "a", "b", "c"]
    assert sim.now() == 1005


def test_cancelled_events_do_not_run():
    """A cancelled event is skipped and does not move the clock."""
    sim = Simulator()
    seen = []
    handle = sim.at(50, seen.append, "x")
    sim.at(10, seen.append, "y")
    handle.cancel()
    sim.run()
    assert seen == ["y"] and sim.now() == 10


def test_run_until_stops_at_the_horizon():
    """run(until_ms) leaves later events queued and sets the clock to the horizon."""
    sim = Simulator()
    seen = []
    sim.at(10, seen.append, 1)
    sim.at(30, seen.append, 2)
    sim.run(until_ms=20)
    assert seen == [1] and sim.now() == 20 and sim.next_time() == 30


def test_an_event_that_calls_stop_is_the_last_one_run():
    """An event calling stop() ends run() after it; the events after it stay queued for the next run()."""
    sim = Simulator()
    seen = []
    sim.at(10, seen.append, 1)
    sim.at(10, sim.stop)
    sim.at(10, seen.append, 2)
    sim.at(20, seen.append, 3)
    sim.run()
    assert seen == [1] and sim.now() == 10
    sim.run()
    assert seen == [1, 2, 3] and sim.now() == 20


def test_event_bound_is_an_explicit_outcome():
    """A run that exceeds its event bound stops with SimulationLimitError, never hangs."""
    sim = Simulator(events_max=100)

    def forever():
        sim.after(1, forever)

    sim.after(0, forever)
    with pytest.raises(SimulationLimitError):
        sim.run()


def test_forward_jump_makes_past_events_due_in_order():
    """After a forward clock jump, overdue events run at the new present in their old order."""
    sim = Simulator()
    seen = []
    sim.at(100, seen.append, "a")
    sim.at(200, seen.append, "b")
    sim.jump(500)
    sim.run()
    assert seen == ["a", "b"] and sim.now() == 500


@pytest.mark.parametrize("how", ["run", "step"])
def test_events_scheduled_for_the_present_run_after_those_already_due(how):
    """after(0) and at(<= now) run after every event that was due at that time before, in the order scheduled."""
    sim = Simulator()
    seen = []

    def first():
        seen.append("first")
        sim.after(0, seen.append, "zero-delay")
        sim.at(3, seen.append, "in the past")
        sim.after(0, lambda: (seen.append("nested"), sim.after(0, seen.append, "nested's own")))

    sim.at(10, first)
    sim.at(10, seen.append, "second")
    sim.at(11, seen.append, "later")
    if how == "run":
        sim.run()
    else:
        while sim.step():
            pass
    assert seen == ["first", "second", "zero-delay", "in the past", "nested", "nested's own", "later"]
    assert sim.now() == 11


def test_a_jump_orders_events_due_now_with_the_overdue_ones_by_when_they_were_scheduled():
    """After a forward jump, an after(0) event from before it runs where its scheduling order puts it."""
    sim = Simulator()
    seen = []
    sim.at(50, seen.append, "scheduled first, due at 50")

    def jumper():
        sim.after(0, seen.append, "scheduled at 10 for 10")
        sim.at(60, seen.append, "scheduled at 10 for 60")
        sim.jump(100)
        sim.after(0, seen.append, "scheduled at 110 for 110")

    sim.at(10, jumper)
    sim.run()
    assert seen == ["scheduled first, due at 50", "scheduled at 10 for 10", "scheduled at 10 for 60",
                    "scheduled at 110 for 110"]
    assert sim.now() == 110


def test_a_jump_past_the_horizon_leaves_the_events_due_then_queued():
    """Events due at a present past run()'s horizon wait for the next run()."""
    sim = Simulator()
    seen = []

    def jumper():
        sim.jump(1_000)
        sim.after(0, seen.append, "after the jump")

    sim.at(10, jumper)
    sim.run(until_ms=500)
    assert seen == [] and sim.pending() == 1 and sim.next_time() == 1_010
    sim.run()
    assert seen == ["after the jump"]


class _Waiter:
    """Keeps the handle of its own event, whose arguments hold the waiter: a cycle until it runs."""

    def __init__(self, sim: Simulator):
        self.done = False
        self.handle = sim.after(5, self.finish, self)

    def finish(self, me) -> None:
        assert me is self
        self.done = True


@pytest.mark.parametrize("how", ["run", "step"])
def test_a_run_event_lets_go_of_its_callback_so_no_cycle_outlives_it(how):
    """Once an event has run, its handle holds neither callback nor arguments: nothing waits for the garbage collector."""
    sim = Simulator()
    waiter = _Waiter(sim)
    gone = weakref.ref(waiter)
    sim.run() if how == "run" else sim.step()
    assert waiter.done and waiter.handle.fn is None and waiter.handle.args is None
    enabled = gc.isenabled()
    gc.disable()
    try:
        del waiter
        assert gone() is None, "the waiter was kept alive by a reference cycle"
    finally:
        if enabled:
            gc.enable()
