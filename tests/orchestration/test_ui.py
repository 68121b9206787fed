"""``make ui``: the Dagster UI serves this project's assets, with DAGSTER_HOME under the data home."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ports import free_port

from orchestration.ui import UI_HOST, ui_command, ui_environment

UI_START_S_MAX = 240  # measured 7-9 s on an idle machine; generous for a busy shared one
ASSET_NODES_QUERY = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
SENSORS_QUERY = json.dumps({"query": "{ repositoriesOrError { ... on RepositoryConnection { nodes { "
                                     "sensors { name sensorState { status } } } } } }"}).encode()


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


def _asset_paths(port: int) -> list[str] | None:
    req = urllib.request.Request(f"http://{UI_HOST}:{port}/graphql", data=ASSET_NODES_QUERY,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            nodes = json.load(resp).get("data", {}).get("assetNodes")
    except OSError:
        return None
    return sorted("/".join(n["assetKey"]["path"]) for n in nodes) if nodes else None


def _sensors(port: int) -> dict[str, str]:
    req = urllib.request.Request(f"http://{UI_HOST}:{port}/graphql", data=SENSORS_QUERY,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        repos = json.load(resp)["data"]["repositoriesOrError"]["nodes"]
    return {s["name"]: s["sensorState"]["status"] for r in repos for s in r["sensors"]}


def test_ui_serves_every_asset(tmp_path):
    """The UI started by `python -m orchestration.ui` lists raw, lineage and audit assets, and the
    stores_grown sensor (off until turned on)."""
    # A free port, not the default 3000 (a developer's own UI may hold it) nor any fixed one
    # (another worker of the test run may be serving the UI at the same time).
    port = free_port(UI_HOST)
    env = dict(os.environ, RETRY_AUDIT_HOME=str(tmp_path / "home"), RETRY_AUDIT_UI_PORT=str(port))
    # Its own session, so the whole process group (webserver, daemon, code server) stops together.
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.ui"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=Path(__file__).parents[2])
    try:
        paths = None
        deadline = time.monotonic() + UI_START_S_MAX
        while paths is None and time.monotonic() < deadline and proc.poll() is None:
            paths = _asset_paths(port)
            if paths is None:
                time.sleep(1)
        sensors = _sensors(port) if paths is not None else {}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    assert paths is not None, "the UI did not answer"
    assert {"raw/run", "lineage/message_hops", "audit/dlq_messages"} <= set(paths)
    assert sensors == {"stores_grown": "STOPPED"}
