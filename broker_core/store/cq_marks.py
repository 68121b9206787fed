"""Where each consume queue's last import stopped, so that the next import reads only its new units.

A consume queue only grows at its end (ConsumeQueue.putMessagePositionInfo appends one 20-byte
unit per dispatched record, into files preallocated with zeros), so an import that remembers, per
queue, the file and position of the first unit it did not read can start there the next time and
read nothing it read before. What the check of the units found before that point (units that
start below the log's first offset and end after it) is remembered with the mark; so are a
schedule queue's last units, from which the delay of its level is read (``schedule_delays``).

A live import's mark stands at the last unit it read, not after it: a broker may be writing that
unit, and the next import reads it again (the rows it gave are provisional, replaced then).

The marks are only valid while the log starts where it did: retention moving the first offset
changes which units are "below the log", so the queues are then read whole, as they are when a
marked file is gone or the last import found units pointing past its valid log (those are read
again each time until the log reaches them, and the rows they would add are not known yet).

Reads from a mark are exactly as long as the commit log says: every record names its queue and its
queue offset, so the highest queue offset the records of the log hold (up to where the scan
stopped; :attr:`QueueMark.expected`, kept from import to import) is the last unit a queue can have.
A queue is read from its mark up to that unit and no further (:func:`exact_pieces`): a queue no new
record names is not opened, and nothing past a queue's last unit is read. A queue whose units are
behind its records (a live broker dispatching on) is read on from where its units end by the next
import. Two kinds of queue are read as before, to the first invalid unit (:func:`piece_sizes`:
growing pieces, never a megabyte of the zeros that follow the last unit): a ``%LMQ%`` queue
(multi-dispatch writes its units from other topics' records) and a queue new since the last import.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from broker_core import names
from broker_core.constants import CQ_UNIT_SIZE_BYTES

# The last units of a schedule queue kept with its mark: schedule_delays reads a level's delay from
# the last unit (of up to this many, from the end) that names a whole SCHEDULE record of the log.
TAIL_UNITS = 8
# A queue is read from its mark in pieces of this many units at first, doubling up to the reader's
# chunk size: most queues gained a few units, or none, since the last import.
FIRST_PIECE_UNITS = 2


def queue_key(topic: str, queue_id: int) -> str:
    """How a queue is named in the import state."""
    return f"{topic}/{queue_id}"


def piece_sizes(first_bytes: int, chunk_max_bytes: int) -> Iterator[int]:
    """Read sizes for a queue file: ``first_bytes``, then small ones doubling up to
    ``chunk_max_bytes`` (whole units each)."""
    yield min(first_bytes, chunk_max_bytes)
    size = FIRST_PIECE_UNITS * CQ_UNIT_SIZE_BYTES
    while size < chunk_max_bytes:
        yield size
        size *= 2
    while True:
        yield chunk_max_bytes


def first_piece_bytes(expected_units: int | None, unit_at: int) -> int:
    """The first read of a queue read to its end from unit ``unit_at`` (``expected_units``: the
    units the log's records name, None when not known): up to the unit after the last one they
    name, else :data:`FIRST_PIECE_UNITS`."""
    if expected_units is None:
        return FIRST_PIECE_UNITS * CQ_UNIT_SIZE_BYTES
    return (max(expected_units - unit_at, 0) + 1) * CQ_UNIT_SIZE_BYTES


def exact_pieces(expected_units: int, unit_at: int, chunk_max_bytes: int) -> Iterator[int]:
    """Read sizes for a queue file read from unit ``unit_at`` up to unit ``expected_units`` (not
    included) and no further: the units the log's records name, in chunks of at most
    ``chunk_max_bytes`` (a whole number of units)."""
    left = max(expected_units - unit_at, 0) * CQ_UNIT_SIZE_BYTES
    while left > 0:
        size = min(left, chunk_max_bytes)
        yield size
        left -= size


def reads_exactly(topic: str) -> bool:
    """Whether a queue's units are all named by records of its own topic (so it is read exactly as
    far as they say): every queue but a multi-dispatch ``%LMQ%`` one."""
    return not names.is_lmq(topic)


@dataclass
class QueueMark:
    """A queue read up to ``file`` at byte ``position`` (the first unit not read yet).

    ``across``: units that start below the log's first offset and end after it, found before the
    mark: ``[count, file (as problems name it), position, queue_offset, phys_offset, size]`` of the
    first one. ``tail``: a schedule queue's last :data:`TAIL_UNITS` units in ``tail_file`` (the
    last file holding units), as ``[queue_offset, phys_offset, size, tags_code]``. ``expected``:
    the highest queue offset + 1 the log's records held for the queue up to where the scan stopped
    (None: not known, the queue is read to its end).
    """

    file: str
    position: int
    across: list | None = None
    tail_file: str | None = None
    tail: list[list[int]] = field(default_factory=list)
    expected: int | None = None

    def to_json(self) -> dict:
        return {"file": self.file, "position": self.position, "across": self.across,
                "tail_file": self.tail_file, "tail": self.tail, "expected": self.expected}

    @classmethod
    def from_json(cls, doc: dict) -> QueueMark:
        return cls(doc["file"], doc["position"], doc["across"], doc["tail_file"], [list(u) for u in doc["tail"]],
                   doc.get("expected"))


@dataclass
class QueueWalk:
    """Where a walk of one queue has got to: the file and position after the last valid unit read,
    and the file and position of that unit (None: none was read)."""

    file: str | None = None
    position: int = 0
    last: tuple[str, int] | None = None


def held_back(walk: QueueWalk, live: bool) -> tuple[str, int] | None:
    """Where a live import's mark of a queue stands: at the last unit it read, which is read again
    by the next import (a broker may have been writing it: a unit half written looks whole when its
    last bytes are still zeros of a valid value). None: at the walk's end."""
    return walk.last if live and walk.last is not None else None


def without_last_unit(pieces: list[tuple]) -> list[tuple]:
    """The pieces of a queue read without their last unit (the one a live import reads again)."""
    if not pieces:
        return pieces
    path, pos, data = pieces[-1]
    rest = data[:-CQ_UNIT_SIZE_BYTES]
    return pieces[:-1] + ([(path, pos, rest)] if rest else [])
