"""The sensors: runs_on_disk keeps the run partitions equal to the runs on disk; stores_grown asks
for a run of a store partition only when its commit log grew, with a cursor that advances with
it, and the launched run imports only the new records."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import dagster as dg
import duckdb
from testdata import CLEAN_STORE

from broker_core.export.store_import import import_store
from broker_core.store.log_end import log_end
from orchestration.definitions import build_definitions
from orchestration.partitions import RUN_PARTITIONS_NAME
from orchestration.resources import dagster_home
from orchestration.sensors import RUNS_SENSOR_NAME, SENSOR_NAME, STORE_JOB_NAME

sys.path.insert(0, str(Path(__file__).parents[1] / "broker_core" / "export"))
from growing_store import GrowingStore  # noqa: E402

STORE_FIXTURE = CLEAN_STORE
TINY_SCENARIO = Path(__file__).parents[1] / "golden" / "tiny.yaml"


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None, name: str = SENSOR_NAME):
    """One evaluation of a sensor; its partition requests are applied to the instance, as the
    sensor daemon applies them (before it launches the tick's runs)."""
    sensor = defs.resolve_sensor_def(name)
    # The ref too, as the daemon gives it: a run request's partition is checked through it.
    with dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), cursor=cursor,
                                 resources=defs.resources, definitions=defs) as context:
        tick = sensor.evaluate_tick(context)
    for request in tick.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return tick


def _instance(home: Path) -> dg.DagsterInstance:
    """A real instance in <home>/dagster_home, as `make ui` uses (a run request's partition is checked
    through the instance's ref, which an ephemeral instance does not have)."""
    return dg.DagsterInstance.from_config(str(dagster_home(home)))


def _partitions(instance: dg.DagsterInstance) -> list[str]:
    return list(instance.get_dynamic_partitions(RUN_PARTITIONS_NAME))


def test_runs_on_disk_adds_the_runs_that_appear_and_deletes_the_ones_that_go(tmp_path):
    """A store linked under stores/, a scenario file and an imported run become partitions at the
    next tick, with no new definitions; a run removed from disk stops being one; a tick with
    nothing new changes nothing."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(TINY_SCENARIO, scenarios / "tiny.yaml")
    home = tmp_path / "home"
    defs = build_definitions(home, scenarios)
    instance = _instance(home)

    first = _tick(defs, instance, None, RUNS_SENSOR_NAME)
    assert _partitions(instance) == ["tiny"] and not first.run_requests
    quiet = _tick(defs, instance, None, RUNS_SENSOR_NAME)
    assert quiet.skip_message and not quiet.dynamic_partitions_requests

    GrowingStore(home / "stores" / "broker-a").grow(5)
    import_store(STORE_FIXTURE, home / "runs" / "prod-b", name="prod-b")
    _tick(defs, instance, None, RUNS_SENSOR_NAME)
    assert _partitions(instance) == ["tiny", "broker-a", "prod-b"]

    (scenarios / "tiny.yaml").unlink()
    _tick(defs, instance, None, RUNS_SENSOR_NAME)
    assert _partitions(instance) == ["broker-a", "prod-b"]


def test_runs_on_disk_is_on_by_default_and_stores_grown_is_off():
    """The partitions follow the disk without anyone turning a sensor on; imports wait to be asked for."""
    defs = build_definitions()
    assert defs.resolve_sensor_def(RUNS_SENSOR_NAME).default_status == dg.DefaultSensorStatus.RUNNING
    assert defs.resolve_sensor_def(SENSOR_NAME).default_status == dg.DefaultSensorStatus.STOPPED


def test_a_store_linked_between_two_looks_of_runs_on_disk_gets_its_partition_with_its_first_run(tmp_path):
    """stores_grown adds the partition of a store runs_on_disk has not seen yet, with the run it asks for."""
    home = tmp_path / "home"
    GrowingStore(home / "stores" / "broker-a").grow(5)
    defs = build_definitions(home, tmp_path / "no-scenarios")
    instance = _instance(home)
    tick = _tick(defs, instance, None)
    assert [r.partition_key for r in tick.run_requests] == ["broker-a"]
    assert _partitions(instance) == ["broker-a"]


def test_a_run_is_asked_for_only_when_a_store_grew_and_the_cursor_follows_the_log(tmp_path):
    """No run request while a store is unchanged, one for the grown store when it grew (not for the
    others, nor for a scenario), and the cursor holds the offset its log reached."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    shutil.copy(TINY_SCENARIO, scenarios / "tiny.yaml")
    home = tmp_path / "home"
    a, b = GrowingStore(home / "stores" / "broker-a"), GrowingStore(home / "stores" / "broker-b")
    a.grow(20)
    b.grow(10)
    # broker-b was imported into its run before: unchanged since, it is not imported again.
    import_store(b.root, home / "runs" / "broker-b", name="broker-b")
    defs = build_definitions(home, scenarios)
    instance = _instance(home)

    first = _tick(defs, instance, None)
    assert [(r.partition_key, r.run_config) for r in first.run_requests] == \
        [("broker-a", {"ops": {"raw__run": {"config": {"live": True}}}})]
    cursor = json.loads(first.cursor)
    assert cursor["broker-a"]["offset"] == a.store.commit_log.max_offset
    assert "broker-b" not in cursor  # looked at from where its run's import ended: nothing new

    unchanged = _tick(defs, instance, first.cursor)
    assert unchanged.run_requests == [] and unchanged.skip_message and unchanged.cursor == first.cursor

    b.grow(7)
    grown = _tick(defs, instance, unchanged.cursor)
    assert [r.partition_key for r in grown.run_requests] == ["broker-b"]
    after = json.loads(grown.cursor)
    assert after["broker-b"]["offset"] == b.store.commit_log.max_offset and after["broker-a"] == cursor["broker-a"]
    assert grown.run_requests[0].run_key.endswith(f":{b.store.commit_log.max_offset}")
    assert _tick(defs, instance, grown.cursor).run_requests == []


def test_log_end_walks_on_from_where_it_stopped(tmp_path):
    """The walk over record headers reaches the end of the written records, across files, and a
    walk begun where an earlier one stopped (or stopped by its record budget) ends at the same place."""
    store = GrowingStore(tmp_path / "store")
    store.grow(300)
    end = log_end(store.root)
    assert end.offset == store.store.commit_log.max_offset and end.first_file == "0" * 20
    part = log_end(store.root, records_max=7)
    assert part.offset < end.offset
    assert log_end(store.root, (part.file_name, part.position)) == end


def test_the_launched_run_imports_only_what_the_store_gained(tmp_path):
    """A store partition whose newest commit-log file appears between two ticks: the sensor asks for a
    run each time, and each launched run materializes raw/run, the lineage and the warehouse; the
    second import goes on from where the first ended and reads only the new file's records."""
    home = tmp_path / "home"
    store = home / "stores" / "broker-a"
    shutil.copytree(STORE_FIXTURE, store)
    for path in store.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    newest = sorted((store / "commitlog").iterdir())[-1]
    held_back = tmp_path / newest.name
    shutil.move(newest, held_back)  # the broker has not written its last file yet
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    defs = build_definitions(home, scenarios)
    instance = _instance(home)
    job = defs.resolve_job_def(STORE_JOB_NAME)

    def launch(tick):
        (request,) = tick.run_requests
        result = job.execute_in_process(partition_key=request.partition_key, run_config=request.run_config,
                                        instance=instance, tags=request.tags, raise_on_error=False)
        assert result.success
        (raw,) = [m for m in result.asset_materializations_for_node("raw__run")]
        return {k: v.value for k, v in raw.metadata.items()}

    first = _tick(defs, instance, None)
    meta = launch(first)
    assert meta["continued_from_offset"] == -1 and meta["live"] is True
    shutil.move(held_back, newest)
    second = _tick(defs, instance, first.cursor)
    meta2 = launch(second)
    assert meta2["continued_from_offset"] == meta["next_offset"] == int(newest.name)
    assert meta2["bytes_read"] == meta2["next_offset"] - int(newest.name) and meta2["records_added"] > 0
    assert json.loads(second.cursor)["broker-a"]["offset"] == meta2["next_offset"]
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        rows = con.execute("select count(*) from commitlog where run_id = 'broker-a'").fetchone()[0]
    assert rows == meta2["records"] == 112


def test_retention_of_the_oldest_file_asks_for_a_run(tmp_path):
    """A store whose oldest commit-log file retention deleted gets a run request even though its log
    reaches no further (the run's rows of that file must go), and the cursor notes the new first file."""
    home = tmp_path / "home"
    store = GrowingStore(home / "stores" / "broker-a")
    store.grow(300)
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    defs = build_definitions(home, scenarios)
    instance = _instance(home)
    first = _tick(defs, instance, None)
    assert _tick(defs, instance, first.cursor).run_requests == []
    oldest = sorted((store.root / "commitlog").iterdir())[0]
    oldest.unlink()
    after = _tick(defs, instance, first.cursor)
    assert [r.partition_key for r in after.run_requests] == ["broker-a"]
    entry = json.loads(after.cursor)["broker-a"]
    assert entry["first_file"] > oldest.name and entry["offset"] == json.loads(first.cursor)["broker-a"]["offset"]
