"""A RocketMQ store directory (read-only) -> a run directory's Parquet tables.

``import_store`` reads the commit log in physical order as 4.9.4's recovery keeps it (see
:mod:`broker_core.store.reader`) and streams one ``commitlog`` row per record into Parquet, plus
the delay offsets, the consumer offsets (event ``RESTORE``), one ``runs`` row and what was found
damaged (``store_problems``). Tables the store cannot fill (consume attempts, schedule deliveries,
faults, produced) are written empty with their schema, so every run directory has every table.

The run directory is complete or absent: everything is written to a temporary sibling and renamed
into place at the end. By default damage is reported and the valid prefix exported; ``strict``
turns any error-level problem into :class:`CorruptStoreError` and leaves no output behind. A run
may hold several brokers of a cluster: ``broker=`` adds one (or replaces its earlier import) and
keeps the others, one file per broker per table (:mod:`broker_core.export.broker_parts`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.constants import CQ_UNIT_SIZE_BYTES, SCHEDULE_TOPIC
from broker_core.errors import BadInputError, CorruptStoreError
from broker_core.export.broker_parts import (
    PARQUET_DIR_NAME,
    PART_SUFFIX,
    broker_parts_of,
    brokers_of,
    increment_part_name,
    kept_parts,
    link_parts,
    part_name,
    run_lock,
    validate_broker,
)
from broker_core.export.client_trace import PROBLEM_TRACE_UNREADABLE, write_client_trace
from broker_core.export.columnar import ColumnarStoreReader, CommitlogWriter, RecordColumns
from broker_core.export.commitlog_rows import (
    COMMITLOG_COLUMNS,
    STORE_HOST_AT,
    TOPIC_AT,
    msg_id_host,
    record_to_values,
)
from broker_core.export.controller_epochs import write_replica_epochs
from broker_core.export.dledger_replicas import (
    ROLE_REPLICA,
    ReplicaMerge,
    link_replicas,
    merge_replicas,
    replica_side,
)
from broker_core.export.increments import (
    FileStats,
    ImportState,
    Tail,
    carry_commitlog,
    carry_parts,
    compact,
    drop_provisional,
    load_state,
    plan_import,
    records_by_topic,
    save_state,
    store_hosts,
    tail_fingerprints,
)
from broker_core.export.inner_batches import (
    PROBLEM_INNER_COUNT,
    PROBLEM_INNER_UNDECODABLE,
    write_inner_messages,
)
from broker_core.export.lmq_dispatches import write_lmq_dispatches
from broker_core.export.parquet import TableWriter, atomic_dir
from broker_core.export.pop_import import PROBLEM_POP_BODY, earlier_evidence, write_pop_tables
from broker_core.export.replicas import (
    ROLE_MASTER,
    ROLE_SLAVE,
    ROLES,
    MergeResult,
    earlier_side,
    link_side,
    merge_sides,
    other_role,
    side_dir,
)
from broker_core.export.schema import DLEDGER_STATES, RAW_TABLES, RUN_SOURCE_IMPORT
from broker_core.export.tier_import import TierImport, open_tier, write_tier_rows
from broker_core.export.transaction_ops import PROBLEM_OP_UNREADABLE, write_transaction_ops
from broker_core.store.checkpoint import Checkpoint
from broker_core.store.config_files import split_topic_group
from broker_core.store.cq_marks import queue_key
from broker_core.store.layout_5x import store_items_5x
from broker_core.store.problem import Problem
from broker_core.store.reader import ScanProgress, StoreReader

# The problems of the tables read from record bodies a row set per record (remembered between
# imports of a store: an increment reads only its new records' bodies).
RECORD_BODY_PROBLEMS = (PROBLEM_INNER_UNDECODABLE, PROBLEM_INNER_COUNT, PROBLEM_OP_UNREADABLE, PROBLEM_POP_BODY,
                        PROBLEM_TRACE_UNREADABLE)
# An increment keeps up to this many of the bytes its scan read, so that the record bodies read
# after the scan (POP checkpoints and acks, transaction ops, inner batches, the clients' trace) of
# its new records are not read from the store again; past it they are.
KEPT_SCANNED_BYTES_MAX = 64 * 1024 * 1024
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
OFFSET_EVENT_RESTORE = "RESTORE"
# How the commit log is decoded: whole slices of records into Arrow columns (columnar.py), or one
# Record object per record (the reference the columnar decoder is tested against).
DECODERS = ("columnar", "reference")


@dataclass
class ImportSummary:
    """What an import read and wrote."""

    run_id: str
    broker: str
    store_dir: Path
    out_dir: Path
    commitlog_files: int
    commitlog_file_size_bytes: int
    records: int
    blanks: int
    valid_end: int
    records_by_topic: dict[str, int]
    problems: list[Problem]
    rows_by_table: dict[str, int] = field(default_factory=dict)
    abort_file_present: bool = False
    wall_seconds: float | None = None
    checkpoint: Checkpoint | None = None
    recovery_start_file: str | None = None  # the first file RocketMQ's recovery would check
    # The smallest physical offset present (the first commit-log file's name): past 0 once
    # retention deleted the oldest files, which is a broker's normal state, not damage.
    first_offset: int = 0
    # Every broker the run holds after this import (this one and those kept from earlier ones).
    brokers: list[str] = field(default_factory=list)
    role: str = "master"
    # When the broker's master and slave are both imported: what the merge of the two found.
    merged: dict | None = None
    # Commit-log bytes this import decoded: from the first offset, or, when it continued the last
    # import of the broker, from where that one ended (``resumed_from``) to ``valid_end``.
    bytes_read: int = 0
    # Bytes this import read from the store's files, by directory (commitlog: the records decoded,
    # the zeros after them it checked, the records read again; consumequeue; config; ...).
    store_bytes_read: dict[str, int] = field(default_factory=dict)
    resumed_from: int | None = None
    records_added: int = 0
    # Why the broker's earlier import was not continued (None: it was, or there was none).
    full_import_reason: str | None = None
    # Where the next import of this store goes on from (file name and physical offset).
    next_file: str | None = None
    next_offset: int | None = None
    live: bool = False
    # 5.x store items the import does not read (timer wheel and log, compaction, RocksDB queues;
    # of them only the RocksDB consumer offsets are read, into consumer_offsets):
    # path under the store root -> what was found there (broker_core.store.layout_5x).
    store_items_5x: dict[str, str] = field(default_factory=dict)
    # A DLedger store: what its entries hold beside the records (broker_core.store.dledger_scan
    # RaftLog.to_json: committed index, uncommitted tail, terms) and, when replicas of the group
    # were merged, what the merge found (broker_core.export.dledger_replicas).
    dledger: dict | None = None
    # A 5.x controller-mode store: its epochs and identity (broker_core.store.controller_files);
    # how they merged with the other side's is in ``merged["epochs"]``.
    controller: dict | None = None
    # ``--tiered``: what the import read from the broker's tiered store (tier_import.TierImport).
    tiered: TierImport | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def to_json(self) -> dict:
        return {
            "run_id": self.run_id, "broker": self.broker, "brokers": self.brokers, "role": self.role,
            "merged": self.merged,
            "store_dir": str(self.store_dir),
            "out_dir": str(self.out_dir), "commitlog_files": self.commitlog_files,
            "commitlog_file_size_bytes": self.commitlog_file_size_bytes,
            "records": self.records, "blanks": self.blanks, "first_offset": self.first_offset,
            "valid_end": self.valid_end,
            "records_by_topic": self.records_by_topic,
            "abort_file_present": self.abort_file_present,
            "problems": [{"file": p.file, "offset": p.offset, "kind": p.kind, "reason": p.reason,
                          "severity": p.severity} for p in self.problems],
            "rows_by_table": self.rows_by_table, "wall_seconds": self.wall_seconds,
            "checkpoint": dataclasses.asdict(self.checkpoint) if self.checkpoint else None,
            "recovery_start_file": self.recovery_start_file,
            "live": self.live, "bytes_read": self.bytes_read, "resumed_from": self.resumed_from,
            "store_bytes_read": self.store_bytes_read,
            "records_added": self.records_added, "full_import_reason": self.full_import_reason,
            "next_file": self.next_file, "next_offset": self.next_offset,
            "store_items_5x": self.store_items_5x,
            "dledger": self.dledger,
            "controller": self.controller,
            "tiered": self.tiered.to_json() if self.tiered is not None else None,
        }


def commitlog_values(reader: StoreReader, run_id: str, broker: str,
                     progress: Callable[[ScanProgress], None] | None = None) -> Iterator[tuple]:
    """The ``commitlog`` rows of a store as ``COMMITLOG_COLUMNS`` values, in physical order."""
    for entry in reader.records(progress):
        yield record_to_values(entry.record, run_id, broker, entry.file_name)


def commitlog_rows(store_dir: Path, run_id: str, broker: str) -> Iterator[dict]:
    """The ``commitlog`` rows of a store, in physical order, up to where recovery would stop."""
    for values in commitlog_values(StoreReader(store_dir), run_id, broker):
        yield dict(zip(COMMITLOG_COLUMNS, values, strict=True))


def write_schedule_units(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str) -> int:
    """The ``schedule_units`` table of a store: every unit of its schedule queues that names a
    record of the valid log, with the deliver time its tags code holds. Call after the scan."""
    writer = TableWriter(parquet, "schedule_units", part=part)
    for level, unit in reader.schedule_units():
        writer.write_values((run_id, broker, level, unit.queue_offset, unit.phys_offset, unit.tags_code))
    return writer.close()


@dataclass(frozen=True)
class _Carry:
    """An import that goes on from the broker's last one: the old run's Parquet, the file name of
    this increment's rows, the first offset of the log when retention deleted files since (their
    rows are dropped), and the problems the last import found reading record bodies again."""

    old_parquet: Path
    increment: str
    keep_from: int | None
    body_problems: tuple[Problem, ...]
    schedule_provisional: str | None = None


def _free_name(parquet: Path, table: str, increment: str) -> str:
    """``increment``, or, when an earlier increment that began at the same offset has a file of
    ``table`` (schedule units a live import read before the records they name), a name after it."""
    name, n = increment, 0
    while (parquet / table / name).exists():
        n += 1
        name = f"{increment.removesuffix(PART_SUFFIX)}-{n:04d}{PART_SUFFIX}"
    return name


def _added_part(parquet: Path, table: str, part: str, increment: str, added: int) -> None:
    """Drop an increment's empty file of ``table``; the broker keeps its part file, if empty."""
    if not added:
        (parquet / table / increment).unlink(missing_ok=True)
    if not (parquet / table / part).exists():
        TableWriter(parquet, table, part=part).close()


def _schedule_units_table(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str,
                          carry: _Carry | None) -> tuple[int, str]:
    """``schedule_units`` whole, or, when the consume queues were read from the last import's
    marks, the broker's earlier files (less the provisional rows of the units read again) and a
    file of the units read since; return the rows and the file written."""
    if carry is None or reader.cq_read_whole:
        return write_schedule_units(reader, parquet, part, run_id, broker), part
    rows = carry_parts(carry.old_parquet, parquet, broker, "schedule_units", RAW_TABLES["schedule_units"])
    drop_provisional(parquet, broker, carry.schedule_provisional, _held_schedule_units(reader))
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in broker_parts_of(parquet / "schedule_units", broker))
    increment = _free_name(parquet, "schedule_units", carry.increment)
    added = write_schedule_units(reader, parquet, increment, run_id, broker)
    _added_part(parquet, "schedule_units", part, increment, added)
    return rows + added, increment


def _held_schedule_units(reader: StoreReader) -> dict[int, int]:
    """Per delay level, the queue offset of the unit the last import's mark of its schedule queue
    stands at: this import reads the queue from there."""
    prefix = f"{SCHEDULE_TOPIC}/"
    return {int(key[len(prefix):]) + 1: (int(mark.file) + mark.position) // CQ_UNIT_SIZE_BYTES
            for key, mark in (reader.cq_start or {}).items() if key.startswith(prefix)}


def _record_body_table(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str, table: str,
                       carry: _Carry | None) -> tuple[int, list[Problem]]:
    """A table read from record bodies, a row set per record (``inner_messages``,
    ``transaction_ops``, ``client_trace``): whole, or the broker's earlier rows (those of records retention left)
    and the rows of this increment's records, whose bodies alone are read again."""
    write = {"inner_messages": write_inner_messages, "transaction_ops": write_transaction_ops,
             "client_trace": write_client_trace}[table]
    if carry is None:
        return write(reader, parquet, part, run_id, broker)
    rows = carry_parts(carry.old_parquet, parquet, broker, table, RAW_TABLES[table], carry.keep_from)
    new_log = parquet / "commitlog" / carry.increment
    increment = _free_name(parquet, table, carry.increment)
    added, problems = (write(reader, parquet, increment, run_id, broker, commitlog=new_log)
                       if new_log.exists() else (0, []))
    _added_part(parquet, table, part, increment, added)
    return rows + added, problems


def delay_levels_list(delays: dict[int, int]) -> list[int | None] | None:
    """``runs.delay_levels_ms`` from {level: delay ms}: element k-1 for level k, null where unknown."""
    if not delays:
        return None
    return [delays.get(level) for level in range(1, max(delays) + 1)]


def validate_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id or ""):
        raise BadInputError(f"run id {run_id!r} must match [A-Za-z0-9_-]+",
                            hint="pass --name, or choose an output directory with such a name")
    return run_id


def _version() -> str:
    try:
        return metadata.version("retry-audit")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _strict_error(errors: list[Problem]) -> CorruptStoreError:
    first = errors[0]
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return CorruptStoreError(f"{first.kind}: {first.reason}{more}", where=f"{first.file}@{first.offset}",
                             hint="without --strict the valid prefix is imported and the damage listed "
                                  "in store_problems")


def import_store(store_dir: Path | str, out_dir: Path | str, *, name: str | None = None,
                 strict: bool = False, progress: Callable[[ScanProgress], None] | None = None,
                 broker: str | None = None, role: str = ROLE_MASTER,
                 wall_clock: Callable[[], float] | None = None,
                 decoder: str = DECODERS[0], live: bool = False,
                 reader_factory: Callable[..., StoreReader] | None = None,
                 dledger_data: Path | str | None = None,
                 tiered: Path | str | None = None) -> ImportSummary:
    """Read the store at ``store_dir`` (never written) into the run directory ``out_dir``.

    ``name`` is the run id (default: the output directory's name). Without ``broker`` the run
    directory is replaced whole and the broker column is the run id. With ``broker`` the store is
    that broker of the run: its tables replace the broker's earlier import, if any, and the other
    brokers' tables are kept (``broker_parts``). ``role`` ``slave`` imports the store as the other
    side of ``broker`` (its master's name): the broker's tables become the merge of its master and
    slave, each record once (``replicas``). ``wall_clock`` (e.g. ``time.monotonic``), when
    given, measures ``wall_seconds`` for the runs table; the model itself never reads a clock.
    ``decoder`` is one of :data:`DECODERS`; both write the same tables.

    Importing the same store into the same run and broker again reads only what it gained since
    (:mod:`broker_core.export.increments`: the rules, and when the store is read whole instead).
    ``live``: a broker is writing the store as it is read; the record it is writing at the end
    of the log is not damage (:meth:`StoreReader.entries`).
    ``reader_factory``, when given, makes the store's reader instead (called as the
    decoders' classes are, with ``live``): a :class:`ColumnarStoreReader` whose files are decoded
    elsewhere, e.g. by Spark tasks (``assets.spark_import``); the tables are the same.

    A DLedger store (``dledger-<selfId>/``, :mod:`broker_core.store.dledger`) is recognized by its
    files; ``dledger_data`` is its entries' directory when the broker kept them elsewhere
    (``storePathDLedgerCommitLog``). Only its committed entries' records are ``commitlog`` rows;
    every entry is a ``dledger_entries`` row. ``role`` ``replica`` imports it as one replica of
    ``broker``'s DLedger group, merged with the replicas imported before (``dledger_replicas``).
    A DLedger store is always read whole.

    ``tiered`` is the broker's tieredStoreFilePath (a 5.x tiered store, POSIX backend): its records
    that local retention deleted become ``commitlog`` rows again (:mod:`broker_core.export.tier_import`).
    A store imported with its tier is read whole, tier included, every time.
    """
    _check_arguments(decoder, role, broker)
    started = wall_clock() if wall_clock is not None else None
    store_dir = Path(store_dir)
    out_dir = Path(out_dir)
    run_id = validate_run_id(name if name is not None else out_dir.absolute().name)
    adding = broker is not None
    broker = validate_broker(broker) if adding else run_id
    part = part_name(broker)
    extra = {"dledger_data": dledger_data} if dledger_data is not None else {}
    reader = (reader_factory or (ColumnarStoreReader if decoder == "columnar" else StoreReader))(store_dir, live=live,
                                                                                                **extra)
    _check_dledger(reader, role, live, reader_factory)
    store_root = store_dir.resolve()
    out_resolved = out_dir.resolve()
    if out_resolved == store_root or store_root in out_resolved.parents:
        raise BadInputError("the output directory is inside the store, which is only ever read",
                            where=str(out_dir), hint="write the run directory somewhere else")
    if strict and reader.errors:
        raise _strict_error(reader.errors)
    tier = _open_tier(tiered, reader, role, live, reader_factory, broker if adding else None, store_root)

    merged: MergeResult | None = None
    tier_import: TierImport | None = None
    merged_replicas: ReplicaMerge | None = None
    with run_lock(out_dir):
        # The other side of a replicated broker, kept to merge with (None: nothing to merge with).
        earlier = earlier_side(out_dir, broker, role) if adding and role != ROLE_REPLICA else None
        replicated = role != ROLE_MASTER or earlier is not None
        # A DLedger log is read whole: its uncommitted tail may be committed or cut by the next import.
        state = (load_state(out_dir, broker) if out_dir.is_dir() and reader.dledger is None and tier is None
                 else None)
        plan = plan_import(state, reader, store_root, replicated)
        resume, full_reason = plan.resume, plan.reason
        kept = kept_parts(out_dir, run_id, broker) if adding else []
        # What was read from each commit-log file (the earlier imports' files left, then this one's).
        book = _CommitlogBook(Tail(*(state.tail.last_record, state.tail.blank)) if resume is not None else Tail(),
                              dict(plan.files))
        with atomic_dir(out_dir) as tmp:
            link_parts(out_dir, kept, tmp)
            if role == ROLE_REPLICA:
                side = replica_side(reader.dledger.self_id)
                parquet = side_dir(tmp, broker, side)
                link_replicas(out_dir, tmp, broker, side)
            else:
                parquet = side_dir(tmp, broker, role) if earlier is not None else tmp / PARQUET_DIR_NAME
            if resume is not None:
                carry_commitlog(out_dir / PARQUET_DIR_NAME, parquet, broker, plan.drop_before)
                _continue_reader(reader, state)
            commitlog_part = increment_part_name(broker, resume.offset) if resume is not None else part
            write_commitlog = _write_columnar if isinstance(reader, ColumnarStoreReader) else _write_decoded
            entries = (_DLedgerEntriesWriter(parquet, part, run_id, broker, reader.dledger.self_id,
                                             isinstance(reader, ColumnarStoreReader))
                       if reader.dledger is not None else None)
            added, commitlog_path = write_commitlog(reader, parquet, commitlog_part, run_id, broker,
                                                    progress, resume, book, entries)
            if resume is not None and not added:
                commitlog_path.unlink()  # nothing new: no empty file per import
            rows_by_table = {"commitlog": reader.record_count if resume is not None else added,
                             **({"dledger_entries": entries.close()} if entries is not None else {})}
            if strict and reader.errors:
                raise _strict_error(reader.errors)
            if tier is not None:
                tier_import = write_tier_rows(tier, reader, parquet, commitlog_path, run_id, broker)
                rows_by_table["commitlog"] += tier_import.added
                if strict and tier_import.errors:
                    raise _strict_error(tier_import.errors)
            epoch_rows, epoch_problems, controller = write_replica_epochs(
                store_root, parquet, part, run_id, broker, role, reader.valid_end or 0)
            carry = (_Carry(out_dir / PARQUET_DIR_NAME, commitlog_part,
                            reader.first_offset if plan.drop_before is not None else None,
                            tuple(state.body_problems), state.schedule_provisional) if resume is not None else None)
            store_rows, body_problems, schedule_file = _write_store_tables(
                reader, parquet, part, run_id, broker, book.files, carry,
                list(epoch_problems) + (tier_import.problems if tier_import else []))
            rows_by_table["replica_epochs"] = epoch_rows
            rows_by_table.update(store_rows)
            wall = (wall_clock() - started) if wall_clock is not None else None
            rows_by_table["runs"] = _write_runs_row(reader, parquet, part, run_id, broker, wall, book.files)
            for table in RAW_TABLES:
                if table not in rows_by_table:
                    rows_by_table[table] = TableWriter(parquet, table, part=part).close()
            if earlier is not None:
                merged = _merge_sides(tmp, broker, role, earlier, strict)
            elif role == ROLE_REPLICA:
                merged_replicas = merge_replicas(tmp, broker, tmp / PARQUET_DIR_NAME)
                if strict and merged_replicas.errors:
                    raise _strict_error(merged_replicas.errors)
            brokers = brokers_of(tmp)
            new_state = None
            if reader.resume_point is not None and not replicated and reader.dledger is None and tier is None:
                prints = tail_fingerprints(reader, book.tail, state if resume is not None else None)
                if prints is not None:
                    new_state = ImportState(broker, str(store_root), reader.file_size, reader.first_offset,
                                            reader.resume_point, book.tail, prints, book.files,
                                            reader.cq_marks, _delay_records(reader), reader.zeros_from,
                                            [p for p in body_problems if p.kind in RECORD_BODY_PROBLEMS],
                                            schedule_file if live else None)
                    save_state(tmp, new_state)

    return ImportSummary(
        run_id=run_id, broker=broker, store_dir=store_dir, out_dir=out_dir,
        commitlog_files=len(reader.files), commitlog_file_size_bytes=reader.file_size,
        records=reader.record_count, blanks=reader.blank_count, valid_end=reader.valid_end or 0,
        first_offset=reader.first_offset,
        records_by_topic=records_by_topic(book.files),
        problems=(reader.problems + body_problems + (merged.problems if merged is not None else [])
                  + (merged_replicas.problems if merged_replicas is not None else [])),
        rows_by_table=rows_by_table, abort_file_present=reader.abort_file_present,
        wall_seconds=wall, checkpoint=reader.checkpoint,
        recovery_start_file=(reader.files[reader.recovery_start_index()].name if reader.files else None),
        brokers=brokers, role=role,
        merged=None if merged is None else {"records": merged.records, "only_on_master": merged.only_master,
                                            "only_on_slave": merged.only_slave, "offsets_differ": merged.differ,
                                            **({"epochs": merged.epochs} if merged.epochs else {})},
        controller=controller.to_json() if controller is not None else None,
        bytes_read=(reader.valid_end or 0) - reader.scan_start, live=live,
        store_bytes_read=dict(sorted(reader.bytes_read.items())),
        resumed_from=resume.offset if resume is not None else None,
        records_added=added, full_import_reason=full_reason,
        next_file=reader.resume_point.file_name if new_state is not None else None,
        next_offset=reader.resume_point.offset if new_state is not None else None,
        store_items_5x=store_items_5x(store_root),
        dledger=_dledger_summary(reader, merged_replicas), tiered=tier_import)


def _open_tier(tiered: Path | str | None, reader: StoreReader, role: str, live: bool, reader_factory,
               broker: str | None, store_root: Path):
    """The broker's tier when ``--tiered`` names one (None otherwise); refuses what it cannot go with."""
    if tiered is None:
        return None
    what = ("a DLedger store" if reader.dledger is not None else "--live" if live
            else "--engine spark" if reader_factory is not None else f"--role {role}" if role != ROLE_MASTER else None)
    if what is not None:
        raise BadInputError(f"--tiered reads a master's store whole, with the local engine: not with {what}",
                            where="--tiered", hint="import the master's store and its tier without that option")
    return open_tier(tiered, broker, store_root)


def _check_dledger(reader: StoreReader, role: str, live: bool, reader_factory) -> None:
    """Refuse what a DLedger store cannot be imported with (and ``--role replica`` without one)."""
    if reader.dledger is None:
        if role == ROLE_REPLICA:
            raise BadInputError("--role replica imports a replica of a DLedger group, and this store has no "
                                "dledger-<selfId>/ directory", where=str(reader.root),
                                hint="a master/slave pair is imported with --role master and --role slave")
        return
    if role == ROLE_SLAVE:
        raise BadInputError("a DLedger store is a replica of its group, not a slave", where="--role slave",
                            hint="import each replica with --role replica")
    if live:
        raise BadInputError("a DLedger store is imported at rest (--live reads a commitlog/ being written)",
                            where="--live", hint="import it without --live")
    if reader_factory is not None:
        raise BadInputError("a DLedger store is decoded by the local engine", where=str(reader.root),
                            hint="import it without --engine spark")


def _dledger_summary(reader: StoreReader, merged: ReplicaMerge | None) -> dict | None:
    if reader.raft is None:
        return None
    summary = reader.raft.to_json()
    if merged is not None:
        summary["merged"] = merged.to_json()
    return summary


def _check_arguments(decoder: str, role: str, broker: str | None) -> None:
    if decoder not in DECODERS:
        raise BadInputError(f"unknown decoder {decoder!r}", hint=f"use one of {', '.join(DECODERS)}")
    if role not in (*ROLES, ROLE_REPLICA):
        raise BadInputError(f"unknown role {role!r}", where="--role",
                            hint=f"use one of {', '.join((*ROLES, ROLE_REPLICA))}")
    if role == ROLE_SLAVE and broker is None:
        raise BadInputError("a slave's store is imported as a side of its master's broker", where="--role slave",
                            hint="pass --broker with the brokerName master and slave share")
    if role == ROLE_REPLICA and broker is None:
        raise BadInputError("a DLedger replica's store is imported as a replica of its group's broker",
                            where="--role replica", hint="pass --broker with the group's brokerName")


@dataclass
class _CommitlogBook:
    """The bookkeeping both decoders share: what was read from each commit-log file, and the
    spans just before where the scan stopped (the next import checks them before it continues)."""

    tail: Tail
    files: dict[str, FileStats]

    def blank(self, file_name: str, phys_offset: int, size: int) -> None:
        self.tail.blank_at(phys_offset, size)
        self.files.setdefault(file_name, FileStats()).blanks += 1

    @staticmethod
    def queue_offset(reader: StoreReader, topic: str, queue_id: int, queue_offset: int) -> None:
        """A new record at ``queue_offset`` of a queue: its consume queue is read that far."""
        key = queue_key(topic, queue_id)
        reader.cq_expected[key] = max(reader.cq_expected.get(key, 0), queue_offset + 1)

    def records(self, file_name: str, count: int, first_store_ts: int, last_store_ts: int,
                by_topic: dict[str, int], hosts, last: tuple[int, int]) -> None:
        """``count`` consecutive records of one file; ``last`` is the last one's (offset, size)."""
        self.files.setdefault(file_name, FileStats()).add(count, first_store_ts, last_store_ts, by_topic, hosts)
        self.tail.record(*last)


class _DLedgerEntriesWriter:
    """The ``dledger_entries`` rows of one DLedger store, from either decoder."""

    def __init__(self, parquet: Path, part: str, run_id: str, broker: str, self_id: str, columnar: bool):
        self.run_id, self.broker, self.self_id = run_id, broker, self_id
        schema = RAW_TABLES["dledger_entries"]
        self.writer = (CommitlogWriter(parquet, "dledger_entries", part=part, schema=schema) if columnar
                       else TableWriter(parquet, "dledger_entries", part=part))

    def write_columns(self, batch: RecordColumns) -> None:
        self.writer.write(batch.dledger_table(self.run_id, self.broker, self.self_id))

    def write_entry(self, entry) -> None:
        record, raft = entry.record, entry.raft
        self.writer.write_values((self.run_id, self.broker, raft.index, raft.term, entry.phys_offset,
                                  raft.entry_size, DLEDGER_STATES[0] if raft.committed else DLEDGER_STATES[1],
                                  [self.self_id], record.topic, record.queue_id, record.queue_offset,
                                  record.uniq_key, record.store_ts))

    def close(self) -> int:
        return self.writer.close()


def _write_columnar(reader: ColumnarStoreReader, parquet: Path, part: str, run_id: str, broker: str,
                    progress, resume, book: _CommitlogBook,
                    entries: _DLedgerEntriesWriter | None = None) -> tuple[int, Path]:
    """The ``commitlog`` rows, a slice of Arrow columns at a time; return (rows, file written).
    A DLedger log's entries go to ``entries`` too; only its committed records are commitlog rows."""
    writer = CommitlogWriter(parquet, part=part)
    for batch in reader.entries(progress, resume):
        if not isinstance(batch, RecordColumns):
            book.blank(batch.file_name, batch.phys_offset, batch.size)
            continue
        if batch.raft is not None:
            entries.write_columns(batch)
            if not batch.committed:
                continue
        columns = batch.columns
        counts = pc.value_counts(columns["topic"]).to_pylist()
        book.records(batch.file_name, batch.num_rows, columns["store_ts"][0].value, columns["store_ts"][-1].value,
                     {c["values"]: c["counts"] for c in counts}, pc.unique(columns["store_host"]).to_pylist(),
                     (columns["phys_offset"][-1].as_py(), columns["total_size"][-1].as_py()))
        _note_queues(reader, book, columns, resume is not None)
        writer.write(batch.table(run_id, broker))
    return writer.close(), writer.path


def _note_queues(reader: StoreReader, book: _CommitlogBook, columns: dict, increment: bool) -> None:
    """A slice of records: how far each queue's consume queue is read (the next increment reads no
    further than the log's records say), and in an increment the store times of its SCHEDULE
    records (a delay level's delay is read from one of them)."""
    ends = pa.table({k: columns[k] for k in ("topic", "queue_id", "queue_offset")}).group_by(
        ["topic", "queue_id"]).aggregate([("queue_offset", "max")])
    for topic, queue_id, last in zip(*(ends.column(c).to_pylist() for c in ends.column_names), strict=True):
        book.queue_offset(reader, topic, queue_id, last)
    if not increment:
        return
    scheduled = pc.equal(columns["topic"], SCHEDULE_TOPIC)
    if pc.any(scheduled).as_py():
        for phys, ts in zip(columns["phys_offset"].filter(scheduled).to_pylist(),
                            columns["store_ts"].filter(scheduled), strict=True):
            reader.schedule_store_ts[phys] = ts.value


def _write_decoded(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str,
                   progress, resume, book: _CommitlogBook,
                   entries: _DLedgerEntriesWriter | None = None) -> tuple[int, Path]:
    """The ``commitlog`` rows, one decoded record at a time; return (rows, file written).
    A DLedger log's entries go to ``entries`` too; only its committed records are commitlog rows."""
    writer = TableWriter(parquet, "commitlog", part=part)
    for entry in reader.entries(progress, resume):
        if entry.record is None:
            book.blank(entry.file_name, entry.phys_offset, entry.size)
            continue
        if entry.raft is not None:
            entries.write_entry(entry)
            if not entry.raft.committed:
                continue
        values = record_to_values(entry.record, run_id, broker, entry.file_name)
        book.records(entry.file_name, 1, entry.record.store_ts, entry.record.store_ts, {values[TOPIC_AT]: 1},
                     (values[STORE_HOST_AT],), (entry.phys_offset, entry.size))
        book.queue_offset(reader, entry.record.topic, entry.record.queue_id, entry.record.queue_offset)
        if resume is not None and entry.record.topic == SCHEDULE_TOPIC:
            reader.schedule_store_ts[entry.phys_offset] = entry.record.store_ts
        writer.write_values(values)
    return writer.close(), writer.path


def _continue_reader(reader: StoreReader, state: ImportState) -> None:
    """Hand the reader what the broker's last import left for this one to go on from: each consume
    queue's mark, the zeros after the data it found, the SCHEDULE records its delays came from."""
    reader.cq_start, reader.cq_start_first_offset = state.queues, state.first_offset
    reader.keep_scanned_bytes_max = KEPT_SCANNED_BYTES_MAX
    reader.zeros_checked_from = state.zeros_from
    reader.schedule_store_ts.update(state.schedule_store_ts)


def _delay_records(reader: StoreReader) -> dict[int, int | None]:
    """The SCHEDULE records' store times the next import may need: those its tails name, and those
    the tails read now name (a live import's mark stands before the unit it read last, which the
    next import reads again and reads a level's delay from)."""
    marks = reader.cq_marks or {}
    named = {unit[1] for mark in marks.values() for unit in mark.tail}
    named.update(unit[1] for tail in (reader.schedule_tails_read() or {}).values() for unit in tail)
    return {phys: ts for phys, ts in reader.schedule_store_ts.items() if phys in named}


def _write_store_tables(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str,
                        files: dict[str, FileStats],
                        carry: _Carry | None = None,
                        more_problems: list[Problem] = ()) -> tuple[dict[str, int], list[Problem], str]:
    """The tables read from the store beside the commit log; return (rows by table, problems
    found in record bodies and ``more_problems``, those found in other files: the epoch files,
    the tier's with ``--tiered``; the schedule_units file written). ``carry``: see
    :func:`_schedule_units_table`."""
    rows_by_table = {}
    writer = TableWriter(parquet, "delay_offsets", part=part)
    for level, offset in sorted(reader.delay_offsets().items()):
        writer.write({"run_id": run_id, "broker": broker, "delay_level": level, "offset": offset})
    rows_by_table["delay_offsets"] = writer.close()

    rows_by_table["schedule_units"], schedule_file = _schedule_units_table(reader, parquet, part, run_id, broker,
                                                                           carry)

    # The offsets are as of their last persist: consumerOffset.json's modification time, or
    # the newest file's in config/consumerOffsets/ (RocksDB) is that moment.
    offsets_ts = reader.consumer_offsets_ts_ms()
    writer = TableWriter(parquet, "consumer_offsets", part=part)
    for key, queues in sorted(reader.consumer_offsets().items()):
        topic, group = split_topic_group(key)
        for queue_id, offset in sorted(queues.items()):
            writer.write({"run_id": run_id, "broker": broker, "group": group, "topic": topic,
                          "queue_id": queue_id, "offset": offset, "ts": offsets_ts,
                          "event": OFFSET_EVENT_RESTORE})
    rows_by_table["consumer_offsets"] = writer.close()

    # 5.x POP checkpoints and acks, and who owns each %RETRY% topic (pop_import).
    earlier = None
    if carry is not None:
        new_log = parquet / "commitlog" / carry.increment
        earlier = (earlier_evidence(carry.old_parquet, broker, carry.keep_from), new_log if new_log.exists() else None)
    pop_rows, owner_rows, body_problems = write_pop_tables(reader, parquet, part, run_id, broker,
                                                           records_by_topic(files), earlier)
    rows_by_table["pop_evidence"], rows_by_table["retry_topics"] = pop_rows, owner_rows

    # 5.x inner batches: the messages the consumer's client unwraps from each one; transaction op
    # records: which half records a commit or rollback decided.
    if carry is not None:
        body_problems += [p for p in carry.body_problems if p.offset >= reader.first_offset]
    for table in ("inner_messages", "transaction_ops"):
        rows_by_table[table], found = _record_body_table(reader, parquet, part, run_id, broker, table, carry)
        body_problems += found

    # The clients' message trace, when a client wrote it to this broker (docs/client-trace.md).
    rows_by_table["client_trace"], trace_problems = _record_body_table(reader, parquet, part, run_id, broker,
                                                                       "client_trace", carry)
    body_problems += trace_problems
    body_problems += more_problems

    # Multi-dispatch (LMQ): each record's consume-queue positions beside its own queue's.
    rows_by_table["lmq_dispatches"], lmq_problems = write_lmq_dispatches(reader, parquet, part, run_id, broker)
    body_problems += lmq_problems

    writer = TableWriter(parquet, "store_problems", part=part)
    for p in reader.problems + body_problems:
        writer.write({"run_id": run_id, "broker": broker, "file_name": p.file, "offset": p.offset,
                      "kind": p.kind, "detail": p.reason, "severity": p.severity})
    rows_by_table["store_problems"] = writer.close()
    return rows_by_table, body_problems, schedule_file


def _write_runs_row(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str,
                    wall: float | None, files: dict[str, FileStats]) -> int:
    writer = TableWriter(parquet, "runs", part=part)
    writer.write({"run_id": run_id, "scenario": None, "seed": None,
                  "sim_start_ts": reader.first_store_ts, "sim_end_ts": reader.last_store_ts,
                  "wall_seconds": wall, "messages_produced": None,
                  "records_written": reader.record_count, "version": _version(),
                  "source": RUN_SOURCE_IMPORT, "first_offset": reader.first_offset,
                  "broker": broker,
                  "msg_id_hosts": sorted(msg_id_host(h) for h in store_hosts(files)),
                  "delay_levels_ms": delay_levels_list(reader.schedule_delays())})
    return writer.close()


def _merge_sides(tmp: Path, broker: str, role: str, earlier: dict, strict: bool) -> MergeResult:
    """Merge this side of a replicated broker with the other side imported earlier."""
    # A master imported in increments is merged from one commitlog file.
    logs = [src for src, rel in earlier.items() if rel.parent.name == "commitlog"]
    if len(logs) > 1:
        compact(logs, side_dir(tmp, broker, other_role(role)), broker)
        earlier = {src: rel for src, rel in earlier.items() if src not in logs}
    link_side(earlier, side_dir(tmp, broker, other_role(role)))
    merged = merge_sides(tmp, broker, tmp / PARQUET_DIR_NAME)
    merge_errors = [p for p in merged.problems if p.severity == "error"]
    if strict and merge_errors:
        raise _strict_error(merge_errors)
    return merged
