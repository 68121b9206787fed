"""The resources of a data home (``assets.resources``' typed resources, configured), and its
``DAGSTER_HOME``. Nothing here reads the environment at import time.
"""

from __future__ import annotations

from pathlib import Path

from assets.resources import DataHome, SparkResource, WarehouseResource
from orchestration.partitions import DAGSTER_HOME_DIR, WAREHOUSE_FILE


def default_resources(home: Path, scenarios: Path, spark_master: str | None = None) -> dict:
    """The resources by the key each asset and sensor names them with."""
    return {
        "home": DataHome(path=str(home), scenarios=str(scenarios)),
        "spark": SparkResource(master=spark_master),
        "warehouse": WarehouseResource(db_path=str(home / WAREHOUSE_FILE)),
    }


def dagster_home(home: Path) -> Path:
    """``<data home>/dagster_home`` with a dagster.yaml that turns telemetry and the intro modal off."""
    path = (home / DAGSTER_HOME_DIR).absolute()
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n", encoding="utf-8")
    return path
