"""The 5.x put hook for timer messages (``HookUtils.handleScheduleMessage`` @5.3.3).

A message carrying ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (the client's
``setDelayTimeSec`` / ``setDelayTimeMs`` / ``setDeliverTimeMs``) whose deliver time is ahead is
stored in ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (the deliver time rounded down to
the timer's precision), ``REAL_TOPIC`` and ``REAL_QID``; a deliver time already past leaves it in
its own topic. A message with a delay level loses its timer properties instead (the level wins).
Only brokers with the 5.x rules run this (``StoreConfig.timer_wheel``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker_core.constants import (
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
    PROP_TIMER_OUT_MS,
    TIMER_TOPIC,
)
from broker_core.message import PROP_REAL_QID, PROP_REAL_TOPIC, JavaHashMap

# The client's inputs, in the order transformTimerMessage reads them.
TIMER_INPUT_PROPERTIES = (PROP_TIMER_DELAY_SEC, PROP_TIMER_DELAY_MS, PROP_TIMER_DELIVER_MS)
_JAVA_LONG_RE = re.compile(r"[+-]?[0-9]+")
_JAVA_LONG_MIN, _JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1


def java_parse_long(text: str) -> int | None:
    """``Long.parseLong``: an optional sign and ASCII digits within int64, else None."""
    if not text.isascii() or not _JAVA_LONG_RE.fullmatch(text):
        return None
    value = int(text)
    return value if _JAVA_LONG_MIN <= value <= _JAVA_LONG_MAX else None


def has_timer_input(props) -> bool:
    return any(props.get(k) is not None for k in TIMER_INPUT_PROPERTIES)


def drop_timer_input(props: JavaHashMap) -> None:
    """``checkIfTimerMessage`` with a delay level: the timer properties are cleared from the map."""
    for key in TIMER_INPUT_PROPERTIES:
        props.remove(key)


@dataclass(frozen=True)
class TimerPut:
    """Where a timer message goes: ``refused`` names why it is illegal (WHEEL_TIMER_MSG_ILLEGAL)."""

    topic: str
    queue_id: int
    refused: str | None = None
    out_ms: int | None = None


def timer_rewrite(props: JavaHashMap, topic: str, queue_id: int, now_ms: int, *, precision_ms: int,
                  max_delay_ms: int) -> TimerPut:
    """``transformTimerMessage`` on the in-memory map (changed in place when the timer applies).

    The caller has checked: no delay level, no ``TIMER_OUT_MS``, not the timer topic, a timer
    input present."""
    assert props.get(PROP_TIMER_OUT_MS) is None and topic != TIMER_TOPIC
    sec, ms, deliver = (props.get(k) for k in TIMER_INPUT_PROPERTIES)
    if sec is not None:
        value = java_parse_long(sec)
        deliver_ms = None if value is None else now_ms + value * 1000
    elif ms is not None:
        value = java_parse_long(ms)
        deliver_ms = None if value is None else now_ms + value
    else:
        deliver_ms = java_parse_long(deliver)
    if deliver_ms is None:
        return TimerPut(topic, queue_id, refused="a timer property is not a number")
    if deliver_ms <= now_ms:
        if props.get(PROP_TIMER_DEL_UNIQKEY) is not None:
            return TimerPut(topic, queue_id, refused="a recall of a timer already due")
        return TimerPut(topic, queue_id)  # already due: stored in its own topic, as it is
    if deliver_ms - now_ms > max_delay_ms:
        return TimerPut(topic, queue_id, refused=f"the timer is more than {max_delay_ms} ms ahead")
    # An aligned time is moved one slot earlier; any other is rounded down to its slot.
    if deliver_ms % precision_ms == 0:
        deliver_ms -= precision_ms
    else:
        deliver_ms = deliver_ms // precision_ms * precision_ms
    props.put(PROP_TIMER_OUT_MS, str(deliver_ms))
    props.put(PROP_REAL_TOPIC, topic)
    props.put(PROP_REAL_QID, str(queue_id))
    return TimerPut(TIMER_TOPIC, 0, out_ms=deliver_ms)
