"""Paths and assertions the simulation tests share (imported by name: tests are not a package)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.errors import ScenarioError
from broker_core.export.parquet import read_table
from broker_core.sim.invariants import check_run, format_violations
from broker_core.sim.run import reproduce_command
from broker_core.sim.scenario import load_scenario_text

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "scenarios"
SMALL = SCENARIOS / "small.yaml"


def assert_run_passes(run_dir: Path, scenario_path: Path, seed: int, messages: int | None = None) -> None:
    """Fail with SEED=... and the reproduce command when any checker finds a violation.

    ``messages`` is the --messages the run was scaled to (the scenario's ``scaled_messages``), so
    the command printed is exactly the run's.
    """
    violations = check_run(run_dir)
    if violations:
        pytest.fail(f"SEED={seed}\nreproduce: {reproduce_command(scenario_path, run_dir, seed, messages)}\n"
                    f"{len(violations)} violations:\n{format_violations(violations)}")


def scenario_error(text: str) -> ScenarioError:
    """The error loading the scenario ``text`` (as file s.yaml) raises; the test fails if none."""
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(text, source="s.yaml")
    return info.value


NONDETERMINISTIC_COLUMNS = {"runs": {"wall_seconds"}}  # wall time, measured at the edge


def run_rows(run_dir: Path, table: str) -> list[dict]:
    """A run's table as rows, without the columns that differ between two runs of one seed."""
    data = read_table(run_dir, table)
    drop = NONDETERMINISTIC_COLUMNS.get(table, set())
    return data.select([c for c in data.column_names if c not in drop]).to_pylist()


POP_RUN_TABLES = ("pop_evidence", "retry_topics")


def assert_same_seed_same_rows(run_dir: Path, scenario_path: Path, tmp_path: Path, other_seed: int,
                               **simulate_kwargs) -> None:
    """Simulating ``scenario_path`` again gives ``run_dir``'s rows in every table (the POP tables
    too), and ``other_seed`` gives other consume attempts."""
    from broker_core.export.schema import RAW_TABLES
    from broker_core.sim.run import simulate

    again = tmp_path / "again"
    simulate(scenario_path, again, **simulate_kwargs)
    for table in (*RAW_TABLES, *POP_RUN_TABLES):
        assert run_rows(run_dir, table) == run_rows(again, table), f"table {table} differs"
    other = tmp_path / "other"
    simulate(scenario_path, other, seed=other_seed, **simulate_kwargs)
    assert run_rows(other, "consume_attempts") != run_rows(run_dir, "consume_attempts")
