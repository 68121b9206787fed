"""Fixtures for the failure stories: the story warehouse.

``story_warehouse`` runs every ``scenarios/story-*.yaml`` through the same
functions the CLI calls (simulate -> lineage --engine duckdb -> warehouse) once per test session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SCENARIOS = Path(__file__).parents[2] / "scenarios"
STORIES = ("story-delay-offset-not-persisted", "story-long-consume", "story-consumer-restarts",
           "story-orderly-small-max", "story-dlq-via-schedule")


@pytest.fixture(scope="session")
def story_warehouse_path(tmp_path_factory) -> Path:
    """The warehouse file holding every story run (built once per test session). The lineage runs
    on DuckDB (``lineage --engine duckdb``: the same SQL as Spark's, held row-identical by
    tests/bench/test_duckdb_lineage.py); what the stories judge is the audit's verdicts."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse
    from broker_core.sim.run import simulate

    root = tmp_path_factory.mktemp("stories")
    run_dirs = []
    for name in STORIES:
        run_dir = root / "runs" / name
        simulate(SCENARIOS / f"{name}.yaml", run_dir)
        run_lineage_duckdb(run_dir)
        run_dirs.append(run_dir)
    db = root / "stories.duckdb"
    build_warehouse(run_dirs, db)
    return db


@pytest.fixture(scope="session")
def story_warehouse(story_warehouse_path):
    """A read-only DuckDB connection to the story warehouse."""
    from assets.warehouse import open_read_only

    con = open_read_only(story_warehouse_path)
    yield con
    con.close()
