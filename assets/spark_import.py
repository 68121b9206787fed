"""``import-store --engine spark``: the commit log decoded by Spark tasks, one per commit-log file.

The local engine walks the files one after another in one process. A record never spans two
files (a file ends with a BLANK), so each file can be decoded on its own: here every file is one
Spark task that runs the columnar decoder (:class:`ColumnarStoreReader`, the very code of the
local engine), stages the decoded Arrow batches as an Arrow IPC file and returns only what the
scan found (outcome, end, counts, store times, problems): one small dict per file.

The driver then runs the local engine's own scan over those results: :class:`SparkStoreReader`
is a :class:`ColumnarStoreReader` whose per-file step replays a task's result instead of reading
the file, so the order of files, the recovery window, the stop at damage or a gap, ``valid_end``,
the unreachable-file, checkpoint, consume-queue and config checks are the local engine's code,
and ``import_store`` writes the Parquet tables with the same writers (one
``part-<broker>.parquet`` per table, 64Ki-row groups). The staged columns are read back through a
memory map (no copy), so the driver's share is what writing the Parquet costs; decoding is what
spreads over the cluster. Files past the point where the scan stops (damage) are decoded by their
tasks and then ignored, as the local engine never reads them.

Paths: the store and the run directory's parent must be paths every executor and the driver see
alike (one machine, or a shared mount such as NFS at the same path); ``file://`` URIs name such
paths. The staging directory is a hidden sibling of the run directory, removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa

from broker_core.errors import BadInputError
from broker_core.export.columnar import ColumnarStoreReader, RecordColumns
from broker_core.export.schema import COMMITLOG
from broker_core.store.reader import CommitLogFile, LogEntry, Problem, ResumePoint, ScanProgress

ENGINES = ("local", "spark")
# The decoded columns a task stages: the commitlog table but run_id and broker (the driver adds them).
STAGED = pa.schema([f for f in COMMITLOG if f.name not in ("run_id", "broker")])
_STAGED_SUFFIX = ".arrow"


def local_path(location: str | Path) -> Path:
    """A store or run directory as a path every process reads alike: a path or a ``file://`` URI.

    Other schemes are refused: a commit-log file is read through a memory map, and the run
    directory is renamed into place, both of which need a file system path (a shared mount).
    """
    text = str(location)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and text[1:2] == ":"):
        return Path(parsed.path if parsed.scheme == "file" else text)
    raise BadInputError(f"import-store reads and writes file system paths, not {parsed.scheme}:// URIs",
                        where=text, hint="copy or mount the store on a path every Spark worker sees "
                                         "(e.g. NFS), and pass that path or a file:// URI")


def _problem_dicts(problems: list[Problem]) -> str:
    return json.dumps([[p.file, p.offset, p.kind, p.reason, p.severity] for p in problems])


def scan_file_task(store: str, file_size: int, check_crc: bool, stage: str, name: str, start: int,
                   length: int, index: int, lenient: bool) -> dict:
    """Decode one commit-log file as the local engine's scan would; stage its columns.

    Runs in a Spark task: everything comes in as plain values, and the result is one row.
    """
    reader = ColumnarStoreReader(store, check_crc=check_crc, commitlog_file_size_bytes=file_size)
    cf = CommitLogFile(name, Path(store) / "commitlog" / name, start, length)
    staged = Path(stage) / f"{index:010d}{_STAGED_SUFFIX}"
    # A task may run twice (a retry, a speculative copy): each attempt writes a file of its own
    # and renames it into place whole.
    fd, attempt = tempfile.mkstemp(prefix=f".{index:010d}-", dir=stage)
    os.close(fd)
    writer = None
    batches = 0
    blank_at = None
    scan = reader._scan_file(cf, None, index, lenient)
    try:
        while True:
            item = next(scan)
            if isinstance(item, RecordColumns):
                if writer is None:
                    writer = pa.ipc.new_file(attempt, STAGED)
                writer.write_batch(pa.record_batch([item.columns[f.name] for f in STAGED], schema=STAGED))
                batches += 1
            else:
                blank_at = item.phys_offset
    except StopIteration as done:
        kind, end = done.value
    finally:
        if writer is not None:
            writer.close()
    if batches:
        os.replace(attempt, staged)
    else:
        os.unlink(attempt)
    return {"index": index, "kind": kind, "end": end, "records": reader.record_count,
            "blanks": reader.blank_count, "first_store_ts": reader.first_store_ts,
            "last_store_ts": reader.last_store_ts, "problems": _problem_dicts(reader._scan_problems),
            "staged": str(staged) if batches else None, "batches": batches, "blank_at": blank_at}


def _tasks(store: str, file_size: int, check_crc: bool, stage: str,
           files: list[tuple[str, int, int, bool]]) -> Callable:
    """The function each partition runs: its file indexes in, one result per file out."""

    def run(indexes: Iterator[int]) -> Iterator[dict]:
        for index in indexes:
            name, start, length, lenient = files[index]
            yield scan_file_task(store, file_size, check_crc, stage, name, start, length, index, lenient)

    return run


class SparkStoreReader(ColumnarStoreReader):
    """A ColumnarStoreReader whose commit-log files are decoded by Spark tasks, one per file.

    :meth:`entries` first runs one Spark job over every file, then the local engine's scan, whose
    per-file step yields the file's staged columns and takes over the task's counts and problems.
    """

    def __init__(self, root: Path | str, spark, stage_parent: Path | str, **kwargs):
        if kwargs.get("live"):
            raise BadInputError("--live reads a store its broker is writing, which the Spark engine's "
                                "tasks do not follow", where="--engine spark",
                                hint="import a live store with --engine local (an increment is small)")
        super().__init__(root, **kwargs)
        self.spark = spark
        self.stage_parent = Path(stage_parent)
        self._results: dict[int, dict] = {}
        self._stage: Path | None = None
        self.task_files = 0  # commit-log files the last job decoded

    def entries(self, progress: Callable[[ScanProgress], None] | None = None,
                resume: ResumePoint | None = None) -> Iterator:
        if resume is not None:
            # Importing a store again reads only what it gained since the last import: a tail of
            # the log, decoded here by the local engine rather than by a Spark job.
            yield from super().entries(progress, resume)
            return
        self.stage_parent.mkdir(parents=True, exist_ok=True)
        self._stage = Path(tempfile.mkdtemp(prefix=".import-stage-", dir=self.stage_parent))
        try:
            self._results = self._run_job()
            yield from super().entries(progress)
        finally:
            shutil.rmtree(self._stage, ignore_errors=True)
            self._stage = None

    def _run_job(self) -> dict[int, dict]:
        if not self.files:
            return {}
        window = self.recovery_start_index()
        files = [(cf.name, cf.start, cf.length, index < window) for index, cf in enumerate(self.files)]
        run = _tasks(str(self.root.absolute()), self.file_size, self.check_crc, str(self._stage), files)
        # One partition (one task) per file. The records never pass through Spark's rows: a task
        # decodes its file into Arrow batches and stages them; Spark carries one small dict back.
        # (DataFrame.mapInArrow would do the same, but in PySpark 4.3 it goes through pandas_udf,
        # which requires pandas; nothing here uses pandas, and the project does not install it.)
        context = self.spark.sparkContext
        context.setJobDescription(f"import-store {self.root.name}: {len(files)} commit-log file(s)")
        results = context.parallelize(range(len(files)), len(files)).mapPartitions(run).collect()
        self.task_files = len(results)
        return {result["index"]: result for result in results}

    def _scan_file(self, cf: CommitLogFile, progress, index: int, lenient: bool, start: int = 0):
        """Replay the task's scan of this file: its columns, then its counts and problems. (A file
        no task decoded, in an increment, is scanned here by the local engine.)"""
        if index not in self._results:
            return (yield from super()._scan_file(cf, progress, index, lenient, start))
        assert start == 0, f"a Spark task decodes {cf.name} whole, not from {start}"
        result = self._results[index]
        base = self.record_count
        if result["staged"] is not None:
            with pa.memory_map(result["staged"]) as source:
                staged = pa.ipc.open_file(source)
                for i in range(staged.num_record_batches):
                    batch = staged.get_batch(i)
                    yield RecordColumns(cf.name, dict(zip(STAGED.names, batch.columns, strict=True)),
                                        batch.num_rows)
        self._scan_problems.extend(Problem(*p) for p in json.loads(result["problems"]))
        self.record_count = base + result["records"]
        self.blank_count += result["blanks"]
        if result["records"]:
            if self.first_store_ts is None:
                self.first_store_ts = result["first_store_ts"]
            self.last_store_ts = result["last_store_ts"]
        if result["blank_at"] is not None:
            yield LogEntry(cf.name, result["blank_at"], cf.start + self.file_size - result["blank_at"], None)
        return result["kind"], result["end"]
