"""A gRPC push consumer's retry delays are its client's reading of the group retry policy
(docs/rocketmq-5x.md "gRPC PushConsumer and the group retry policies: confirmed")."""

from __future__ import annotations

import pytest

from broker_core.client.pop_consumer import PopSettings
from broker_core.client.retry_policy import CUSTOMIZED, EXPONENTIAL, RetryPolicy


def test_a_customized_policy_gives_the_attempt_th_entry_then_the_last():
    """Customized: attempt a waits the a-th entry of the table, the last one beyond it (push-custom:
    2000, 1000, 3000 ms)."""
    policy = RetryPolicy(CUSTOMIZED, delays_ms=(2000, 1000, 3000))
    assert [policy.next_attempt_delay_ms(a) for a in (1, 2, 3, 4, 10)] == [2000, 1000, 3000, 3000, 3000]


def test_the_default_policy_is_the_delay_level_table_from_its_first_entry():
    """No policy set: the delay levels from 1 s (push-default: 1000, 5000, 10000 ms), not the
    broker's nextDelayDuration (10 s, 30 s, 1 min), and 2 h from the 18th attempt on."""
    policy = RetryPolicy()
    assert [policy.next_attempt_delay_ms(a) for a in (1, 2, 3, 4, 5)] == [1000, 5000, 10000, 30000, 60000]
    assert policy.next_attempt_delay_ms(18) == policy.next_attempt_delay_ms(100) == 7_200_000


def test_an_exponential_policy_multiplies_from_initial_and_is_capped_at_max():
    """Exponential: initial x multiplier^(a-1), capped at max (push-exp: 1000, 2000, 3000, 3000)."""
    policy = RetryPolicy(EXPONENTIAL, initial_ms=1000, max_ms=3000, multiplier=2.0)
    assert [policy.next_attempt_delay_ms(a) for a in (1, 2, 3, 4, 5000)] == [1000, 2000, 3000, 3000, 3000]
    assert RetryPolicy(EXPONENTIAL, initial_ms=1000, max_ms=60_000, multiplier=1.5).next_attempt_delay_ms(3) == 2250


def test_a_push_consumers_failure_delay_is_the_policy_at_reconsume_times_plus_one():
    """The delivery attempt is reconsume times + 1; the remoting client's table is read by reconsume
    times, and a SimpleConsumer has no delay of its own."""
    push = PopSettings("g", ("T",), client="grpc-push",
                       retry_policy=RetryPolicy(CUSTOMIZED, delays_ms=(2000, 1000, 3000)))
    assert [push.delay_ms(rt) for rt in (0, 1, 2)] == [2000, 1000, 3000]
    remoting = PopSettings("g", ("T",), retry_delays_ms=(2000, 1000, 3000))
    assert [remoting.delay_ms(rt) for rt in (0, 1, 2)] == [2000, 1000, 3000]
    assert push.grpc and not remoting.grpc


def test_a_policy_outside_its_bounds_is_a_programmer_error():
    """Attempts count from 1; a policy with no delay or a max below its initial is refused."""
    with pytest.raises(AssertionError):
        RetryPolicy().next_attempt_delay_ms(0)
    with pytest.raises(AssertionError):
        RetryPolicy(CUSTOMIZED, delays_ms=())
    with pytest.raises(AssertionError):
        RetryPolicy(EXPONENTIAL, initial_ms=2000, max_ms=1000, multiplier=2.0)
