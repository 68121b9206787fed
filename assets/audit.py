"""The DuckDB audit warehouse: the run tables side by side, and the audit tables built from them.

``build_warehouse(run_dirs, db_path)`` loads every contract table of every run (a ``run_id``
column on each), then runs ``assets/sql/<table>.sql`` for each audit table in ``AUDIT_TABLES``
order. The file is written beside ``db_path`` and renamed into place (see ``assets.warehouse``),
in DuckDB's v1.0.0 storage format so DuckDB 1.x clients open it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import duckdb

from assets.warehouse import (
    LOADED,
    attach_for_build,
    check_run_dir,
    create_empty_tables,
    distinct_run_ids,
    finish_build,
    load_run,
    quote_ident,
    remove_db_file,
)

# Audit tables, in build order (a later table may read an earlier one); one SQL file each.
AUDIT_TABLES = ("dlq_messages", "delay_accuracy", "retry_funnel", "delivery_accounting",
                "group_health", "anomalies")
# Every table of a built warehouse: the loaded contract tables, then the audit tables.
WAREHOUSE_TABLES = tuple(LOADED) + AUDIT_TABLES

# A delayed message delivered later than this after its due time is listed as LATE_DELIVERY. The
# schedule service polls each level every 100 ms, so seconds of lateness mean it was stalled
# (a crash, put failures, a busy store).
LATE_DELIVERY_MS_THRESHOLD = 5_000

# Values the SQL files read with getvariable('<name>').
SQL_VARIABLES: dict[str, int] = {
    "late_delivery_ms_threshold": LATE_DELIVERY_MS_THRESHOLD,
}


def sql_text(table: str) -> str:
    """The SQL that builds one audit table (packaged beside this module)."""
    return resources.files("assets").joinpath("sql", f"{table}.sql").read_text(encoding="utf-8")


def set_sql_variables(con: duckdb.DuckDBPyConnection) -> None:
    for name, value in SQL_VARIABLES.items():
        con.execute(f"SET VARIABLE {name} = {int(value)}")


def build_audit_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Run every audit table's SQL on a connection that already holds the contract tables."""
    set_sql_variables(con)
    for table in AUDIT_TABLES:
        con.execute(sql_text(table))


@dataclass
class WarehouseSummary:
    """What a build wrote: the file, the runs in it, rows per table and how long it took."""

    db_path: Path
    run_ids: list[str]
    rows: dict[str, int] = field(default_factory=dict)
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
        create_empty_tables(con)
        for run_dir, run_id in zip(dirs, run_ids, strict=True):
            loaded = load_run(con, run_dir, run_id)
            if progress:
                progress(f"loaded {run_id}: {loaded['commitlog']:,} commit-log records, "
                         f"{loaded['message_hops']:,} hops")
        build_audit_tables(con)
        rows = table_counts(con)
        finish_build(con, built, db_path)
    except BaseException:
        con.close()
        remove_db_file(built)
        raise
    return WarehouseSummary(db_path=db_path, run_ids=run_ids, rows=rows,
                            seconds=time.perf_counter() - started)
