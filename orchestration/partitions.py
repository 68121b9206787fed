"""One partition per run, found on disk: scenario files, stores to import, and imported runs.

A partition key is a run name. The runs are whatever the disk holds when the definitions are
built, so a new scenario file or a new import appears after a reload (``dagster dev`` reloads the
code location from the UI) without a code change:

* ``<scenarios>/<name>.yaml``: a scenario; materializing ``raw/run`` simulates it;
* ``<data home>/stores/<name>/``: a RocketMQ store directory; ``raw/run`` imports it;
* ``<data home>/runs/<name>/`` whose ``runs`` table says source ``import``: a store imported with
  ``retry-audit import-store``; ``raw/run`` takes it as it is;
* ``<data home>/conformance/<version>/stores/<broker>/``: a real broker's store written by
  ``make conformance``; partition ``conformance-<version, dots as underscores>-<broker>``, imported
  like any store.

The data home is ``RETRY_AUDIT_HOME`` (default ``./var``, made absolute); nothing here reads the
environment at import time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

from assets.run_source import IMPORTED, SCENARIO, STORE, RunSource

HOME_ENV = "RETRY_AUDIT_HOME"
HOME_DEFAULT = "var"
SCENARIOS_ENV = "RETRY_AUDIT_SCENARIOS"
RUNS_DIR = "runs"
STORES_DIR = "stores"
CONFORMANCE_DIR = "conformance"
WAREHOUSE_FILE = "warehouse.duckdb"
DAGSTER_HOME_DIR = "dagster_home"
SOURCE_IMPORT = "import"
# Partition keys are run ids and directory names: the same safe alphabet as scenario names.
RUN_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")

def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


def data_home(env: Mapping[str, str] | None = None) -> Path:
    """The data home: ``RETRY_AUDIT_HOME`` or ``./var``, absolute."""
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or HOME_DEFAULT).absolute()


def scenarios_dir(env: Mapping[str, str] | None = None) -> Path:
    """The scenario directory: ``RETRY_AUDIT_SCENARIOS``, else ``./scenarios``, else the project's."""
    env = os.environ if env is None else env
    if env.get(SCENARIOS_ENV):
        return Path(env[SCENARIOS_ENV]).absolute()
    local = Path("scenarios").absolute()
    return local if local.is_dir() else project_root() / "scenarios"


def run_source_of(run_dir: Path) -> str | None:
    """The ``source`` column of a run directory's ``runs`` table (None when unreadable)."""
    table_dir = run_dir / "parquet" / "runs"
    for f in sorted(table_dir.glob("*.parquet")) if table_dir.is_dir() else []:
        try:
            values = pq.read_table(f, columns=["source"]).column(0).to_pylist()
        except (OSError, KeyError, ValueError):
            return None
        if values:
            return values[0]
    return None


def discover_runs(home: Path, scenarios: Path) -> dict[str, RunSource]:
    """Every run the disk offers, by name; a scenario wins over a store or import of the same name."""
    found: dict[str, RunSource] = {}
    runs = home / RUNS_DIR
    if runs.is_dir():
        for run_dir in sorted(runs.iterdir()):
            if (run_dir.is_dir() and RUN_NAME_PATTERN.fullmatch(run_dir.name)
                    and run_source_of(run_dir) == SOURCE_IMPORT):
                found[run_dir.name] = RunSource(run_dir.name, IMPORTED, run_dir)
    stores = home / STORES_DIR
    if stores.is_dir():
        for store in sorted(stores.iterdir()):
            if store.is_dir() and RUN_NAME_PATTERN.fullmatch(store.name) and (store / "commitlog").is_dir():
                found[store.name] = RunSource(store.name, STORE, store)
    for store in sorted((home / CONFORMANCE_DIR).glob(f"*/{STORES_DIR}/*")):
        name = f"{CONFORMANCE_DIR}-{store.parent.parent.name.replace('.', '_')}-{store.name}"
        if (store / "commitlog").is_dir() and RUN_NAME_PATTERN.fullmatch(name):
            found[name] = RunSource(name, STORE, store)
    if scenarios.is_dir():
        for scenario in sorted(scenarios.glob("*.yaml")):
            if RUN_NAME_PATTERN.fullmatch(scenario.stem):
                found[scenario.stem] = RunSource(scenario.stem, SCENARIO, scenario)
    return dict(sorted(found.items()))


def run_partitions(sources: Mapping[str, RunSource]):
    """A static partitions definition with one key per run (rebuilt from disk on every reload)."""
    import dagster as dg

    return dg.StaticPartitionsDefinition(list(sources))
