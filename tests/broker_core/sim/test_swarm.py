"""Swarm: one valid random scenario per seed, reproducible, checked end to end."""

from __future__ import annotations

import pytest

from broker_core.errors import BadInputError
from broker_core.sim.scenario import load_scenario_text
from broker_core.sim.swarm import parse_seed_range, random_scenario_yaml, run_swarm

SEEDS_CHECKED_FOR_VALIDITY = range(1, 101)


def test_seed_ranges():
    """--seeds takes A..B inclusive or one N, and refuses anything else."""
    assert parse_seed_range("1..3") == [1, 2, 3]
    assert parse_seed_range("7") == [7]
    for bad in ("3..1", "a..b", "1-3", ""):
        with pytest.raises(BadInputError):
            parse_seed_range(bad)


def test_random_scenarios_are_valid_and_reproducible():
    """Every seed's scenario passes the loader, and the same seed always gives the same YAML."""
    for seed in SEEDS_CHECKED_FOR_VALIDITY:
        text = random_scenario_yaml(seed)
        assert text == random_scenario_yaml(seed)
        scenario = load_scenario_text(text, source=f"swarm-{seed}")
        assert scenario.seed == seed and scenario.producers


def test_swarm_runs_and_cleans_up(tmp_path):
    """A short swarm runs every seed through every checker and leaves nothing behind on success."""
    report = run_swarm([1, 2], base=tmp_path)
    assert report["runs"] == 2
    assert report["failures"] == [], "\n".join(
        f"SEED={f['seed']} {f['summary']}\n{f.get('detail', '')}\nreproduce: {f['reproduce']}"
        for f in report["failures"])
    assert list(tmp_path.iterdir()) == []


def test_cli_swarm_reports_json(tmp_path, monkeypatch, capsys):
    """retry-audit swarm --json reports the runs and failures and exits 0 when all pass."""
    import json

    from orchestration.cli import main as cli_main

    monkeypatch.setenv("RETRY_AUDIT_HOME", str(tmp_path))
    code = cli_main(["--quiet", "swarm", "--seeds", "3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["runs"] == 1 and report["failures"] == []
