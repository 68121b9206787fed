"""The ``audit/<table>`` Dagster assets: one DuckDB build of the whole warehouse per run partition,
with the drift checks and the plots as metadata.

The tables' SQL is ``assets.audit`` (plain DuckDB, which the CLI runs too); this module is the
Dagster step around ``assets.warehouse.build_warehouse``.
"""

# No `from __future__ import annotations` here: Dagster checks the `context` parameter's
# annotation as written, and a string there is an error.

import dagster as dg

from assets.checks import DRIFTS, run_checks
from assets.raw import LINEAGE_KEYS, RAW_RUN_KEY, check_result, check_spec, failed_blocking_checks
from assets.resources import DataHome, WarehouseResource
from assets.warehouse import (
    TABLE_DESCRIPTIONS,
    WAREHOUSE_TABLES,
    build_warehouse,
    open_read_only,
    run_id_of,
    table_counts,
)


def audit_assets(partitions_def: dg.PartitionsDefinition) -> list:
    """The ``audit/<table>`` assets: one DuckDB build step for the whole warehouse, per run partition.

    Materializing a run's partition rebuilds the warehouse from every run directory that has its
    lineage (so runs stay side by side) and swaps the file in; the drift checks (WARN) judge the
    partition's run.
    """
    keys = {t: dg.AssetKey(["audit", t]) for t in WAREHOUSE_TABLES}
    specs = [dg.AssetSpec(keys[t], deps=[RAW_RUN_KEY, *LINEAGE_KEYS.values()], group_name="audit",
                          kinds={"duckdb"}, description=TABLE_DESCRIPTIONS[t]) for t in WAREHOUSE_TABLES]
    check_specs = [check_spec(c) for c in DRIFTS]

    @dg.multi_asset(specs=specs, check_specs=check_specs, partitions_def=partitions_def, name="audit")
    def audit(context: dg.AssetExecutionContext, home: DataHome, warehouse: WarehouseResource):
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
        from assets.plots import lateness_plot, retry_funnel_plot, transactions_plot

        return {"retry_funnel": retry_funnel_plot(con, run_id).markdown(),
                "delay_accuracy": lateness_plot(con, run_id).markdown(),
                "transactions": transactions_plot(con, run_id).markdown()}
    except Exception as exc:  # noqa: BLE001 - pictures are a courtesy; the tables are the product
        log.warning(f"plots skipped: {type(exc).__name__}: {exc}")
        return {}
