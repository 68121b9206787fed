"""A DLedger node's index files (``dledger-<selfId>/index/``) checked against the entries its data holds.

DLedger (0.2.6 in RocketMQ 4.9.4, 0.3.1.2 in 5.3.3, alike) writes one 32-byte unit per entry
(``DLedgerMmapFileStore.INDEX_UNIT_SIZE``; ``DLedgerEntryCoder.encodeIndex``, big-endian) at
``index * 32`` of the index log, files named by their start offset like the data files
(``mappedFileSizeForEntryIndex``, 160 MiB preallocated, mostly zeros)::

    offset  size  field
    0       4     magic (1, the entry's)
    4       8     pos: the entry's position in the data log
    12      4     size: the whole entry
    16      8     index
    24      8     term

Every append writes the entry's unit (``appendAsLeader``, ``appendAsFollower``), and ``get(index)``
finds an entry through it: the entry a follower is sent is read by its unit. ``recover`` compares
the units of its last three data files' entries with the entries (magic, pos, size, index, term)
and rewrites them from the first that differs; an older entry's unit is never compared again.

What a clean store may hold past its last entry: zeros, or the units of entries a truncation cut
off (``truncate`` of a divergent tail, ``recover`` cutting a damaged data tail): ``MmapFileList.
truncateOffset`` moves the write position without zeroing. So only the units of the entries the
data holds are checked; each must be there and name the entry exactly. A unit past the end of a
(cut) index file is missing: a broker's index files are whole.
"""

from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from broker_core.store.dledger import ENTRY_HEADER_BYTES, ENTRY_MAGIC, EntryHeader, read_header
from broker_core.store.log_files import CommitLogFile
from broker_core.store.problem import WARNING, Problem

INDEX_DIR_NAME = "index"
INDEX_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term (DLedgerEntryCoder.encodeIndex)
INDEX_UNIT_BYTES = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE
assert INDEX_UNIT.size == INDEX_UNIT_BYTES
KIND_INDEX_MISMATCH = "dledger-index-mismatch"
MAX_REPORTED = 20  # units reported one by one per node; the rest are counted in one more row
_READ_UNITS = 32768  # units read at a time (1 MiB)
_FILE_NAME = re.compile(r"\d{20}")


@dataclass(frozen=True)
class IndexUnit:
    magic: int
    pos: int
    size: int
    index: int
    term: int


@dataclass(frozen=True)
class IndexFile:
    start: int  # the byte offset of its first unit in the index log (its name)
    path: Path
    length: int  # bytes on disk


def index_files(index_dir: Path, rel, problems: list[Problem]) -> list[IndexFile]:
    """The index directory's files in order; a name that is not 20 digits is reported and skipped."""
    found = []
    for path in sorted(index_dir.iterdir()):
        if not _FILE_NAME.fullmatch(path.name) or not path.is_file():
            problems.append(Problem(rel(path), 0, "bad-file-name",
                                    "not a DLedger index file (a regular file named by 20 digits); ignored",
                                    WARNING))
            continue
        found.append(IndexFile(int(path.name), path, path.stat().st_size))
    return found


class _DataHeaders:
    """The entry headers of the data files, read 48 bytes at a time at a position."""

    def __init__(self, files: list[CommitLogFile]):
        self.files = [f for f in files if f.dledger]
        self.starts = [f.start for f in self.files]
        self.handles: dict[int, object] = {}

    def at(self, pos: int) -> EntryHeader | None:
        i = bisect.bisect_right(self.starts, pos) - 1
        if i < 0 or pos < 0:
            return None
        cf = self.files[i]
        if pos - cf.start + ENTRY_HEADER_BYTES > cf.length:
            return None
        handle = self.handles.get(i) or self.handles.setdefault(i, cf.path.open("rb"))
        handle.seek(pos - cf.start)
        return read_header(handle.read(ENTRY_HEADER_BYTES), 0)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()


def read_units(files: list[IndexFile], first: int, last: int):
    """Yield (index, its file or None, the unit or None where the files do not hold it) for each
    index from ``first`` to ``last``, reading only those units."""
    index = first
    starts = [f.start for f in files]
    while index <= last:
        at = index * INDEX_UNIT_BYTES
        i = bisect.bisect_right(starts, at) - 1
        held = files[i] if i >= 0 else None
        count = min(last - index + 1, _READ_UNITS)
        if held is None or at - held.start >= held.length:
            yield index, held, None
            index += 1
            continue
        count = min(count, (held.length - (at - held.start)) // INDEX_UNIT_BYTES) or 1
        with held.path.open("rb") as f:
            f.seek(at - held.start)
            block = f.read(count * INDEX_UNIT_BYTES)
        for k in range(count):
            unit = INDEX_UNIT.unpack_from(block, k * INDEX_UNIT_BYTES) if len(block) >= (k + 1) * INDEX_UNIT_BYTES else None
            yield index + k, held, IndexUnit(*unit) if unit else None
        index += count


def unit_fault(index: int, unit: IndexUnit | None, header: EntryHeader | None, log_end: int) -> str | None:
    """Why the unit of ``index`` does not name the entry the data holds (None: it does)."""
    if unit is None:
        return "no unit: the index files end before it"
    if not any((unit.magic, unit.pos, unit.size, unit.index, unit.term)):
        return "the unit is zeros"
    if unit.magic != ENTRY_MAGIC:
        return f"magic {unit.magic}, not {ENTRY_MAGIC}"
    if unit.index != index:
        return f"the unit names index {unit.index}"
    if unit.pos < 0 or unit.pos + unit.size > log_end:
        return f"pos {unit.pos} and size {unit.size} run past the end of the log ({log_end})"
    if header is None or header.magic != ENTRY_MAGIC or header.pos != unit.pos or header.index != index:
        there = "nothing" if header is None else f"index {header.index}, pos {header.pos}, magic {header.magic}"
        return f"pos {unit.pos} holds no entry of index {index} (the header there: {there})"
    if header.size != unit.size:
        return f"size {unit.size}, the entry's is {header.size}"
    if header.term != unit.term:
        return f"term {unit.term}, the entry's is {header.term}"
    return None


def check_index(base: Path, self_id: str, data_files: list[CommitLogFile], first_index: int | None,
                last_index: int | None, log_end: int, rel) -> list[Problem]:
    """The disagreements between ``base``/index/ and the entries ``first_index``..``last_index`` of
    the data (nothing when the node keeps no index directory or the walk found no entry)."""
    index_dir = base / INDEX_DIR_NAME
    if not index_dir.is_dir() or first_index is None or last_index is None:
        return []
    problems: list[Problem] = []
    files = index_files(index_dir, rel, problems)
    headers = _DataHeaders(data_files)
    faults = 0
    try:
        for index, held, unit in read_units(files, first_index, last_index):
            fault = unit_fault(index, unit, headers.at(unit.pos) if unit else None, log_end)
            if fault is None:
                continue
            faults += 1
            if faults <= MAX_REPORTED:
                problems.append(_mismatch(rel, index_dir, held, self_id, index, fault))
    finally:
        headers.close()
    if faults > MAX_REPORTED:
        problems.append(Problem(rel(index_dir), 0, KIND_INDEX_MISMATCH,
                                f"node {self_id}: {faults - MAX_REPORTED} more index units disagree with "
                                f"their entries (indexes {first_index}-{last_index} checked)", WARNING))
    return problems


def _mismatch(rel, index_dir: Path, held: IndexFile | None, self_id: str, index: int, fault: str) -> Problem:
    at = index * INDEX_UNIT_BYTES
    file = rel(held.path) if held is not None else rel(index_dir)
    offset = at - held.start if held is not None else at
    return Problem(file, offset, KIND_INDEX_MISMATCH,
                   f"node {self_id}: the index unit of entry {index} disagrees with the data: {fault}", WARNING)
