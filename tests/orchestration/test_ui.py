"""``make ui``: the Dagster UI serves this project's assets, with DAGSTER_HOME under the data home."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ports import free_port
from testdata import CLEAN_STORE

from orchestration.ui import UI_HOST, ui_command, ui_environment

# A free port, not the default 3000 (a developer's own UI may hold it) nor any fixed one (another
# worker of the test run may be serving the UI at the same time).
UI_TEST_PORT = free_port(UI_HOST)
UI_START_S_MAX = 240  # measured 7-9 s on an idle machine; generous for a busy shared one
# The runs_on_disk sensor looks every 10 s; the daemon's own loop and a busy machine add to that.
NEW_PARTITION_S_MAX = 120
ASSET_NODES_QUERY = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
SENSORS_QUERY = json.dumps({"query": "{ repositoriesOrError { ... on RepositoryConnection { nodes { "
                                     "sensors { name sensorState { status } } } } } }"}).encode()
PARTITION_KEYS_QUERY = json.dumps({"query": '{ assetNodeOrError(assetKey: {path: ["raw", "run"]}) '
                                            "{ ... on AssetNode { partitionKeys } } }"}).encode()


def test_dagster_home_is_absolute_with_telemetry_and_nux_off(tmp_path):
    """DAGSTER_HOME is an absolute directory under the data home whose dagster.yaml turns both off."""
    env = ui_environment(tmp_path / "home")
    home = Path(env["DAGSTER_HOME"])
    assert home.is_absolute() and home.parent == tmp_path / "home"
    config = (home / "dagster.yaml").read_text()
    assert "telemetry:\n  enabled: false" in config and "nux:\n  enabled: false" in config


def test_command_serves_the_workspace_on_localhost(tmp_path):
    """The command is dagster dev on workspace.yaml, bound to 127.0.0.1."""
    command = ui_command(Path("workspace.yaml"), 3000)
    assert command[-7:] == ["dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", "3000"]


def _graphql(body: bytes, timeout_s: float = 30):
    req = urllib.request.Request(f"http://{UI_HOST}:{UI_TEST_PORT}/graphql", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.load(resp)


def _asset_paths() -> list[str] | None:
    try:
        nodes = _graphql(ASSET_NODES_QUERY, timeout_s=5).get("data", {}).get("assetNodes")
    except OSError:
        return None
    return sorted("/".join(n["assetKey"]["path"]) for n in nodes) if nodes else None


def _sensors() -> dict[str, str]:
    repos = _graphql(SENSORS_QUERY)["data"]["repositoriesOrError"]["nodes"]
    return {s["name"]: s["sensorState"]["status"] for r in repos for s in r["sensors"]}


def _partition_keys() -> list[str]:
    return _graphql(PARTITION_KEYS_QUERY)["data"]["assetNodeOrError"]["partitionKeys"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """`python -m orchestration.ui` on a fresh data home: (the data home, the answer it gave at start)."""
    home = tmp_path_factory.mktemp("ui") / "home"
    env = dict(os.environ, RETRY_AUDIT_HOME=str(home), RETRY_AUDIT_UI_PORT=str(UI_TEST_PORT))
    # Its own session, so the whole process group (webserver, daemon, code server) stops together.
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.ui"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=Path(__file__).parents[2])
    try:
        paths = None
        deadline = time.monotonic() + UI_START_S_MAX
        while paths is None and time.monotonic() < deadline and proc.poll() is None:
            paths = _asset_paths()
            if paths is None:
                time.sleep(1)
        assert paths is not None, "the UI did not answer"
        yield home, paths
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def test_ui_serves_every_asset(ui):
    """The UI started by `python -m orchestration.ui` lists raw, lineage and audit assets, the
    scenarios as partitions from the start, and its sensors: runs_on_disk on, stores_grown off
    until turned on."""
    _home, paths = ui
    assert {"raw/run", "lineage/message_hops", "audit/dlq_messages"} <= set(paths)
    assert {"default", "small"} <= set(_partition_keys())
    assert _sensors() == {"runs_on_disk": "RUNNING", "stores_grown": "STOPPED"}


def test_a_store_put_under_stores_appears_as_a_partition_without_a_reload(ui):
    """A RocketMQ store copied under <data home>/stores/ while the UI runs becomes a partition of
    raw/run by itself (the runs_on_disk sensor, run by the UI's daemon): no "Reload definitions"."""
    home, _paths = ui
    assert "broker-new" not in _partition_keys()
    shutil.copytree(CLEAN_STORE, home / "stores" / "broker-new")
    deadline = time.monotonic() + NEW_PARTITION_S_MAX
    keys = _partition_keys()
    while "broker-new" not in keys and time.monotonic() < deadline:
        time.sleep(2)
        keys = _partition_keys()
    assert "broker-new" in keys, f"not a partition after {NEW_PARTITION_S_MAX} s: {keys}"
