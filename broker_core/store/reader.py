"""A read-only view of any RocketMQ store directory: commit log, consume queues, config, checkpoint.

:class:`StoreReader` never writes: every file is opened ``'rb'`` (commit-log files are memory-mapped
read-only, so a 1 GiB file is never copied into memory) and nothing is created, so it can read a
live broker's store, a backup or a read-only mount. It walks the commit log exactly as 4.9.4's
recovery keeps it (§3.8): a BLANK moves to the next file, zeros or an unknown magic
end the data, and a damaged record ends the scan. Whatever it finds wrong on the way is a
:class:`Problem` naming the file and the offset, so ``import-store`` can export the valid prefix and
still say exactly what was left out and why.

Offsets in a Problem: commit-log problems carry the *physical* offset (the file name plus the
position); every other file's problems carry the byte position inside that file.

A commit log whose first file starts after offset 0 is the normal state of a broker that has run
for a while: CleanCommitLogService deletes the oldest files once they are older than
fileReservedTime. :attr:`StoreReader.first_offset` is where the log starts (the first file's
name); consume-queue units that point below it name records retention removed (RocketMQ only
moves each queue's min offset past them) and are not problems.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import mmap
import os
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_core import names
from broker_core.codec import (
    FIRST_RECORD_HEAD_BYTES,
    SYSFLAG_POS,
    Blank,
    Record,
    decode_record,
    int_property_out_of_range,
    peek_magic_and_store_ts,
    property_crc_values,
    record_head_bytes,
)
from broker_core.constants import (
    BLANK_MAGIC_CODE,
    CHECKPOINT_FILE_SIZE_BYTES,
    CQ_UNIT_SIZE_BYTES,
    FILE_NAME_DIGITS,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    RECOVER_NORMAL_FILES_FROM_END,
    SCHEDULE_TOPIC,
)
from broker_core.errors import BadInputError, CorruptRecordError
from broker_core.message import (
    PORT_MAX,
    PROP_DELAY,
    PROP_MAX_RECONSUME_TIMES,
    PROP_REAL_QID,
    host_port,
    port_in_range,
)
from broker_core.store import config_files
from broker_core.store.checkpoint import (
    ABORT_FILE_NAME,
    CHECKPOINT_FIELDS_BYTES,
    CHECKPOINT_FILE_NAME,
    Checkpoint,
    parse_checkpoint,
)
from broker_core.store.cq_marks import (
    TAIL_UNITS,
    QueueMark,
    QueueWalk,
    exact_pieces,
    first_piece_bytes,
    held_back,
    piece_sizes,
    queue_key,
    reads_exactly,
    without_last_unit,
)
from broker_core.store.dledger import RECOVER_FILES_FROM_END as DLEDGER_RECOVER_FILES_FROM_END
from broker_core.store.dledger import DLedgerCheckpoint, DLedgerLayout, find_layout
from broker_core.store.dledger import parse_checkpoint as parse_dledger_checkpoint
from broker_core.store.dledger_index import check_index
from broker_core.store.dledger_scan import KIND_CHECKPOINT_MISSING, DLedgerScan, RaftLog
from broker_core.store.log_files import (
    KEPT_NOTE,
    PROGRESS_EVERY_RECORDS,
    RELEASE_MAPPED_EVERY_BYTES,
    CommitLogFile,
    LogEntry,
    ScanProgress,
    release_pages,
)
from broker_core.store.mapped_file import offset_to_file_name
from broker_core.store.problem import ERROR, WARNING, Problem
from broker_core.store.rocksdb_metadata import GROUPS, OFFSETS, TOPICS, RocksDBMetadata

COMMITLOG_DIR_NAME = "commitlog"
CONSUME_QUEUE_DIR_NAME = "consumequeue"
CONFIG_DIR_NAME = "config"

CQ_UNIT = struct.Struct(">qiq")  # ConsumeQueue unit: physOffset, size, tagsCode (§2.2)
assert CQ_UNIT.size == CQ_UNIT_SIZE_BYTES
CQ_PRE_BLANK_UNIT_SIZE = 2**31 - 1  # fillPreBlank writes (0, Integer.MAX_VALUE, 0) below minOffset
_SIZE_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_KNOWN_MAGICS = (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE)
_FILE_NAME = re.compile(rf"\d{{{FILE_NAME_DIGITS}}}")

# Problems a scan finds at or after where it stops; a scan resumed there finds them again.
_AT_THE_END_KINDS = ("gap-between-files", "unreachable-data", "in-flight")
# What a record cut short by the scan reading it as the broker writes it is reported as.
_TAIL_DAMAGE_KINDS = ("truncated-record", "torn-record", "crc-mismatch", "bad-record", "bad-magic")
_OFFSET_MAX = 2**63 - 1

# Consume-queue files are read in pieces of this many bytes (a whole number of units), and the
# zero check after the end of data looks at this much at a time: memory stays bounded.
READ_CHUNK_BYTES = CQ_UNIT_SIZE_BYTES * 64 * 1024

@dataclass(frozen=True)
class CqUnit:
    """One consume-queue unit: the message at ``queue_offset`` lives at ``phys_offset``."""

    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int


@dataclass(frozen=True)
class ResumePoint:
    """Where an earlier scan of the same store stopped, and what it had counted up to there.

    A scan resumed here reads only ``file_name`` from ``position`` on (and the files after it),
    and ends with the same counts and problems as a scan of the whole log: ``problems`` are the
    earlier scan's commit-log problems before this point.
    """

    file_name: str
    position: int
    records: int = 0
    blanks: int = 0
    first_store_ts: int | None = None
    last_store_ts: int | None = None
    problems: tuple[Problem, ...] = ()

    @property
    def offset(self) -> int:
        return int(self.file_name) + self.position


# Numeric properties the contract keeps as int32 columns, in the order their problems are listed.
INT_PROPERTIES = (PROP_DELAY, PROP_REAL_QID, PROP_MAX_RECONSUME_TIMES)
HOST_ROLES = ("born", "store")  # a record's two hosts, in the order their problems are listed


def host_port_problem(rel: str, phys: int, role: str, host: str) -> Problem:
    """A record whose born or store host has a port InetSocketAddress refuses.

    The port field is a Java int, so a damaged or foreign record can hold any value; the broker's
    recovery (checkMessageAndReturnSize) never looks at it and keeps the record, so the import
    keeps it too, with the host as stored and an offset msgId built from the stored port bytes.
    """
    return Problem(rel, phys, "host-port-out-of-range",
                   f"{role} host {host}: port {host_port(host)} is outside 0..{PORT_MAX}; the record is "
                   "kept, its msgId built from the stored port bytes", WARNING)


def int_property_problem(rel: str, phys: int, key: str, text: str) -> Problem:
    """A numeric property whose value does not fit the Java int the broker parses it into."""
    return Problem(rel, phys, "property-out-of-range",
                   f"property {key}={text[:40]!r} does not fit a Java int (Integer.parseInt refuses it); "
                   "its column is left as if the property were absent, the properties map keeps the text",
                   WARNING)


def property_crc_problem(rel: str, phys: int, stored: str, computed: str) -> Problem:
    """A 5.x ``__CRC32#`` property tail that does not match the record's bytes before it."""
    return Problem(rel, phys, "property-crc-mismatch",
                   f"the __CRC32# property holds {stored!r}, the record's bytes before it give {computed!r}; "
                   "the record is kept", WARNING)


def record_value_problems(rel: str, phys: int, record: Record) -> list[Problem]:
    """What a decoded record holds that its contract columns cannot: hosts, then numeric properties."""
    found = [host_port_problem(rel, phys, role, host)
             for role, host in zip(HOST_ROLES, (record.born_host, record.store_host), strict=True)
             if not port_in_range(host_port(host))]
    found.extend(int_property_problem(rel, phys, key, record.properties[key]) for key in INT_PROPERTIES
                 if int_property_out_of_range(record.properties.get(key)))
    return found


class StoreReader(DLedgerScan):
    """Read-only scan of a RocketMQ store root (the directory holding ``commitlog/``, or a DLedger
    node's ``dledger-<selfId>/``: :mod:`broker_core.store.dledger`)."""

    def __init__(self, root: Path | str, *, check_crc: bool = True,
                 commitlog_file_size_bytes: int | None = None, live: bool = False,
                 dledger_data: Path | str | None = None):
        """``commitlog_file_size_bytes``: the broker's mappedFileSizeCommitLog when known; by
        default it is taken from the files themselves. ``live``: a broker is writing the store
        while it is read (see :meth:`entries`). ``dledger_data``: where a DLedger node's entries
        are when its broker set ``storePathDLedgerCommitLog`` (default ``dledger-<selfId>/data``)."""
        assert commitlog_file_size_bytes is None or commitlog_file_size_bytes > 0, \
            f"commit-log file size must be positive, got {commitlog_file_size_bytes}"
        self.root = Path(root)
        self.check_crc = check_crc
        self._expected_file_size = commitlog_file_size_bytes
        self.live = live
        # Bytes read from the store's files, by directory (commitlog, consumequeue, config, ...).
        self.bytes_read: Counter = Counter()
        if not self.root.is_dir():
            raise BadInputError("store directory does not exist" if not self.root.exists()
                                else "not a directory", where=str(self.root),
                                hint="pass the RocketMQ store root (storePathRootDir, e.g. ~/store)")
        # A DLedger broker keeps its log in dledger-<selfId>/data/ instead of commitlog/.
        self.dledger: DLedgerLayout | None = find_layout(self.root, dledger_data)
        if self.dledger is None and dledger_data is not None:
            raise BadInputError("--dledger-data names a DLedger data directory, but the store root holds no "
                                "dledger-<selfId>/ directory", where=str(self.root))
        if self.dledger is None and not (self.root / COMMITLOG_DIR_NAME).is_dir():
            raise BadInputError(f"no {COMMITLOG_DIR_NAME}/ directory: not a RocketMQ store root",
                                where=str(self.root),
                                hint="pass the directory that holds commitlog/ (or a DLedger broker's "
                                     "dledger-<selfId>/), consumequeue/ and config/")
        self._file_problems: list[Problem] = []
        self._scan_problems: list[Problem] = []
        self._after_scan_problems: list[Problem] = []
        self.files: list[CommitLogFile] = []
        self.file_size = 0
        self._list_commitlog_files()
        # The smallest physical offset present: the first file's name (0 without files). Files
        # before it were deleted by retention, which is not damage.
        self.first_offset = self.files[0].start if self.files else 0
        self.abort_file_present = (self.root / ABORT_FILE_NAME).exists()
        if self.abort_file_present:
            self._file_problems.append(Problem(
                ABORT_FILE_NAME, 0, "abort-file",
                "last shutdown was abnormal (the abort file is present): RocketMQ would run abnormal "
                "recovery; a torn tail is expected", WARNING))
        self.checkpoint = self._read_checkpoint()
        self.dledger_checkpoint = self._read_dledger_checkpoint() if self.dledger is not None else None
        # Set by a complete scan of entries().
        self.valid_end: int | None = None
        self.record_count = 0
        self.blank_count = 0
        self.last_store_ts: int | None = None
        self.first_store_ts: int | None = None
        # Set by a complete scan: where a later scan of the grown store goes on from.
        self.resume_point: ResumePoint | None = None
        # The last record the scan took: its physical offset, and its fixed header up to its store
        # timestamp as the scan read it (the next import's fingerprint of the tail, read once).
        self._last_record_at: int | None = None
        self.last_record_head: tuple[int, bytes] | None = None
        # Up to this many bytes the scan read are kept, for reading record bodies again without
        # reading the store again (set by an increment's caller: 0 keeps none).
        self.keep_scanned_bytes_max = 0
        self.kept_bytes = 0
        self._kept: list[tuple[int, bytes]] = []
        # Where the scan began: the first file's start, or the resume point's offset.
        self.scan_start = self.first_offset
        self._config_cache: dict[str, object] = {}
        # Where each consume queue's last import stopped (set by the caller before the scan; None:
        # read every queue whole) and the first offset the log had then (cq_marks).
        self.cq_start: dict[str, QueueMark] | None = None
        self.cq_start_first_offset: int | None = None
        # The queue offsets the scan's new records hold, per queue: the highest + 1 (set by the
        # caller, who counts them; the first read from a queue's mark reaches that far).
        self.cq_expected: dict[str, int] = {}
        # Set by a complete scan: where each queue's read stopped (None: the next import reads the
        # queues whole), and whether this one read them whole.
        self.cq_marks: dict[str, QueueMark] | None = None
        self.cq_read_whole = True
        self._schedule_pieces: dict[int, list] | None = None
        self._schedule_tails: dict[int, list] | None = None
        # The store time of the SCHEDULE record at a physical offset (None: none there), for the
        # delays of the levels: kept between imports of the store, each read once.
        self.schedule_store_ts: dict[int, int | None] = {}
        # Where the last import found zeros from to the end of its last file (set by the caller),
        # and where this scan did (None: it did not, or its data did not end inside a file).
        self.zeros_checked_from: int | None = None
        self.zeros_from: int | None = None
        # A 5.x store's topics, groups and offsets kept in RocksDB (v2 config/rdb/, or v1).
        self.rocksdb = RocksDBMetadata(self.root)

    # --- problems ---------------------------------------------------------------------------

    @property
    def problems(self) -> list[Problem]:
        """Every problem found so far; complete after :meth:`entries` has run to its end."""
        return self._file_problems + self._scan_problems + self._after_scan_problems

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    def check(self) -> list[Problem]:
        """Scan everything once (commit log, consume queues, config) and return the problems."""
        for _ in self.entries():
            pass
        return self.problems

    # --- commit-log files -------------------------------------------------------------------

    def _rel(self, path: Path) -> str:
        """A path as problems name it: relative to the store root (a DLedger data directory kept
        elsewhere, storePathDLedgerCommitLog, is named in full)."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def _list_commitlog_files(self) -> None:
        found: list[CommitLogFile] = []
        directory = self.root / COMMITLOG_DIR_NAME
        if directory.is_dir():
            found = self._log_files(directory, dledger=False)
        if self.dledger is not None:
            found = self._mixed_log(found, self._log_files(self.dledger.data_dir, dledger=True))
        self._check_file_sizes(found)

    def _log_files(self, directory: Path, dledger: bool) -> list[CommitLogFile]:
        """The files of one commit-log directory (commitlog/ or a DLedger data directory), in order."""
        found: list[CommitLogFile] = []
        for path in sorted(directory.iterdir()):
            if not _FILE_NAME.fullmatch(path.name):
                # MappedFileQueue.doLoad would fail on this name; we read around it.
                self._file_problems.append(Problem(
                    self._rel(path), 0, "bad-file-name",
                    f"not a commit-log file name ({FILE_NAME_DIGITS} digits); ignored"))
                continue
            if not path.is_file():
                # A directory, FIFO or dangling link under a valid name: reading it would fail or block.
                self._file_problems.append(Problem(
                    self._rel(path), int(path.name), "not-a-file",
                    "not a regular file (a directory, FIFO or dangling link); ignored"))
                continue
            try:
                length = path.stat().st_size
            except OSError as exc:
                self._file_problems.append(Problem(self._rel(path), int(path.name), "unreadable-file",
                                                   str(exc)))
                continue
            found.append(CommitLogFile(path.name, path, int(path.name), length, dledger))
        return found

    def _mixed_log(self, old: list[CommitLogFile], entries: list[CommitLogFile]) -> list[CommitLogFile]:
        """A broker switched to DLedger keeps its old ``commitlog/`` files below the first DLedger
        data file (``dividedCommitlogOffset``, the end of the last old file, whose tail the switch
        filled with a BLANK) and reads both (``DLedgerCommitLog.recover``, ``getData``): the old
        records, then the entries. An old file at or past that offset is not read."""
        if not old or not entries:
            return old + entries
        divided = entries[0].start
        for cf in old:
            if cf.start >= divided:
                self._file_problems.append(Problem(
                    self._rel(cf.path), cf.start, "commitlog-past-dledger",
                    f"an old commit-log file at or past the first DLedger data file ({entries[0].name}): "
                    "the broker reads DLedger entries from that offset on; not read"))
        return [cf for cf in old if cf.start < divided] + entries

    def _read_dledger_checkpoint(self) -> DLedgerCheckpoint | None:
        """The node's ``dledger-<selfId>/checkpoint`` (committed and end index)."""
        path = self.dledger.checkpoint_path
        try:
            text = path.read_text(encoding="latin-1")
        except FileNotFoundError:
            self._file_problems.append(Problem(
                self._rel(path), 0, KIND_CHECKPOINT_MISSING,
                "no DLedger checkpoint: only entries a consume queue names are taken as committed", WARNING))
            return None
        except OSError as exc:
            self._file_problems.append(Problem(self._rel(path), 0, "unreadable-file", str(exc)))
            return None
        return parse_dledger_checkpoint(text)

    def _consume_queue_offset_max(self) -> int | None:
        """The highest physical offset a unit of any consume queue names (None without units)."""
        best = None
        for _topic, _queue_id, files in self.consume_queues():
            for unit in self._last_units(files, 1):
                if best is None or unit.phys_offset > best:
                    best = unit.phys_offset
        return best

    def _check_file_sizes(self, found: list[CommitLogFile]) -> None:
        # The size every file is created at is taken from the files themselves: the most common
        # size (ties: the largest), since a torn or foreign file is the exception.
        # An empty file (a live broker's newest, just created) says nothing of the size.
        sizes = Counter(f.length for f in found if f.length)
        if self._expected_file_size is not None:
            self.file_size = self._expected_file_size
        elif sizes:
            self.file_size = max(sizes, key=lambda s: (sizes[s], s))
        if self.live and found and found[-1].length < self.file_size and not _head_nonzero(found[-1].path):
            # RocketMQ creates the next file and then maps it at its full size: a live store's
            # newest file can be seen, for a moment, shorter and empty. Not read, not damage.
            found.pop()
        for f in found:
            if f.length != self.file_size:
                self._file_problems.append(Problem(
                    self._rel(f.path), f.start + min(f.length, self.file_size), "wrong-size-file",
                    f"file is {f.length} bytes, commit-log files are {self.file_size}: "
                    "RocketMQ refuses to load such a store"))
            elif self.file_size and f.start % self.file_size:
                # Every file starts at a multiple of the size (MappedFileQueue.getLastMappedFile).
                self._file_problems.append(Problem(
                    self._rel(f.path), f.start, "misaligned-file-name",
                    f"start offset {f.start} is not a multiple of the file size {self.file_size}"))
        self.files = found

    def _read_checkpoint(self) -> Checkpoint | None:
        path = self.root / CHECKPOINT_FILE_NAME
        try:
            # Only the fields are read: the rest of the page is never written (its size is checked).
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                data = fh.read(CHECKPOINT_FIELDS_BYTES)
            self.bytes_read[CHECKPOINT_FILE_NAME] += len(data)
        except FileNotFoundError:
            self._file_problems.append(Problem(CHECKPOINT_FILE_NAME, 0, "checkpoint-missing",
                                               "no checkpoint file", WARNING))
            return None
        except OSError as exc:
            self._file_problems.append(Problem(CHECKPOINT_FILE_NAME, 0, "unreadable-file", str(exc)))
            return None
        if self.live and not size:
            # A live broker creates the file and then maps it at full size, as its commit-log files.
            self._file_problems.append(Problem(CHECKPOINT_FILE_NAME, 0, "checkpoint-missing",
                                               "the checkpoint file is being created (empty)", WARNING))
            return None
        if size != CHECKPOINT_FILE_SIZE_BYTES:
            self._file_problems.append(Problem(
                CHECKPOINT_FILE_NAME, min(size, CHECKPOINT_FILE_SIZE_BYTES), "wrong-size-file",
                f"checkpoint is {size} bytes, expected {CHECKPOINT_FILE_SIZE_BYTES}"))
        return parse_checkpoint(data)

    # --- the commit-log scan ----------------------------------------------------------------

    def entries(self, progress: Callable[[ScanProgress], None] | None = None,
                resume: ResumePoint | None = None) -> Iterator[LogEntry]:
        """Yield records and BLANKs in physical order, up to where RocketMQ's recovery stops.

        When the generator is exhausted, :attr:`valid_end` is the end of the last valid record,
        :attr:`problems` also holds the consume-queue and config findings, and
        :attr:`resume_point` says where a later scan of the grown store goes on from.

        ``resume`` (an earlier scan's :attr:`resume_point`, checked by the caller to still hold)
        skips what that scan read: the files before its file are not opened, its counts and
        problems are taken over, and only the entries after it are yielded.

        A live store (``live``): the end of the data is where the broker is writing. A record
        there that is not whole yet, or a file being written after the scan passed, is reported as
        ``in-flight`` (a warning) and read by the next import; a record that is still damaged
        once data has been written after it is damage, as in a store at rest.
        """
        self._scan_problems = list(resume.problems) if resume is not None else []
        self._after_scan_problems = []
        assert resume is None or self.dledger is None, "a DLedger log is read whole"
        if self.dledger is not None:
            self.raft = RaftLog(self.dledger.self_id, self.dledger_checkpoint, self._consume_queue_offset_max())
            self._raft_last = None
        self.record_count = resume.records if resume is not None else 0
        self.blank_count = resume.blanks if resume is not None else 0
        self.first_store_ts = resume.first_store_ts if resume is not None else None
        self.last_store_ts = resume.last_store_ts if resume is not None else None
        end = self.files[0].start if self.files else 0
        if resume is not None:
            end = self.scan_start = resume.offset
        stopped_at_file = len(self.files)
        window = self.recovery_start_index()
        outcome = "none"
        last: CommitLogFile | None = None
        for index, cf in enumerate(self.files):
            if resume is not None and cf.start < int(resume.file_name):
                continue  # read by the earlier scan
            if index and cf.start != self.files[index - 1].start + self.file_size:
                self._scan_problems.append(Problem(
                    self._rel(cf.path), self.files[index - 1].start + self.file_size, "gap-between-files",
                    f"expected the next file to start at {self.files[index - 1].start + self.file_size}, "
                    f"found {cf.name}: the scan stops before the gap"))
                stopped_at_file = index
                outcome = "gap"
                break
            if progress is not None:
                progress(ScanProgress(cf.name, index, len(self.files), self.record_count))
            start = resume.position if resume is not None and cf.name == resume.file_name else 0
            last = cf
            outcome, end = yield from self._scan_file(cf, progress, index, lenient=index < window,
                                                      start=start)
            if outcome not in ("blank", "skip"):
                stopped_at_file = index + 1
                break
        self.valid_end = end
        self.bytes_read[COMMITLOG_DIR_NAME] += max(0, end - self.scan_start)
        self._check_unreachable(stopped_at_file)
        if self.live:
            self._settle_live_end(end)
        self._set_resume_point(end, outcome, last, resume)
        self._check_checkpoint()
        self._check_dledger_index(end)
        # A live broker's consume queues already point at records written after the scan.
        self._after_scan_problems.extend(self._check_consume_queues(end if not self.live else _OFFSET_MAX))
        self._after_scan_problems.extend(self._config_problems())

    def _check_dledger_index(self, end: int) -> None:
        """A DLedger node's index units against the entries the walk found (dledger_index)."""
        if self.dledger is None or self.raft is None:
            return
        self._after_scan_problems.extend(check_index(
            self.dledger.base, self.dledger.self_id, self.files, self.raft.first_index, self.raft.last_index,
            end, self._rel))

    def _set_resume_point(self, end: int, outcome: str, last: CommitLogFile | None,
                          resume: ResumePoint | None) -> None:
        """Where a later scan starts: in the file this one stopped in, at the position it stopped
        at; after a BLANK (or before a gap) at the start of the next file, which may not exist yet."""
        if last is None:  # nothing was scanned: no files, or none from the resume point on
            self.resume_point = (None if resume is None else
                                 dataclasses.replace(resume, problems=tuple(self._carried(end))))
            return
        if outcome in ("end", "damage"):
            name, position = last.name, end - last.start
        else:
            name, position = offset_to_file_name(end), 0
        self.resume_point = ResumePoint(name, position, self.record_count, self.blank_count,
                                        self.first_store_ts, self.last_store_ts, tuple(self._carried(end)))

    def _carried(self, end: int) -> list[Problem]:
        """The scan's problems before ``end``: those a resumed scan takes over (the ones at and after
        the end are found again by the next scan, which reads from there)."""
        return [p for p in self._scan_problems if p.offset < end and p.kind not in _AT_THE_END_KINDS]

    def records(self, progress: Callable[[ScanProgress], None] | None = None) -> Iterator[LogEntry]:
        """Like :meth:`entries` without the BLANKs and a DLedger log's uncommitted entries."""
        return (e for e in self.entries(progress) if e.record is not None and (e.raft is None or e.raft.committed))

    def recovery_start_index(self) -> int:
        """Index of the first file RocketMQ's recovery checks (§3.8); earlier files it keeps as they are.

        Normal recovery (no abort file) starts at the third-last file. Abnormal recovery starts
        at the newest file whose first record has a valid magic and a store time no later than
        the checkpoint's min timestamp (``isMappedFileMatchedRecover``), else at the first file.
        A DLedger log's recovery checks its last three data files, after a crash too; the old
        ``commitlog/`` files of a store switched to DLedger are not checked at all.
        """
        if self.dledger is not None:
            old = sum(1 for cf in self.files if not cf.dledger)
            return old + max(0, len(self.files) - old - DLEDGER_RECOVER_FILES_FROM_END)
        if not self.abort_file_present:
            return max(0, len(self.files) - RECOVER_NORMAL_FILES_FROM_END)
        min_ts = self.checkpoint.min_timestamp() if self.checkpoint is not None else 0
        for index in range(len(self.files) - 1, -1, -1):
            try:
                with open(self.files[index].path, "rb") as fh:
                    head = fh.read(FIRST_RECORD_HEAD_BYTES)
            except OSError:
                continue
            found = peek_magic_and_store_ts(head)
            if found is None:
                continue
            magic, store_ts = found
            # 4.9.4 accepts only the v1 magic here.
            if magic == MESSAGE_MAGIC_CODE_V1 and store_ts != 0 and store_ts <= min_ts:
                return index
        return 0

    def _scan_file(self, cf: CommitLogFile, progress, index: int, lenient: bool, start: int = 0):
        """Yield one file's entries from position ``start``; return (outcome, physical end of valid data).

        Outcomes: "blank" (go on with the next file), "skip" (a file before the recovery window
        whose data ended or is damaged: go on), "end" (the data ends), "damage" (stop here).
        """
        limit = min(cf.length, self.file_size)
        try:
            fh = open(cf.path, "rb")
        except FileNotFoundError as exc:
            if self.live and cf.start == self.first_offset and self.record_count == 0:
                # Retention deleted the oldest file after it was listed: the log starts at the next.
                self.first_offset = cf.start + self.file_size
                return "skip", self.first_offset
            self._scan_problems.append(Problem(self._rel(cf.path), cf.start, "unreadable-file", str(exc)))
            return "damage", cf.start
        except OSError as exc:
            self._scan_problems.append(Problem(self._rel(cf.path), cf.start, "unreadable-file", str(exc)))
            return "damage", cf.start
        with fh:
            if limit == 0:
                return "end", cf.start
            try:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                self._scan_problems.append(Problem(self._rel(cf.path), cf.start, "unreadable-file",
                                                   str(exc)))
                return "damage", cf.start
            try:
                outcome, end = yield from self._scan_buffer(cf, buf, limit, progress, index, lenient, start)
                self._keep_scanned(cf, buf, start, limit)
                return outcome, end
            finally:
                self._keep_last_head(cf, buf, limit)
                buf.close()

    def _keep_scanned(self, cf: CommitLogFile, buf, start: int, limit: int) -> None:
        """Keep a copy of the records the scan read of this file, from ``start`` to the end of the
        last one (``keep_scanned_bytes_max`` in all): what reads record bodies after the scan
        (:meth:`scanned_bytes`) takes them from here."""
        at = self._last_record_at
        if at is None or not cf.start + start <= at < cf.start + limit or limit - (at - cf.start) < 4:
            return
        end = min(limit, at - cf.start + _I32.unpack_from(buf, at - cf.start)[0])
        size = end - start
        if size <= 0 or self.kept_bytes + size > self.keep_scanned_bytes_max:
            return
        self._kept.append((cf.start + start, bytes(buf[start:end])))
        self.kept_bytes += size

    def scanned_bytes(self, offset: int, size: int) -> bytes | None:
        """The ``size`` bytes at physical ``offset`` as the scan read them, when it kept them."""
        for start, data in self._kept:
            if start <= offset and offset + size <= start + len(data):
                return data[offset - start:offset - start + size]
        return None

    def _keep_last_head(self, cf: CommitLogFile, buf, limit: int) -> None:
        """Keep the header of the last record the scan took, when it is in this file (bytes the
        scan read already: not counted again)."""
        at = self._last_record_at
        if at is None or not cf.start <= at < cf.start + limit:
            return
        pos = at - cf.start
        if limit - pos < SYSFLAG_POS + 4:
            return
        size = record_head_bytes(_I32.unpack_from(buf, pos + SYSFLAG_POS)[0])
        self.last_record_head = (at, bytes(buf[pos:min(limit, pos + size)]))

    def _scan_buffer(self, cf: CommitLogFile, buf, limit: int, progress, index: int, lenient: bool,
                     start: int = 0):
        """Yield one mapped file's entries from ``start``; return (outcome, physical end of valid data).

        The one commit-log scan loop: :meth:`_fast_records` may take a run of plain records first
        (the columnar decoder does), and wherever it stops, ``decode_record`` and the
        classification below decide what lies there.
        """
        if cf.dledger:
            return (yield from self._scan_dledger_buffer(cf, buf, limit, progress, index, lenient, start))
        pos = start
        released = 0
        rel = self._rel(cf.path)
        while pos < limit:
            if pos - released >= RELEASE_MAPPED_EVERY_BYTES:
                released = release_pages(buf, released, pos)
            pos, took_every_record = yield from self._fast_records(cf, rel, buf, pos, limit, progress, index)
            if took_every_record:
                continue
            try:
                item = decode_record(buf, pos, check_crc=self.check_crc, limit=limit)
            except CorruptRecordError as exc:
                problem = self._classify(cf, buf, pos, limit, exc)
                if not lenient:
                    self._scan_problems.append(problem)
                    return "damage", cf.start + pos
                self._scan_problems.append(dataclasses.replace(problem, reason=problem.reason + KEPT_NOTE))
                if problem.kind == "crc-mismatch":
                    # The record's length is sound: step over it as a reader of this file would.
                    pos += _SIZE_MAGIC.unpack_from(buf, pos)[0]
                    continue
                return "skip", cf.start + pos
            if item is None:
                total, magic = _SIZE_MAGIC.unpack_from(buf, pos) if limit - pos >= 8 else (0, 0)
                if (total, magic) != (0, 0) and magic not in _KNOWN_MAGICS:
                    reason = f"illegal magic code {magic:#010x} (TOTALSIZE {total})"
                    if lenient:
                        self._scan_problems.append(Problem(rel, cf.start + pos, "bad-magic",
                                                           reason + KEPT_NOTE))
                        return "skip", cf.start + pos
                    self._scan_problems.append(Problem(rel, cf.start + pos, "bad-magic",
                                                       reason + ": the data ends here"))
                    return "damage", cf.start + pos
                self._zero_tail(cf, buf, pos, limit)
                if lenient:
                    self._scan_problems.append(Problem(
                        rel, cf.start + pos, "no-end-of-file-record",
                        "the file's data ends without an END_OF_FILE record; the next file is read",
                        WARNING))
                    return "skip", cf.start + pos
                return "end", cf.start + pos
            if isinstance(item, Blank):
                if pos + item.size != self.file_size:
                    self._scan_problems.append(Problem(
                        rel, cf.start + pos, "blank-size",
                        f"END_OF_FILE record says {item.size} bytes, {self.file_size - pos} remain",
                        WARNING))
                self.blank_count += 1
                yield LogEntry(cf.name, cf.start + pos, item.size, None)
                return "blank", cf.start + self.file_size
            yield self._record_entry(cf, rel, buf, pos, item)
            pos += item.total_size
            if progress is not None and self.record_count % PROGRESS_EVERY_RECORDS == 0:
                progress(ScanProgress(cf.name, index, len(self.files), self.record_count))
        # A file full of records with no BLANK: checkMessageAndReturnSize underflows and the
        # recovery stops here, as at zeros.
        return ("skip" if lenient else "end"), cf.start + pos

    def _fast_records(self, cf: CommitLogFile, rel: str, buf, pos: int, limit: int, progress, index: int):
        """Yield what a faster decoder takes from ``pos`` on; return (where it stopped, whether it
        took every record it walked over). The reference takes none: every record is decoded."""
        yield from ()
        return pos, False

    def _record_entry(self, cf: CommitLogFile, rel: str, buf, pos: int, item: Record,
                      counted: bool = True) -> LogEntry:
        """Note a decoded record's problems, count it (unless not ``counted``: a DLedger entry past
        the committed index), and make its entry."""
        phys = cf.start + pos
        if item.phys_offset != phys:
            self._scan_problems.append(Problem(
                rel, phys, "phys-offset-mismatch",
                f"record stores PHYSICALOFFSET {item.phys_offset} but sits at {phys}", WARNING))
        self._scan_problems.extend(record_value_problems(rel, phys, item))
        # A 5.x enabledAppendPropCRC tail is checked after the values (the columnar order too).
        crc_values = property_crc_values(buf, pos, pos + item.total_size)
        if crc_values is not None and crc_values[0] != crc_values[1]:
            self._scan_problems.append(property_crc_problem(rel, phys, *crc_values))
        if not counted:
            return LogEntry(cf.name, phys, item.total_size, item)
        self._last_record_at = phys
        self.record_count += 1
        if self.first_store_ts is None:
            self.first_store_ts = item.store_ts
        self.last_store_ts = item.store_ts
        return LogEntry(cf.name, phys, item.total_size, item)

    def _classify(self, cf: CommitLogFile, buf, pos: int, limit: int,
                  exc: CorruptRecordError) -> Problem:
        rel = self._rel(cf.path)
        phys = cf.start + pos
        if limit - pos >= 8:
            total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            if magic != BLANK_MAGIC_CODE and total > limit - pos:
                return Problem(rel, phys, "truncated-record",
                               f"record of {total} bytes runs past the end of the file data "
                               f"({limit - pos} bytes left): {exc.message}")
            span = buf[pos:pos + total] if total > 8 else b""
            zero_from = len(span.rstrip(b"\0"))
            if span and zero_from < len(span) - 8:
                # A kill -9 mid-write leaves the record's header and a zero tail.
                return Problem(rel, phys, "torn-record",
                               f"record of {total} bytes is zeros from byte {zero_from} on "
                               f"(a write cut short): {exc.message}")
        if self.check_crc:
            try:
                rec = decode_record(buf, pos, check_crc=False, limit=limit)
            except CorruptRecordError:
                rec = None
            if isinstance(rec, Record):
                computed = zlib.crc32(rec.body) & 0x7FFFFFFF
                return Problem(rel, phys, "crc-mismatch",
                               f"body CRC stored {rec.body_crc}, computed {computed} "
                               f"({rec.topic} queue {rec.queue_id} offset {rec.queue_offset})")
        return Problem(rel, phys, "bad-record", exc.message)

    def _zero_tail(self, cf: CommitLogFile, buf, pos: int, limit: int) -> None:
        """Check the bytes after the end of data in the file, unless the last import of the store
        found them zeros from where its data ended (:attr:`zeros_checked_from`) and nothing starts
        where the data ends now: a broker only appends, so the bytes past the first zero ones it
        has not written are still the zeros the last import saw. Sets :attr:`zeros_from`."""
        checked = self.zeros_checked_from
        problems = len(self._scan_problems)
        head = min(limit, pos + 8)
        self.bytes_read[COMMITLOG_DIR_NAME] += head - pos
        if any(buf[pos:head]):
            # Something follows the data at once (a live broker's next record): the first non-zero
            # byte is among these, and the check names it from them alone.
            self._check_zero_tail(cf, buf, pos, head)
        elif checked is not None and cf.start <= checked <= cf.start + pos:
            pass
        else:
            # A file's holes (never written: RocketMQ maps each file at its full size) read as
            # zeros; only the part that holds data is read.
            data_end = _data_end(cf.path, pos, limit)
            self.bytes_read[COMMITLOG_DIR_NAME] += max(0, data_end - pos)
            self._check_zero_tail(cf, buf, pos, data_end)
        self.zeros_from = cf.start + pos if len(self._scan_problems) == problems else None

    def _check_zero_tail(self, cf: CommitLogFile, buf, pos: int, limit: int) -> None:
        """Bytes after the end of data in the same file are data RocketMQ's recovery drops."""
        cursor = pos
        while cursor < limit:
            chunk = buf[cursor:min(limit, cursor + READ_CHUNK_BYTES)]
            stripped = chunk.lstrip(b"\0")
            if stripped:
                where = cursor + len(chunk) - len(stripped)
                self._scan_problems.append(Problem(
                    self._rel(cf.path), cf.start + where, "unreachable-data",
                    f"non-zero bytes after the end of data at {cf.start + pos}: RocketMQ's recovery "
                    "ignores them (a later append would overwrite them)", WARNING))
                return
            cursor += len(chunk)

    def _settle_live_end(self, end: int) -> None:
        """A live store: tell the record the broker is writing at the end of the data from damage.

        A failing record at ``end`` with nothing written after it, or one that decodes now that
        data follows it (the broker finished it while the scan read on), is in flight: a warning,
        and the data after it was written after the scan passed (the next import reads it). A
        record that still fails with data after it is damage, as in a store at rest.
        """
        at_end = [p for p in self._scan_problems
                  if p.offset == end and p.kind in _TAIL_DAMAGE_KINDS and p.severity == ERROR]
        after = [p for p in self._scan_problems if p.kind == "unreachable-data" and p.offset >= end]
        if not at_end and not after:
            return
        if (after or self._written_past_record(end)) and not self._decodes_now(end):
            return
        in_flight = [Problem(p.file, p.offset, "in-flight",
                             f"{p.kind}: {p.reason}; the broker is writing here (live import): the next "
                             "import reads it", WARNING) for p in at_end]
        drop = {id(p) for p in at_end + after}
        self._scan_problems = [p for p in self._scan_problems if id(p) not in drop] + in_flight

    def _written_past_record(self, offset: int) -> bool:
        """Whether the file holds a non-zero byte past the end the record at ``offset`` claims."""
        for cf in self.files:
            if cf.start <= offset < cf.start + self.file_size:
                limit = min(cf.length, self.file_size)
                try:
                    with open(cf.path, "rb") as fh:
                        fh.seek(offset - cf.start)
                        head = fh.read(8)
                        self.bytes_read[COMMITLOG_DIR_NAME] += len(head)
                        total = _SIZE_MAGIC.unpack_from(head)[0] if len(head) == 8 else 0
                        cursor = offset - cf.start + max(total, 8)
                        fh.seek(cursor)
                        limit = _data_end(cf.path, cursor, limit)  # holes read as zeros: not read
                        while cursor < limit:
                            chunk = fh.read(min(READ_CHUNK_BYTES, limit - cursor))
                            self.bytes_read[COMMITLOG_DIR_NAME] += len(chunk)
                            if not chunk:
                                break
                            if chunk.strip(b"\0"):
                                return True
                            cursor += len(chunk)
                except OSError:
                    return False
        return False

    def _decodes_now(self, offset: int) -> bool:
        """Whether a whole record or a BLANK is at ``offset`` when read again now."""
        return self._read_at(offset) is not None

    def _read_at(self, offset: int) -> Record | bool | None:
        """The record at ``offset`` read now; True for a BLANK; None when nothing whole is there."""
        for cf in self.files:
            if cf.start <= offset < cf.start + self.file_size:
                try:
                    with open(cf.path, "rb") as fh:
                        fh.seek(offset - cf.start)
                        head = fh.read(8)
                        if len(head) < 8:
                            return None
                        total, magic = _SIZE_MAGIC.unpack_from(head)
                        if magic == BLANK_MAGIC_CODE:
                            return True
                        total = max(8, total)
                        data = head + fh.read(min(total, self.file_size) - 8)
                    self.bytes_read[COMMITLOG_DIR_NAME] += len(data)
                    return decode_record(data, 0, check_crc=self.check_crc)
                except (OSError, CorruptRecordError):
                    return None
        return None

    def _check_unreachable(self, first_unread: int) -> None:
        """Later files that hold data the scan never reached (recovery deletes such files). A file
        whose first bytes are a hole (a broker's next file, created ahead and never written) reads
        as zeros: it is not read."""
        for cf in self.files[first_unread:]:
            if _data_end(cf.path, 0, 8) == 0:
                continue
            try:
                with open(cf.path, "rb") as fh:
                    head = fh.read(8)
                    self.bytes_read[COMMITLOG_DIR_NAME] += len(head)
            except OSError as exc:
                self._scan_problems.append(Problem(self._rel(cf.path), cf.start, "unreadable-file",
                                                   str(exc)))
                continue
            if any(head):
                self._scan_problems.append(Problem(
                    self._rel(cf.path), cf.start, "unreachable-data",
                    "file holds data after the end of the valid commit log: not read"))

    def _check_checkpoint(self) -> None:
        if self.checkpoint is None or self.last_store_ts is None:
            return
        flushed = self.checkpoint.physic_msg_timestamp
        if flushed > self.last_store_ts:
            self._after_scan_problems.append(Problem(
                CHECKPOINT_FILE_NAME, 0, "checkpoint-ahead",
                f"physicMsgTimestamp {flushed} is newer than the last valid record's store time "
                f"{self.last_store_ts}: records flushed before the last checkpoint are missing",
                WARNING))

    # --- consume queues ---------------------------------------------------------------------

    def consume_queues(self) -> list[tuple[str, int, list[Path]]]:
        """(topic, queue id, files in order) for every queue under ``consumequeue/``."""
        base = self.root / CONSUME_QUEUE_DIR_NAME
        if not base.is_dir():
            return []
        queues = []
        for topic_dir in sorted(p for p in base.iterdir() if p.is_dir()):
            queue_dirs = [p for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()]
            for queue_dir in sorted(queue_dirs, key=lambda p: int(p.name)):
                files = sorted(p for p in queue_dir.iterdir() if p.is_file() and _FILE_NAME.fullmatch(p.name))
                queues.append((topic_dir.name, int(queue_dir.name), files))
        return queues

    def _valid_units(self, data: bytes) -> int:
        """How many units of ``data`` come before the first invalid one (ConsumeQueue.recover stops
        there); a pre-blank unit (fillPreBlank) is valid."""
        for i, (phys, size, tags) in enumerate(CQ_UNIT.iter_unpack(data)):
            if (phys < 0 or size <= 0) and (phys, size, tags) != (0, CQ_PRE_BLANK_UNIT_SIZE, 0):
                return i
        return len(data) // CQ_UNIT_SIZE_BYTES

    def cq_pieces(self, files: list[Path], mark: QueueMark | None = None, walk: QueueWalk | None = None,
                  expected_units: int | None = None, exact: bool = False) -> Iterator[tuple[Path, int, bytes]]:
        """(file, byte position, bytes) pieces of a queue's valid units, from ``mark`` (or the start)
        up to the first invalid unit; ``walk`` is left where the valid units end. ``exact``: read no
        further than unit ``expected_units`` (the units the log's records name: nothing past them
        is read, not even the zeros where the queue ends); else each file is read in pieces that
        start small and grow (a queue that gained a unit costs a 40-byte read)."""
        walk = walk if walk is not None else QueueWalk()
        for path in files:
            if mark is not None and path.name < mark.file:
                continue
            pos = mark.position if mark is not None and path.name == mark.file else 0
            walk.file, walk.position = path.name, pos
            unit_at = (int(path.name) + pos) // CQ_UNIT_SIZE_BYTES
            if exact and expected_units <= unit_at:
                return
            sizes = (exact_pieces(expected_units, unit_at, READ_CHUNK_BYTES) if exact else
                     piece_sizes(first_piece_bytes(expected_units, unit_at), READ_CHUNK_BYTES))
            with open(path, "rb") as fh:
                fh.seek(pos)
                for size in sizes:
                    data = fh.read(size)
                    self.bytes_read[CONSUME_QUEUE_DIR_NAME] += len(data)
                    valid = self._valid_units(data)
                    if valid:
                        yield path, pos, data[:valid * CQ_UNIT_SIZE_BYTES]
                        pos += valid * CQ_UNIT_SIZE_BYTES
                        walk.position, walk.last = pos, (path.name, pos - CQ_UNIT_SIZE_BYTES)
                    if valid < len(data) // CQ_UNIT_SIZE_BYTES:
                        return  # an invalid unit (zeros after the last one): the queue ends here
                    if len(data) < size:
                        break  # the end of the file: the queue goes on in the next one
            if exact and expected_units <= (int(path.name) + pos) // CQ_UNIT_SIZE_BYTES:
                return

    def cq_units(self, files: list[Path]) -> Iterator[tuple[Path, int, CqUnit]]:
        """Yield (file, byte position in it, unit) up to the first invalid unit (ConsumeQueue.recover)."""
        for path, pos, data in self.cq_pieces(files):
            yield from _units_of(path, pos, data)

    def schedule_units(self) -> Iterator[tuple[int, CqUnit]]:
        """(delay level, unit) for every unit of the ``SCHEDULE_TOPIC_XXXX`` consume queues that
        names a record of the valid log: its tags code is that record's deliver time, the time the
        schedule service may deliver it at the earliest (the record's store time plus the delay its
        broker's ``messageDelayLevel`` gave the level when it was stored).

        Units below the log's first offset (retention) or past its valid end are left out. Only
        the units the scan's consume-queue read reached: from the marks it started from
        (:attr:`cq_start`), all of them when it read the queues whole (:attr:`cq_read_whole`).
        Call after a complete scan of :meth:`entries`.
        """
        assert self._schedule_pieces is not None, "schedule_units() is read after a complete scan"
        end = self.valid_end if self.valid_end is not None and not self.live else _OFFSET_MAX
        for level in sorted(self._schedule_pieces):
            for path, pos, data in self._schedule_pieces[level]:
                for _path, _pos, unit in _units_of(path, pos, data):
                    if self.first_offset <= unit.phys_offset and unit.phys_offset + unit.size <= end:
                        yield level, unit

    def schedule_delays(self) -> dict[int, int]:
        """The delay in ms of each delay level whose schedule queue the store holds, read from
        the store itself: a ``SCHEDULE_TOPIC_XXXX`` consume-queue unit's tags code is its record's
        deliver time, the record's store time plus its level's delay (CommitLog
        checkMessageAndReturnSize), so the two differ by the broker's ``messageDelayLevel`` entry.

        Each level is read from the last unit of its queue (of the last file holding units, up
        to :data:`TAIL_UNITS` from its end) that names a whole record of the valid log (the
        broker's current table); a level whose queue holds none is left out.
        Call after a complete scan of :meth:`entries`.
        """
        assert self._schedule_tails is not None, "schedule_delays() is read after a complete scan"
        end = self.valid_end if self.valid_end is not None and not self.live else _OFFSET_MAX
        delays: dict[int, int] = {}
        for level, tail in sorted(self._schedule_tails.items()):
            for _queue_offset, phys, size, tags in reversed(tail):
                if not (self.first_offset <= phys and phys + size <= end):
                    continue
                store_ts = self._schedule_store_ts(phys)
                if store_ts is not None:
                    delays[level] = tags - store_ts
                    break
        return delays

    def schedule_tails_read(self) -> dict[int, list] | None:
        """Per delay level, the last units of its schedule queue as the scan's read left them (a
        live import's unit read again included); None before a complete scan."""
        return self._schedule_tails

    def _schedule_store_ts(self, phys: int) -> int | None:
        """The store time of the SCHEDULE record at ``phys`` (None: no such record there), read once
        per import of a store and remembered for the next (:attr:`schedule_store_ts`)."""
        if phys not in self.schedule_store_ts:
            record = self._read_at(phys)
            self.schedule_store_ts[phys] = (record.store_ts if isinstance(record, Record)
                                            and record.topic == SCHEDULE_TOPIC else None)
        return self.schedule_store_ts[phys]

    def _last_units(self, files: list[Path], count: int = TAIL_UNITS) -> Iterator[CqUnit]:
        """Up to ``count`` units from the end of a queue, last first (the written units are a
        prefix of each file; the rest is zeros)."""
        for path in reversed(files):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            self.bytes_read[CONSUME_QUEUE_DIR_NAME] += len(data)
            units = len(data) // CQ_UNIT_SIZE_BYTES
            lo, hi = 0, units  # the first unit index at or past which every unit is empty
            while lo < hi:
                mid = (lo + hi) // 2
                if any(data[mid * CQ_UNIT_SIZE_BYTES:(mid + 1) * CQ_UNIT_SIZE_BYTES]):
                    lo = mid + 1
                else:
                    hi = mid
            start_unit = int(path.name) // CQ_UNIT_SIZE_BYTES
            for index in range(lo - 1, max(lo - 1 - count, -1), -1):
                phys, size, tags = CQ_UNIT.unpack_from(data, index * CQ_UNIT_SIZE_BYTES)
                if phys >= 0 and size > 0:
                    yield CqUnit(start_unit + index, phys, size, tags)
                    count -= 1
            if count <= 0 or lo:
                return

    def _cq_start_marks(self, queues: list[tuple[str, int, list[Path]]]) -> dict[str, QueueMark] | None:
        """The marks the consume queues are read from (None: read them whole): those of the last
        import, while the log starts where it did then and every marked file is still there."""
        marks = self.cq_start
        if marks is None or self.cq_start_first_offset != self.first_offset:
            return None
        present = {queue_key(topic, queue_id): {p.name for p in files} for topic, queue_id, files in queues}
        if any(mark.file not in present.get(key, ()) for key, mark in marks.items()):
            return None
        return marks

    def _check_consume_queues(self, valid_end: int) -> list[Problem]:
        """Units that point outside the commit log that should be there, each queue read from where
        the last import left it (:mod:`broker_core.store.cq_marks`); sets :attr:`cq_marks`.

        Past the valid end: recovery's truncateDirtyLogicFiles drops them. Wholly below
        :attr:`first_offset`: records retention removed, expected (RocketMQ's correctMinOffset moves
        the queue's min offset past them, the file is not rewritten). A unit that starts below
        the first offset and ends after it names a record that would cross a file boundary,
        which no record does.
        """
        queues = self.consume_queues()
        start = self._cq_start_marks(queues)
        self.cq_read_whole = start is None
        marks: dict[str, QueueMark] | None = {}
        self._schedule_pieces, self._schedule_tails = {}, {}
        problems = []
        for topic, queue_id, files in queues:
            key = queue_key(topic, queue_id)
            old = start.get(key) if start is not None else None
            found = _QueueFindings(list(old.across) if old is not None and old.across else None)
            walk = QueueWalk()
            schedule = topic == SCHEDULE_TOPIC and queue_id >= 0
            pieces = []
            expected = _expected_units(old, self.cq_expected.get(key))
            exact = old is not None and expected is not None and reads_exactly(topic)
            try:
                # A queue read to its end from a mark starts with the units its records name and one more.
                probe = (expected or 0) if old is not None else None
                for path, pos, data in self.cq_pieces(files, old, walk, expected if exact else probe, exact):
                    self._unit_findings(path, pos, data, valid_end, found)
                    if schedule:
                        pieces.append((path, pos, data))
            except OSError as exc:
                problems.append(Problem(f"{CONSUME_QUEUE_DIR_NAME}/{topic}/{queue_id}", 0,
                                        "unreadable-file", str(exc)))
                marks = None
                continue
            problems.extend(found.problems(topic, queue_id, valid_end, self.first_offset))
            if found.past is not None:
                marks = None  # read again until the log reaches them: the next import reads all
            mark = QueueMark(walk.file, walk.position, found.across, expected=expected) if walk.file is not None else None
            held = held_back(walk, self.live)
            if held is not None:
                mark.file, mark.position = held
            if schedule:
                self._schedule_pieces[queue_id + 1] = pieces
                if mark is not None:
                    mark.tail_file, mark.tail = _tail_after(old, without_last_unit(pieces) if held else pieces)
                    self._schedule_tails[queue_id + 1] = _tail_after(old, pieces)[1]
                elif old is not None:
                    self._schedule_tails[queue_id + 1] = old.tail
            if marks is not None and mark is not None:
                marks[key] = mark
            for path in files:
                length = path.stat().st_size
                if length % CQ_UNIT_SIZE_BYTES:
                    problems.append(Problem(self._rel(path), length - length % CQ_UNIT_SIZE_BYTES,
                                            "wrong-size-file",
                                            f"{length} bytes is not a whole number of "
                                            f"{CQ_UNIT_SIZE_BYTES}-byte units"))
        self.cq_marks = marks
        return problems

    def _unit_findings(self, path: Path, pos: int, data: bytes, valid_end: int, found: _QueueFindings) -> None:
        """Note the units of one piece that point past ``valid_end`` or across the first offset."""
        first_offset = self.first_offset
        for _path, at, unit in _units_of(path, pos, data):
            if unit.size == CQ_PRE_BLANK_UNIT_SIZE and unit.phys_offset == 0 and unit.tags_code == 0:
                continue
            end = unit.phys_offset + unit.size
            if end <= first_offset:
                continue
            if end > valid_end:
                found.past = _first_or_count(found.past, self._rel(path), at, unit)
            elif unit.phys_offset < first_offset:
                found.across = _first_or_count(found.across, self._rel(path), at, unit)


    # --- config files -----------------------------------------------------------------------

    def _load_config(self, file_name: str) -> config_files.ConfigLoad:
        loaded = self._config_cache.get(file_name)
        if loaded is None:
            path = self.root / CONFIG_DIR_NAME / file_name
            loaded = config_files.read_config(path, config_files.DECODERS[file_name])
            self._config_cache[file_name] = loaded
            for read in {*(exc.path for exc in loaded.damaged), loaded.source} - {None}:
                with contextlib.suppress(OSError):
                    self.bytes_read[CONFIG_DIR_NAME] += Path(read).stat().st_size
        return loaded

    def _config_problems(self) -> list[Problem]:
        problems = []
        for file_name in config_files.CONFIG_FILES:
            loaded = self._load_config(file_name)
            for exc in loaded.damaged:
                used = (f"; {self._rel(loaded.source)} was read instead" if loaded.source is not None
                        else "; no usable backup")
                problems.append(Problem(self._rel(exc.path), exc.offset or 0, "bad-config-file",
                                        f"{exc.message}{used}"))
        return problems + self.rocksdb.problems() + self._ambiguous_retry_topics()

    def consumer_offsets_ts_ms(self) -> int | None:
        """When the offsets were last persisted: their JSON file's modification time
        (:meth:`offsets_file`), or the newest file's in their RocksDB directory when they are
        read from there."""
        json_path = self.root / CONFIG_DIR_NAME / self.offsets_file()
        if json_path.exists():
            return int(json_path.stat().st_mtime * 1000)
        return self.rocksdb.offsets_ts_ms()

    def offsets_file(self) -> str:
        """The JSON file of the consumer offsets: ``lmqConsumerOffset.json`` when the broker last
        persisted its offsets with enableLmq (it then writes that file only, so it is the newer
        of the two, or the only one), else ``consumerOffset.json``."""
        config = self.root / CONFIG_DIR_NAME

        def mtime(name: str) -> float | None:
            times = [p.stat().st_mtime for p in (config / name, config / (name + config_files.BAK_SUFFIX))
                     if p.is_file()]
            return max(times) if times else None

        lmq, plain = mtime(config_files.LMQ_CONSUMER_OFFSET_FILE), mtime(config_files.CONSUMER_OFFSET_FILE)
        if lmq is not None and (plain is None or lmq >= plain):
            return config_files.LMQ_CONSUMER_OFFSET_FILE
        return config_files.CONSUMER_OFFSET_FILE

    def _ambiguous_retry_topics(self) -> list[Problem]:
        """A warning per %RETRY% topic of the store's topics that more than one (group, topic) it
        knows fits: a push group's %RETRY%<group> and a 5.x POP retry topic %RETRY%<group>_<topic>
        can be the same name, since '_' is legal in both (names.retry_topic_owner)."""
        topics = self.topics()
        groups = self.subscription_groups()
        plain = [t for t in topics if not (names.is_retry_topic(t) or names.is_dlq_topic(t))]
        rocksdb_topics = self.rocksdb.source(TOPICS)
        topics_file = (self.rocksdb.rel(rocksdb_topics) if rocksdb_topics is not None
                       else f"{CONFIG_DIR_NAME}/{config_files.TOPICS_FILE}")
        problems = []
        for name in sorted(topics):
            owner = names.retry_topic_owner(name, groups, plain)
            if owner is not None and owner.ambiguous:
                problems.append(Problem(
                    topics_file, 0, "retry-topic-ambiguous",
                    f"{name} fits more than one consumer group and topic this store knows (a push "
                    f"group's %RETRY%<group>, or a POP retry topic %RETRY%<group>_<topic>): the lineage "
                    f"gives its records to the group named by the whole rest of the name", WARNING))
        return problems

    def delay_offsets(self) -> dict[int, int]:
        return self._load_config(config_files.DELAY_OFFSET_FILE).value or {}

    def consumer_offsets(self) -> dict[str, dict[int, int]]:
        """The offsets of consumerOffset.json (or lmqConsumerOffset.json: :meth:`offsets_file`)
        or, on a store without it, those kept in RocksDB."""
        kept = self.rocksdb.table(OFFSETS)
        return kept if kept is not None else self._load_config(self.offsets_file()).value or {}

    def topics(self) -> dict[str, config_files.TopicConfig]:
        """topics.json's topics or, on a store without it, those kept in RocksDB."""
        kept = self.rocksdb.table(TOPICS)
        return kept if kept is not None else self._load_config(config_files.TOPICS_FILE).value or {}

    def subscription_groups(self) -> dict[str, config_files.SubscriptionGroupConfig]:
        """subscriptionGroup.json's groups or, on a store without it, those kept in RocksDB."""
        kept = self.rocksdb.table(GROUPS)
        return kept if kept is not None else self._load_config(config_files.SUBSCRIPTION_GROUP_FILE).value or {}


def _data_end(path: Path, start: int, end: int) -> int:
    """Where the last part of ``[start, end)`` of a file that holds data ends (``start`` when it is
    all holes): past it, up to ``end``, the file is holes, which read as zeros (lseek SEEK_DATA and
    SEEK_HOLE; ``end`` when the file system cannot tell)."""
    if not hasattr(os, "SEEK_DATA"):
        return end
    last = start
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return end
    try:
        at = start
        while at < end:
            try:
                data = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after ``at``
                    break
                return end
            if data >= end:
                break
            at = os.lseek(fd, data, os.SEEK_HOLE)
            last = min(at, end)
    except OSError:
        return end
    finally:
        os.close(fd)
    return last


def _head_nonzero(path: Path) -> bool:
    """Whether a file's first 8 bytes hold anything but zeros (False when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return any(fh.read(8))
    except OSError:
        return False


def tree_digest(root: Path) -> dict[str, tuple[int, str]]:
    """(size, SHA-256) of every file under ``root``: lets a caller prove a scan changed nothing."""
    result = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file():
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(READ_CHUNK_BYTES):
                    digest.update(chunk)
            result[path.relative_to(root).as_posix()] = (path.stat().st_size, digest.hexdigest())
    return result


def _units_of(path: Path, pos: int, data: bytes) -> Iterator[tuple[Path, int, CqUnit]]:
    """The units of one piece of a queue file (pre-blank units left out)."""
    start_unit = (int(path.name) + pos) // CQ_UNIT_SIZE_BYTES
    for i, (phys, size, tags) in enumerate(CQ_UNIT.iter_unpack(data)):
        if (phys, size, tags) == (0, CQ_PRE_BLANK_UNIT_SIZE, 0):
            continue
        yield path, pos + i * CQ_UNIT_SIZE_BYTES, CqUnit(start_unit + i, phys, size, tags)


def _expected_units(old: QueueMark | None, named: int | None) -> int | None:
    """The units a queue's records name up to where this scan stopped: the last import's count
    (its mark's) and this scan's, the larger (None: neither is known)."""
    known = [n for n in (old.expected if old is not None else None, named) if n is not None]
    return max(known) if known else None


def _first_or_count(found: list | None, rel: str, pos: int, unit: CqUnit) -> list:
    """``[count, file, position, queue_offset, phys_offset, size]`` of the first unit, counted on."""
    if found is None:
        return [1, rel, pos, unit.queue_offset, unit.phys_offset, unit.size]
    found[0] += 1
    return found


def _tail_after(old: QueueMark | None, pieces: list[tuple[Path, int, bytes]]) -> tuple[str | None, list[list[int]]]:
    """A schedule queue's last units after this read: the last file holding units, and its last
    :data:`TAIL_UNITS` units (pre-blank ones included, as the broker wrote them)."""
    tail_file = old.tail_file if old is not None else None
    tail = list(old.tail) if old is not None else []
    for path, pos, data in pieces:
        if path.name != tail_file:
            tail_file, tail = path.name, []
        units = len(data) // CQ_UNIT_SIZE_BYTES
        skip = units - min(units, TAIL_UNITS)
        start_unit = (int(path.name) + pos) // CQ_UNIT_SIZE_BYTES + skip
        tail.extend([start_unit + i, phys, size, tags]
                    for i, (phys, size, tags) in enumerate(CQ_UNIT.iter_unpack(data[skip * CQ_UNIT_SIZE_BYTES:])))
        tail = tail[-TAIL_UNITS:]
    return tail_file, tail


@dataclass
class _QueueFindings:
    """What the check found in one queue: the first unit across the first offset and the first
    past the valid end, each with a count."""

    across: list | None = None
    past: list | None = None

    def problems(self, topic: str, queue_id: int, valid_end: int, first_offset: int) -> list[Problem]:
        found = []
        if self.across:
            count, rel, pos, queue_offset, phys, size = self.across
            found.append(Problem(
                rel, pos, "cq-across-first-offset",
                f"{count} unit(s) of {topic}/{queue_id} start before the commit log's first "
                f"offset ({first_offset}) and end after it, but no record crosses a file "
                f"boundary; first: queue offset {queue_offset} -> phys {phys} size {size}"))
        if self.past:
            count, rel, pos, queue_offset, phys, size = self.past
            found.append(Problem(
                rel, pos, "cq-past-commitlog",
                f"{count} unit(s) of {topic}/{queue_id} point past the end of the valid commit "
                f"log ({valid_end}); first: queue offset {queue_offset} -> phys "
                f"{phys} size {size}"))
        return found
