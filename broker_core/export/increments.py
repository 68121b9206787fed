"""Importing a store again reads only what is new: the run remembers where each broker's import ended.

After every import of a broker, ``<run>/import_state/<broker>.json`` holds where the commit-log
scan stopped (file and position), what it had counted up to there (records, BLANKs, store times,
records by topic, store hosts), the scan's problems before that point, and a fingerprint of the
bytes just before it (the last record, and the BLANK when the scan left a file through one). The
state is written into the run directory with the data and swapped in with it, so the two always
agree.

The next import of the same store into the same run and broker continues from there when all of
these hold (:func:`plan_resume`), and otherwise reads the store whole, saying why:

* the store is the same directory, with the same commit-log file size;
* no commit-log file was deleted since (the log's first offset is unchanged): retention moving the
  first offset, or deleting the file the last import ended in, makes the next import a full one,
  which gives exactly what a fresh import of the store gives (the rows of deleted files go, and a
  gap is never papered over);
* the files from the first one up to where the last import ended are all there, none damaged;
* the last import found no damage before where it ended (damage in the log can make RocketMQ's
  recovery keep a different part of it once the recovery window moves);
* the fingerprinted bytes are unchanged. RocketMQ only ever appends; the one thing that rewrites
  bytes already written is a restart's recovery truncating the tail (and appending new records
  over it), which always changes the last record imported or the BLANK after it.

A continued import scans from the remembered point, writes the new records as another file of the
broker's commitlog table (``part-<broker>+<offset>.parquet``), and rewrites the broker's small
tables whole: runs, store_problems (the remembered problems, then those of the new part and of
the files, consume queues and config read again), delay_offsets and consumer_offsets (config
files, read again). ``tests/broker_core/export/test_increments.py`` holds every table to a fresh
import of the grown store. Once a broker has :data:`INCREMENT_PARTS_MAX` increments the next
import merges its commitlog files into one (Parquet to Parquet; the store is not read again).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from broker_core.export.broker_parts import IMPORT_STATE_DIR_NAME, STATE_SUFFIX, broker_parts_of, part_name
from broker_core.export.columnar import CommitlogWriter
from broker_core.store.problem import ERROR, Problem
from broker_core.store.reader import ResumePoint, StoreReader

STATE_VERSION = 1
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
    """Spans ``[offset, offset + size)`` of the commit log just before where a scan stopped."""

    last_record: tuple[int, int] | None = None
    blank: tuple[int, int] | None = None

    def record(self, offset: int, size: int) -> None:
        self.last_record, self.blank = (offset, size), None

    def blank_at(self, offset: int, size: int) -> None:
        self.blank = (offset, min(size, BLANK_FINGERPRINT_BYTES))

    def spans(self) -> list[tuple[int, int]]:
        return [s for s in (self.last_record, self.blank) if s is not None]


# A BLANK's TOTALSIZE and magic: RocketMQ writes only these 8 bytes of it (the rest stays zero).
BLANK_FINGERPRINT_BYTES = 8


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
    records_by_topic: dict[str, int] = field(default_factory=dict)
    store_hosts: list[str] = field(default_factory=list)

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
            "records_by_topic": self.records_by_topic, "store_hosts": self.store_hosts,
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
            records_by_topic=dict(doc["records_by_topic"]), store_hosts=list(doc["store_hosts"]))


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
        found.append(hashlib.sha256(data).hexdigest())
    return found


def plan_resume(state: ImportState | None, reader: StoreReader, store_root: Path,
                replicated: bool) -> tuple[ResumePoint | None, str | None]:
    """Where this import of the store goes on from: (resume point, None), or (None, why the store is
    read whole). (None, None) when the broker was never imported into the run."""
    if state is None:
        return None, None
    resume = state.resume
    if replicated:
        return None, "the broker's master and slave are both in the run: they are merged from whole imports"
    if state.store_dir != str(store_root):
        return None, f"the last import of broker {state.broker} read another store ({state.store_dir})"
    if reader.file_size != state.file_size:
        return None, (f"the commit-log files are {reader.file_size} bytes, the last import read "
                      f"{state.file_size}-byte files")
    if reader.first_offset != state.first_offset:
        gap = (f"; records from {resume.offset} to {reader.first_offset} were deleted before any import read "
               "them" if reader.first_offset > resume.offset else "")
        return None, (f"retention deleted commit-log files since the last import (the log started at "
                      f"{state.first_offset}, now at {reader.first_offset}){gap}")
    file_errors = [p for p in reader.problems if p.severity == ERROR]
    if file_errors:
        return None, f"the store's files have problems ({file_errors[0].kind} in {file_errors[0].file})"
    # Every file from the first to the one the last import ended in is still there (the one
    # after a BLANK may not be written yet).
    resume_start = int(resume.file_name)
    starts = [cf.start for cf in reader.files if cf.start <= resume_start]
    wanted = list(range(state.first_offset, resume_start + (1 if resume.position else 0), reader.file_size))
    if starts[:len(wanted)] != wanted:
        missing = next((w for w, s in zip(wanted, starts + [None] * len(wanted), strict=False) if w != s),
                       resume_start)
        return None, f"commit-log file {missing:020d}, read by the last import, is missing"
    damage = [p for p in resume.problems if p.kind not in CARRIED_PROBLEM_KINDS]
    if damage:
        return None, (f"the last import found damage before where it ended ({damage[0].kind} at "
                      f"{damage[0].offset}): what recovery keeps there can change, so the store is read whole")
    now = fingerprints(reader, state.tail.spans())
    if now != state.fingerprints:
        at = state.tail.last_record[0] if state.tail.last_record else resume.offset
        return None, (f"the commit log changed under the last import: the bytes at {at} are not the ones "
                      "imported (the broker restarted and truncated its tail, or the files were replaced)")
    return resume, None


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
