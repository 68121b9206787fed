"""The commit-log files a scan walks and the entries it yields (commitlog/ and DLedger alike)."""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

from broker_core.codec import Record

# A scan hands the pages it has read back to the OS this often, so a 1 GiB mapped file does not
# stay resident while it is walked (records hold copies of their bytes, never views).
RELEASE_MAPPED_EVERY_BYTES = 32 * 1024 * 1024
# How often a long scan reports progress, in records.
PROGRESS_EVERY_RECORDS = 50_000
# Added to a problem found in a file before the part recovery checks.
KEPT_NOTE = ("; this file is before the part recovery checks, so RocketMQ keeps it as it is: "
             "the scan goes on")


@dataclass(frozen=True)
class RaftEntry:
    """What the DLedger entry around a record says (a DLedger commit log only)."""

    index: int
    term: int
    entry_size: int  # the whole entry, its 48-byte header included
    committed: bool  # False: past the node's committed index, not a record the broker handed out


@dataclass(frozen=True)
class LogEntry:
    """One commit-log entry: a record, or (``record is None``) the BLANK that ends a file."""

    file_name: str  # the commit-log file's 20-digit name
    phys_offset: int
    size: int  # TOTALSIZE of the record, or the BLANK's length
    record: Record | None
    raft: RaftEntry | None = None  # the DLedger entry holding the record (a DLedger log)

    @property
    def is_blank(self) -> bool:
        return self.record is None


@dataclass(frozen=True)
class CommitLogFile:
    name: str
    path: Path
    start: int  # physical offset of the first byte (the name)
    length: int  # bytes on disk
    dledger: bool = False  # a DLedger data file (entries around records), not a commitlog/ file


@dataclass(frozen=True)
class ScanProgress:
    file_name: str
    file_index: int
    file_count: int
    records: int


def release_pages(buf, start: int, pos: int) -> int:
    """Drop the already-read pages [start, pos) of a read-only mapping; returns the new start."""
    aligned = pos - pos % mmap.PAGESIZE
    if hasattr(buf, "madvise") and hasattr(mmap, "MADV_DONTNEED") and aligned > start:
        buf.madvise(mmap.MADV_DONTNEED, start, aligned - start)
        return aligned
    return start
