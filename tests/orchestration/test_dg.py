"""The `dg` command works in this project: `dg check defs` passes and `dg list defs` shows the
assets, checks, sensors and resources of orchestration.definitions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GRAPH_GOLDEN = Path(__file__).parent / "asset_graph.txt"  # the reviewed asset graph
ROOT = Path(__file__).resolve().parents[2]
DG = Path(sys.executable).with_name("dg")
DG_S_MAX = 300  # measured 3 s on an idle machine; each loads the definitions in a subprocess

needs_dg = pytest.mark.skipif(not DG.exists(), reason="dg is installed with the project (dagster-dg-cli)")


def run_dg(*args: str, home: Path) -> subprocess.CompletedProcess:
    # In a project dg loads the definitions with its own interpreter: the one running these tests.
    # VIRTUAL_ENV: the environment dg runs in is the project's (else it warns that none is active).
    env = dict(os.environ, RETRY_AUDIT_HOME=str(home), VIRTUAL_ENV=sys.prefix, NO_COLOR="1")
    return subprocess.run([str(DG), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=DG_S_MAX)


@needs_dg
def test_dg_check_defs_passes(tmp_path):
    """`dg check defs` loads and validates the project's definitions and exits 0."""
    done = run_dg("check", "defs", home=tmp_path / "home")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All definitions loaded successfully" in done.stdout + done.stderr


@needs_dg
def test_dg_list_defs_shows_every_asset_check_sensor_and_resource(tmp_path):
    """`dg list defs --json` lists exactly the reviewed asset graph's assets and checks, both sensors,
    the store job and the three resources."""
    done = run_dg("list", "defs", "--json", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr[-3000:]
    listed = json.loads(done.stdout)
    golden = GRAPH_GOLDEN.read_text().splitlines()
    assert sorted(a["asset_key"] for a in listed["assets"]) == sorted(
        line.split()[1] for line in golden if line.startswith("asset "))
    assert sorted(c["key"] for c in listed["asset_checks"]) == sorted(
        line.split()[1] for line in golden if line.startswith("check "))
    assert sorted(s["name"] for s in listed["sensors"]) == ["runs_on_disk", "stores_grown"]
    assert [j["name"] for j in listed["jobs"]] == ["store_pipeline"]
    assert sorted(r["name"] for r in listed["resources"]) == ["home", "spark", "warehouse"]
