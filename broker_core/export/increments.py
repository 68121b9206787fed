"""Importing a store again reads only what is new: the run remembers where each broker's import ended.

After every import of a broker, ``<run>/import_state/<broker>.json`` holds where the commit-log
scan stopped (file and position), what it had counted up to there (records, BLANKs, store times,
records by topic, store hosts), the scan's problems before that point, and a fingerprint of the
bytes just before it (the last record's fixed header, TOTALSIZE to STORETIMESTAMP, and the BLANK's 8
bytes when the scan left a file through one), taken from the bytes the scan read. The
state is written into the run directory with the data and swapped in with it, so the two always
agree.

The next import of the same store into the same run and broker continues from there when all of
these hold (:func:`plan_resume`), and otherwise reads the store whole, saying why:

* the store is the same directory, with the same commit-log file size;
* the file the last import ended in is still there. Retention deleting older files is the normal
  life of a broker: the rows read from them are dropped from the run (a Parquet file holding some
  is rewritten without them; the store is not read again) and the counts are those of the files
  left, kept per file in the state, so the run is what a fresh import of the store gives. Retention
  deleting the file the last import ended in (records may have gone before any import read them:
  a gap) makes a full import, which never papers over the gap;
* the files from the first one up to where the last import ended are all there, none damaged;
* the last import found no damage before where it ended (damage in the log can make RocketMQ's
  recovery keep a different part of it once the recovery window moves);
* the fingerprinted bytes are unchanged (read once, 64 or 72 bytes). RocketMQ only ever appends;
  the one thing that rewrites bytes already written is a restart's recovery truncating the tail
  (and appending new records over it), which always changes the last record imported (its body
  CRC, queue offset, physical offset or store time) or the BLANK after it.

A continued import scans from the remembered point, writes the new records as another file of the
broker's commitlog table (``part-<broker>+<offset>.parquet``), and rewrites the broker's small
tables whole: runs, store_problems (the remembered problems, then those of the new part and of
the files, consume queues and config read again), delay_offsets and consumer_offsets (config
files, read again). ``tests/broker_core/export/test_increments.py`` holds every table to a fresh
import of the grown store. Once a broker has :data:`INCREMENT_PARTS_MAX` increments the next
import merges its commitlog files into one (Parquet to Parquet; the store is not read again).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.constants import BLANK_MAGIC_CODE
from broker_core.export.broker_parts import IMPORT_STATE_DIR_NAME, STATE_SUFFIX, broker_parts_of, part_name
from broker_core.export.columnar import CommitlogWriter
from broker_core.export.replicas import link_side
from broker_core.store.cq_marks import QueueMark
from broker_core.store.problem import ERROR, Problem
from broker_core.store.reader import ResumePoint, StoreReader

# The remembered import's format. 3: the commitlog rows gained prepared_tx_offset, so a broker
# imported before is read whole once (a continued import would mix part files with and without it).
# 4: each consume queue's mark (cq_marks), so one earlier import is read whole once more.
# 5: the problems of POP bookkeeping bodies are remembered (their rows are kept, not read again).
STATE_VERSION = 5
# Commit-log problems a scan finds at one record, whatever the recovery window: an import that
# found only these before its end can be continued. Anything else before the end is damage.
CARRIED_PROBLEM_KINDS = ("phys-offset-mismatch", "blank-size")
# A broker's commitlog table is merged into one file when it has this many increments: each
# import of a live broker adds one, and thousands of small files slow every reader down.
INCREMENT_PARTS_MAX = 64


def state_path(run_dir: Path, broker: str) -> Path:
    return Path(run_dir) / IMPORT_STATE_DIR_NAME / f"{broker}{STATE_SUFFIX}"


@dataclass
class Tail:
    """Spans ``[offset, offset + size)`` of the commit log just before where a scan stopped: the
    last record's fixed header (:func:`broker_core.codec.record_head_bytes`, once the scan has
    said how long it is) and the BLANK the scan left its file through, if it did."""

    last_record: tuple[int, int] | None = None
    blank: tuple[int, int] | None = None
    # The BLANK's TOTALSIZE as the scan read it (its bytes are that and the magic): not kept.
    blank_size: int | None = field(default=None, compare=False)

    def record(self, offset: int, size: int) -> None:
        self.last_record, self.blank = (offset, size), None

    def blank_at(self, offset: int, size: int) -> None:
        self.blank, self.blank_size = (offset, min(size, BLANK_FINGERPRINT_BYTES)), size

    def spans(self) -> list[tuple[int, int]]:
        return [s for s in (self.last_record, self.blank) if s is not None]


# A BLANK's TOTALSIZE and magic: RocketMQ writes only these 8 bytes of it (the rest stays zero).
BLANK_FINGERPRINT_BYTES = 8
_BLANK_HEAD = struct.Struct(">iI")


@dataclass
class FileStats:
    """What the imports read from one commit-log file: kept per file, so that the counts of a run
    whose oldest files retention deleted are those of the files left."""

    records: int = 0
    blanks: int = 0
    first_store_ts: int | None = None
    last_store_ts: int | None = None
    by_topic: Counter = field(default_factory=Counter)
    hosts: set = field(default_factory=set)

    def add(self, records: int, first_store_ts: int, last_store_ts: int, by_topic, hosts) -> None:
        self.records += records
        if self.first_store_ts is None:
            self.first_store_ts = first_store_ts
        self.last_store_ts = last_store_ts
        self.by_topic.update(by_topic)
        self.hosts.update(h for h in hosts if h)

    def to_json(self) -> dict:
        return {"records": self.records, "blanks": self.blanks, "first_store_ts": self.first_store_ts,
                "last_store_ts": self.last_store_ts, "by_topic": dict(sorted(self.by_topic.items())),
                "hosts": sorted(self.hosts)}

    @classmethod
    def from_json(cls, doc: dict) -> FileStats:
        return cls(doc["records"], doc["blanks"], doc["first_store_ts"], doc["last_store_ts"],
                   Counter(doc["by_topic"]), set(doc["hosts"]))


def records_by_topic(files: dict[str, FileStats]) -> dict[str, int]:
    total: Counter = Counter()
    for stats in files.values():
        total.update(stats.by_topic)
    return dict(sorted(total.items()))


def store_hosts(files: dict[str, FileStats]) -> set[str]:
    return {h for stats in files.values() for h in stats.hosts}


@dataclass
class ImportState:
    """What the last import of a broker read, to go on from (``import_state/<broker>.json``)."""

    broker: str
    store_dir: str
    file_size: int
    first_offset: int
    resume: ResumePoint
    tail: Tail
    fingerprints: list[str]
    files: dict[str, FileStats] = field(default_factory=dict)
    # Where each consume queue's read stopped (None: the next import reads the queues whole).
    queues: dict[str, QueueMark] | None = None
    # The store times of the SCHEDULE records the levels' delays were read from (by offset).
    schedule_store_ts: dict[int, int | None] = field(default_factory=dict)
    # Where the last file was found zeros from to its end (StoreReader.zeros_from).
    zeros_from: int | None = None
    # What reading record bodies again found (inner batches, transaction ops) before the end.
    body_problems: list[Problem] = field(default_factory=list)
    # A live import's file of schedule_units, whose rows of the units its marks stand at are
    # provisional (the next import reads those units again and replaces them).
    schedule_provisional: str | None = None

    def to_json(self) -> dict:
        r = self.resume
        return {
            "version": STATE_VERSION, "broker": self.broker, "store_dir": self.store_dir,
            "file_size": self.file_size, "first_offset": self.first_offset,
            "resume": {"file": r.file_name, "position": r.position, "offset": r.offset,
                       "records": r.records, "blanks": r.blanks,
                       "first_store_ts": r.first_store_ts, "last_store_ts": r.last_store_ts,
                       "problems": [[p.file, p.offset, p.kind, p.reason, p.severity] for p in r.problems]},
            "tail": {"last_record": self.tail.last_record, "blank": self.tail.blank},
            "fingerprints": self.fingerprints,
            "files": {name: stats.to_json() for name, stats in sorted(self.files.items())},
            "queues": (None if self.queues is None else
                       {key: mark.to_json() for key, mark in sorted(self.queues.items())}),
            "schedule_store_ts": {str(k): v for k, v in sorted(self.schedule_store_ts.items())},
            "zeros_from": self.zeros_from,
            "body_problems": [[p.file, p.offset, p.kind, p.reason, p.severity] for p in self.body_problems],
            "schedule_provisional": self.schedule_provisional,
        }

    @classmethod
    def from_json(cls, doc: dict) -> ImportState:
        r = doc["resume"]
        tail = doc["tail"]
        return cls(
            broker=doc["broker"], store_dir=doc["store_dir"], file_size=doc["file_size"],
            first_offset=doc["first_offset"],
            resume=ResumePoint(r["file"], r["position"], r["records"], r["blanks"], r["first_store_ts"],
                               r["last_store_ts"], tuple(Problem(*p) for p in r["problems"])),
            tail=Tail(tuple(tail["last_record"]) if tail["last_record"] else None,
                      tuple(tail["blank"]) if tail["blank"] else None),
            fingerprints=list(doc["fingerprints"]),
            files={name: FileStats.from_json(f) for name, f in doc["files"].items()},
            queues=(None if doc["queues"] is None else
                    {key: QueueMark.from_json(m) for key, m in doc["queues"].items()}),
            schedule_store_ts={int(k): v for k, v in doc["schedule_store_ts"].items()},
            zeros_from=doc["zeros_from"],
            body_problems=[Problem(*p) for p in doc["body_problems"]],
            schedule_provisional=doc["schedule_provisional"])


def load_state(run_dir: Path, broker: str) -> ImportState | None:
    """The broker's remembered import, or None (never imported, or a state this code cannot read:
    the next import is then a full one)."""
    path = state_path(run_dir, broker)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("version") != STATE_VERSION:
            return None
        return ImportState.from_json(doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_state(run_dir: Path, state: ImportState) -> None:
    path = state_path(run_dir, state.broker)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state.to_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def fingerprints(reader: StoreReader, spans: list[tuple[int, int]]) -> list[str] | None:
    """SHA-256 of each span's bytes in the store now (None when a span is not there to read)."""
    found = []
    for offset, size in spans:
        cf = next((f for f in reader.files if f.start <= offset and offset + size <= f.start + reader.file_size),
                  None)
        if cf is None:
            return None
        try:
            with open(cf.path, "rb") as fh:
                fh.seek(offset - cf.start)
                data = fh.read(size)
        except OSError:
            return None
        if len(data) != size:
            return None
        reader.bytes_read["commitlog"] += len(data)
        found.append(hashlib.sha256(data).hexdigest())
    return found


def tail_fingerprints(reader: StoreReader, tail: Tail, state: ImportState | None) -> list[str] | None:
    """The fingerprints of ``tail`` (the spans before where this import's scan stopped), from bytes
    already read: a span the last import fingerprinted (``state``; this import checked it before
    going on), the last record's header as the scan read it (the span becomes that header), the
    BLANK's 8 bytes as the scan decoded them. Only a span none of these gives is read again."""
    head = reader.last_record_head
    if tail.last_record is not None and head is not None and head[0] == tail.last_record[0]:
        tail.last_record = (head[0], len(head[1]))
    known = dict(zip(state.tail.spans(), state.fingerprints, strict=True)) if state is not None else {}
    prints: list[str] = []
    for span in tail.spans():
        if span in known:
            prints.append(known[span])
        elif head is not None and span == (head[0], len(head[1])):
            prints.append(hashlib.sha256(head[1]).hexdigest())
        elif span == tail.blank and tail.blank_size is not None and span[1] == BLANK_FINGERPRINT_BYTES:
            prints.append(hashlib.sha256(_BLANK_HEAD.pack(tail.blank_size, BLANK_MAGIC_CODE)).hexdigest())
        else:
            again = fingerprints(reader, [span])
            if again is None:
                return None
            prints += again
    return prints


@dataclass(frozen=True)
class Plan:
    """How an import reads the store: from ``resume`` on (None: whole, ``reason`` says why when the
    broker was imported before), dropping the rows of files before ``drop_before`` (a file name:
    retention deleted the files before it since the last import)."""

    resume: ResumePoint | None = None
    reason: str | None = None
    drop_before: str | None = None
    files: dict[str, FileStats] = field(default_factory=dict)


def plan_import(state: ImportState | None, reader: StoreReader, store_root: Path, replicated: bool) -> Plan:
    """Whether this import goes on from the broker's last one (the module's rules), and from where."""
    resume, reason = plan_resume(state, reader, store_root, replicated)
    if resume is None:
        return Plan(reason=reason)
    if reader.first_offset == state.first_offset:
        return Plan(resume, files=dict(state.files))
    # Retention deleted the oldest files, not the one the last import ended in: their rows go, and
    # the counts are those of the files left (what a fresh import of the store counts).
    first = reader.first_offset
    files = {name: stats for name, stats in state.files.items() if int(name) >= first}
    with_records = [files[n] for n in sorted(files) if files[n].records]
    resume = dataclasses.replace(
        resume, records=sum(f.records for f in files.values()), blanks=sum(f.blanks for f in files.values()),
        first_store_ts=with_records[0].first_store_ts if with_records else None,
        last_store_ts=with_records[-1].last_store_ts if with_records else None,
        problems=tuple(p for p in resume.problems if p.offset >= first))
    return Plan(resume, drop_before=f"{first:020d}", files=files)


def plan_resume(state: ImportState | None, reader: StoreReader, store_root: Path,
                replicated: bool) -> tuple[ResumePoint | None, str | None]:
    """Where this import of the store goes on from: (resume point, None), or (None, why the store is
    read whole). (None, None) when the broker was never imported into the run. The resume point's
    counts are the last import's: :func:`plan_import` takes off those of files deleted since."""
    if state is None:
        return None, None
    resume = state.resume
    if replicated:
        return None, "the broker's master and slave are both in the run: they are merged from whole imports"
    if state.store_dir != str(store_root):
        return None, f"the last import of broker {state.broker} read another store ({state.store_dir})"
    # A last import that found only an empty file (a live broker's first, just created) read
    # nothing and learnt no size: it is gone on from like any other.
    if state.file_size and reader.file_size != state.file_size:
        return None, (f"the commit-log files are {reader.file_size} bytes, the last import read "
                      f"{state.file_size}-byte files")
    first = reader.first_offset
    if first < state.first_offset or first > int(resume.file_name) or \
            (first == int(resume.file_name) and resume.position == 0 and first > state.first_offset):
        gap = (f"; records from {resume.offset} to {first} were deleted before any import read them"
               if first > resume.offset else "")
        return None, (f"retention deleted the commit-log file the last import ended in (the log started at "
                      f"{state.first_offset}, now at {first}){gap}" if first > state.first_offset else
                      f"the log now starts at {first}, before the {state.first_offset} the last import read from")
    file_errors = [p for p in reader.problems if p.severity == ERROR]
    if file_errors:
        return None, f"the store's files have problems ({file_errors[0].kind} in {file_errors[0].file})"
    # Every file from the first to the one the last import ended in is still there (the one
    # after a BLANK may not be written yet).
    resume_start = int(resume.file_name)
    starts = [cf.start for cf in reader.files if cf.start <= resume_start]
    wanted = list(range(first, resume_start + (1 if resume.position else 0), reader.file_size))
    if starts[:len(wanted)] != wanted:
        missing = next((w for w, s in zip(wanted, starts + [None] * len(wanted), strict=False) if w != s),
                       resume_start)
        return None, f"commit-log file {missing:020d}, read by the last import, is missing"
    damage = [p for p in resume.problems if p.kind not in CARRIED_PROBLEM_KINDS and p.offset >= first]
    if damage:
        return None, (f"the last import found damage before where it ended ({damage[0].kind} at "
                      f"{damage[0].offset}): what recovery keeps there can change, so the store is read whole")
    now = fingerprints(reader, state.tail.spans())
    if now != state.fingerprints:
        at = state.tail.last_record[0] if state.tail.last_record else resume.offset
        return None, (f"the commit log changed under the last import: the bytes at {at} are not the ones "
                      "imported (the broker restarted and truncated its tail, or the files were replaced)")
    return resume, None


def carry_commitlog(old_parquet: Path, new_parquet: Path, broker: str, drop_before: str | None) -> None:
    """Put ``broker``'s earlier commitlog files into the new run: hard links as they are; without the
    rows read from files before ``drop_before`` (retention deleted those files), a file holding some
    of them rewritten row group by row group; merged into one file once the broker has
    :data:`INCREMENT_PARTS_MAX` increments. The broker keeps its part file, if only an empty one."""
    sources = broker_parts_of(Path(old_parquet) / "commitlog", broker)
    merge = len(sources) - 1 >= INCREMENT_PARTS_MAX
    merged = CommitlogWriter(new_parquet, part=part_name(broker)) if merge else None
    for path in sources:
        f = pq.ParquetFile(path)
        files = _file_name_range(f)
        if drop_before is None or (files is not None and files[0] >= drop_before):
            if merged is not None:
                for i in range(f.num_row_groups):
                    merged.write(f.read_row_group(i))
            else:
                link_side({path: Path("commitlog") / path.name}, new_parquet)
            continue
        writer = merged if merged is not None else CommitlogWriter(new_parquet, part=path.name)
        for i in range(f.num_row_groups):
            group = _file_name_range(f, i)
            if group is not None and group[1] < drop_before:
                continue
            table = f.read_row_group(i)
            writer.write(table.filter(pc.greater_equal(table.column("file_name"), drop_before)))
        if merged is None:
            if writer.close() == 0 and path.name != part_name(broker):
                writer.path.unlink()
    if merged is not None:
        merged.close()
    elif not (Path(new_parquet) / "commitlog" / part_name(broker)).exists():
        CommitlogWriter(new_parquet, part=part_name(broker)).close()


def _file_name_range(f: pq.ParquetFile, group: int | None = None) -> tuple[str, str] | None:
    """(smallest, largest) ``file_name`` of a Parquet file's rows (or one row group's), from the
    statistics; None when they are not there (the rows are then read)."""
    # The leaf column's index (a map column counts two leaves, so not the field's index).
    column = next(j for j in range(f.metadata.num_columns) if f.metadata.schema.column(j).path == "file_name")
    low = high = None
    for i in range(f.num_row_groups) if group is None else (group,):
        stats = f.metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return None
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    return (low, high) if low is not None else ("", "")


def increments_of(parquet_dir: Path, broker: str, table: str = "commitlog") -> list[Path]:
    """``broker``'s increment files of a table (its part excluded), in physical order."""
    return [p for p in broker_parts_of(Path(parquet_dir) / table, broker) if p.name != part_name(broker)]


def compact(sources: list[Path], parquet_dir: Path, broker: str) -> int:
    """Write ``sources`` (a broker's commitlog files, in physical order) as its one part file."""
    writer = CommitlogWriter(parquet_dir, part=part_name(broker))
    for path in sources:
        f = pq.ParquetFile(path)
        for i in range(f.num_row_groups):
            writer.write(f.read_row_group(i))
    return writer.close()


def carry_parts(old_parquet: Path, new_parquet: Path, broker: str, table: str, schema,
                keep_from: int | None = None) -> int:
    """Put ``broker``'s earlier files of ``table`` into the new run as they are (hard links),
    merged into one file once it has :data:`INCREMENT_PARTS_MAX` increments, or without the rows
    whose ``phys_offset`` is below ``keep_from`` (retention deleted their records); return the rows."""
    sources = broker_parts_of(Path(old_parquet) / table, broker)
    if len(sources) - 1 < INCREMENT_PARTS_MAX and keep_from is None:
        link_side({path: Path(table) / path.name for path in sources}, new_parquet)
        return sum(pq.ParquetFile(path).metadata.num_rows for path in sources)
    writer = CommitlogWriter(new_parquet, table, part=part_name(broker), schema=schema)
    for path in sources:
        f = pq.ParquetFile(path)
        for i in range(f.num_row_groups):
            rows = f.read_row_group(i)
            if keep_from is not None:
                rows = rows.filter(pc.greater_equal(rows.column("phys_offset"), keep_from))
            writer.write(rows)
    return writer.close()


def drop_provisional(parquet: Path, broker: str, name: str | None, held: dict[int, int]) -> None:
    """Take out of the broker's schedule_units file ``name`` (or its part, into which a merge put
    it) the rows a live import gave for the units its marks stand at: ``held`` is, per delay level,
    the queue offset of the unit its mark stands at (read again now)."""
    if name is None or not held:
        return
    table_dir = Path(parquet) / "schedule_units"
    path = table_dir / name if (table_dir / name).exists() else table_dir / part_name(broker)
    rows = pq.read_table(path)
    limit = pa.array([held.get(level, 2**62) for level in rows.column("delay_level").to_pylist()], pa.int64())
    keep = pc.less(rows.column("queue_offset"), limit)
    if pc.all(keep).as_py() is not False:
        return
    kept = rows.filter(keep)
    path.unlink()  # a hard link to the old run's file: never written through
    pq.write_table(kept, path)

