"""Where a run comes from: a scenario file to simulate, a store to import, or a run imported before.

``raw/run`` materializes a run from its source. :func:`discover_runs` finds the sources on disk,
each under the name that is its run id and its partition key:

* ``<scenarios>/<name>.yaml``: a scenario; materializing ``raw/run`` simulates it;
* ``<data home>/stores/<name>/``: a RocketMQ store directory (``commitlog/``, or a DLedger node's
  ``dledger-<selfId>/``); ``raw/run`` imports it;
* ``<data home>/stores/<cluster>/<broker>/``: the stores of a cluster's brokers, one directory per
  broker under the cluster's (a store root; or, for a DLedger group, a directory holding each
  node's store root); ``raw/run`` imports every broker into one run, under its directory's name,
  as ``import-store --broker`` does (a group's nodes with ``--role replica``): one audit;
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
CLUSTER = "cluster"
IMPORTED = "imported"

RUNS_DIR = "runs"
STORES_DIR = "stores"
CONFORMANCE_DIR = "conformance"
# Run names are run ids, directory names and partition keys: the same safe alphabet as scenario names.
RUN_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True)
class RunSource:
    """A partition's run: its name, its kind (SCENARIO, STORE, CLUSTER or IMPORTED) and the path it
    comes from."""

    name: str
    kind: str
    path: Path


def is_store_root(path: Path) -> bool:
    """Whether ``path`` is a RocketMQ store root: it holds ``commitlog/`` or a DLedger node's
    ``dledger-<selfId>/``."""
    return (path / "commitlog").is_dir() or is_dledger_store(path)


def is_dledger_store(path: Path) -> bool:
    """Whether the store root ``path`` is a DLedger node's (``dledger-<selfId>/``)."""
    return any(p.is_dir() for p in Path(path).glob("dledger-*"))


def cluster_brokers(path: Path) -> dict[str, list[Path]]:
    """A cluster directory's brokers: {broker name: its store roots}, one root for a broker, each
    node's for a DLedger group (a directory of store roots); empty when ``path`` is no cluster."""
    if not path.is_dir() or is_store_root(path):
        return {}
    brokers = {}
    for sub in sorted(p for p in path.iterdir() if p.is_dir() and RUN_NAME_PATTERN.fullmatch(p.name)):
        nodes = [sub] if is_store_root(sub) else sorted(p for p in sub.iterdir() if p.is_dir() and is_store_root(p))
        if nodes:
            brokers[sub.name] = nodes
    return brokers


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
            if not (store.is_dir() and RUN_NAME_PATTERN.fullmatch(store.name)):
                continue
            if is_store_root(store):
                found[store.name] = RunSource(store.name, STORE, store)
            elif cluster_brokers(store):
                found[store.name] = RunSource(store.name, CLUSTER, store)
    for store in sorted((home / CONFORMANCE_DIR).glob(f"*/{STORES_DIR}/*")):
        name = f"{CONFORMANCE_DIR}-{store.parent.parent.name.replace('.', '_')}-{store.name}"
        if is_store_root(store) and RUN_NAME_PATTERN.fullmatch(name):
            found[name] = RunSource(name, STORE, store)
    if scenarios.is_dir():
        for scenario in sorted(scenarios.glob("*.yaml")):
            if RUN_NAME_PATTERN.fullmatch(scenario.stem):
                found[scenario.stem] = RunSource(scenario.stem, SCENARIO, scenario)
    return dict(sorted(found.items()))
