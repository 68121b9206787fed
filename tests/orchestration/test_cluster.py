"""A cluster's brokers under one directory of var/stores are one partition and one audit, and a
DLedger store there is a partition the store sensor watches, materialized for real in Dagster."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.parquet as pq
from testdata import CLEAN_STORE, DLEDGER_FIXTURES, DLEDGER_REPLICAS

from assets.raw import RAW_RUN_KEY
from assets.run_source import CLUSTER, STORE, cluster_brokers, discover_runs
from broker_core.export.store_import import import_store
from broker_core.store.log_end import log_end
from orchestration.definitions import build_definitions
from orchestration.sensors import STORE_JOB_NAME

sys.path.insert(0, str(Path(__file__).parents[1] / "broker_core" / "export"))
sys.path.insert(0, str(Path(__file__).parent))
from growing_store import GrowingStore, rows_of  # noqa: E402
from test_materialize import materialize  # noqa: E402
from test_sensors import _instance, _partitions, _tick  # noqa: E402


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def _cluster(home: Path, grown: bool = False) -> tuple[Path, GrowingStore | None]:
    """var/stores/prod: broker-a a real 4.9.4 store, RaftNode00 the three nodes of a real DLedger
    group; with ``grown``, broker-b a growing model store too."""
    prod = home / "stores" / "prod"
    _copy(CLEAN_STORE, prod / "broker-a")
    for node in DLEDGER_REPLICAS:
        _copy(DLEDGER_FIXTURES / node, prod / "RaftNode00" / node)
    if not grown:
        return prod, None
    grower = GrowingStore(prod / "broker-b")
    grower.grow(40)
    return prod, grower


def test_a_cluster_directory_is_one_partition_materialized_as_one_audit(tmp_path):
    """A directory of brokers' stores is one partition (not one per broker); materializing it
    imports every broker into one run (the DLedger group's nodes as replicas), rows equal to
    import-store --broker of each, and builds the lineage and warehouse over all of them."""
    home = tmp_path / "home"
    prod, _ = _cluster(home)
    sources = discover_runs(home, tmp_path / "no-scenarios")
    assert {n: s.kind for n, s in sources.items()} == {"prod": CLUSTER}
    assert {b: [p.name for p in s] for b, s in cluster_brokers(prod).items()} == {
        "RaftNode00": list(DLEDGER_REPLICAS), "broker-a": ["broker-a"]}
    result = materialize(home, tmp_path / "no-scenarios", "prod")
    assert result.success
    (raw,) = [m for m in result.asset_materializations_for_node("raw__run")]
    assert raw.metadata["brokers"].value == "RaftNode00, broker-a"
    want = tmp_path / "want" / "prod"
    import_store(prod / "broker-a", want, broker="broker-a")
    for node in DLEDGER_REPLICAS:
        import_store(prod / "RaftNode00" / node, want, broker="RaftNode00", role="replica")
    wanted = rows_of(want)
    assert rows_of(home / "runs" / "prod") == wanted
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        brokers = con.execute("select broker from runs where run_id = 'prod' order by 1").fetchall()
        hops = con.execute("select broker, count(*) from message_hops where run_id = 'prod' group by 1 order by 1")
        hops = hops.fetchall()
    assert [b for (b,) in brokers] == ["RaftNode00", "broker-a"]
    assert [b for b, _ in hops] == ["RaftNode00", "broker-a"] and sum(n for _, n in hops) == len(wanted["commitlog"])


def test_the_store_sensor_runs_a_cluster_when_one_of_its_brokers_grew(tmp_path):
    """stores_grown watches each broker's store of a cluster: one run of the cluster partition when
    any grew (never one per broker), the cursor per broker; the launched run imports only what the
    grown broker's store gained."""
    home = tmp_path / "home"
    prod, grower = _cluster(home, grown=True)
    shutil.rmtree(prod / "RaftNode00")
    defs = build_definitions(home, tmp_path / "no-scenarios")
    instance = _instance(home)
    job = defs.resolve_job_def(STORE_JOB_NAME)
    first = _tick(defs, instance, None)
    assert [r.partition_key for r in first.run_requests] == ["prod"] and _partitions(instance) == ["prod"]
    assert sorted(json.loads(first.cursor)) == ["prod/broker-a", "prod/broker-b"]
    (request,) = first.run_requests
    _launch_raw(job, request, instance)
    assert _tick(defs, instance, first.cursor).run_requests == []
    grower.grow(9)
    grown = _tick(defs, instance, first.cursor)
    (request,) = grown.run_requests
    assert request.partition_key == "prod"
    after = json.loads(grown.cursor)
    assert after["prod/broker-a"] == json.loads(first.cursor)["prod/broker-a"]
    assert after["prod/broker-b"]["offset"] == grower.store.commit_log.max_offset
    meta = _launch_raw(job, request, instance)
    assert meta["records_added"] == 9 and meta["live"] is True and "read_whole_because" not in meta
    assert rows_of(home / "runs" / "prod") == rows_of(_imported(prod, tmp_path / "want" / "prod"))


def _launch_raw(job, request: dg.RunRequest, instance: dg.DagsterInstance) -> dict:
    """Run the sensor's request as the daemon would, raw/run alone (the whole job, lineage and
    warehouse, is materialized in the test above); return raw/run's metadata."""
    result = job.execute_in_process(partition_key=request.partition_key, run_config=request.run_config,
                                    instance=instance, tags=request.tags, asset_selection=[RAW_RUN_KEY])
    (raw,) = [m for m in result.asset_materializations_for_node("raw__run")]
    return {k: v.value for k, v in raw.metadata.items()}


def _imported(cluster: Path, run: Path) -> Path:
    for broker, (store,) in cluster_brokers(cluster).items():
        import_store(store, run, broker=broker)
    return run


def test_a_dledger_store_is_a_partition_the_store_sensor_watches(tmp_path):
    """A DLedger node's store under var/stores is a store partition; the sensor walks its entries
    (log_end reaches the end of its last entry) and asks for a run, which imports it (whole: a
    DLedger store is never imported live), and none while it does not grow."""
    home = tmp_path / "home"
    store = _copy(DLEDGER_FIXTURES / DLEDGER_REPLICAS[2], home / "stores" / "n2")
    assert {n: s.kind for n, s in discover_runs(home, tmp_path / "no-scenarios").items()} == {"n2": STORE}
    run = tmp_path / "run"
    import_store(store, run)
    entries = pq.read_table(run / "parquet" / "dledger_entries").to_pylist()
    end = log_end(store)
    assert end.offset == max(e["phys_offset"] - 48 + e["entry_size"] for e in entries)
    defs = build_definitions(home, tmp_path / "no-scenarios")
    instance = _instance(home)
    first = _tick(defs, instance, None)
    (request,) = first.run_requests
    assert request.partition_key == "n2" and json.loads(first.cursor)["n2"]["offset"] == end.offset
    meta = _launch_raw(defs.resolve_job_def(STORE_JOB_NAME), request, instance)
    assert meta["live"] is False and meta["records"] == pq.read_metadata(
        next((run / "parquet" / "commitlog").glob("*.parquet"))).num_rows
    assert _tick(defs, instance, first.cursor).run_requests == []
