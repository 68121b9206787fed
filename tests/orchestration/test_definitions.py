"""The Dagster definitions: they load, find runs on disk, and keep the reviewed asset graph."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest
from testdata import CLEAN_STORE

from assets.run_source import discover_runs
from orchestration.definitions import build_definitions
from orchestration.partitions import RUN_PARTITIONS_NAME, scenarios_dir, sync_run_partitions

GRAPH_GOLDEN = Path(__file__).parent / "asset_graph.txt"
STORE_FIXTURE = CLEAN_STORE


def graph_lines(defs: dg.Definitions) -> list[str]:
    """One line per asset (key <- deps) and per check (asset:check), sorted."""
    graph = defs.resolve_asset_graph()
    lines = []
    for key in graph.get_all_asset_keys():
        deps = ", ".join(sorted(k.to_user_string() for k in graph.get(key).parent_keys))
        lines.append(f"asset {key.to_user_string()} <- {deps}")
    for check in graph.asset_check_keys:
        lines.append(f"check {check.asset_key.to_user_string()}:{check.name}")
    return sorted(lines)


def test_definitions_load_and_validate(tmp_path):
    """The definitions build and pass Dagster's own validation."""
    defs = build_definitions(tmp_path / "home", scenarios_dir())
    dg.Definitions.validate_loadable(defs)
    assert {"home", "spark", "warehouse"} <= set(defs.resources)


def test_asset_graph_matches_the_reviewed_snapshot(tmp_path):
    """Asset keys, their dependencies and the check names match the committed snapshot."""
    lines = graph_lines(build_definitions(tmp_path / "home", scenarios_dir()))
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GRAPH_GOLDEN.write_text("\n".join(lines) + "\n")
    assert lines == GRAPH_GOLDEN.read_text().splitlines()


def test_partitions_come_from_scenarios_stores_and_imports(tmp_path):
    """Scenario files, store directories and imported runs each become a partition, without code changes."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "alpha.yaml").write_text("name: alpha\n")
    (scenarios / "not a name.yaml").write_text("name: x\n")
    home = tmp_path / "home"
    (home / "stores" / "broker-b" / "commitlog").mkdir(parents=True)
    (home / "stores" / "not-a-store").mkdir(parents=True)
    found = discover_runs(home, scenarios)
    assert {n: s.kind for n, s in found.items()} == {"alpha": "scenario", "broker-b": "store"}
    defs = build_definitions(home, scenarios)
    partitions = defs.resolve_asset_graph().get(dg.AssetKey(["raw", "run"])).partitions_def
    instance = dg.DagsterInstance.ephemeral()
    sync_run_partitions(instance, defs.resources["home"].sources())
    assert partitions.get_partition_keys(dynamic_partitions_store=instance) == ["alpha", "broker-b"]


def test_an_imported_run_is_a_partition(tmp_path):
    """A run directory imported with import-store (source "import") is found as a partition."""
    from broker_core.export.store_import import import_store

    home = tmp_path / "home"
    import_store(STORE_FIXTURE, home / "runs" / "prod-a", name="prod-a")
    found = discover_runs(home, tmp_path / "no-scenarios")
    assert [(n, s.kind) for n, s in found.items()] == [("prod-a", "imported")]


def test_explicit_home_wins_over_the_environment(tmp_path, monkeypatch):
    """Explicit arguments win over RETRY_AUDIT_HOME, so tests and the UI can point anywhere."""
    monkeypatch.setenv("RETRY_AUDIT_HOME", str(tmp_path / "elsewhere"))
    defs = build_definitions(tmp_path / "home", scenarios_dir())
    assert defs.resources["home"].path == str((tmp_path / "home").absolute())


@pytest.mark.parametrize("name", ["default", "small"])
def test_embedded_scenarios_are_partitions(tmp_path, name):
    """The embedded scenarios are partitions of every asset."""
    found = discover_runs(tmp_path, scenarios_dir())
    assert found[name].kind == "scenario"


def test_a_conformance_runs_real_stores_are_partitions(tmp_path):
    """The real brokers' stores `make conformance` leaves under conformance/<version>/stores/ are store partitions."""
    home = tmp_path / "home"
    for broker in ("broker-a", "broker-b"):
        (home / "conformance" / "4.9.4" / "stores" / broker / "commitlog").mkdir(parents=True)
    (home / "conformance" / "4.9.4" / "stores" / "empty").mkdir(parents=True)
    found = discover_runs(home, tmp_path / "no-scenarios")
    assert {n: (s.kind, s.path.name) for n, s in found.items()} == {
        "conformance-4_9_4-broker-a": ("store", "broker-a"),
        "conformance-4_9_4-broker-b": ("store", "broker-b"),
    }


LAZY_PROBE = """
import assets.run_source as run_source
scanned = []
real = run_source.discover_runs
run_source.discover_runs = lambda home, scenarios: scanned.append(str(home)) or real(home, scenarios)
import dagster as dg
import orchestration.definitions as module
assert scanned == [], f"importing the definitions scanned {scanned}"
defs = module.defs()  # what Dagster's loader does with a @dg.definitions function
partitions_def = defs.resolve_asset_graph().get(dg.AssetKey(["raw", "run"])).partitions_def
print(scanned, defs.resources["home"].path, type(partitions_def).__name__, partitions_def.name)
"""


def test_the_definitions_read_the_environment_when_dagster_loads_them_and_never_scan_the_disk(tmp_path):
    """Importing orchestration.definitions reads neither the disk nor RETRY_AUDIT_HOME; Dagster's
    loader builds the definitions from the environment of that moment, and they hold no run names
    (the partitions are dynamic: the instance holds them)."""
    import subprocess
    import sys

    home = tmp_path / "home"
    (home / "stores" / "broker-z" / "commitlog").mkdir(parents=True)
    env = dict(os.environ, RETRY_AUDIT_HOME=str(home))
    done = subprocess.run([sys.executable, "-c", LAZY_PROBE], cwd=Path(__file__).parents[2], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[]", str(home), "DynamicPartitionsDefinition", RUN_PARTITIONS_NAME]
