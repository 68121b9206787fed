"""broker_core takes time, chance and settings as parameters (no wall clock, no global randomness,
no environment) and imports only the standard library, with two named exceptions by path; and the
repository tracks no large files but the RocketMQ stores the tests read, and its Java drivers keep
one owner for each step they share."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "broker_core"
BANNED = re.compile(
    r"time\.time\(|time\.monotonic\(|time\.perf_counter\(|datetime\.now\(|datetime\.utcnow\(|uuid4\(|"
    r"^import random|^from random import|[^_.a-zA-Z]random\.(random|randint|choice|uniform|seed|shuffle)\(",
    re.M)
# By path under broker_core/: rng.py owns random; sim/run.py measures the wall time the runs
# table reports.
ALLOWED = {"rng.py", "sim/run.py"}
# The only imports from outside the standard library, by path: Parquet and Arrow in export/,
# PyYAML and pydantic in the scenario loader (YAML nodes give each mistake's file and line, the
# pydantic models check each field's type and range); rocksdict where a 5.x store's RocksDB
# metadata (topics, groups, consumer offsets; v1 directories and v2 config/rdb/) is opened
# (imported inside the function that needs it; rocksdb_config_v2 decodes what it returns).
THIRD_PARTY_ALLOWED = {"export/": {"pyarrow", "numpy"}, "sim/scenario.py": {"yaml", "pydantic"},
                       "store/rocksdb_config.py": {"rocksdict"}}


def test_no_ambient_time_or_randomness_in_broker_core():
    """No broker_core module reads the wall clock or global random state (rng.py owns random)."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).as_posix() in ALLOWED:
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


def _imported_packages(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file, wherever it stands (a function too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _allowed_third_party(rel: str) -> set[str]:
    return set().union(*(names for prefix, names in THIRD_PARTY_ALLOWED.items()
                         if rel == prefix or (prefix.endswith("/") and rel.startswith(prefix))))


def test_broker_core_imports_the_standard_library_only_but_where_named():
    """Outside export/ (pyarrow, numpy), sim/scenario.py (yaml, pydantic) and
    store/rocksdb_config.py (rocksdict), broker_core imports only the standard library and itself."""
    ours = {"broker_core", "__future__"}
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        extra = _imported_packages(path) - set(sys.stdlib_module_names) - ours - _allowed_third_party(rel)
        if extra:
            offenders.append(f"{rel}: {sorted(extra)}")
    assert offenders == []


def test_broker_core_reads_no_environment():
    """No broker_core module reads or sets environment variables: settings come in as arguments."""
    pattern = re.compile(r"\bos\.(environ|getenv|putenv|unsetenv)\b|^\s*from\s+os\s+import\s+.*\b(environ|getenv)\b", re.M)
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted(ROOT.rglob("*.py")) if pattern.search(p.read_text())]
    assert offenders == []


REPO = ROOT.parent
TRACKED_FILE_BYTES_MAX = 1024 * 1024  # a recording or a dump does not belong in the history
# Real RocketMQ stores are test inputs; their commit-log files are the size the broker wrote.
LARGE_FILES_ALLOWED_UNDER = "tests/data/"


def test_no_large_tracked_files_outside_test_data():
    """No file git tracks is larger than 1 MiB, except the RocketMQ stores under tests/data/."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for name in listed.stdout.decode().split("\0"):
        path = REPO / name
        if not name or name.startswith(LARGE_FILES_ALLOWED_UNDER) or not path.is_file():
            continue
        size = path.stat().st_size
        if size > TRACKED_FILE_BYTES_MAX:
            offenders.append(f"{name}: {size:,} bytes")
    assert offenders == [], "large tracked files:\n" + "\n".join(offenders)


def test_constants_have_one_owner():
    """A name broker_core/constants.py defines is not defined again in another module."""
    assignment = re.compile(r"^([A-Z][A-Z0-9_]*)\s*(?::[^=]+)?=", re.M)
    owned = set(assignment.findall((ROOT / "constants.py").read_text()))
    offenders = []
    for package in ("broker_core", "assets", "orchestration"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == ROOT / "constants.py":
                continue
            offenders.extend(f"{path.relative_to(REPO).as_posix()}: {name}"
                             for name in assignment.findall(path.read_text()) if name in owned)
    assert offenders == [], "defined again outside constants.py:\n" + "\n".join(offenders)


# The Java drivers: the product's (conformance/driver/) and the real-broker tests' (tests/conformance/).
# Each step they share has one owner: PlanSupport prints a JSON line and quotes a JSON string,
# DriverSupport waits for a topic's route.
DRIVER_DIRS = (REPO / "conformance" / "driver", REPO / "tests" / "conformance")
DRIVER_STEP_OWNERS = {
    re.compile(r"\bvoid\s+emit\s*\("): "PlanSupport.java",
    re.compile(r"\bString\s+quoted\s*\("): "PlanSupport.java",
    re.compile(r"\.examineTopicRouteInfo\s*\("): "DriverSupport.java",
}


def driver_step_copies(dirs) -> list[str]:
    """Where a Java file under ``dirs`` defines or does a shared step its owner is for."""
    found = []
    for d in dirs:
        for path in sorted(Path(d).glob("*.java")):
            text = path.read_text()
            for pattern, owner in DRIVER_STEP_OWNERS.items():
                if path.name == owner:
                    continue
                found.extend(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)} (owner: {owner})"
                             for m in pattern.finditer(text))
    return found


def test_each_shared_driver_step_has_one_owner():
    """No Java driver defines its own emit or JSON quoting (PlanSupport's) or waits for a route itself (DriverSupport's)."""
    assert all((d / name).is_file() for d, name in zip(DRIVER_DIRS, ("PlanSupport.java", "DriverSupport.java"), strict=True))
    assert driver_step_copies(DRIVER_DIRS) == []


def test_a_driver_with_its_own_emit_is_found(tmp_path):
    """A driver that grows its own emit, quoted or route wait again is named, with its line."""
    (tmp_path / "CopyDriver.java").write_text(
        "public class CopyDriver {\n    static void emit(String line) {\n    }\n"
        "    static String quoted(String s) {\n        return s;\n    }\n"
        "    static void topic() {\n        admin.examineTopicRouteInfo(t);\n    }\n}\n")
    (tmp_path / "PlanSupport.java").write_text("final class PlanSupport {\n    static void emit(String line) {\n    }\n}\n")
    assert driver_step_copies([tmp_path]) == [
        "CopyDriver.java:2: void emit( (owner: PlanSupport.java)",
        "CopyDriver.java:4: String quoted( (owner: PlanSupport.java)",
        "CopyDriver.java:8: .examineTopicRouteInfo( (owner: DriverSupport.java)",
    ]
