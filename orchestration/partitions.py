"""One partition per run found on disk, kept in the Dagster instance as dynamic partitions.

A partition key is a run name: a scenario file, a store under ``<data home>/stores/`` (or one a
conformance run wrote), or a run imported with ``retry-audit import-store``
(``assets.run_source.discover_runs`` says which). The partitions are dynamic: the
``runs_on_disk`` sensor (``orchestration.sensors``) adds the runs that appear on disk and removes
the ones that went, so a new store or scenario shows up in the UI by itself, with no "Reload
definitions" and no code change. ``make ui`` and ``make demo`` bring the instance up to date
before they start (:func:`sync_run_partitions`).

The data home is ``RETRY_AUDIT_HOME`` (default ``./var``, made absolute); nothing here reads the
environment at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from assets.run_source import RunSource

HOME_ENV = "RETRY_AUDIT_HOME"
HOME_DEFAULT = "var"
SCENARIOS_ENV = "RETRY_AUDIT_SCENARIOS"
WAREHOUSE_FILE = "warehouse.duckdb"
DAGSTER_HOME_DIR = "dagster_home"
# The dynamic partitions' name in the Dagster instance (the UI shows it as the partition set).
RUN_PARTITIONS_NAME = "runs"


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


def run_partitions():
    """The run partitions: dynamic, their keys held by the Dagster instance, not by the code."""
    import dagster as dg

    return dg.DynamicPartitionsDefinition(name=RUN_PARTITIONS_NAME)


def partition_changes(found: Iterable[str], current: Sequence[str]) -> tuple[list[str], list[str]]:
    """(keys to add, keys to delete) so that the partitions are the runs found: new runs in name
    order, gone ones in the order the instance holds them."""
    found, have = set(found), set(current)
    return sorted(found - have), [key for key in current if key not in found]


def sync_run_partitions(instance, sources: Mapping[str, RunSource]) -> tuple[list[str], list[str]]:
    """Make the instance's run partitions the runs found on disk; return (added, deleted)."""
    added, deleted = partition_changes(sources, instance.get_dynamic_partitions(RUN_PARTITIONS_NAME))
    if added:
        instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, added)
    for key in deleted:
        instance.delete_dynamic_partition(RUN_PARTITIONS_NAME, key)
    return added, deleted
