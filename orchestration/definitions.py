"""The Dagster definitions: ``dagster dev -w workspace.yaml`` loads ``defs`` from here.

Kept thin: ``build_definitions()`` wires the assets, checks, sensors and resources of a data
home. Importing this module does not: ``defs`` is a ``@dg.definitions`` function, which Dagster's
loader calls when it loads the code location, so the environment is read then, not at import.
The run partitions are dynamic (``orchestration.partitions``): the definitions never change when a
run appears on disk; the ``runs_on_disk`` sensor adds its partition to the instance.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.audit_assets import audit_assets
from assets.raw import raw_assets
from orchestration.partitions import data_home, run_partitions, scenarios_dir
from orchestration.resources import default_resources
from orchestration.sensors import runs_sensor, store_job, stores_sensor


def build_definitions(home: Path | None = None, scenarios: Path | None = None,
                      spark_master: str | None = None) -> dg.Definitions:
    """Definitions for the runs of ``home`` (default RETRY_AUDIT_HOME or ./var)."""
    home = Path(home).absolute() if home is not None else data_home()
    scenarios = Path(scenarios).absolute() if scenarios is not None else scenarios_dir()
    partitions = run_partitions()
    # One process per run: the three steps run in order anyway, and a subprocess per step would
    # start a Python interpreter and a Spark JVM again for each.
    return dg.Definitions(assets=[*raw_assets(partitions), *audit_assets(partitions)],
                          jobs=[store_job()], sensors=[runs_sensor(partitions), stores_sensor(partitions)],
                          resources=default_resources(home, scenarios, spark_master),
                          executor=dg.in_process_executor)


@dg.definitions
def defs() -> dg.Definitions:
    """The definitions for RETRY_AUDIT_HOME (or ./var) and the project's scenarios, built on load."""
    return build_definitions()
