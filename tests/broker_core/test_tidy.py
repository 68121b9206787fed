"""broker_core takes time and chance as parameters: no wall clock, no global randomness."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "broker_core"
BANNED = re.compile(
    r"time\.time\(|time\.monotonic\(|time\.perf_counter\(|datetime\.now\(|datetime\.utcnow\(|uuid4\(|"
    r"^import random|^from random import|[^_.a-zA-Z]random\.(random|randint|choice|uniform|seed|shuffle)\(",
    re.M)
# Measuring wall time for the runs table is allowed only at the edge that reports it.
ALLOWED = {"rng.py", "run.py", "swarm.py"}


def test_no_ambient_time_or_randomness_in_broker_core():
    """No broker_core module reads the wall clock or global random state (rng.py owns random)."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name in ALLOWED:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if BANNED.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert offenders == [], "ambient time/randomness:\n" + "\n".join(offenders)


def test_broker_core_imports_no_pipeline_packages():
    """broker_core never imports dagster, pyspark, duckdb or the assets/orchestration packages."""
    pattern = re.compile(r"^\s*(import|from)\s+(dagster|pyspark|duckdb|assets|orchestration)\b", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_only_export_uses_pyarrow():
    """Only broker_core/export may import pyarrow; the model itself is standard library."""
    pattern = re.compile(r"^\s*(import|from)\s+pyarrow\b", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                 if "export" not in p.parts and pattern.search(p.read_text())]
    assert offenders == []
