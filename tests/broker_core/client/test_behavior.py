"""The listener model: stable poison messages and seeded verdicts."""

import pytest

from broker_core.client.behavior import (
    CONSUME_SUCCESS,
    DLQ_REQUESTED,
    EXCEPTION,
    RECONSUME_LATER,
    RETURN_NULL,
    Behavior,
    Listener,
    is_poison,
    poison_score,
)
from broker_core.rng import Streams

KEYS = [f"7F0000010FA0{i:020X}" for i in range(4000)]
TIMEOUT_MS = 60_000


def test_poison_depends_on_the_key_only():
    """The poison score is a pure function of the key: the same in every group and under every seed."""
    assert [poison_score(k) for k in KEYS[:50]] == [poison_score(k) for k in KEYS[:50]]
    poisoned = [k for k in KEYS if is_poison(k, 0.05)]
    assert 0.03 < len(poisoned) / len(KEYS) < 0.07
    assert not any(is_poison(k, 0.0) for k in KEYS)
    assert set(poisoned) <= {k for k in KEYS if is_poison(k, 0.10)}  # a larger fraction is a superset


def test_poison_messages_always_fail_whatever_the_seed():
    """A poison message returns RECONSUME_LATER on every delivery, in every listener."""
    poison = next(k for k in KEYS if is_poison(k, 0.05))
    for seed in (1, 2, 3):
        listener = Listener(Behavior(poison_fraction=0.05), Streams(seed).stream("l"), TIMEOUT_MS)
        assert {listener.consume([poison]).status for _ in range(20)} == {RECONSUME_LATER}


def test_verdicts_follow_the_probabilities_and_the_seed():
    """Same seed, same verdicts; each status appears about as often as its probability."""
    behavior = Behavior(fail_probability=0.1, exception_probability=0.1,
                        return_null_probability=0.1)
    a = Listener(behavior, Streams(5).stream("l"), TIMEOUT_MS)
    b = Listener(behavior, Streams(5).stream("l"), TIMEOUT_MS)
    got = [a.consume([k]).status for k in KEYS]
    assert got == [b.consume([k]).status for k in KEYS]
    share = {s: got.count(s) / len(got) for s in (EXCEPTION, RETURN_NULL, RECONSUME_LATER)}
    # Checked in order (exception, null, fail), each one takes 10% of what is left.
    assert 0.08 < share[EXCEPTION] < 0.12
    assert 0.07 < share[RETURN_NULL] < 0.11 and 0.06 < share[RECONSUME_LATER] < 0.10
    assert got.count(CONSUME_SUCCESS) > 0.6 * len(got)


def test_a_hang_outlasts_two_timeouts():
    """A hanging delivery succeeds only after more than two consume timeouts."""
    listener = Listener(Behavior(hang_probability=1.0), Streams(1).stream("l"), TIMEOUT_MS)
    verdict = listener.consume([KEYS[0]])
    assert verdict.hung and verdict.status == CONSUME_SUCCESS
    assert verdict.duration_ms > 2 * TIMEOUT_MS


def test_a_dlq_probability_of_0_draws_nothing_and_turning_it_on_moves_no_other_verdict():
    """Without a DLQ request the verdicts are those drawn before the knob existed; with one, every
    delivery it does not take keeps the verdict it had without it."""
    behavior = Behavior(fail_probability=0.2, exception_probability=0.05, hang_probability=0.01)
    before = Listener(behavior, Streams(9).stream("l"), TIMEOUT_MS)
    off = Listener(behavior, Streams(9).stream("l"), TIMEOUT_MS, Streams(9).stream("dlq"))
    expected = [before.consume([k]) for k in KEYS]
    assert [off.consume([k]) for k in KEYS] == expected
    on = Listener(Behavior(fail_probability=0.2, exception_probability=0.05, hang_probability=0.01,
                           dlq_probability=0.1), Streams(9).stream("l"), TIMEOUT_MS, Streams(9).stream("dlq"))
    got = [on.consume([k]) for k in KEYS]
    requested = [i for i, v in enumerate(got) if v.status == DLQ_REQUESTED]
    assert 0.06 < len(requested) / len(KEYS) < 0.12
    assert all(got[i] == expected[i] for i in range(len(KEYS)) if i not in set(requested))
    # A hanging delivery succeeds, an exception is thrown before the listener could set a level.
    assert not any(expected[i].hung or expected[i].status == EXCEPTION for i in requested)


def test_a_dlq_request_needs_its_own_stream():
    """A listener that may request the DLQ draws it from a stream of its own."""
    with pytest.raises(AssertionError, match="dlq_rng"):
        Listener(Behavior(dlq_probability=0.5), Streams(1).stream("l"), TIMEOUT_MS)
