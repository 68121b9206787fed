"""Where a run comes from: a scenario file to simulate, a store to import, or a run imported before.

``raw/run`` materializes a run from its source; the orchestration layer finds the sources on
disk (``orchestration.partitions.discover_runs``) and hands one to the asset per partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCENARIO = "scenario"
STORE = "store"
IMPORTED = "imported"


@dataclass(frozen=True)
class RunSource:
    """A partition's run: its name, its kind (SCENARIO, STORE or IMPORTED) and the path it comes from."""

    name: str
    kind: str
    path: Path
