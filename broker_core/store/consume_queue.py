"""Consume queues: per topic and queue id, a file queue of 20-byte position units (§2).

Unit ``n`` (the message's queue offset) sits at logical byte ``n * 20`` and holds the commit-log
physical offset, the record's total size and its tags code. Directory:
``<root>/consumequeue/<topic>/<queueId>/``. A topic is validated with ``names.validate_topic``
before any path is built from it, and the resolved path is checked to stay under the root.
"""

from __future__ import annotations

import struct
from itertools import starmap
from pathlib import Path

from broker_core import names
from broker_core.constants import CQ_UNIT_SIZE_BYTES, RECOVER_NORMAL_FILES_FROM_END
from broker_core.errors import InvalidNameError
from broker_core.store.mapped_file import MappedFileQueue

CQ_UNIT = struct.Struct(">qiq")  # physOffset, size, tagsCode
assert CQ_UNIT.size == CQ_UNIT_SIZE_BYTES
CONSUME_QUEUE_DIR_NAME = "consumequeue"
# fillPreBlank unit: (0, Integer.MAX_VALUE, 0) marks queue slots below the first real unit.
PRE_BLANK_UNIT_SIZE = 2**31 - 1
_PRE_BLANK = CQ_UNIT.pack(0, PRE_BLANK_UNIT_SIZE, 0)
# correct_min_offset reads this many units at a time (bounded memory; usually the first one decides).
CORRECT_MIN_OFFSET_BATCH_UNITS = 1024
pack_cq_unit = CQ_UNIT.pack


def consume_queue_dir(root: Path, topic: str, queue_id: int) -> Path:
    """``<root>/consumequeue/<topic>/<queueId>``, refused for any name that could leave the root."""
    names.validate_topic(topic)
    assert isinstance(queue_id, int) and queue_id >= 0, f"bad queue id {queue_id!r}"
    base = (Path(root) / CONSUME_QUEUE_DIR_NAME).resolve()
    path = (base / topic / str(queue_id)).resolve()
    assert path.parent.parent == base, f"consume queue path {path} escapes {base}"
    return path


class ConsumeQueue:
    """One topic/queue's position index (ConsumeQueue)."""

    def __init__(self, root: Path, topic: str, queue_id: int, units_per_file: int):
        assert units_per_file > 0, f"units per file must be positive, got {units_per_file}"
        self.topic = topic
        self.queue_id = queue_id
        self.directory = consume_queue_dir(root, topic, queue_id)
        self.files = MappedFileQueue(self.directory, units_per_file * CQ_UNIT_SIZE_BYTES)
        # offset + size of the last unit: the dispatch guard against building a unit twice.
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    # --- loading and recovery -----------------------------------------------------------------

    def load(self) -> None:
        self.files.load()

    def recover(self) -> None:
        """ConsumeQueue.recover: from the third-last file, keep units up to the first invalid one."""
        files = self.files.files
        if not files:
            return
        index = max(0, len(files) - RECOVER_NORMAL_FILES_FROM_END)
        # RocketMQ trusts every file before the third-last. Here a crash loses unflushed units,
        # so the last files may hold none at all: step back to a file whose first unit is valid,
        # so that the scan finds the true end of the queue.
        while index > 0 and not self._first_unit_valid(files[index]):
            index -= 1
        valid_end = files[index].start
        max_physic = -1
        for mapped in files[index:]:
            data = self.files.read_file_bytes(mapped)
            pos = 0
            ended = False
            while pos < len(data):
                offset, size, _tags = CQ_UNIT.unpack_from(data, pos)
                if offset >= 0 and size > 0:
                    pos += CQ_UNIT_SIZE_BYTES
                    if size != PRE_BLANK_UNIT_SIZE:
                        max_physic = offset + size
                else:
                    ended = True
                    break
            valid_end = mapped.start + pos
            if ended:
                break
        self._truncate_positions(valid_end)
        self._recover_min_logic_offset()
        if max_physic < 0:
            # The scanned files held no unit (empty files left by a crash). RocketMQ would leave
            # the guard at -1 and dispatch every record again as a duplicate unit; the guard is
            # the end of the last unit before them.
            max_physic = self._unit_end_before(valid_end)
        self.max_physic_offset = max_physic

    def _first_unit_valid(self, mapped) -> bool:
        offset, size, _tags = CQ_UNIT.unpack(self.files.read(mapped.start, CQ_UNIT_SIZE_BYTES))
        return offset >= 0 and size > 0

    def _truncate_positions(self, logical_end: int) -> None:
        """truncateDirtyFiles on the queue, and the units past the new end are zeroed.

        RocketMQ leaves them in place for later appends to overwrite; if fewer units follow before
        the next restart, its recovery would read the stale ones as valid. Zeroing them keeps a
        later recovery from resurrecting units a truncation removed; the live units are the same.
        """
        self.files.truncate_to(logical_end)
        if self.files.files:
            last = self.files.files[-1]
            self.files.zero_range(logical_end, last.end)

    def _recover_min_logic_offset(self) -> None:
        """The first unit that is not a pre-blank filler is the queue's minimum."""
        first = self.files.files[0] if self.files.files else None
        self.min_logic_offset = first.start if first else 0
        if first is None:
            return
        data = self.files.read(first.start, first.size)
        pos = 0
        while pos + CQ_UNIT_SIZE_BYTES <= len(data):
            offset, size, _tags = CQ_UNIT.unpack_from(data, pos)
            if size != PRE_BLANK_UNIT_SIZE or offset != 0:
                break
            pos += CQ_UNIT_SIZE_BYTES
        self.min_logic_offset = first.start + pos

    def correct_min_offset(self, phys_min_offset: int) -> None:
        """correctMinOffset: the queue's minimum moves to its first unit whose record is at or
        after ``phys_min_offset``, the commit log's first offset.

        The units before it name records whose commit-log files retention deleted; RocketMQ leaves
        them in the file and only moves the minimum. 4.9.4 looks in the queue's first file only
        (CleanConsumeQueueService deletes files whose units are all below); here every unit is
        looked at, and a queue whose units all point below is empty (min = max), as in 5.x.
        """
        index = self.min_offset
        while index < self.max_offset:
            units = self.units(index, CORRECT_MIN_OFFSET_BATCH_UNITS)
            if not units:
                break
            for phys, size, _tags in units:
                if phys >= phys_min_offset and size != PRE_BLANK_UNIT_SIZE:
                    self.min_logic_offset = index * CQ_UNIT_SIZE_BYTES
                    return
                index += 1
        self.min_logic_offset = self.max_offset * CQ_UNIT_SIZE_BYTES

    # --- dispatch -----------------------------------------------------------------------------

    def put(self, phys_offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """putMessagePositionInfo: append the unit for queue offset ``cq_offset``.

        Returns True (as RocketMQ does) also when the unit is skipped because it was built
        before: the record ends at or before ``max_physic_offset``, or its slot is already written.
        """
        if phys_offset + size <= self.max_physic_offset:
            return True
        expect = cq_offset * CQ_UNIT_SIZE_BYTES
        files = self.files
        if expect == files.wrote_offset and files.files and expect < files.files[-1].end:
            # The common case: the next slot of an open file.
            self.max_physic_offset = phys_offset + size
            files.append(pack_cq_unit(phys_offset, size, tags_code))
            return True
        first_file = not files.files
        if files.space_in_last_file() == 0:
            files.ensure_writable_file(expect)
        if first_file and cq_offset != 0 and files.wrote_offset == files.files[-1].start:
            # fillPreBlank: slots below the first unit are fillers so offsets keep their places.
            self.min_logic_offset = expect
            pre = (expect - files.wrote_offset) // CQ_UNIT_SIZE_BYTES
            if pre:
                files.append(_PRE_BLANK * pre)
        if cq_offset != 0 and expect < files.wrote_offset:
            return True  # "Build consume queue repeatedly"
        # A gap (expect > wrote) is only logged by RocketMQ; the unit still goes at the end.
        self.max_physic_offset = phys_offset + size
        files.append(CQ_UNIT.pack(phys_offset, size, tags_code))
        return True

    def put_run(self, units: list[tuple[int, int, int]], cq_offset: int) -> None:
        """``put`` for consecutive units from queue offset ``cq_offset`` (a batch's records).

        Written with one append when they all go to the next slots of the open file; otherwise
        unit by unit, with every rule of ``put``.
        """
        phys_offset, size, _tags = units[0]
        expect = cq_offset * CQ_UNIT_SIZE_BYTES
        files = self.files
        if (phys_offset + size > self.max_physic_offset and expect == files.wrote_offset and files.files
                and expect + len(units) * CQ_UNIT_SIZE_BYTES <= files.files[-1].end):
            last_phys, last_size, _tags = units[-1]
            self.max_physic_offset = last_phys + last_size
            files.append(b"".join(starmap(pack_cq_unit, units)))
            return
        for offset, (phys_offset, size, tags_code) in enumerate(units, cq_offset):
            self.put(phys_offset, size, tags_code, offset)

    # --- reading ------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """getMinOffsetInQueue: the first real unit's queue offset."""
        return self.min_logic_offset // CQ_UNIT_SIZE_BYTES

    @property
    def max_offset(self) -> int:
        """getMaxOffsetInQueue: the queue offset the next unit will get."""
        return self.files.wrote_offset // CQ_UNIT_SIZE_BYTES

    def unit(self, index: int) -> tuple[int, int, int] | None:
        """The unit (phys_offset, size, tags_code) at queue offset ``index``, or None."""
        if index < self.min_offset or index >= self.max_offset:
            return None
        data = self.files.read(index * CQ_UNIT_SIZE_BYTES, CQ_UNIT_SIZE_BYTES)
        if len(data) < CQ_UNIT_SIZE_BYTES:
            return None
        return CQ_UNIT.unpack(data)

    def units(self, start: int, max_n: int) -> list[tuple[int, int, int]]:
        """Up to ``max_n`` consecutive units from queue offset ``start`` (may stop at a file end)."""
        start = max(start, self.min_offset)
        end = min(start + max_n, self.max_offset)
        out: list[tuple[int, int, int]] = []
        while start < end:
            data = self.files.read(start * CQ_UNIT_SIZE_BYTES, (end - start) * CQ_UNIT_SIZE_BYTES)
            if not data:
                break
            out.extend(CQ_UNIT.iter_unpack(data[:len(data) - len(data) % CQ_UNIT_SIZE_BYTES]))
            start += len(data) // CQ_UNIT_SIZE_BYTES
        return out

    def last_unit_end(self) -> int:
        """offset + size of the last unit, or -1 for an empty queue."""
        last = self.unit(self.max_offset - 1) if self.max_offset > self.min_offset else None
        return last[0] + last[1] if last else -1

    # --- truncation, flush, teardown ----------------------------------------------------------

    def truncate_dirty(self, phys_offset: int) -> None:
        """truncateDirtyLogicFiles: drop units that point at or past ``phys_offset``."""
        self.max_physic_offset = phys_offset
        files = self.files
        files.flush()
        while files.files:
            last = files.files[-1]
            data = files.read_file_bytes(last)
            offset, size, _tags = CQ_UNIT.unpack_from(data, 0)
            if offset >= phys_offset and size > 0:
                files.delete_last_file()
                continue
            if not (offset >= 0 and size > 0):
                # An empty file (created, then a crash before its first unit reached disk).
                # RocketMQ would keep its zero first unit as a unit and then skip the real one
                # as "built repeatedly"; an empty file simply ends the queue at its start.
                self._truncate_positions(last.start)
                self.max_physic_offset = self._unit_end_before(last.start)
                break
            keep = CQ_UNIT_SIZE_BYTES
            # RocketMQ would take a pre-blank filler's 0 + Integer.MAX_VALUE here and then skip
            # every later dispatch below 2 GiB; the filler carries no position, so ignore it.
            self.max_physic_offset = offset + size if size != PRE_BLANK_UNIT_SIZE else -1
            pos = CQ_UNIT_SIZE_BYTES
            while pos < len(data):
                offset, size, _tags = CQ_UNIT.unpack_from(data, pos)
                if not (offset >= 0 and size > 0) or offset >= phys_offset:
                    break
                pos += CQ_UNIT_SIZE_BYTES
                keep = pos
                self.max_physic_offset = offset + size
            self._truncate_positions(last.start + keep)
            break
        if not files.files:
            files.wrote_offset = files.flushed_offset = 0
            self.min_logic_offset = 0
            self.max_physic_offset = -1

    def _unit_end_before(self, logical: int) -> int:
        """offset + size of the unit just before logical byte ``logical``, or -1."""
        if logical <= self.min_logic_offset:
            return -1
        data = self.files.read(logical - CQ_UNIT_SIZE_BYTES, CQ_UNIT_SIZE_BYTES)
        if len(data) < CQ_UNIT_SIZE_BYTES:
            return -1
        offset, size, _tags = CQ_UNIT.unpack(data)
        return offset + size if size != PRE_BLANK_UNIT_SIZE else -1

    def flush(self) -> int:
        return self.files.flush()

    def crash(self) -> None:
        self.files.drop_unflushed()

    def destroy(self) -> None:
        self.files.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    def close(self) -> None:
        self.files.close()


def list_consume_queues(root: Path, skipped: list[str] | None = None) -> list[tuple[str, int]]:
    """Every (topic, queue id) with a directory under ``<root>/consumequeue``, sorted.

    A directory whose name is not a valid topic (RocketMQ never writes one) is not a queue: it is
    left alone and its name is added to ``skipped`` when a list is given.
    """
    base = Path(root) / CONSUME_QUEUE_DIR_NAME
    found: list[tuple[str, int]] = []
    if not base.is_dir():
        return found
    for topic_dir in sorted(base.iterdir(), key=lambda p: p.name):
        if not topic_dir.is_dir():
            continue
        try:
            names.validate_topic(topic_dir.name)
        except InvalidNameError:
            if skipped is not None:
                skipped.append(topic_dir.name)
            continue
        for queue_dir in sorted(topic_dir.iterdir(), key=lambda p: p.name):
            if queue_dir.is_dir() and queue_dir.name.isdigit():
                found.append((topic_dir.name, int(queue_dir.name)))
    return sorted(found)
