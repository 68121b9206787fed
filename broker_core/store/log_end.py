"""How far a commit log reaches, found by hopping from record header to record header.

A watcher (the Dagster sensor over the stores) asks, every few seconds, whether a store has grown
since it last looked. File sizes do not tell (RocketMQ creates every commit-log file at its full
size), nor do modification times of memory-mapped files. The records do: each starts with its
TOTALSIZE and magic, so from a known record boundary the end of the written records is a walk
over 8-byte headers, without decoding a record (a DLedger node's log: over its entries' magic and
size). It is read-only and bounded: at most
``records_max`` headers per call (the next call goes on from where this one stopped), and it
checks nothing (an import does); it stops at the first header that is not a whole record's.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from broker_core.constants import (
    BLANK_MAGIC_CODE,
    FILE_NAME_DIGITS,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
)
from broker_core.store.dledger import (
    BLANK_MAGIC,
    DATA_DIR_NAME,
    DLEDGER_DIR_PREFIX,
    ENTRY_HEADER_BYTES,
    ENTRY_MAGIC,
)

_SIZE_MAGIC = struct.Struct(">iI")
_FILE_NAME = re.compile(rf"\d{{{FILE_NAME_DIGITS}}}")
# A walk reads this many headers at most; a broker writing 100,000 records/s between two looks
# 30 s apart is three million headers, which the next looks read on from here.
LOG_END_RECORDS_MAX = 200_000
_HEADER_BYTES = 8


@dataclass(frozen=True)
class LogEnd:
    """Where the walk stopped: a file's name and a position in it (the next record's start), the
    physical offset that is, and the log's first file (retention moves it)."""

    file_name: str | None
    position: int
    first_file: str | None

    @property
    def offset(self) -> int:
        return int(self.file_name) + self.position if self.file_name else 0


def log_end(store_root: Path | str, start: tuple[str, int] | None = None,
            records_max: int = LOG_END_RECORDS_MAX) -> LogEnd:
    """The end of the records of the commit log under ``store_root``, walked from ``start`` (a file
    name and a record's position in it, e.g. an earlier LogEnd's) or from the first file."""
    assert records_max > 0, f"records_max must be positive, got {records_max}"
    directory, dledger = _log_directory(Path(store_root))
    try:
        names = sorted(p.name for p in directory.iterdir() if _FILE_NAME.fullmatch(p.name))
    except OSError:
        return LogEnd(None, 0, None)
    if not names:
        return LogEnd(None, 0, None)
    try:
        file_size = (directory / names[0]).stat().st_size
    except OSError:
        return LogEnd(None, 0, names[0])
    name, pos = start if start is not None and start[0] in names else (names[0], 0)
    if start is not None and start[0] not in names and int(start[0]) > int(names[0]):
        name, pos = start  # the file after a BLANK, not created yet
    walked = 0
    while name in names and walked < records_max and file_size > 0:
        try:
            with open(directory / name, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                limit = min(len(buf), file_size)
                while walked < records_max and pos + _HEADER_BYTES <= limit:
                    total, kind = _header(buf, pos, dledger)
                    if kind == _BLANK:
                        pos = limit
                        break
                    if kind != _RECORD or pos + total > limit:
                        return LogEnd(name, pos, names[0])
                    pos += total
                    walked += 1
        except (OSError, ValueError):
            return LogEnd(name, pos, names[0])
        if pos < limit:
            break  # the record budget ran out inside this file
        name, pos = f"{int(name) + file_size:0{FILE_NAME_DIGITS}d}", 0
    return LogEnd(name, pos, names[0])


_RECORD, _BLANK, _OTHER = "record", "blank", "other"
_DLEDGER_HEADER = struct.Struct(">ii")  # an entry's magic and size, or a blank's magic and length


def _log_directory(root: Path) -> tuple[Path, bool]:
    """The directory where the store's log grows: a DLedger node's ``data/`` (True; a store switched
    to DLedger keeps its old ``commitlog/``, which no longer grows), else ``commitlog/``."""
    nodes = sorted(p for p in root.glob(f"{DLEDGER_DIR_PREFIX}*") if (p / DATA_DIR_NAME).is_dir())
    return (nodes[0] / DATA_DIR_NAME, True) if len(nodes) == 1 else (root / "commitlog", False)


def _header(buf, pos: int, dledger: bool) -> tuple[int, str]:
    """(size, what) of the item at ``pos``: a whole record (a DLedger entry), a BLANK, or neither."""
    if dledger:
        magic, size = _DLEDGER_HEADER.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            return size, _BLANK
        return size, _RECORD if magic == ENTRY_MAGIC and size > ENTRY_HEADER_BYTES else _OTHER
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return total, _BLANK
    return total, _RECORD if magic in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2) and total > _HEADER_BYTES else _OTHER

