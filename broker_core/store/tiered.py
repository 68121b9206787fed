"""A 5.x broker's tiered store with the POSIX backend (``tieredstore``), read-only.

With ``messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore`` and
``tieredBackendServiceProvider=...PosixFileSegment`` a broker copies, queue by queue, the records
its consume queues list into files under ``tieredStoreFilePath`` and keeps them for
``tieredStoreFileReservedTime`` (72 h), past the local commit log's retention. This module reads
them back (docs/rocketmq-5x.md, "Tiered storage", says what a real 5.3.3 broker wrote):

* ``<tier>/<md5(cluster)[:8]>_<cluster>/<broker>/<topic>/<queueId>/COMMIT_LOG/<file>``: the queue's
  records back to back, the original bytes but for PHYSICALOFFSET, which the upload rewrites to
  the record's position in the queue's tier log (``CommitLogInputStream``): the record's original
  physical offset, and so its offset msgId, is not in the tier. Each file is named
  ``<md5(base)[:8]><base, 20 digits>`` after its position in the queue's log (``PosixFileSegment``,
  ``MessageStoreUtil.offset2FileName``), and a record never spans two;
* ``.../CONSUME_QUEUE/<file>``: 20-byte units ``i64 position in the queue's log, i32 size, i64
  tags code`` (``FlatMessageFile.appendConsumeQueue``), the first file named after
  ``queue offset x 20``;
* ``<tier>/.../<broker>/rmq_sys_INDEX/0/INDEX/``: the tier's own index of keys (not read);
* ``<store root>/config/tieredStoreMetadata.json``: the segments the broker knows of, with their
  committed sizes and store-time ranges (``DefaultMetadataStore``).

Only topics ``MessageStoreTopicFilter`` lets through are tiered (:func:`tier_keeps_topic`): a real
topic, ``%RETRY%g`` and ``%DLQ%g`` are; ``SCHEDULE_TOPIC_XXXX``, the timer and transaction topics and
every ``rmq_sys_*`` topic never are. Damage is reported as :class:`Problem` rows with the file
(relative to the tier root) and position, never raised: the valid records are still read.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.codec import Blank, Record, decode_record
from broker_core.constants import LMQ_PREFIX
from broker_core.errors import BadInputError, CorruptRecordError
from broker_core.names import is_system_topic
from broker_core.store.problem import ERROR, WARNING, Problem

COMMIT_LOG_DIR = "COMMIT_LOG"  # FileSegmentType.COMMIT_LOG.toString()
CONSUME_QUEUE_DIR = "CONSUME_QUEUE"
INDEX_TOPIC = "rmq_sys_INDEX"  # MessageStoreUtil.RMQ_SYS_TIERED_STORE_INDEX_TOPIC
METADATA_PATH = "config/tieredStoreMetadata.json"  # DefaultMetadataStore.configFilePath, under the store root
# FileSegmentType codes in the metadata's segments.
SEGMENT_TYPE_COMMIT_LOG, SEGMENT_TYPE_CONSUME_QUEUE = 0, 1
TIER_CQ_UNIT = struct.Struct(">qiq")  # MessageFormatUtil.CONSUME_QUEUE_UNIT_SIZE = 20
HASH_PREFIX_CHARS = 8  # MessageStoreUtil.getHash / offset2FileName: the first 8 hex digits of an MD5
OFFSET_DIGITS = 20
SEGMENT_NAME = re.compile(r"([0-9a-f]{8})(\d{20})")
# Topics the tier never keeps beyond TopicValidator's system topics (MessageStoreTopicFilter):
# 5.x's RocksDB offset topic, and LMQ queues (MixAll.isLmq).
ROCKSDB_OFFSET_TOPIC = "CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC (5.x)
# A tier holds one directory per broker; a listing of candidates in an error stays this short.
NAMES_SHOWN_MAX = 10
# A bare numeric key of fastjson's output ({0:{ or ,12:{), quoted before the JSON is parsed.
_BARE_KEY = re.compile(r'([{,]\s*)(-?\d+)\s*:')
# File name prefix of a record read from the tier in the commitlog table (file_name column).
TIER_FILE_PREFIX = "tier:"


def md5_prefix(text: str) -> str:
    """The first 8 hex digits of the MD5 of ``text`` (UTF-8), as MessageStoreUtil.getHash gives them."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:HASH_PREFIX_CHARS]


def cluster_dir_name(cluster: str) -> str:
    """``<md5(cluster)[:8]>_<cluster>``: a cluster's directory under tieredStoreFilePath."""
    return f"{md5_prefix(cluster)}_{cluster}"


def segment_file_name(base_offset: int) -> str:
    """``<md5(base)[:8]><base, 20 digits>``: a segment file's name (MessageStoreUtil.offset2FileName)."""
    return f"{md5_prefix(str(base_offset))}{base_offset:0{OFFSET_DIGITS}d}"


def tier_keeps_topic(topic: str, cluster: str, broker: str) -> bool:
    """Whether a broker's tier copies ``topic``'s records (MessageStoreTopicFilter.filterTopic, negated)."""
    return not (not topic.strip() or is_system_topic(topic) or topic == ROCKSDB_OFFSET_TOPIC
                or topic in (cluster, broker) or topic.startswith(LMQ_PREFIX))


@dataclass(frozen=True)
class Segment:
    """One file of a queue's tiered commit log or consume queue."""

    path: Path
    base_offset: int
    size: int


@dataclass(frozen=True)
class TierQueue:
    """A queue's directory in the tier: its topic, queue id and segment files, by base offset."""

    topic: str
    queue_id: int
    path: Path
    commit_log: tuple[Segment, ...]
    consume_queue: tuple[Segment, ...]


@dataclass(frozen=True)
class TierEntry:
    """A record read from the tier: where (``file_name`` under the tier root, ``position`` in the
    queue's log) and what."""

    record: Record
    file_name: str
    position: int


@dataclass
class TierCounts:
    """What a read of the tier found, for the import's summary."""

    queues: int = 0
    segments: int = 0
    records: int = 0
    duplicates: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)


def locate_broker_dir(root: Path, broker: str | None) -> Path:
    """The directory of ``broker`` (or of the tier's only broker) under a tier root (tieredStoreFilePath).

    BadInputError when the root is not a tier, or holds several brokers and ``broker`` names none."""
    root = Path(root)
    if not root.is_dir():
        raise BadInputError("the tiered store directory does not exist", where=str(root),
                            hint="pass the broker's tieredStoreFilePath")
    brokers = sorted(b for c in root.iterdir() if _is_cluster_dir(c) for b in c.iterdir() if b.is_dir())
    if not brokers:
        raise BadInputError("no <md5>_<cluster>/<broker>/ directory: not a POSIX tiered store", where=str(root),
                            hint="pass the broker's tieredStoreFilePath (the directory holding <md5>_<cluster>/)")
    named = [b for b in brokers if b.name == broker]
    if len(named) == 1:
        return named[0]
    if len(brokers) == 1 and not named:
        return brokers[0]
    shown = ", ".join(str(b.relative_to(root)) for b in brokers[:NAMES_SHOWN_MAX])
    raise BadInputError(f"the tiered store holds {len(brokers)} broker directories and none is only "
                        f"{broker!r}: {shown}", where=str(root),
                        hint="pass --broker with the brokerName whose tier to read")


def _is_cluster_dir(path: Path) -> bool:
    prefix, _, cluster = path.name.partition("_")
    return path.is_dir() and bool(cluster) and prefix == md5_prefix(cluster)


class TieredStore:
    """The tier of one broker: its queues and their records, read-only.

    ``root`` is the broker's tieredStoreFilePath; ``broker`` picks its directory when the tier holds
    several. ``store_root`` (the broker's local store) is where its metadata file is, if any.
    """

    def __init__(self, root: Path | str, broker: str | None = None, store_root: Path | str | None = None):
        self.root = Path(root)
        self.broker_dir = locate_broker_dir(self.root, broker)
        self.broker = self.broker_dir.name
        self.cluster = self.broker_dir.parent.name.partition("_")[2]
        self.problems: list[Problem] = []
        self.counts = TierCounts()
        self.metadata_file = Path(store_root) / METADATA_PATH if store_root is not None else None
        self.metadata = self._read_metadata()
        self.queues = self._scan_queues()
        self._check_against_metadata()

    # --- the files -----------------------------------------------------------------------------

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def _problem(self, path: Path | str, offset: int, kind: str, reason: str, severity: str = WARNING) -> None:
        """A problem in a tier file, named ``tier:<path under the tier root>``."""
        rel = self._rel(path) if isinstance(path, Path) else path
        self.problems.append(Problem(f"{TIER_FILE_PREFIX}{rel}", offset, kind, reason, severity))

    def _scan_queues(self) -> list[TierQueue]:
        queues = []
        for topic_dir in sorted(p for p in self.broker_dir.iterdir() if p.is_dir()):
            if topic_dir.name == INDEX_TOPIC:
                continue
            for queue_dir in sorted((p for p in topic_dir.iterdir() if p.is_dir()), key=lambda p: p.name):
                if not queue_dir.name.isdigit():
                    self._problem(queue_dir, 0, "tier-unknown-file", "not a queue id directory")
                    continue
                queues.append(TierQueue(topic_dir.name, int(queue_dir.name), queue_dir,
                                        self._segments(queue_dir / COMMIT_LOG_DIR),
                                        self._segments(queue_dir / CONSUME_QUEUE_DIR)))
        self.counts.queues = len(queues)
        self.counts.segments = sum(len(q.commit_log) + len(q.consume_queue) for q in queues)
        return queues

    def _segments(self, directory: Path) -> tuple[Segment, ...]:
        if not directory.is_dir():
            return ()
        found = []
        for path in directory.iterdir():
            match = SEGMENT_NAME.fullmatch(path.name)
            if match is None or match.group(1) != md5_prefix(str(int(match.group(2)))):
                self._problem(path, 0, "tier-unknown-file",
                              "not a segment file name (<md5(offset)[:8]><offset, 20 digits>)")
                continue
            found.append(Segment(path, int(match.group(2)), path.stat().st_size))
        return tuple(sorted(found, key=lambda s: s.base_offset))

    # --- the records ---------------------------------------------------------------------------

    def entries(self) -> Iterator[TierEntry]:
        """Every record of the tier, queue by queue (topic, then queue id), each queue's in order;
        a record's ``phys_offset`` is its position in its queue's tier log (the tier rewrote it).

        A record stored twice in one queue's log (the broker copied it again after a crash between
        its commit-log and consume-queue writes) is yielded once, by queue offset, and counted as a
        duplicate."""
        for queue in self.queues:
            units = self._consume_queue_units(queue)
            seen: set[int] = set()
            for entry in self._queue_entries(queue, units):
                if entry.record.queue_offset in seen:
                    self.counts.duplicates += 1
                    continue
                seen.add(entry.record.queue_offset)
                self.counts.records += 1
                self.counts.by_topic[queue.topic] = self.counts.by_topic.get(queue.topic, 0) + 1
                yield entry

    def _queue_entries(self, queue: TierQueue, units: dict[int, tuple[int, int]]) -> Iterator[TierEntry]:
        expected = queue.commit_log[0].base_offset if queue.commit_log else 0
        for segment in queue.commit_log:
            if segment.base_offset != expected:
                self._problem(segment.path, segment.base_offset, "tier-gap",
                              f"the queue's log jumps from {expected} to {segment.base_offset}: "
                              "the bytes between are missing", ERROR)
            yield from self._segment_entries(queue, segment, units)
            expected = segment.base_offset + segment.size

    def _segment_entries(self, queue: TierQueue, segment: Segment,
                         units: dict[int, tuple[int, int]]) -> Iterator[TierEntry]:
        data = segment.path.read_bytes()
        pos = 0
        while pos < len(data):
            item = self._decode(segment, data, pos)
            if item is None:
                return
            where = segment.base_offset + pos
            if not self._in_place(queue, segment, where, item, units):
                return
            yield TierEntry(item, f"{TIER_FILE_PREFIX}{self._rel(segment.path)}", where)
            pos += item.total_size

    def _decode(self, segment: Segment, data: bytes, pos: int) -> Record | None:
        try:
            item = decode_record(data, pos)
        except CorruptRecordError as e:
            self._problem(segment.path, segment.base_offset + pos, "tier-corrupt-record", str(e), ERROR)
            return None
        if item is None or isinstance(item, Blank):
            # The tier writes records back to back and no end-of-file filler: anything else is damage.
            what = "an end-of-file blank" if isinstance(item, Blank) else "no record"
            self._problem(segment.path, segment.base_offset + pos, "tier-corrupt-record",
                          f"{what} where a record should start ({len(data) - pos} bytes left)", ERROR)
            return None
        return item

    def _in_place(self, queue: TierQueue, segment: Segment, where: int, record: Record,
                  units: dict[int, tuple[int, int]]) -> bool:
        """Whether a record belongs where it is: its queue's directory, and the consume-queue unit
        that names its position (if one does) gives its queue offset and size."""
        if (record.topic, record.queue_id) != (queue.topic, queue.queue_id):
            self._problem(segment.path, where, "tier-misplaced",
                          f"a record of {record.topic} queue {record.queue_id} in the log of {queue.topic} "
                          f"queue {queue.queue_id}", ERROR)
            return False
        if record.phys_offset != where:
            self._problem(segment.path, where, "tier-offset-mismatch",
                          f"PHYSICALOFFSET {record.phys_offset}: the tier writes a record's position in the "
                          f"queue's log ({where}) there")
        unit = units.get(where)
        if unit is not None and unit != (record.queue_offset, record.total_size):
            self._problem(segment.path, where, "tier-queue-mismatch",
                          f"the tier's consume queue names queue offset {unit[0]} of {unit[1]} bytes here, "
                          f"the record is queue offset {record.queue_offset} of {record.total_size} bytes")
        return True

    def _consume_queue_units(self, queue: TierQueue) -> dict[int, tuple[int, int]]:
        """{position in the queue's log: (queue offset, size)} from the tier's consume queue."""
        units: dict[int, tuple[int, int]] = {}
        for segment in queue.consume_queue:
            data = segment.path.read_bytes()
            if segment.base_offset % TIER_CQ_UNIT.size or len(data) % TIER_CQ_UNIT.size:
                self._problem(segment.path, segment.base_offset, "tier-queue-mismatch",
                              f"a consume-queue file of {len(data)} bytes from {segment.base_offset}: "
                              f"not whole {TIER_CQ_UNIT.size}-byte units")
            first = segment.base_offset // TIER_CQ_UNIT.size
            for i, (position, size, _tags) in enumerate(TIER_CQ_UNIT.iter_unpack(data[:len(data) - len(data) %
                                                                                      TIER_CQ_UNIT.size])):
                units[position] = (first + i, size)
        return units

    # --- the metadata --------------------------------------------------------------------------

    def _read_metadata(self) -> dict | None:
        """The broker's tieredStoreMetadata.json, or None (with a warning) when it is not there."""
        if self.metadata_file is None:
            return None
        if not self.metadata_file.is_file():
            self.problems.append(Problem(METADATA_PATH, 0, "tier-metadata-missing",
                                         "the store has no tieredStoreMetadata.json: the tier's files are read "
                                         "without the broker's list of segments", WARNING))
            return None
        try:
            # fastjson writes the maps keyed by a number (a segment's base offset, a queue id) with
            # bare keys ({0:{...}}), which JSON does not allow: they are quoted first.
            text = _BARE_KEY.sub(r'\1"\2":', self.metadata_file.read_text(encoding="utf-8"))
            doc = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            self.problems.append(Problem(METADATA_PATH, 0, "tier-metadata-unreadable", str(e), WARNING))
            return None
        return doc if isinstance(doc, dict) else None

    def listed_segments(self) -> dict[tuple[str, int], int]:
        """{(segment path under the tier's cluster directory, type code): committed size} for the
        segments the metadata lists under this broker."""
        listed = {}
        for key in ("commitLogFileSegmentTable", "consumeQueueFileSegmentTable"):
            for path, by_offset in (self.metadata or {}).get(key, {}).items():
                if not path.startswith(f"{self.broker}/"):
                    continue
                for meta in by_offset.values():
                    folder = COMMIT_LOG_DIR if meta.get("type") == SEGMENT_TYPE_COMMIT_LOG else CONSUME_QUEUE_DIR
                    listed[(f"{path}/{folder}/{segment_file_name(int(meta['baseOffset']))}",
                            int(meta.get("type", 0)))] = int(meta.get("size", 0))
        return listed

    def _check_against_metadata(self) -> None:
        """A segment the metadata lists that is not on disk, or shorter than its committed size, is
        damage; a file it does not list is one the broker ignores (it recovers from the metadata)."""
        if self.metadata is None:
            return
        cluster_dir = self.broker_dir.parent
        listed = self.listed_segments()
        on_disk = {self._rel(s.path): s for q in self.queues for s in (*q.commit_log, *q.consume_queue)}
        prefix = f"{cluster_dir.name}/"
        for (path, _kind), size in sorted(listed.items()):
            segment = on_disk.get(prefix + path)
            if segment is None:
                self._problem(prefix + path, 0, "tier-segment-missing",
                              f"tieredStoreMetadata.json lists this segment ({size} bytes committed), "
                              "the tier has no such file", ERROR)
            elif segment.size < size:
                self._problem(segment.path, segment.base_offset + segment.size, "tier-segment-short",
                              f"{segment.size} bytes, tieredStoreMetadata.json says {size} were committed", ERROR)
        listed_paths = {prefix + p for p, _ in listed}
        for rel in sorted(set(on_disk) - listed_paths):
            self._problem(rel, 0, "tier-segment-unlisted",
                          "tieredStoreMetadata.json does not list this file: the broker does not "
                          "read it (its records are imported all the same)")
