"""The DuckDB audit warehouse: loading run directories, building the audit tables on them, and
swapping the finished file into place (``build_warehouse``).

A run directory holds ``parquet/<table>/`` (the raw tables of the data contract) and
``lineage/<table>/`` (message_hops, message_lineage from Spark). Every table gets the contract's
columns in the contract's order, whatever extra columns a writer added, so several runs load side
by side into one table and a run that lacks a table (an import has no consume_attempts) still
gets an empty table with the right columns.

The warehouse file is never edited in place: DuckDB allows one writer process XOR any number of
readers, so a user's open read-only session would block an in-place rebuild. The build writes a
new file beside the target and ``os.replace()`` s it into place; a reader keeps the old file's
inode until it reconnects and never sees half a warehouse.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from assets.audit import AUDIT_TABLES, build_audit_tables
from broker_core.errors import BadInputError
from broker_core.export.schema import LINEAGE_TABLES, RAW_TABLES
from broker_core.store.config_files import fsync_dir

# DuckDB 2.0 writes storage that DuckDB 1.x cannot open; v1.0.0 storage opens in every client
# from 1.0 on (and in 2.0), so people's existing DuckDB CLIs and drivers can read the warehouse.
STORAGE_VERSION = "v1.0.0"
# The file a build writes before the swap: hidden, beside the target, unique per process.
BUILD_SUFFIX = ".building"

# A simulated run's manifest (run.json, written by broker_core.sim.run): the settings the checks
# need and the Parquet does not carry (flush mode, each group's maximum reconsume times).
MANIFEST_NAME = "run.json"
RUN_MANIFEST = pa.schema([
    ("run_id", pa.string()),
    ("flush", pa.string()),
    ("semantics", pa.string()),
    ("end_reason", pa.string()),
    ("horizon_ms", pa.int64()),
    # The broker's transactionCheckMax the scenario set (null in a run.json written before it
    # was recorded): transaction_decided_by_check_max judges by it where nothing was discarded.
    ("transaction_check_max", pa.int32()),
])
RUN_GROUPS = pa.schema([
    ("run_id", pa.string()),
    ("group", pa.string()),
    ("model", pa.string()),
    ("mode", pa.string()),
    ("consumers", pa.int32()),
    ("max_reconsume_times", pa.int32()),  # as configured: -1 = 16 (concurrently), unlimited (orderly)
    ("subscribe", pa.list_(pa.string())),
])
# The broker's delay-level table per run (level 1 is the first entry), from the run manifest. An
# imported store does not record its broker's messageDelayLevel (it lives in broker.conf), so an
# import has no rows here rather than a guessed default.
DELAY_LEVELS = pa.schema([
    ("run_id", pa.string()),
    ("delay_level", pa.int32()),
    ("delay_ms", pa.int64()),
])
MANIFEST_TABLES: dict[str, pa.Schema] = {"run_manifest": RUN_MANIFEST, "run_groups": RUN_GROUPS,
                                         "delay_levels": DELAY_LEVELS}

# Where each contract table lives inside a run directory.
TABLE_DIRS: dict[str, str] = {**{name: "parquet" for name in RAW_TABLES},
                              **{name: "lineage" for name in LINEAGE_TABLES}}
CONTRACT: dict[str, pa.Schema] = {**RAW_TABLES, **LINEAGE_TABLES}
# Every table loaded from a run directory.
LOADED: dict[str, pa.Schema] = {**CONTRACT, **MANIFEST_TABLES}
# Every table of a built warehouse: the loaded contract tables, then the audit tables.
WAREHOUSE_TABLES = tuple(LOADED) + AUDIT_TABLES


def quiet(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """No progress bar: long queries would otherwise draw one into the CLI's and Dagster's output."""
    con.execute("SET enable_progress_bar = false")
    return con


def quote_ident(name: str) -> str:
    """A DuckDB identifier, quoted (``group`` is a keyword; quoting every name keeps it simple)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def parquet_files(run_dir: Path, table: str) -> list[Path]:
    """The Parquet files of one table in a run directory, sorted (none when the table is absent)."""
    base = Path(run_dir) / TABLE_DIRS[table] / table
    if not base.is_dir():
        return []
    return sorted(p for p in base.rglob("*.parquet") if not p.name.startswith((".", "_")))


def table_rows(run_dir: Path, tables) -> dict[str, int]:
    """Rows per table, read from the Parquet footers (no data is scanned)."""
    return {t: sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(run_dir, t)) for t in tables}


# Characters DuckDB's glob reads as wildcards; in a directory's own name each is matched literally
# by a one-character class ("[*]"), so a run directory may be called anything.
_GLOB_SPECIAL = re.compile(r"([*?\[])")
# The files a view reads: every Parquet file under a table's directory, at any depth, except the
# hidden and underscore ones writers use for work in progress (what ``parquet_files`` lists).
TABLE_FILES_GLOB = "**/[!._]*.parquet"


def parquet_glob(run_dir: Path, table: str) -> str:
    """The DuckDB glob of one table's Parquet files in a run directory (absolute path).

    A view reads its table through this pattern rather than a list of the files there at build
    time: Spark names its part files with a new UUID on every write (and writes as many as the
    shuffle has partitions), so a listed file is gone after the next lineage.
    """
    base = _GLOB_SPECIAL.sub(r"[\1]", str(Path(run_dir).absolute() / TABLE_DIRS[table] / table))
    return f"{base}/{TABLE_FILES_GLOB}"


def run_id_of(run_dir: Path) -> str:
    """The run id a run directory carries in its ``runs`` table, else the directory's name."""
    for f in parquet_files(run_dir, "runs"):
        ids = [i for i in pq.read_table(f, columns=["run_id"]).column(0).to_pylist() if i]
        if ids:
            return ids[0]
    return Path(run_dir).name


def check_run_dir(run_dir: Path, *, need_lineage: bool = True) -> Path:
    """Return the run directory as an absolute path, or raise BadInputError saying what is missing."""
    path = Path(run_dir).absolute()
    if not (path / "parquet").is_dir():
        raise BadInputError("not a run directory (no parquet/ inside)", where=str(path),
                            hint="create one with `retry-audit simulate` or `retry-audit import-store`")
    if need_lineage and not all(parquet_files(path, t) for t in LINEAGE_TABLES):
        raise BadInputError("the run has no lineage yet (lineage/message_hops, lineage/message_lineage)",
                            where=str(path), hint=f"run `retry-audit lineage {path}` first")
    return path


def _select_list(table: str, file_columns: set[str], run_id: str) -> str:
    """Contract columns cast to contract types; a column the files lack becomes a typed NULL."""
    schema = LOADED[table]
    duck_types = _duck_types(table)
    parts = []
    for field in schema:
        col = quote_ident(field.name)
        typ = duck_types[field.name]
        if field.name not in file_columns:
            expr = f"CAST(NULL AS {typ})"
        else:
            expr = f"CAST({col} AS {typ})"
        if field.name == "run_id":
            # A run's rows always say which run they belong to, even if a writer left it blank.
            expr = f"coalesce({expr}, {quote_literal(run_id)})"
        parts.append(f"{expr} AS {col}")
    return ", ".join(parts)


_DUCK_TYPES_CACHE: dict[str, dict[str, str]] = {}


def _duck_types(table: str) -> dict[str, str]:
    """DuckDB type names of a contract table, learnt by letting DuckDB read its empty Arrow table.

    Every loaded table's at once, in one connection (opening one costs about as much as reading
    a table's types)."""
    if not _DUCK_TYPES_CACHE:
        types = {}
        con = duckdb.connect()
        try:
            for name, schema in LOADED.items():
                empty = schema.empty_table()  # noqa: F841 - read by DuckDB's replacement scan
                rows = con.execute("DESCRIBE SELECT * FROM empty").fetchall()
                types[name] = {col: typ for col, typ, *_ in rows}
        finally:
            con.close()
        _DUCK_TYPES_CACHE.update(types)
    return _DUCK_TYPES_CACHE[table]


def create_empty_tables(con: duckdb.DuckDBPyConnection, tables: Iterable[str] | None = None) -> None:
    """Create every loaded table empty, with the contract's columns and types."""
    for table in tables or LOADED:
        cols = ", ".join(f"{quote_ident(n)} {t}" for n, t in _duck_types(table).items())
        con.execute(f"CREATE OR REPLACE TABLE {quote_ident(table)} ({cols})")


def contract_select(table: str, runs: Sequence[tuple[Path, str]]) -> tuple[str, dict[str, int]]:
    """The SELECT reading one contract table from every run's Parquet, and its rows per run.

    Each run contributes its table directory's files cast to the contract (run_id filled in),
    read through a glob so that a table rewritten in place (a new lineage) is read as it is now;
    a table no run has reads as an empty relation with the contract's columns and types. The
    columns and row counts are those of the files there at build time.
    """
    parts, rows = [], {}
    for run_dir, run_id in runs:
        files = parquet_files(run_dir, table)
        rows[run_id] = 0
        if not files:
            continue
        columns: set[str] = set()
        for f in files:
            meta = pq.read_metadata(f)
            columns.update(meta.schema.to_arrow_schema().names)
            rows[run_id] += meta.num_rows
        # No hive partitioning: a "key=value" directory in a run's path must not add a column.
        parts.append(f"SELECT {_select_list(table, columns, run_id)} "
                     f"FROM read_parquet({quote_literal(parquet_glob(run_dir, table))}, "
                     f"union_by_name = true, hive_partitioning = false)")
    if not parts:
        parts.append(f"SELECT {_select_list(table, set(), '')} WHERE false")
    return "\nUNION ALL\n".join(parts), rows


def load_runs(con: duckdb.DuckDBPyConnection, runs: Sequence[tuple[Path, str]]) -> dict[str, dict[str, int]]:
    """Give ``con`` every loaded table for ``runs`` (run directory, run id); rows per run and table.

    The contract tables are views over the runs' Parquet files: copying them into DuckDB's storage
    costs more than every audit table and check together (docs/warehouse.md, "Tables are views over
    the run directories"). The manifest tables are small and are stored.
    """
    loaded: dict[str, dict[str, int]] = {run_id: {} for _, run_id in runs}
    for table in CONTRACT:
        select, rows = contract_select(table, runs)
        con.execute(f"CREATE OR REPLACE VIEW {quote_ident(table)} AS {select}")
        for run_id, n in rows.items():
            loaded[run_id][table] = n
    create_empty_tables(con, MANIFEST_TABLES)
    for run_dir, run_id in runs:
        loaded[run_id].update(load_manifest(con, run_dir, run_id))
    return loaded


def manifest_rows(run_dir: Path, run_id: str) -> dict[str, list[dict]]:
    """The run_manifest and run_groups rows of a run's run.json (none for an imported store)."""
    path = Path(run_dir) / MANIFEST_NAME
    if not path.is_file():
        return {"run_manifest": [], "run_groups": [], "delay_levels": []}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInputError(f"unreadable run manifest: {exc}", where=str(path)) from exc
    manifest = [{"run_id": run_id, "flush": doc.get("flush"), "semantics": doc.get("semantics"),
                 "end_reason": doc.get("end_reason"), "horizon_ms": doc.get("horizon_ms"),
                 "transaction_check_max": doc.get("transaction_check_max")}]
    groups = [{"run_id": run_id, "group": g.get("name"), "model": g.get("model"), "mode": g.get("mode"),
               "consumers": g.get("consumers"), "max_reconsume_times": g.get("max_reconsume_times"),
               "subscribe": list(g.get("subscribe") or [])}
              for g in doc.get("groups") or []]
    return {"run_manifest": manifest, "run_groups": groups,
            "delay_levels": [{"run_id": run_id, "delay_level": i + 1, "delay_ms": int(ms)}
                             for i, ms in enumerate(doc.get("delay_levels_ms") or [])]}


def load_manifest(con: duckdb.DuckDBPyConnection, run_dir: Path, run_id: str) -> dict[str, int]:
    loaded = {}
    for table, rows in manifest_rows(run_dir, run_id).items():
        if rows:
            arrow = pa.Table.from_pylist(rows, schema=MANIFEST_TABLES[table])  # noqa: F841 - scanned below
            con.execute(f"INSERT INTO {quote_ident(table)} SELECT * FROM arrow")
        loaded[table] = len(rows)
    return loaded


def run_views(run_dir: Path, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per contract table of a single run.

    The checks run on this before the warehouse exists (they guard the lineage assets).
    """
    con = con or quiet(duckdb.connect())
    load_runs(con, [(Path(run_dir), run_id_of(run_dir))])
    return con


def run_warehouse(run_dir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory warehouse of a single run: :func:`run_views` and the audit tables built on them.

    What the HTML report reads when it is given a run directory rather than a warehouse file.
    """
    con = run_views(run_dir)
    build_audit_tables(con)
    return con


def build_path(db_path: Path) -> Path:
    """The temporary file a build of ``db_path`` writes before the swap."""
    return db_path.parent / f".{db_path.name}{BUILD_SUFFIX}-{os.getpid()}"


def remove_db_file(path: Path) -> None:
    for p in (path, Path(str(path) + ".wal")):
        if p.exists():
            p.unlink()


def swap_into_place(built: Path, db_path: Path) -> None:
    """Atomically replace ``db_path`` with the finished file ``built`` (same directory, one rename)."""
    # A WAL left beside the old file would be replayed onto the new one by the next writer.
    stale_wal = Path(str(db_path) + ".wal")
    if stale_wal.exists():
        stale_wal.unlink()
    os.replace(built, db_path)
    fsync_dir(db_path.parent)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_builds(db_path: Path) -> list[Path]:
    """Remove build files (and WALs) that killed builds left beside ``db_path``; return them.

    A build file names its process; one whose process is gone can never be swapped in.
    """
    removed = []
    prefix = f".{db_path.name}{BUILD_SUFFIX}-"
    for path in db_path.parent.glob(f"{prefix}*"):
        pid_text = path.name[len(prefix):].removesuffix(".wal")
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def attach_for_build(db_path: Path) -> tuple[duckdb.DuckDBPyConnection, Path]:
    """A connection whose default database is a fresh build file beside ``db_path``."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(db_path)
    built = build_path(db_path)
    remove_db_file(built)
    con = quiet(duckdb.connect())
    con.execute(f"ATTACH {quote_literal(str(built))} AS wh (STORAGE_VERSION '{STORAGE_VERSION}')")
    con.execute("USE wh")
    return con, built


def finish_build(con: duckdb.DuckDBPyConnection, built: Path, db_path: Path) -> None:
    """Checkpoint, close and swap the build file into place."""
    con.execute("CHECKPOINT wh")
    con.execute("USE memory")
    con.execute("DETACH wh")
    con.close()
    swap_into_place(built, db_path)


def open_read_only(db_path: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a warehouse file, or BadInputError with how to make one."""
    path = Path(db_path)
    if not path.is_file():
        raise BadInputError("no warehouse file", where=str(path),
                            hint="build it with `make demo` or `retry-audit warehouse RUN_DIR --db "
                                 f"{path}`")
    try:
        return quiet(duckdb.connect(str(path), read_only=True))
    except duckdb.Error as exc:
        raise BadInputError(f"cannot open the warehouse read-only: {exc}", where=str(path)) from exc


def distinct_run_ids(run_dirs: Sequence[Path]) -> list[str]:
    """Run ids of the given directories; two directories with one run id would mix their rows."""
    ids: dict[str, Path] = {}
    for run_dir in run_dirs:
        rid = run_id_of(run_dir)
        if rid in ids:
            raise BadInputError(f"run id {rid!r} appears twice ({ids[rid]} and {run_dir})",
                                where=str(run_dir),
                                hint="load each run once; re-import with a different --name")
        ids[rid] = run_dir
    return list(ids)


@dataclass
class WarehouseSummary:
    """What a build wrote: the file, the runs in it, rows per table and how long it took."""

    db_path: Path
    run_ids: list[str]
    rows: dict[str, int] = dataclass_field(default_factory=dict)
    seconds: float = 0.0


def table_counts(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> dict[str, int]:
    """Rows per warehouse table, for all runs or one."""
    counts = {}
    for table in WAREHOUSE_TABLES:
        if run_id is None:
            counts[table] = con.execute(f"SELECT count(*) FROM {quote_ident(table)}").fetchone()[0]
        else:
            counts[table] = con.execute(f"SELECT count(*) FROM {quote_ident(table)} WHERE run_id = ?",
                                        [run_id]).fetchone()[0]
    return counts


def build_warehouse(run_dirs: Sequence[str | Path], db_path: str | Path, *,
                    progress: Callable[[str], None] | None = None) -> WarehouseSummary:
    """Build the warehouse of ``run_dirs`` into a new file and swap it into ``db_path``.

    Each run directory needs ``parquet/`` and ``lineage/`` (run ``retry-audit lineage`` first).
    A reader with the old file open keeps reading the old file; nothing blocks the build.
    """
    started = time.perf_counter()
    dirs = [check_run_dir(Path(d)) for d in run_dirs]
    assert dirs, "build_warehouse needs at least one run directory"
    run_ids = distinct_run_ids(dirs)
    db_path = Path(db_path).absolute()
    con, built = attach_for_build(db_path)
    try:
        loaded = load_runs(con, list(zip(dirs, run_ids, strict=True)))
        if progress:
            for run_id, rows in loaded.items():
                progress(f"loaded {run_id}: {rows['commitlog']:,} commit-log records, "
                         f"{rows['message_hops']:,} hops")
        build_audit_tables(con)
        rows = table_counts(con)
        finish_build(con, built, db_path)
    except BaseException:
        con.close()
        remove_db_file(built)
        raise
    return WarehouseSummary(db_path=db_path, run_ids=run_ids, rows=rows,
                            seconds=time.perf_counter() - started)


TABLE_DESCRIPTIONS = {
    "commitlog": "Every commit-log record of every run (physical-offset order), properties as a map.",
    "consume_attempts": "Every delivery of a message to a listener, with its status and outcome (simulations).",
    "schedule_deliveries": "Every delayed message moved out of SCHEDULE_TOPIC_XXXX, with its lateness.",
    "consumer_offsets": "Consumer offset events (UPDATE, PERSIST, RESTORE) per group, topic and queue.",
    "faults": "Faults injected into a simulated run (crashes, send-back and put failures, ...).",
    "runs": "One row per run: scenario, seed, simulated start and end, source (simulation or import).",
    "produced": "Every message a producer tried to send, with its send status (simulations).",
    "delay_offsets": "Delay-level offsets of the schedule service (config/delayOffset.json).",
    "store_problems": "Damage found while reading an imported store.",
    "pop_evidence": "5.x POP checkpoints and acks of an imported store, decoded from their records.",
    "retry_topics": "The owner (group, origin topic) of every %RETRY% topic an imported store knows.",
    "inner_messages": "The messages inside an imported store's 5.x inner-batch records, one row each, "
                      "with the UNIQ_KEY and queue offset the consumer saw.",
    "schedule_units": "One row per unit of a SCHEDULE_TOPIC_XXXX consume queue: the record it names and its "
                      "due time (the unit's tags code).",
    "transaction_calls": "One row per call of a transactional producer's listener (execution, each check) and "
                         "its answer (simulations; a conformance run's real clients).",
    "transaction_ops": "One row per transaction op record (RMQ_SYS_TRANS_OP_HALF_TOPIC): the half-queue offsets "
                       "of the half records a commit or rollback decided, read from its body.",
    "dledger_entries": "A DLedger store's entries, one row per (Raft index, term): committed (its record is in "
                       "commitlog), uncommitted or divergent (never handed out), and which replicas hold it.",
    "client_trace": "One row per message-trace record a client wrote to the trace topic (Pub, SubBefore, "
                    "SubAfter, EndTransaction), read from the store that holds it (lossy, optional).",
    "replica_epochs": "A 5.x controller-mode broker's epochs, per imported copy (master, slave): the offsets "
                      "each master epoch wrote, the store hosts of its records, and the records a failover cut off.",
    "failover_cut": "The records a controller-mode broker's merge left out: a copy's tail past where its epochs "
                    "leave the new master's (written by a master that lost its role before a replica had them).",
    "lmq_dispatches": "An imported store's multi-dispatch (LMQ) positions: one row per (record, queue its "
                      "INNER_MULTI_DISPATCH lists), matched with the consume-queue unit there.",
    "message_hops": "One row per commit-log record of a message's journey, from the Spark lineage.",
    "message_lineage": "One row per (message, group): path, retries (the chain's depth), forks, final state, "
                       "from the Spark lineage.",
    "run_manifest": "A simulated run's settings from run.json (flush mode, semantics, end reason).",
    "run_groups": "A simulated run's consumer groups from run.json (model, mode, max reconsume times).",
    "delay_levels": "A simulated run's delay-level table (level -> ms) from run.json.",
    "dlq_messages": "One row per (message, group) in a DLQ: origin topic and msgId, uniq key, retries, "
                    "its DLQ copies and the first one (the copy a resend uses) with all its properties, "
                    "and the last failed delivery.",
    "delay_accuracy": "Per run and delay level: deliveries, expected delay, lateness p50/p99/max, early count.",
    "retry_funnel": "Per run, group and origin topic: messages reaching each attempt, succeeding there, "
                    "going to the DLQ after it.",
    "delivery_accounting": "Per run and group, the OpenChaos queue checker's fields: enqueue_invoke, "
                           "enqueue_success, dequeue_success, lost, duplicated, at_least_once, exactly_once; forked "
                           "messages, their duplicate deliveries and those a broker restart explains.",
    "group_health": "Per run and group: messages, consumed, DLQ, retrying, retry rate, end-to-end p50/p99.",
    "transactions": "Per transactional message: its outcome (transaction_state), checks, half and commit "
                    "records, and the time from its half to the decision.",
    "traced_attempts": "One row per delivery to a listener a client's message trace records: reconsume times, "
                       "begin and end, time, success and return type, the lineage's final state (empty without trace).",
    "anomalies": "Things to look at: DUPLICATE_CONSUME, LOST, EARLY_DELIVERY, LATE_DELIVERY, DLQ_UNEXPLAINED, "
                 "STORE_DAMAGE, REVIVE_LOST, TRANSACTION_PAST_CHECK_MAX, COMMIT_WITHOUT_HALF, OP_WITHOUT_HALF, "
                 "COMMITTED_TWICE, SENT_NOT_STORED, FAILURE_NOT_RETRIED, DECISION_NOT_STORED, FAILOVER_CUT, "
                 "LMQ_REDELIVERED, RETRY_COUNT_LOST.",
    "lmq_deliveries": "One row per LMQ (multi-dispatch) position of a message: which delivery of it in that queue "
                      "(its retry records are dispatched again), its record's hop kind, and the groups whose "
                      "committed offset there is past it.",
    "delay_periods": "Per run, broker and delay level: each period the broker gave the level one delay, read "
                     "from the schedule queues (a restart with another messageDelayLevel starts a new one).",
}
assert set(TABLE_DESCRIPTIONS) == set(WAREHOUSE_TABLES), "every warehouse table needs a description"
