"""The commit log: every record of every topic, appended to one queue of fixed-size files (§1).

A record never crosses a file end: when ``size + 8`` does not fit in what is left of the file, an
8-byte BLANK record (``int32 maxBlank, int32 BLANK_MAGIC_CODE``) closes the file, the rest of it
stays zero, and the same record is written at offset 0 of the next file (§1.8). The queue offset
of each ``topic-queueId`` is assigned here, inside the append, as 4.9.4's ``doAppend`` does.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker_core import codec
from broker_core.constants import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH_BYTES,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    SCHEDULE_TOPIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from broker_core.delay_levels import clamp_level, deliver_timestamp
from broker_core.errors import CorruptRecordError
from broker_core.message import PROP_DELAY, PROP_TAGS, tags_code
from broker_core.store.mapped_file import MappedFile, MappedFileQueue
from broker_core.store.problem import Problem

COMMIT_LOG_DIR_NAME = "commitlog"
# Problem kinds of the commit log's half of check() (stable strings: reports and tests match on them).
CORRUPT_RECORD = "corrupt_record"
DATA_ENDS_EARLY = "data_ends_early"
_INT32 = struct.Struct(">i")
_HEAD = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
# Recovery and check() read a file in windows of this size rather than all of a 1 GiB file at once.
SCAN_WINDOW_BYTES = 8 * 1024 * 1024
_JAVA_INT_RE = re.compile(r"[+-]?[0-9]+")
JAVA_INT_MIN = -(2**31)
JAVA_INT_MAX = 2**31 - 1


def java_parse_int(text: str) -> int | None:
    """Integer.parseInt: an optional sign and ASCII digits within int32, else None."""
    if not text.isascii() or not _JAVA_INT_RE.fullmatch(text):
        return None
    value = int(text)
    return value if JAVA_INT_MIN <= value <= JAVA_INT_MAX else None


def record_tags_code(topic: str, properties, store_ts: int, delay_levels: list[int]) -> int:
    """The consume-queue tags code of a stored record (checkMessageAndReturnSize, §2.2).

    The Java hash of TAGS; for a SCHEDULE_TOPIC_XXXX record with DELAY, the deliver time of its
    (clamped) level when that level is above 0. A DELAY that is not an int makes RocketMQ's read of
    the record fail, so it raises CorruptRecordError.
    """
    code = tags_code(properties.get(PROP_TAGS))
    if topic == SCHEDULE_TOPIC:
        text = properties.get(PROP_DELAY)
        if text is not None:
            level = java_parse_int(text)
            if level is None:
                raise CorruptRecordError(f"DELAY property {text!r} of a schedule record is not an int")
            level = clamp_level(level, len(delay_levels))
            if level > 0:
                code = deliver_timestamp(delay_levels, level, store_ts)
    return code


TOPIC_FIELD_CACHE_ENTRIES_MAX = 100_000  # distinct topics whose encoded field is kept
HOST_CACHE_ENTRIES_MAX = 10_000


class FieldCache:
    """Encoded topic fields and host parts, computed once per distinct value (the append path)."""

    def __init__(self):
        # What topic_field and hosts return, by their arguments: the append path reads these
        # first (a dict lookup, no call) and calls the method only for a value not seen yet.
        self.topic_fields: dict[str, bytes] = {}
        self.host_pairs: dict[tuple[str, str], tuple] = {}
        self._hosts: dict[str, bytes] = {}

    def topic_field(self, topic: str) -> bytes:
        """The v1 topic field: a 1-byte length, then the UTF-8 bytes (the topic is validated)."""
        field_bytes = self.topic_fields.get(topic)
        if field_bytes is None:
            field_bytes = codec.encode_topic_field(topic)
            if len(self.topic_fields) < TOPIC_FIELD_CACHE_ENTRIES_MAX:
                self.topic_fields[topic] = field_bytes
        return field_bytes

    def hosts(self, born_host: str, store_host: str) -> tuple[bytes, bytes, int, struct.Struct, int]:
        """(born host field, store host field, sysFlag V6 bits, header struct, fixed size).

        The fixed size is the bytes of a record besides its body, topic and properties: the
        header's and the properties length field's.

        A broker sees few (born, store) host pairs, so the whole tuple is kept per pair.
        """
        key = (born_host, store_host)
        parts = self.host_pairs.get(key)
        if parts is None:
            born_field = self.host(born_host)
            store_field = self.host(store_host)
            born_v6 = len(born_field) == codec.HOST_V6_BYTES
            store_v6 = len(store_field) == codec.HOST_V6_BYTES
            header = codec.RECORD_HEADERS_HOSTS_PACKED[born_v6 | store_v6 << 1]
            parts = (born_field, store_field,
                     born_v6 * SYSFLAG_BORNHOST_V6 | store_v6 * SYSFLAG_STOREHOST_V6, header,
                     header.size + codec.PROPERTIES_LENGTH.size)
            if len(self.host_pairs) < HOST_CACHE_ENTRIES_MAX:
                self.host_pairs[key] = parts
        return parts

    def host(self, host: str) -> bytes:
        """The host's record field (address and port, ``codec.host_field``)."""
        field_bytes = self._hosts.get(host)
        if field_bytes is None:
            field_bytes = codec.host_field(host)
            if len(self._hosts) < HOST_CACHE_ENTRIES_MAX:
                self._hosts[host] = field_bytes
        return field_bytes


@dataclass
class RecordCheck:
    """What a CRC-checked read of the whole log found: its problems, each live record's
    ``(topic, queue_id, queue_offset, size)`` by physical offset, and the next queue offset each
    ``(topic, queue_id)`` should have. Prepared and rolled-back transaction halves are not live."""

    problems: list[Problem] = field(default_factory=list)
    records: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class ScanStep:
    """What a scan found at ``phys_offset``: a record, a BLANK (``record`` is a codec.Blank),
    or the end of valid data (``record`` None, ``error`` set when the bytes were damaged)."""

    phys_offset: int
    record: object
    error: CorruptRecordError | None = None
    tags_code: int = 0


class CommitLog:
    """Append and read records; the queue offsets per ``topic-queueId``; the END_OF_FILE rule."""

    def __init__(self, root: Path, file_size: int, delay_levels: list[int], *, check_crc: bool = True):
        assert file_size > END_FILE_MIN_BLANK_LENGTH_BYTES, f"file size {file_size} too small"
        self.directory = Path(root) / COMMIT_LOG_DIR_NAME
        self.file_size = file_size
        self.delay_levels = delay_levels
        self.check_crc = check_crc
        self.files = MappedFileQueue(self.directory, file_size)
        # CommitLog.topicQueueTable: next queue offset per "topic-queueId".
        self.topic_queue_table: dict[str, int] = {}

    def load(self) -> None:
        self.files.load()

    # --- appending ----------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """getMaxOffset: the end of written data (the next record's physical offset)."""
        return self.files.wrote_offset

    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.files.flushed_offset

    def fits_in_a_file(self, size: int) -> bool:
        """A record larger than a file less the BLANK margin could never be written anywhere."""
        return size + END_FILE_MIN_BLANK_LENGTH_BYTES <= self.file_size

    def append(self, buf: bytearray, key: str, queue_dispatch: bool, store_ts: int) -> tuple[int, int]:
        """Write an encoded record (placeholders at the append-time fields); return (phys, queue offset).

        ``queue_dispatch`` is False for PREPARED/ROLLBACK records: they get queue offset 0 and do
        not advance the table (doAppend).
        """
        files = self.files
        size = len(buf)
        space = files.files[-1].end - files.wrote_offset if files.files else 0
        if space == 0:
            files.ensure_writable_file(files.wrote_offset)
            space = self.file_size
        if size + END_FILE_MIN_BLANK_LENGTH_BYTES > space:
            # END_OF_FILE: only the 8 header bytes of the blank are written; the file is full.
            files.append(codec.encode_blank(space))
            files.mark_file_full()
            files.ensure_writable_file()
        table = self.topic_queue_table
        queue_offset = table.get(key, 0) if queue_dispatch else 0
        phys = files.wrote_offset
        codec.patch_append(buf, queue_offset, phys, store_ts)
        files.append(buf)
        if queue_dispatch:
            table[key] = queue_offset + 1
        return phys, queue_offset

    def reserve(self, size: int, key: str, queue_dispatch: bool, units: int = 1) -> tuple[int, int]:
        """Place a record of ``size`` bytes: (physical offset, queue offset).

        The END_OF_FILE blank is written here when the record does not fit the current file. The
        caller encodes the record with the returned offsets and appends it to ``files`` before
        any other append (``files.append`` returns the offset it wrote at: the physical offset).
        A batch places its ``units`` records at once, ``size`` bytes in all, in one file; their
        queue offsets follow on from the returned one.
        """
        files = self.files
        wrote = files.wrote_offset
        last = files.files[-1] if files.files else None
        if last is None or wrote == last.end:
            last = files.ensure_writable_file(wrote)
        space = last.end - wrote
        if size + END_FILE_MIN_BLANK_LENGTH_BYTES > space:
            files.append(codec.encode_blank(space))
            files.mark_file_full()
            files.ensure_writable_file()
            wrote = files.wrote_offset
        if not queue_dispatch:
            return wrote, 0
        table = self.topic_queue_table
        queue_offset = table.get(key, 0)
        table[key] = queue_offset + units
        return wrote, queue_offset

    def unreserve(self, key: str, queue_offset: int) -> None:
        """Give back the queue offsets of a reservation whose records could not be encoded (nothing
        was appended): the next record takes ``queue_offset`` again, so no gap opens in the queue.
        A BLANK the reservation wrote at a file end stays: it ends that file as any other does."""
        self.topic_queue_table[key] = queue_offset

    # --- reading ------------------------------------------------------------------------------

    def record_size_at(self, phys: int) -> int | None:
        head = self.files.read(phys, 4)
        return _INT32.unpack(head)[0] if len(head) == 4 else None

    def read_record(self, phys: int, size: int | None = None, *, check_crc: bool = False,
                    size_hint: int | None = None):
        """The record at ``phys`` (a codec.Record), or None where none can be read.

        Like lookMessageByOffset, the size is read from the first 4 bytes when not given, and
        an offset at or beyond the end of written data gives None. Damage raises
        CorruptRecordError. ``size_hint`` (without ``size``) is a guess of the size: when the
        record's TOTALSIZE matches it, one read is saved; otherwise it is ignored.
        """
        if phys < self.min_offset or phys >= self.max_offset:
            return None
        if size is None and size_hint is not None and size_hint >= 4:
            data = self.files.read(phys, size_hint)
            if len(data) == size_hint and _INT32.unpack_from(data)[0] == size_hint:
                return self._decode(data, check_crc)
        if size is None:
            size = self.record_size_at(phys)
            if size is None or size <= 0:
                return None
        data = self.files.read(phys, size)
        if len(data) < size:
            raise CorruptRecordError(
                f"record of {size} bytes runs past the end of written data", where="commitlog",
                offset=phys)
        return self._decode(data, check_crc)

    @staticmethod
    def _decode(data: bytes, check_crc: bool):
        found = codec.decode_record(data, 0, check_crc=check_crc, limit=len(data))
        if found is None or isinstance(found, codec.Blank):
            return None
        return found

    def scan(self, start: int, *, check_crc: bool | None = None) -> Iterator[ScanStep]:
        """Every record from ``start`` on, file by file, as recovery reads them (§3.8).

        A BLANK moves to the next file; a step with ``record`` None ends the valid data (its
        ``error`` says why when the bytes were damaged rather than simply unwritten).
        """
        crc = self.check_crc if check_crc is None else check_crc
        files = self.files.files
        mapped = self.files.find_file(start)
        if mapped is None:
            yield ScanStep(start, None)
            return
        index = files.index(mapped)
        pos = start - mapped.start
        while True:
            step = None
            for step in self._scan_file(mapped, pos, crc):
                yield step
                if step.record is None or isinstance(step.record, codec.Blank):
                    break
            if step is not None and isinstance(step.record, codec.Blank) and index + 1 < len(files):
                index += 1
                mapped = files[index]
                pos = 0
                continue
            if step is None or isinstance(step.record, codec.Blank):
                # A BLANK in the last file, or nothing readable: valid data ends here.
                end = step.phys_offset if step is not None else mapped.start + pos
                yield ScanStep(end, None)
            return

    def _scan_file(self, mapped: MappedFile, pos: int, crc: bool) -> Iterator[ScanStep]:
        """Records of one file from ``pos``; stops after a BLANK or at the end of valid data."""
        window = b""
        window_pos = pos
        file_end = mapped.size
        while True:
            if pos + 8 > file_end:
                yield ScanStep(mapped.start + pos, None)
                return
            rel = pos - window_pos
            if rel + 8 > len(window):
                window_pos, window = pos, self._read_window(mapped, pos, SCAN_WINDOW_BYTES)
                rel = 0
                if len(window) < 8:
                    # Past the write position (or a short tail): no record starts here.
                    yield ScanStep(mapped.start + pos, None)
                    return
            size, magic = _HEAD.unpack_from(window, rel)
            if magic == BLANK_MAGIC_CODE:
                yield ScanStep(mapped.start + pos, codec.Blank(size))
                return
            if size > 0 and rel + size > len(window) and pos + size <= file_end:
                window_pos, window = pos, self._read_window(mapped, pos, max(size, SCAN_WINDOW_BYTES))
                rel = 0
            phys = mapped.start + pos
            try:
                found = codec.decode_record(window, rel, check_crc=crc, limit=len(window))
            except CorruptRecordError as exc:
                yield ScanStep(phys, None, CorruptRecordError(
                    exc.message, where=f"{COMMIT_LOG_DIR_NAME}/{mapped.path.name}", offset=phys))
                return
            if found is None:
                yield ScanStep(phys, None)
                return
            if isinstance(found, codec.Blank):
                yield ScanStep(phys, found)
                return
            try:
                code = record_tags_code(found.topic, found.properties, found.store_ts,
                                        self.delay_levels)
            except CorruptRecordError as exc:
                yield ScanStep(phys, None, CorruptRecordError(
                    exc.message, where=f"{COMMIT_LOG_DIR_NAME}/{mapped.path.name}", offset=phys))
                return
            yield ScanStep(phys, found, None, code)
            pos += found.total_size

    def _read_window(self, mapped: MappedFile, pos: int, n: int) -> bytes:
        return self.files.read(mapped.start + pos, min(n, mapped.size - pos))

    def first_store_timestamp(self, mapped: MappedFile) -> int | None:
        """The store time of a file's first record when its magic is a message magic, else None.

        isMappedFileMatchedRecover reads it without decoding the record.
        """
        found = codec.peek_magic_and_store_ts(self.files.read(mapped.start, codec.FIRST_RECORD_HEAD_BYTES))
        if found is None or found[0] not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2):
            return None
        return found[1]

    def check(self) -> list[Problem]:
        """Every damaged record, and unreadable bytes before the write position, without raising."""
        return self.check_records().problems

    def check_records(self) -> RecordCheck:
        """Read the whole log with CRC checks: its problems, and where each live record belongs
        (what a post-mortem compares the consume queues with)."""
        found = RecordCheck()
        end = self.min_offset
        if self.files.files:
            for step in self.scan(self.min_offset, check_crc=True):
                if step.record is None:
                    end = step.phys_offset
                    if step.error is not None:
                        found.problems.append(Problem(self.file_of(step.phys_offset), step.phys_offset,
                                                      CORRUPT_RECORD, step.error.message))
                    break
                if isinstance(step.record, codec.Blank):
                    continue
                rec = step.record
                if rec.sys_flag & SYSFLAG_TRANSACTION_MASK in (SYSFLAG_TRANSACTION_PREPARED,
                                                               SYSFLAG_TRANSACTION_ROLLBACK):
                    continue
                found.records[step.phys_offset] = (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size)
                key = (rec.topic, rec.queue_id)
                found.next_offset[key] = max(found.next_offset.get(key, 0), rec.queue_offset + 1)
        if end < self.max_offset:
            found.problems.append(Problem(
                self.file_of(end), end, DATA_ENDS_EARLY,
                f"valid records end at {end} but the write position is {self.max_offset} "
                f"({self.max_offset - end} bytes unreadable)"))
        return found

    def file_of(self, offset: int) -> str:
        """The ``commitlog/<file>`` that holds ``offset`` ("?" past the files), for findings."""
        mapped = self.files.find_file(offset)
        name = mapped.path.name if mapped is not None else "?"
        return f"{COMMIT_LOG_DIR_NAME}/{name}"

    # --- flush, truncation, teardown ----------------------------------------------------------

    def flush(self) -> int:
        return self.files.flush()

    def crash(self) -> int:
        return self.files.drop_unflushed()

    def truncate_to(self, offset: int) -> None:
        """truncateDirtyFiles(processOffset) after recovery."""
        self.files.truncate_to(offset)

    def close(self) -> None:
        self.files.close()
