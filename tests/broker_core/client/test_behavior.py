"""The listener model: stable poison messages and seeded verdicts."""

from broker_core.client.behavior import (
    CONSUME_SUCCESS,
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
