"""simulate(): the run directory, determinism, the summary, the CLI, and the store round trip."""

from __future__ import annotations

import gc
import json

import pytest
from simruns import NONDETERMINISTIC_COLUMNS, SCENARIOS, SMALL, assert_run_passes, run_rows

from broker_core.export.parquet import read_table
from broker_core.export.schema import RAW_TABLES
from broker_core.export.store_import import import_store
from broker_core.sim.invariants import check_run
from broker_core.sim.run import simulate
from broker_core.sim.scenario import load_scenario
from orchestration.cli import main as cli_main


def test_run_directory_layout(small_run):
    """A run directory holds the store, run.json and every contract table."""
    assert (small_run / "store" / "commitlog").is_dir()
    assert (small_run / "store" / "config" / "consumerOffset.json").is_file()
    assert not (small_run / "store" / "abort").exists(), "a finished run shuts the broker down cleanly"
    assert json.loads((small_run / "run.json").read_text())["run_id"] == "small"
    for table in RAW_TABLES:
        assert (small_run / "parquet" / table).is_dir(), f"missing table {table}"
    runs = read_table(small_run, "runs").to_pylist()
    assert len(runs) == 1 and runs[0]["source"] == "simulation" and runs[0]["seed"] == 7


def test_small_run_is_deterministic(small_run, tmp_path):
    """The same scenario and seed give the same rows in every table and the same store bytes."""
    again = tmp_path / "again"
    simulate(SMALL, again)
    for table in RAW_TABLES:
        assert run_rows(small_run, table) == run_rows(again, table), f"table {table} differs"
    files = sorted(p.relative_to(small_run / "store") for p in (small_run / "store").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again / "store") for p in (again / "store").rglob("*") if p.is_file())
    for rel in files:
        if rel.name == "lock":
            continue
        assert (small_run / "store" / rel).read_bytes() == (again / "store" / rel).read_bytes(), str(rel)
    # Byte for byte where the writer allows: every Parquet file but runs (wall_seconds) is identical.
    for table in RAW_TABLES:
        if table in NONDETERMINISTIC_COLUMNS:
            continue
        for path in sorted((small_run / "parquet" / table).glob("*.parquet")):
            assert path.read_bytes() == (again / "parquet" / table / path.name).read_bytes(), f"{table} bytes"


def test_runs_in_two_processes_with_other_hash_seeds_write_the_same_bytes(tmp_path):
    """`retry-audit simulate` in two processes with different PYTHONHASHSEED values writes
    byte-identical Parquet files (runs: the same rows but wall_seconds), store files and run.json."""
    import os
    import shutil
    import subprocess
    import sys

    dirs = []
    for hash_seed in ("1", "2023"):
        cwd = tmp_path / f"hashseed-{hash_seed}"
        cwd.mkdir()
        shutil.copy(SMALL, cwd / "small.yaml")  # the same relative paths: run.json names them
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run([sys.executable, "-m", "orchestration.cli", "-q", "simulate", "small.yaml",
                               "--out", "run"], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        dirs.append(cwd / "run")
    first, second = dirs

    def files(run):
        return sorted(p.relative_to(run) for p in run.rglob("*") if p.is_file() and p.name != "lock")

    assert files(first) == files(second)
    differ = [str(rel) for rel in files(first)
              if rel.parts[:2] != ("parquet", "runs") and (first / rel).read_bytes() != (second / rel).read_bytes()]
    assert differ == []
    assert run_rows(first, "runs") == run_rows(second, "runs")


def test_simulate_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    """simulate runs full collections rarely and puts the caller's thresholds back afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(900, 12, 11)
    try:
        simulate(SMALL, tmp_path / "run")
        assert gc.get_threshold() == (900, 12, 11)
    finally:
        gc.set_threshold(*before)


def test_another_seed_gives_another_run(small_run, tmp_path):
    """--seed changes the run (and is recorded)."""
    other = tmp_path / "other"
    summary = simulate(SMALL, other, seed=8)
    assert summary.seed == 8
    assert run_rows(other, "consume_attempts") != run_rows(small_run, "consume_attempts")
    assert_run_passes(other, SMALL, 8)


def test_invariants_hold_on_small(small_run):
    """Every invariant holds on the small scenario."""
    assert_run_passes(small_run, SMALL, 7)


def test_invariants_hold_on_a_default_like_run(tmp_path):
    """Every invariant holds on the default scenario's topics and groups at 1/100 of its traffic."""
    scenario = load_scenario(SCENARIOS / "default.yaml")
    # The CLI's scale knob (--messages), so a failure's reproduce command is this run's exactly.
    scenario = scenario.with_messages(sum(p.messages for p in scenario.producers) // 100)
    out = tmp_path / "default-like"
    summary = simulate(SCENARIOS / "default.yaml", out, scenario=scenario)
    bursts = sum(f.messages for f in scenario.faults if f.kind == "burst")
    assert summary.produced == sum(p.messages for p in scenario.producers) + bursts
    assert summary.dlq > 0 and summary.retried > 0, "the default shows retries and dead letters"
    assert_run_passes(out, SCENARIOS / "default.yaml", scenario.seed, scenario.scaled_messages)


def test_summary_agrees_with_the_tables(small_run, tmp_path):
    """produced / consumed / DLQ / in flight add up to every (clustering group, message) pair."""
    summary = simulate(SMALL, tmp_path / "s")
    produced = read_table(small_run, "produced").to_pylist()
    assert summary.produced == sum(1 for r in produced if r["status"] == "SEND_OK")
    scenario = load_scenario(SMALL)
    by_topic = {t.name: 0 for t in scenario.topics}
    for r in produced:
        by_topic[r["topic"]] += r["status"] == "SEND_OK"
    pairs = sum(by_topic[t] for g in scenario.groups if g.model == "clustering" for t in g.subscribe)
    dlq_pairs = len({(r["topic"], r["uniq_key"]) for r in read_table(small_run, "commitlog").to_pylist()
                     if r["topic"].startswith("%DLQ%")})
    assert summary.consumed + dlq_pairs + summary.in_flight == pairs
    assert summary.end_reason == "terminal" and summary.in_flight == 0
    assert summary.records_written == sum(summary.tables.values())


def test_simulated_store_imports_back_to_the_same_commitlog(small_run, tmp_path):
    """import-store reads the simulated store into exactly the commitlog rows simulate wrote."""
    out = tmp_path / "imported"
    import_store(small_run / "store", out, name="small", broker="broker-a")
    assert run_rows(out, "commitlog") == run_rows(small_run, "commitlog")


def test_a_failed_run_leaves_no_directory(tmp_path):
    """A run interrupted midway leaves no run directory behind (complete or absent)."""

    class Stop(Exception):
        pass

    def progress(sim_ms, records):
        raise Stop()

    out = tmp_path / "half"
    with pytest.raises(Stop):
        simulate(SMALL, out, progress=progress)
    assert not out.exists()
    assert not any(p.name.startswith(".half") for p in tmp_path.iterdir())


def test_cli_simulate_prints_a_json_summary(tmp_path, capsys):
    """retry-audit simulate --json prints the summary as JSON and exits 0."""
    out = tmp_path / "cli"
    code = cli_main(["--quiet", "simulate", str(SMALL), "--out", str(out), "--json", "--seed", "3"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["seed"] == 3 and summary["produced"] == 500 and summary["run_dir"] == str(out)


def test_cli_simulate_failure_prints_seed_and_command(tmp_path, capsys):
    """A failed simulation prints SEED=... and the command that reproduces it."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = blocker / "run"
    code = cli_main(["simulate", str(SMALL), "--out", str(out), "--seed", "5"])
    err = capsys.readouterr().err
    assert code != 0
    assert "SEED=5" in err
    assert f"retry-audit simulate {SMALL} --out {out} --seed 5" in err


def test_cli_bad_scenario_is_one_line_exit_2(tmp_path, capsys):
    """A scenario mistake exits 2 with one line naming the file and line."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nhorizon: 5x\n")
    code = cli_main(["simulate", str(bad), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}:2" in err and "horizon" in err


def _deliver_early(run_dir) -> None:
    """Break a run: its first delayed delivery happened years before it was due."""
    import pyarrow.parquet as pq

    path = next((run_dir / "parquet" / "schedule_deliveries").glob("*.parquet"))
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[0]["delivered_ts"] = rows[0]["due_ts"].replace(year=2000)
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), path)


def test_failing_simulation_test_prints_seed(small_copy):
    """The helper simulation tests use reports SEED=... and the reproduce command on a violation."""
    _deliver_early(small_copy)
    assert check_run(small_copy)
    with pytest.raises(pytest.fail.Exception) as info:
        assert_run_passes(small_copy, SMALL, 7)
    assert "SEED=7" in str(info.value) and "retry-audit simulate" in str(info.value)


def test_a_scaled_runs_reproduce_line_is_its_own_command(small_copy):
    """A failing scaled run's reproduce line carries its --messages, so it reruns that very run."""
    _deliver_early(small_copy)
    with pytest.raises(pytest.fail.Exception) as info:
        assert_run_passes(small_copy, SMALL, 7, 120)
    assert f"reproduce: retry-audit simulate {SMALL} --out {small_copy} --seed 7 --messages 120\n" in str(info.value)


def test_cli_simulate_messages_scales_the_run(tmp_path, capsys):
    """--messages N is the scale knob: N messages in all, and run.json's command reproduces it."""
    out = tmp_path / "scaled"
    code = cli_main(["--quiet", "simulate", str(SMALL), "--out", str(out), "--json",
                     "--seed", "3", "--messages", "120"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["produced"] + summary["send_failed"] == 120
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["reproduce"].endswith("--seed 3 --messages 120")
