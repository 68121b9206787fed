"""The store checkpoint, the ``abort`` marker and the ``lock`` file (StoreCheckpoint, §3.6-§3.7).

``checkpoint`` is one 4096-byte page holding three big-endian int64 timestamps (5.x adds two offsets): the store time of
the last flushed commit-log record, of the last record dispatched to a consume queue, and of the
last flushed index file. Abnormal recovery starts from the newest commit-log file whose first
record is not newer than :meth:`StoreCheckpoint.min_timestamp`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from broker_core.constants import CHECKPOINT_FILE_SIZE_BYTES, CHECKPOINT_MIN_TIMESTAMP_SLACK_MS
from broker_core.errors import CorruptStoreError

CHECKPOINT_FILE_NAME = "checkpoint"
ABORT_FILE_NAME = "abort"
LOCK_FILE_NAME = "lock"
# physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp (4.9.4 writes these three); 5.x adds
# masterFlushedOffset and confirmPhyOffset, zero in a 4.9.4 file.
_FIELDS = struct.Struct(">qqqqq")
_TIMESTAMPS = struct.Struct(">qqq")
# The bytes of a checkpoint file that hold fields: a reader reads these, not the whole page.
CHECKPOINT_FIELDS_BYTES = _FIELDS.size


def min_timestamp(physic_msg_timestamp: int, logics_msg_timestamp: int) -> int:
    """getMinTimestamp: the older of the two store times, less 3 s of slack, never negative."""
    oldest = min(physic_msg_timestamp, logics_msg_timestamp)
    return max(0, oldest - CHECKPOINT_MIN_TIMESTAMP_SLACK_MS)


@dataclass(frozen=True)
class Checkpoint:
    """The fields of a ``checkpoint`` file, as read (``parse_checkpoint``)."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int  # 5.x only; 0 in 4.9.4
    confirm_phy_offset: int  # 5.x only; 0 in 4.9.4

    def min_timestamp(self) -> int:
        return min_timestamp(self.physic_msg_timestamp, self.logics_msg_timestamp)


def parse_checkpoint(data: bytes) -> Checkpoint | None:
    """The fields at the start of a checkpoint file's bytes; None when too few bytes hold them.

    A whole file is :data:`CHECKPOINT_FILE_SIZE_BYTES` (one page); the size check is the caller's,
    since the model refuses a wrong size and the reader reports it and reads on.
    """
    if len(data) < _FIELDS.size:
        return None
    return Checkpoint(*_FIELDS.unpack_from(data, 0))


class StoreCheckpoint:
    """``<root>/checkpoint`` of a store this model runs: read at open, written by :meth:`flush`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self._fd: int | None = None
        if self.path.exists():
            data = self.path.read_bytes()
            if len(data) != CHECKPOINT_FILE_SIZE_BYTES:
                raise CorruptStoreError(
                    f"checkpoint is {len(data)} bytes, expected {CHECKPOINT_FILE_SIZE_BYTES}",
                    where=str(self.path))
            read = parse_checkpoint(data)
            self.physic_msg_timestamp = read.physic_msg_timestamp
            self.logics_msg_timestamp = read.logics_msg_timestamp
            self.index_msg_timestamp = read.index_msg_timestamp

    def min_timestamp(self) -> int:
        """getMinTimestamp of the current values (:func:`min_timestamp`)."""
        return min_timestamp(self.physic_msg_timestamp, self.logics_msg_timestamp)

    def min_timestamp_index(self) -> int:
        """getMinTimestampIndex: also no newer than the last flushed index file."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def flush(self) -> None:
        """Write the three timestamps in place; the file is created at its full page size."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size != CHECKPOINT_FILE_SIZE_BYTES:
                os.ftruncate(self._fd, CHECKPOINT_FILE_SIZE_BYTES)
        # Only the first 24 bytes change: the rest of the page (5.x writes two more fields)
        # stays as it was.
        os.pwrite(self._fd, _TIMESTAMPS.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                             self.index_msg_timestamp), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def create_abort_file(root: Path) -> None:
    """The marker start() leaves behind; its presence at load means the last exit was not clean."""
    (Path(root) / ABORT_FILE_NAME).touch()


def remove_abort_file(root: Path) -> None:
    path = Path(root) / ABORT_FILE_NAME
    if path.exists():
        path.unlink()


def abort_file_exists(root: Path) -> bool:
    return (Path(root) / ABORT_FILE_NAME).exists()


def write_lock_file(root: Path) -> None:
    """``<root>/lock`` holds the word ``lock`` (RocketMQ writes it through a file channel)."""
    path = Path(root) / LOCK_FILE_NAME
    if not path.exists():
        path.write_bytes(b"lock")
