"""The listener model: what a consumer's message listener does with each delivery.

A scenario describes a group's listener by probabilities (fail, throw, return null, hang) and a
fraction of "poison" messages that fail every time. Poison is chosen by a stable hash of the
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
# The listener returned RECONSUME_LATER with context.setDelayLevelWhenNextConsume(-1): the client's
# send-back asks for the DLQ outright.
DLQ_REQUESTED = "DLQ_REQUESTED"

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

    def __post_init__(self) -> None:
        assert self.consume_time_ms >= 0, f"consume_time_ms {self.consume_time_ms} < 0"
        for name in ("fail_probability", "exception_probability", "return_null_probability",
                     "hang_probability", "poison_fraction"):
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
    """Draws verdicts for deliveries from one seeded stream (one per consumer)."""

    def __init__(self, behavior: Behavior, rng, consume_timeout_ms: int):
        self.behavior = behavior
        self.rng = rng
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
        if u_fail < b.fail_probability:
            return _verdict(RECONSUME_LATER, duration)
        return _verdict(CONSUME_SUCCESS, duration)


@lru_cache(maxsize=VERDICTS_CACHED_MAX)
def _verdict(status: str, duration_ms: int, hung: bool = False) -> Verdict:
    """Verdicts are immutable and a group has a handful: one object per distinct value."""
    return Verdict(status, duration_ms, hung)
