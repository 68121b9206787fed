"""A run's own data as Dagster assets: ``raw/run`` (its Parquet) and its Spark lineage.

``raw/run`` simulates the partition's scenario, or imports its store, into
``<data home>/runs/<partition>/``. ``lineage/message_hops`` and ``lineage/message_lineage`` are one
Spark step (``assets.lineage.run_lineage``), guarded by the blocking invariant checks of
``assets.checks``: they run on the run's own Parquet through an in-memory DuckDB, so a broken
lineage stops the warehouse from being built on it.
"""

# No `from __future__ import annotations` here: Dagster reads raw/run's `config: RawRunConfig`
# parameter from its annotation as written, and takes a string there for a type it cannot resolve.

import json
import time
from enum import StrEnum
from pathlib import Path

import dagster as dg
from pydantic import Field

from assets.checks import ERROR, INVARIANTS, Check, CheckOutcome, run_checks
from assets.lineage_engine import (
    AUTO_ENGINE,
    DUCKDB_ENGINE,
    ENGINE_DEFAULT,
    SPARK_ENGINE,
    commitlog_parquet_bytes,
    pick_engine,
)
from assets.progress import LOG_PROGRESS_INTERVAL_S, Throttle
from assets.resources import DataHome, SparkResource
from assets.run_source import CLUSTER, IMPORTED, SCENARIO, STORE, RunSource, cluster_brokers, is_dledger_store
from assets.warehouse import run_id_of, run_views, table_rows
from broker_core.export.schema import FINAL_STATES, HOP_KINDS, LINEAGE_TABLES, RAW_TABLES

RAW_RUN_KEY = dg.AssetKey(["raw", "run"])
LINEAGE_KEYS = {name: dg.AssetKey(["lineage", name]) for name in LINEAGE_TABLES}
LINEAGE_DESCRIPTIONS = {
    "message_hops": f"One row per commit-log record in a message's journey ({', '.join(HOP_KINDS)}), "
                    "ordered per message and group, with the dwell time to the next hop.",
    "message_lineage": "One row per (message, consumer group): the path through the topics, retries, "
                       f"origin topic and message id, and the final state ({', '.join(FINAL_STATES)}; "
                       "IN_FLIGHT with invisible_until).",
}


def _sim_progress(log):
    """A simulate() progress callback that logs simulated time and records, a few lines a minute."""
    if log is None:
        return None
    throttle = Throttle(LOG_PROGRESS_INTERVAL_S)

    def report(sim_ms: int, records: int) -> None:
        if throttle.ready():
            log.info(f"simulated {sim_ms / 1000:,.0f} s, {records:,} records")

    return report


class RawRunConfig(dg.Config):
    """``raw/run``'s settings (the launchpad shows them; the store sensor sets ``live`` on its runs)."""

    # A broker is writing the store partition, so the record at the end of its log may be in flight.
    live: bool = Field(default=False, description="a broker is writing the store: an in-flight tail is not damage")


class LineageEngine(StrEnum):
    """The engines the lineage asset can build with (assets.lineage_engine)."""

    spark = SPARK_ENGINE
    duckdb = DUCKDB_ENGINE
    auto = AUTO_ENGINE


class LineageConfig(dg.Config):
    """The lineage asset's settings: which engine builds it (both write the same tables)."""

    engine: LineageEngine = Field(
        default=LineageEngine(ENGINE_DEFAULT),
        description="spark (the pipeline's engine), duckdb (in the step's process, the same SQL), or auto: "
                    "duckdb for a run whose commit-log Parquet is below "
                    "assets.lineage_engine.AUTO_DUCKDB_COMMITLOG_BYTES_MAX, else spark")


def materialize_run(source: RunSource, run_dir: Path, log=None, live: bool = False) -> dict:
    """Simulate or import the partition's run into ``run_dir``; return metadata describing it.

    A store imported into its run before is continued from where that import ended (only the new
    records are read; ``broker_core.export.increments``)."""
    started = time.perf_counter()
    meta: dict = {"source": source.kind, "source_path": dg.MetadataValue.path(str(source.path))}
    if source.kind == SCENARIO:
        from broker_core.sim.run import simulate

        summary = simulate(source.path, run_dir, progress=_sim_progress(log))
        meta.update(seed=summary.seed, end_reason=summary.end_reason, produced=summary.produced,
                    consumed=summary.consumed, dlq_records=summary.dlq, in_flight=summary.in_flight,
                    reproduce=f"retry-audit simulate {source.path} --out {run_dir} --seed {summary.seed}")
    elif source.kind == STORE:
        from broker_core.export.store_import import import_store

        # A DLedger store is read whole every time (its uncommitted tail may be cut), never live.
        live = live and not is_dledger_store(source.path)
        summary = import_store(source.path, run_dir, name=source.name, live=live)
        meta.update(records=summary.records, problems=len(summary.problems), broker=summary.broker,
                    live=live, bytes_read=summary.bytes_read, records_added=summary.records_added,
                    continued_from_offset=summary.resumed_from if summary.resumed_from is not None else -1,
                    next_offset=summary.next_offset if summary.next_offset is not None else -1,
                    store_bytes_read=sum(summary.store_bytes_read.values()))
        if summary.full_import_reason:
            meta["read_whole_because"] = summary.full_import_reason
            if log:
                log.info(f"{source.path} read whole: {summary.full_import_reason}")
    elif source.kind == CLUSTER:
        meta.update(import_cluster(source, run_dir, log, live))
    else:
        assert source.kind == IMPORTED, f"unknown run source {source.kind!r}"
        if log:
            log.info(f"{run_dir} was imported with `retry-audit import-store`; taken as it is")
    meta["seconds"] = round(time.perf_counter() - started, 3)
    return meta


def import_cluster(source: RunSource, run_dir: Path, log=None, live: bool = False) -> dict:
    """Every broker of a cluster partition into its one run, as ``import-store --broker`` does
    (a DLedger group's nodes with ``--role replica``); return what the imports read and found.
    Each broker's import goes on from its last one (only what its store gained is read)."""
    from broker_core.export.store_import import import_store

    meta = {"brokers": "", "records": 0, "problems": 0, "bytes_read": 0, "records_added": 0,
            "store_bytes_read": 0, "live": live}
    brokers = cluster_brokers(source.path)
    whole = []
    for broker, stores in brokers.items():
        replicas = len(stores) > 1 or stores[0] != source.path / broker
        for store in stores:
            summary = import_store(store, run_dir, name=source.name, broker=broker,
                                   role="replica" if replicas else "master",
                                   live=live and not is_dledger_store(store))
            meta["problems"] += len(summary.problems)
            meta["bytes_read"] += summary.bytes_read
            meta["store_bytes_read"] += sum(summary.store_bytes_read.values())
            meta["records_added"] += summary.records_added
            if summary.full_import_reason:
                whole.append(f"{broker} ({store.name}): {summary.full_import_reason}")
        meta["records"] += summary.records  # a group's last import counts the merged records
    meta["brokers"] = ", ".join(brokers)
    if whole:
        meta["read_whole_because"] = "; ".join(whole)
        if log:
            log.info(f"{source.path} read whole: {meta['read_whole_because']}")
    return meta


def raw_assets(partitions_def: dg.PartitionsDefinition) -> list:
    """``raw/run`` and the lineage multi-asset, partitioned by run."""

    @dg.asset(key=RAW_RUN_KEY, partitions_def=partitions_def, group_name="raw", kinds={"parquet"},
              description="A run's Parquet tables (commitlog, consume_attempts, schedule_deliveries, "
                          "consumer_offsets, faults, runs, produced, ...): the scenario simulated on the "
                          "broker model, or the RocketMQ store imported, into <data home>/runs/<run>/.")
    def raw_run(context: dg.AssetExecutionContext, config: RawRunConfig, home: DataHome) -> dg.MaterializeResult:
        name = context.partition_key
        run_dir = home.run_dir(name)
        meta = materialize_run(home.source(name), run_dir, context.log, live=config.live)
        rows = table_rows(run_dir, RAW_TABLES)
        meta.update({f"rows_{t}": n for t, n in rows.items()})
        meta["dagster/row_count"] = rows["commitlog"]
        meta["run_dir"] = dg.MetadataValue.path(str(run_dir))
        return dg.MaterializeResult(metadata=meta)

    @dg.multi_asset(
        specs=[dg.AssetSpec(key, deps=[RAW_RUN_KEY], group_name="lineage", kinds={"spark", "parquet"},
                            description=LINEAGE_DESCRIPTIONS[name]) for name, key in LINEAGE_KEYS.items()],
        check_specs=[check_spec(c) for c in INVARIANTS], partitions_def=partitions_def, name="lineage")
    def lineage(context: dg.AssetExecutionContext, config: LineageConfig, home: DataHome, spark: SparkResource):
        run_dir = home.run_dir(context.partition_key)
        engine = pick_engine(run_dir, config.engine.value)
        context.log.info(f"lineage: engine {engine} (engine: {config.engine.value})")
        started = time.perf_counter()
        if engine == DUCKDB_ENGINE:
            from assets.lineage_duckdb import run_lineage_duckdb

            counts = run_lineage_duckdb(run_dir, progress=context.log.info)
        else:
            from assets.lineage import run_lineage

            counts = run_lineage(run_dir, spark.session(commitlog_parquet_bytes(run_dir)), progress=context.log.info)
        seconds = time.perf_counter() - started
        records = table_rows(run_dir, ["commitlog"])["commitlog"]
        for name, key in LINEAGE_KEYS.items():
            yield dg.MaterializeResult(asset_key=key, metadata={
                "dagster/row_count": counts[name], "seconds": round(seconds, 3),
                "records_per_second": round(records / seconds, 1) if seconds > 0 else 0.0,
                "engine": engine,
                "path": dg.MetadataValue.path(str(run_dir / "lineage" / name))})
        con = run_views(run_dir)
        try:
            outcomes = run_checks(con, INVARIANTS, run_id_of(run_dir))
        finally:
            con.close()
        write_check_verdicts(run_dir, outcomes)
        for outcome in outcomes:
            yield check_result(outcome)

    return [raw_run, lineage]


# Beside a run's lineage: the verdicts of its invariant checks, so a warehouse build that loads
# every run can leave out one whose lineage broke an invariant.
CHECK_VERDICTS_FILE = "checks.json"


def write_check_verdicts(run_dir: Path, outcomes: list[CheckOutcome]) -> None:
    doc = [{"check": o.check.name, "severity": o.check.severity, "passed": o.passed,
            "verdict": o.verdict, "judged": o.judged, "violations": o.violations} for o in outcomes]
    tmp = run_dir / f".{CHECK_VERDICTS_FILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(run_dir / CHECK_VERDICTS_FILE)


def failed_blocking_checks(run_dir: Path) -> list[str]:
    """Names of the blocking checks a run's lineage failed (none when it was never checked)."""
    path = Path(run_dir) / CHECK_VERDICTS_FILE
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return ["(unreadable checks.json)"]
    return [v["check"] for v in doc if not v.get("passed") and v.get("severity") == ERROR]


def _asset_key(check: Check) -> dg.AssetKey:
    return dg.AssetKey(check.asset.split("/"))


def check_spec(check: Check) -> dg.AssetCheckSpec:
    """A check as Dagster declares it, on its asset; an invariant (ERROR) blocks what depends on it."""
    return dg.AssetCheckSpec(check.name, asset=_asset_key(check), description=check.description,
                             blocking=check.severity == ERROR)


def check_result(outcome: CheckOutcome) -> dg.AssetCheckResult:
    """A check's verdict as Dagster sees it, with its evidence as metadata."""
    meta = outcome.metadata()
    return dg.AssetCheckResult(
        check_name=outcome.check.name, asset_key=_asset_key(outcome.check),
        passed=outcome.passed,
        severity=dg.AssetCheckSeverity.ERROR if outcome.blocking else dg.AssetCheckSeverity.WARN,
        # A check with nothing to judge in the run blocks nothing and says so, instead of "passed".
        description=None if outcome.applicable else outcome.verdict,
        metadata={"verdict": meta["verdict"], "judged": meta["judged"], "violations": meta["violations"],
                  "first_offending_keys": meta["first_offending_keys"],
                  "evidence": dg.MetadataValue.md("\n".join(f"- {line}" for line in meta["evidence"])
                                                  or "(none)")})
