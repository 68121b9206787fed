"""The Dagster resources the assets and sensors take: the data home, the Spark session and the
warehouse file.

Each is a small typed ``ConfigurableResource``: an asset or sensor names it as a parameter
(``home: DataHome``), and its settings show (and can be changed) in the UI's launchpad. Nothing
here reads the environment at import time; ``orchestration.resources.default_resources`` builds
them for a data home.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.run_source import RUNS_DIR, RunSource, discover_runs
from broker_core.errors import BadInputError


class DataHome(dg.ConfigurableResource):
    """Where runs, stores to import and the warehouse live (``RETRY_AUDIT_HOME``, default ./var)."""

    path: str
    scenarios: str

    @property
    def root(self) -> Path:
        return Path(self.path)

    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS_DIR

    def run_dir(self, name: str) -> Path:
        return self.runs_dir / name

    def sources(self) -> dict[str, RunSource]:
        return discover_runs(self.root, Path(self.scenarios))

    def source(self, name: str) -> RunSource:
        sources = self.sources()
        if name not in sources:
            raise BadInputError(f"no scenario, store or imported run named {name!r}", where=str(self.root),
                                hint=f"a partition is a scenario in {self.scenarios}, a store under "
                                     f"{self.root / 'stores'} or a run imported under {self.runs_dir}; "
                                     "was it removed?")
        return sources[name]

    def lineage_run_dirs(self) -> list[Path]:
        """Run directories that have their lineage: what the warehouse loads side by side."""
        if not self.runs_dir.is_dir():
            return []
        return [d for d in sorted(self.runs_dir.iterdir())
                if d.is_dir() and not d.name.startswith(".")
                and (d / "lineage" / "message_hops").is_dir() and (d / "lineage" / "message_lineage").is_dir()]


class SparkResource(dg.ConfigurableResource):
    """The Spark session the lineage runs on, created on first use.

    ``master`` comes from this resource's config, else ``RETRY_AUDIT_SPARK_MASTER``, else local[*]
    (resolved by ``assets.spark.get_spark`` when the session is built, not at load time).
    """

    master: str | None = None

    def session(self, input_bytes: int | None = None):
        """The session; ``input_bytes`` sizes the JVM when this call starts it (``get_spark``)."""
        from assets.spark import get_spark

        return get_spark(self.master, input_bytes=input_bytes)


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB audit warehouse file (rebuilt whole and swapped in; readers never block it)."""

    db_path: str

    @property
    def path(self) -> Path:
        return Path(self.db_path)
