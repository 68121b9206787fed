"""A gRPC push consumer's retry delays: the group retry policy as the 5.x Java client reads it.

The proxy hands the client the group's ``groupRetryPolicy`` (``subscriptionGroup.json``), and the
client's ``ProcessQueueImpl.nackMessage`` changes a failed message's invisible time to
``retryPolicy.getNextAttemptDelay(attempt)``, ``attempt`` being the delivery attempt (reconsume
times + 1). What a real 5.3.3 broker and proxy with ``rocketmq-client-java`` 5.0.7 did
(docs/rocketmq-5x.md "gRPC PushConsumer and the group retry policies: confirmed"):

* **customized**: the attempt-th entry of the table (the last one beyond it); with no table set,
  the broker's delay levels ``1s 5s 10s 30s 1m …`` (``CustomizedRetryPolicy``);
* **exponential**: ``initial × multiplier^(attempt − 1)``, capped at ``max``
  (``ExponentialBackoffRetryPolicy``).

This is not the broker's ``RetryPolicy.nextDelayDuration(reconsumeTimes)``, which reads a
customized table at entry reconsume times + 2; the proxy uses that one only when it gives up
renewing a message after 3 h, which the model does not play.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.constants import MESSAGE_DELAY_LEVEL_DEFAULT
from broker_core.delay_levels import parse_delay_levels

CUSTOMIZED = "customized"
EXPONENTIAL = "exponential"
RETRY_POLICY_TYPES = (CUSTOMIZED, EXPONENTIAL)
# CustomizedRetryPolicy's default table: the broker's default delay levels.
CUSTOMIZED_DELAYS_MS_DEFAULT = parse_delay_levels(MESSAGE_DELAY_LEVEL_DEFAULT)
# A change of invisible time is bounded by the model to a day (broker_core.broker.pop).
RETRY_POLICY_DELAY_MS_MAX = 86_400_000
RETRY_POLICY_MULTIPLIER_MAX = 100.0  # beyond this the cap is reached at the second attempt anyway


@dataclass(frozen=True)
class RetryPolicy:
    """A group retry policy: a customized table of delays, or an exponential backoff."""

    type: str = CUSTOMIZED
    delays_ms: tuple[int, ...] = CUSTOMIZED_DELAYS_MS_DEFAULT
    # Exponential only; a scenario gives all three (the model does not assume the broker's defaults).
    initial_ms: int = 1_000
    max_ms: int = 1_000
    multiplier: float = 1.0

    def __post_init__(self) -> None:
        assert self.type in RETRY_POLICY_TYPES, f"retry policy type {self.type!r}"
        assert self.delays_ms and all(0 < d <= RETRY_POLICY_DELAY_MS_MAX for d in self.delays_ms), self.delays_ms
        assert 0 < self.initial_ms <= self.max_ms <= RETRY_POLICY_DELAY_MS_MAX, (self.initial_ms, self.max_ms)
        assert 1.0 <= self.multiplier <= RETRY_POLICY_MULTIPLIER_MAX, f"multiplier {self.multiplier}"

    def next_attempt_delay_ms(self, attempt: int) -> int:
        """The invisible time the client asks for after delivery attempt ``attempt`` (1, 2, …) failed."""
        assert attempt >= 1, f"delivery attempts count from 1, got {attempt}"
        if self.type == CUSTOMIZED:
            return self.delays_ms[min(attempt, len(self.delays_ms)) - 1]
        # Java: Math.min(initial * Math.pow(multiplier, attempt - 1), max) in nanoseconds; the
        # exponent is capped so that a large attempt cannot overflow a float.
        exponent = min(attempt - 1, 1_000)
        delay = min(self.initial_ms * self.multiplier ** exponent, float(self.max_ms))
        return int(delay)
