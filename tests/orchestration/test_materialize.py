"""Real Dagster materializations: a scenario end to end, and a broken run stopped by a blocking check.

Both share the process's one Spark session (``assets.spark.get_spark`` caches it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from testdata import CLEAN_STORE

from assets.checks import ALL_CHECKS, INVARIANTS, NO_EARLY_DELIVERY
from assets.raw import LINEAGE_KEYS, failed_blocking_checks
from assets.warehouse import open_read_only
from broker_core.export.parquet import write_rows
from broker_core.export.schema import SCHEDULE_DELIVERIES
from orchestration.definitions import build_definitions
from orchestration.partitions import scenarios_dir, sync_run_partitions

STORE_FIXTURE = CLEAN_STORE
TINY_SCENARIO = Path(__file__).parents[1] / "golden" / "tiny.yaml"


def instance_with_runs(defs: dg.Definitions) -> dg.DagsterInstance:
    """A fresh instance whose run partitions are the runs on disk (what the runs_on_disk sensor keeps)."""
    instance = dg.DagsterInstance.ephemeral()
    sync_run_partitions(instance, defs.resources["home"].sources())
    return instance


def materialize(home: Path, scenarios: Path, partition: str):
    defs = build_definitions(home, scenarios)
    return dg.materialize(list(defs.assets), partition_key=partition, resources=defs.resources,
                          instance=instance_with_runs(defs), raise_on_error=False)


def test_small_scenario_materializes_with_every_check_passing(tmp_path):
    """scenarios/small.yaml runs through raw/run, the Spark lineage and the warehouse; invariants hold."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(scenarios_dir() / "small.yaml", scenarios / "small.yaml")
    home = tmp_path / "home"
    result = materialize(home, scenarios, "small")
    assert result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(evaluations) == {c.name for c in ALL_CHECKS}
    assert all(evaluations[c.name].passed for c in INVARIANTS), {
        n: e.metadata for n, e in evaluations.items() if not e.passed}
    records = pq.read_metadata(next((home / "runs" / "small" / "parquet" / "commitlog").glob("*.parquet")))
    with open_read_only(home / "warehouse.duckdb") as con:
        hops = con.execute("SELECT count(*) FROM message_hops WHERE run_id = 'small'").fetchone()[0]
        states = dict(con.execute("SELECT final_state, count(*) FROM message_lineage GROUP BY 1").fetchall())
    assert hops == records.num_rows
    assert states.get("CONSUMED", 0) > 0


def test_a_lineage_materialized_after_the_warehouse_shows_through_it(tmp_path):
    """Materializing the lineage alone for a partition leaves the warehouse built before it readable."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(TINY_SCENARIO, scenarios / "tiny.yaml")
    home = tmp_path / "home"
    assert materialize(home, scenarios, "tiny").success
    defs = build_definitions(home, scenarios)
    lineage = [a for a in defs.assets if set(a.keys) == set(LINEAGE_KEYS.values())]
    assert len(lineage) == 1
    hops_dir = home / "runs" / "tiny" / "lineage" / "message_hops"
    before = sorted(hops_dir.glob("*.parquet"))
    assert dg.materialize(lineage, partition_key="tiny", resources=defs.resources,
                          instance=instance_with_runs(defs)).success
    assert sorted(hops_dir.glob("*.parquet")) != before, "the lineage was meant to write new part files"
    with open_read_only(home / "warehouse.duckdb") as con:
        hops = con.execute("SELECT count(*) FROM message_hops WHERE run_id = 'tiny'").fetchone()[0]
        chains = con.execute("SELECT count(*) FROM message_lineage WHERE run_id = 'tiny'").fetchone()[0]
    assert hops > 0 and chains > 0


def test_a_blocking_check_stops_the_warehouse(tmp_path):
    """An early delivery in a run fails a blocking check, so the audit assets are not built."""
    home = tmp_path / "home"
    (home / "stores").mkdir(parents=True)
    shutil.copytree(STORE_FIXTURE, home / "stores" / "broken")
    defs = build_definitions(home, tmp_path / "no-scenarios")
    raw = [a for a in defs.assets if dg.AssetKey(["raw", "run"]) in a.keys]
    instance = instance_with_runs(defs)
    assert dg.materialize(raw, partition_key="broken", resources=defs.resources, instance=instance).success
    early = {"run_id": "broken", "delay_level": 3, "schedule_queue_offset": 0, "schedule_msg_id": "S",
             "delivered_msg_id": "D", "real_topic": "OrderTopic", "scheduled_store_ts": 0, "due_ts": 10_000,
             "delivered_ts": 9_000, "lateness_ms": -1_000, "put_attempts": 1, "uniq_key": "EARLY"}
    shutil.rmtree(home / "runs" / "broken" / "parquet" / "schedule_deliveries", ignore_errors=True)
    write_rows(home / "runs" / "broken" / "parquet", "schedule_deliveries", [early], SCHEDULE_DELIVERIES)
    shutil.rmtree(home / "stores")  # the run is now an imported run, taken as it is
    rest = [a for a in build_definitions(home, tmp_path / "no-scenarios").assets]
    result = dg.materialize(rest, partition_key="broken", resources=defs.resources, instance=instance,
                            raise_on_error=False)
    assert not result.success
    failed = [e for e in result.get_asset_check_evaluations() if not e.passed]
    assert [e.check_name for e in failed] == [NO_EARLY_DELIVERY]
    assert failed[0].metadata["first_offending_keys"].value == "EARLY"
    assert not (home / "warehouse.duckdb").exists()
    assert failed_blocking_checks(home / "runs" / "broken") == [NO_EARLY_DELIVERY]


def test_the_lineage_asset_builds_with_the_engine_its_run_config_names(tmp_path):
    """The lineage asset's run config `engine: duckdb` builds the lineage with DuckDB: the same rows
    Spark wrote for the partition, and the engine in the materialization's metadata."""
    import pyarrow as pa

    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(TINY_SCENARIO, scenarios / "tiny.yaml")
    home = tmp_path / "home"
    assert materialize(home, scenarios, "tiny").success
    lineage_dir = home / "runs" / "tiny" / "lineage"

    def tables():
        return {t: pa.concat_tables([pq.read_table(p) for p in sorted((lineage_dir / t).glob("part-*"))])
                for t in ("message_hops", "message_lineage")}
    on_spark = tables()
    defs = build_definitions(home, scenarios)
    lineage = [a for a in defs.assets if set(a.keys) == set(LINEAGE_KEYS.values())]
    result = dg.materialize(lineage, partition_key="tiny", resources=defs.resources,
                            instance=instance_with_runs(defs),
                            run_config={"ops": {"lineage": {"config": {"engine": "duckdb"}}}})
    assert result.success
    engines = {m.metadata["engine"].value for m in result.asset_materializations_for_node("lineage")}
    assert engines == {"duckdb"}
    on_duckdb = tables()
    for table, rows in on_spark.items():
        assert on_duckdb[table].equals(rows), table
