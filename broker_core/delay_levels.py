"""The delay-level table: ``messageDelayLevel`` parsing and deliver times (ScheduleMessageService, §4.1).

Level ``n`` (1-based) delays by the n-th token of the table; the schedule topic's queue id of a
level is ``n - 1``. Both the store (the consume-queue tags code of a SCHEDULE_TOPIC_XXXX record)
and the schedule service read the same table, so it lives here rather than in either of them.
"""

from __future__ import annotations

from broker_core.constants import SCHEDULE_UNKNOWN_LEVEL_DELAY_MS
from broker_core.errors import BadInputError

# parseDelayLevel's unit table: lowercase only, as RocketMQ's HashMap lookup of the last char.
DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# A level's delay is a Java long; anything larger cannot be written by a broker.
DELAY_MS_MAX = 2**63 - 1


def parse_delay_levels(text: str) -> list[int]:
    """Delay in ms of each level (index 0 is level 1); any bad token raises BadInputError naming it.

    RocketMQ splits on a single space and reads each token as ``<long><unit>``; an empty token
    (a double or leading space), an unknown or uppercase unit, or a non-number fails the load.
    """
    if not isinstance(text, str):
        raise BadInputError(f"message_delay_level must be a string, got {type(text).__name__}",
                            where="message_delay_level")
    levels: list[int] = []
    for index, token in enumerate(text.split(" "), 1):
        where = f"message_delay_level token {index}"
        if len(token) < 2:
            raise BadInputError(f"bad delay level token {token!r}: expected <number><s|m|h|d>",
                                where=where)
        unit = DELAY_UNIT_MS.get(token[-1])
        number = token[:-1]
        # Long.parseLong accepts an optional sign and ASCII digits only.
        digits = number[1:] if number[:1] in "+-" else number
        if unit is None or not digits or not digits.isascii() or not digits.isdigit():
            raise BadInputError(f"bad delay level token {token!r}: expected <number><s|m|h|d>",
                                where=where)
        delay_ms = int(number) * unit
        if not 0 <= delay_ms <= DELAY_MS_MAX:
            raise BadInputError(f"delay level token {token!r} is out of range", where=where)
        levels.append(delay_ms)
    return levels


def clamp_level(level: int, max_level: int) -> int:
    """A level above the table's size is treated as the last level (asyncPutMessage)."""
    return max_level if level > max_level else level


def deliver_timestamp(levels: list[int], level: int, store_ts: int) -> int:
    """computeDeliverTimestamp: store time plus the level's delay, or plus 1 s for an unknown level."""
    if 1 <= level <= len(levels):
        return store_ts + levels[level - 1]
    return store_ts + SCHEDULE_UNKNOWN_LEVEL_DELAY_MS


def level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_level(queue_id: int) -> int:
    return queue_id + 1
