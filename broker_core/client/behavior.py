"""The listener model: what a consumer's message listener does with each delivery.

A scenario describes a group's listener by probabilities (fail, throw, return null, hang, send to
the DLQ) and a fraction of "poison" messages that fail every time. Poison is chosen by a stable hash of the
message key (UNIQ_KEY) alone, so the same messages are poison in every group and under every seed:
a poison message is the message's fault, not the consumer's luck.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

# ConsumeConcurrentlyStatus names as the consume_attempts table records them.
CONSUME_SUCCESS = "CONSUME_SUCCESS"
RECONSUME_LATER = "RECONSUME_LATER"
EXCEPTION = "EXCEPTION"  # the listener threw: RocketMQ treats it as RECONSUME_LATER
RETURN_NULL = "RETURN_NULL"  # the listener returned null: also RECONSUME_LATER
# The listener set ConsumeConcurrentlyContext.setDelayLevelWhenNextConsume(-1) and returned
# RECONSUME_LATER ("no retry, put into DLQ directly"): the send-back asks for delay level -1.
DLQ_REQUESTED = "DLQ_REQUESTED"
DLQ_REQUESTED_DELAY_LEVEL = -1  # the broker's send-back takes any level below 0 to the DLQ

# A hanging listener runs this many consume timeouts (plus its normal consume time): long enough
# that a cleanExpiredMsg pass (every consume timeout) finds it expired whatever its start phase,
# even one that starts exactly on a pass (expiry needs strictly more than the timeout).
HANG_CONSUME_TIMEOUTS = 2
VERDICTS_CACHED_MAX = 1024  # distinct (status, duration) pairs: a few per consume time
POISON_HASH_SCALE = 2**64  # the poison hash is a 64-bit value mapped onto [0, 1)


@dataclass
class Behavior:
    """How a group's listener behaves; every probability is per delivery, in [0, 1]."""

    consume_time_ms: int = 5
    fail_probability: float = 0.0  # returns RECONSUME_LATER
    exception_probability: float = 0.0  # throws
    return_null_probability: float = 0.0  # returns null
    hang_probability: float = 0.0  # runs past the consume timeout, then succeeds
    poison_fraction: float = 0.0  # share of messages (by key) that always return RECONSUME_LATER
    dlq_probability: float = 0.0  # returns RECONSUME_LATER with delay level -1 (concurrent push only)

    def __post_init__(self) -> None:
        assert self.consume_time_ms >= 0, f"consume_time_ms {self.consume_time_ms} < 0"
        for name in ("fail_probability", "exception_probability", "return_null_probability",
                     "hang_probability", "poison_fraction", "dlq_probability"):
            value = getattr(self, name)
            assert 0.0 <= value <= 1.0, f"{name} {value} outside [0, 1]"


@dataclass(frozen=True)
class Verdict:
    """One delivery's result: the status the listener produced and how long it ran."""

    status: str
    duration_ms: int
    hung: bool = False


def poison_score(message_key: str) -> float:
    """A stable number in [0, 1) for ``message_key``: the same on every run and in every group."""
    digest = hashlib.sha256(message_key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / POISON_HASH_SCALE


def is_poison(message_key: str, poison_fraction: float) -> bool:
    return poison_fraction > 0.0 and poison_score(message_key) < poison_fraction


class Listener:
    """Draws verdicts for deliveries from one seeded stream (one per consumer).

    The DLQ request draws from a stream of its own (``dlq_rng``), and only when its probability is
    above 0: a scenario without it draws exactly what it drew before the knob existed, and turning
    it on shifts none of the other verdicts' draws.
    """

    def __init__(self, behavior: Behavior, rng, consume_timeout_ms: int, dlq_rng=None):
        assert behavior.dlq_probability == 0.0 or dlq_rng is not None, \
            "a listener with a dlq_probability needs its own stream (dlq_rng)"
        self.behavior = behavior
        self.rng = rng
        self.dlq_rng = dlq_rng
        self.consume_timeout_ms = consume_timeout_ms

    def consume(self, message_keys: list[str]) -> Verdict:
        """The verdict for one listener call on a batch of messages (keyed ``message_keys``).

        A batch fails as a whole (the listener returns one status); it is poisoned when any of
        its messages is.
        """
        b = self.behavior
        # Always draw the same number of values per delivery, so changing one probability never
        # shifts the stream under the others.
        u_hang, u_exc, u_null, u_fail = (self.rng.random(), self.rng.random(),
                                         self.rng.random(), self.rng.random())
        # One draw per delivery from the DLQ stream whatever the other outcomes, so its decisions
        # do not depend on the other probabilities either.
        u_dlq = self.dlq_rng.random() if b.dlq_probability > 0.0 else 1.0
        if u_hang < b.hang_probability:
            hang_ms = HANG_CONSUME_TIMEOUTS * self.consume_timeout_ms + b.consume_time_ms
            return _verdict(CONSUME_SUCCESS, hang_ms, True)
        duration = b.consume_time_ms
        if b.poison_fraction > 0.0 and any(is_poison(key, b.poison_fraction) for key in message_keys):
            return _verdict(RECONSUME_LATER, duration)
        if u_exc < b.exception_probability:
            return _verdict(EXCEPTION, duration)
        if u_null < b.return_null_probability:
            return _verdict(RETURN_NULL, duration)
        if u_dlq < b.dlq_probability:
            return _verdict(DLQ_REQUESTED, duration)
        if u_fail < b.fail_probability:
            return _verdict(RECONSUME_LATER, duration)
        return _verdict(CONSUME_SUCCESS, duration)


@lru_cache(maxsize=VERDICTS_CACHED_MAX)
def _verdict(status: str, duration_ms: int, hung: bool = False) -> Verdict:
    """Verdicts are immutable and a group has a handful: one object per distinct value."""
    return Verdict(status, duration_ms, hung)
