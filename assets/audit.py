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
    distinct_run_ids,
    finish_build,
    load_runs,
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


# Temporary tables the audit SQL shares (built first, dropped after; not in the warehouse).
STAGING_TABLES = ("consume_acks",)


def build_audit_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Run every audit table's SQL on a connection that already holds the contract tables."""
    set_sql_variables(con)
    for table in STAGING_TABLES + AUDIT_TABLES:
        con.execute(sql_text(table))
    for table in STAGING_TABLES:
        con.execute(f"DROP TABLE temp.{quote_ident(table)}")


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
    "message_hops": "One row per commit-log record of a message's journey, from the Spark lineage.",
    "message_lineage": "One row per (message, group): path, retries, final state, from the Spark lineage.",
    "run_manifest": "A simulated run's settings from run.json (flush mode, semantics, end reason).",
    "run_groups": "A simulated run's consumer groups from run.json (model, mode, max reconsume times).",
    "delay_levels": "A simulated run's delay-level table (level -> ms) from run.json.",
    "dlq_messages": "One row per DLQ record: origin topic and msgId, uniq key, group, retries, all "
                    "properties and the last failed delivery.",
    "delay_accuracy": "Per run and delay level: deliveries, expected delay, lateness p50/p99/max, early count.",
    "retry_funnel": "Per run, group and origin topic: messages reaching each attempt, succeeding there, "
                    "going to the DLQ after it.",
    "delivery_accounting": "Per run and group, the OpenChaos queue checker's fields: enqueue_invoke, "
                           "enqueue_success, dequeue_success, lost, duplicated, at_least_once, exactly_once.",
    "group_health": "Per run and group: messages, consumed, DLQ, retrying, retry rate, end-to-end p50/p99.",
    "anomalies": "Things to look at: DUPLICATE_CONSUME, LOST, EARLY_DELIVERY, LATE_DELIVERY, STORE_DAMAGE.",
}
assert set(TABLE_DESCRIPTIONS) == set(WAREHOUSE_TABLES), "every warehouse table needs a description"


def audit_assets(partitions_def) -> list:
    """The ``audit/<table>`` assets: one DuckDB build step for the whole warehouse, per run partition.

    Materializing a run's partition rebuilds the warehouse from every run directory that has its
    lineage (so runs stay side by side) and swaps the file in; the drift checks (WARN) judge the
    partition's run.
    """
    import dagster as dg

    from assets.checks import DRIFTS, run_checks
    from assets.raw import LINEAGE_KEYS, RAW_RUN_KEY, check_result, failed_blocking_checks
    from assets.warehouse import open_read_only, run_id_of

    keys = {t: dg.AssetKey(["audit", t]) for t in WAREHOUSE_TABLES}
    specs = [dg.AssetSpec(keys[t], deps=[RAW_RUN_KEY, *LINEAGE_KEYS.values()], group_name="audit",
                          kinds={"duckdb"}, description=TABLE_DESCRIPTIONS[t]) for t in WAREHOUSE_TABLES]
    check_specs = [dg.AssetCheckSpec(c.name, asset=dg.AssetKey(c.asset.split("/")),
                                     description=c.description, blocking=False) for c in DRIFTS]

    @dg.multi_asset(specs=specs, check_specs=check_specs, partitions_def=partitions_def, name="audit",
                    required_resource_keys={"home", "warehouse"})
    def audit(context):
        home, warehouse = context.resources.home, context.resources.warehouse
        run_dir = home.run_dir(context.partition_key)
        run_id = run_id_of(run_dir)
        run_dirs = []
        for d in home.lineage_run_dirs():
            failed = failed_blocking_checks(d)
            if failed:
                context.log.warning(f"left out of the warehouse: {d.name} failed {', '.join(failed)}")
            else:
                run_dirs.append(d)
        summary = build_warehouse(run_dirs, warehouse.path, progress=context.log.info)
        con = open_read_only(warehouse.path)
        try:
            counts = table_counts(con, run_id)
            outcomes = run_checks(con, DRIFTS, run_id)
            plots = _plots(con, run_id, context.log)
        finally:
            con.close()
        for table, key in keys.items():
            meta = {"dagster/row_count": counts[table], "rows_all_runs": summary.rows[table],
                    "runs_in_warehouse": len(summary.run_ids),
                    "warehouse": dg.MetadataValue.path(str(summary.db_path))}
            if table in plots:
                meta["plot"] = dg.MetadataValue.md(plots[table])
            yield dg.MaterializeResult(asset_key=key, metadata=meta)
        for outcome in outcomes:
            yield check_result(outcome)

    return [audit]


def _plots(con, run_id: str, log) -> dict[str, str]:
    """Markdown images for the tables that have a plot; a plot that fails is logged, not fatal."""
    try:
        from assets.plots import lateness_plot, retry_funnel_plot

        return {"retry_funnel": retry_funnel_plot(con, run_id).markdown(),
                "delay_accuracy": lateness_plot(con, run_id).markdown()}
    except Exception as exc:  # noqa: BLE001 - pictures are a courtesy; the tables are the product
        log.warning(f"plots skipped: {type(exc).__name__}: {exc}")
        return {}
