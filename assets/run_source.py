"""Where a run comes from: a scenario file to simulate, a store to import, or a run imported before.

``raw/run`` materializes a run from its source. :func:`discover_runs` finds the sources on disk,
each under the name that is its run id and its partition key:

* ``<scenarios>/<name>.yaml``: a scenario; materializing ``raw/run`` simulates it;
* ``<data home>/stores/<name>/``: a RocketMQ store directory; ``raw/run`` imports it;
* ``<data home>/runs/<name>/`` whose ``runs`` table says source ``import``: a store imported with
  ``retry-audit import-store``; ``raw/run`` takes it as it is;
* ``<data home>/conformance/<version>/stores/<broker>/``: a real broker's store written by
  ``make conformance``; name ``conformance-<version, dots as underscores>-<broker>``, imported
  like any store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from broker_core.export.schema import RUN_SOURCE_IMPORT

SCENARIO = "scenario"
STORE = "store"
IMPORTED = "imported"

RUNS_DIR = "runs"
STORES_DIR = "stores"
CONFORMANCE_DIR = "conformance"
# Run names are run ids, directory names and partition keys: the same safe alphabet as scenario names.
RUN_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True)
class RunSource:
    """A partition's run: its name, its kind (SCENARIO, STORE or IMPORTED) and the path it comes from."""

    name: str
    kind: str
    path: Path


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
                    and run_source_of(run_dir) == RUN_SOURCE_IMPORT):
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
