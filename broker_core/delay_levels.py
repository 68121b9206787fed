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
# The schedule topic gets one queue per level; RocketMQ's default table has 18.
DELAY_LEVELS_MAX = 256
# RocketMQ takes any long; a level longer than 30 days is a unit typed wrong, and no simulation
# runs that long (a scenario's horizon is at most 30 days).
DELAY_LEVEL_MS_MAX = 30 * 24 * 3600 * 1000


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """Delay in ms of each level (index 0 is level 1), RocketMQ's ``parseDelayLevel``.

    RocketMQ splits on a single space and reads each token as ``<long><unit>``: an empty token
    (a double, leading or trailing space), an unknown or uppercase unit, or a non-number fails
    the load. Any bad token raises :class:`BadInputError` whose message names the token; its
    ``where`` is the setting, so a caller that knows the file and line (the scenario loader)
    puts its own in front.
    """
    where = "message_delay_level"
    if not isinstance(text, str):
        raise BadInputError(f"must be a string such as \"1s 5s 10s\", got {type(text).__name__}",
                            where=where)
    levels: list[int] = []
    for index, token in enumerate(text.split(" "), 1):
        if token == "":
            raise BadInputError(f"token {index} is empty (two spaces, or a leading or trailing space)",
                                where=where)
        unit, number = token[-1], token[:-1]
        if unit not in DELAY_UNIT_MS:
            raise BadInputError(f"token {index} {token!r} does not end in a unit s, m, h or d (lowercase)",
                                where=where)
        # Long.parseLong: an optional sign, then ASCII digits only.
        digits = number[1:] if number[:1] in ("+", "-") else number
        if not digits or not digits.isascii() or not digits.isdigit():
            raise BadInputError(f"token {index} {token!r} is not a whole number of {unit}", where=where)
        delay_ms = int(number) * DELAY_UNIT_MS[unit]
        if delay_ms < 0:
            raise BadInputError(f"token {index} {token!r} is negative", where=where)
        if delay_ms > DELAY_LEVEL_MS_MAX:
            raise BadInputError(f"token {index} {token!r} is longer than {DELAY_LEVEL_MS_MAX} ms (30 days)",
                                where=where)
        levels.append(delay_ms)
    if len(levels) > DELAY_LEVELS_MAX:
        raise BadInputError(f"{len(levels)} levels; at most {DELAY_LEVELS_MAX}", where=where)
    return tuple(levels)


def clamp_level(level: int, max_level: int) -> int:
    """A level above the table's size is treated as the last level (asyncPutMessage)."""
    return max_level if level > max_level else level


def deliver_timestamp(levels: tuple[int, ...] | list[int], level: int, store_ts: int) -> int:
    """computeDeliverTimestamp: store time plus the level's delay, or plus 1 s for an unknown level."""
    if 1 <= level <= len(levels):
        return store_ts + levels[level - 1]
    return store_ts + SCHEDULE_UNKNOWN_LEVEL_DELAY_MS


def level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_level(queue_id: int) -> int:
    return queue_id + 1
