"""Shared test options and fixtures: the --seed option, the paths of the real RocketMQ data, the
test run's one Spark session, and how the run is spread over worker processes (make test's -n).

Real-broker tests (mark ``real_broker``) skip without java, javac and mvn, and the run says so in
its last line; they are started first, since they mostly wait on brokers. make test hands out
whole modules (``--dist loadscope``), so a module-scoped fixture (a simulated run, a lineage, a
real conformance run) is built once per test run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from testdata import COMMITLOG_FIXTURES, STORE_FIXTURES

REAL_BROKER_TOOLS = ("java", "javac", "mvn")


def pytest_addoption(parser):
    parser.addoption("--seed", action="store", type=int, default=None,
                     help="seed for simulation tests (default: each test's own fixed seeds)")


def missing_real_broker_tools() -> list[str]:
    return [tool for tool in REAL_BROKER_TOOLS if shutil.which(tool) is None]


def pytest_configure(config):
    # Each xdist worker probes its own slice of ports for clusters, so two workers starting
    # clusters at once never pick the same name-server or broker port.
    from conformance.cluster import PORT_BASE_MAX, PORT_BASE_MIN, PORT_RANGE_ENV

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and PORT_RANGE_ENV not in os.environ:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        span = (PORT_BASE_MAX - PORT_BASE_MIN) // count // 100 * 100
        low = PORT_BASE_MIN + int(worker[2:]) * span
        os.environ[PORT_RANGE_ENV] = f"{low}-{low + span}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    missing = missing_real_broker_tools()
    skip = pytest.mark.skip(reason=f"real RocketMQ needs {', '.join(missing)} (apt-get install "
                                   "openjdk-17-jdk-headless maven; .ci/run does it)")
    for item in items:
        if missing and item.get_closest_marker("real_broker"):
            item.add_marker(skip)
    # Stable: the real-broker tests first (each waits a minute or more on its brokers, so they
    # overlap best from the start), every other test in collection order.
    items.sort(key=lambda item: item.get_closest_marker("real_broker") is None)


# Outermost, so the line comes after the durations and the short summary, just above the counts.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    result = yield
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "real RocketMQ needs" in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} real-broker tests skipped: without {', '.join(missing_real_broker_tools())} this "
            "was a different suite from CI's (apt-get install openjdk-17-jdk-headless maven)", yellow=True)
    return result


@pytest.fixture
def seed(request) -> int:
    """The seed a simulation test runs with: --seed N, else the SEED env var, else 42."""
    value = request.config.getoption("--seed")
    if value is None:
        value = int(os.environ.get("SEED", "42"))
    return value


@pytest.fixture
def reproduce(request, seed) -> str:
    """What a failing seeded test prints: its seed and the command that reruns this very test with it."""
    return f'SEED={seed}; reproduce: make test-all PYTEST_ARGS="--seed {seed} {request.node.nodeid}"'


@pytest.fixture
def commitlog_fixtures() -> Path:
    return COMMITLOG_FIXTURES


@pytest.fixture
def store_fixtures() -> Path:
    return STORE_FIXTURES


@pytest.fixture
def writable_store_copy(tmp_path) -> callable:
    """Copy a fixture store ("store-clean" or "store-crashed") somewhere a test may change it."""

    def make(name: str = "store-clean") -> Path:
        dest = tmp_path / name
        shutil.copytree(STORE_FIXTURES / name, dest)
        for path in dest.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        return dest

    return make


def drop_oldest_commitlog_files(store: Path, count: int) -> int:
    """Delete a store's ``count`` oldest commit-log files, as RocketMQ's CleanCommitLogService does
    after fileReservedTime; return the first offset left (the next file's name)."""
    files = sorted((Path(store) / "commitlog").iterdir())
    assert 0 <= count < len(files), f"{store} has {len(files)} commit-log files, cannot drop {count}"
    for path in files[:count]:
        path.unlink()
    return int(files[count].name)


@pytest.fixture
def retained_store_copy(writable_store_copy) -> callable:
    """A writable copy of a fixture store whose ``count`` oldest commit-log files retention deleted."""

    def make(name: str = "store-clean", count: int = 1) -> Path:
        store = writable_store_copy(name)
        drop_oldest_commitlog_files(store, count)
        return store

    return make


SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.fixture(scope="session")
def simulated_run(tmp_path_factory) -> callable:
    """``simulated_run(name)``: scenarios/<name>.yaml as written (its own seed), simulated once per
    test run (per worker process) however many tests read it. The run is read-only for them: a test
    that changes a run simulates its own, or copies this one."""
    from broker_core.sim.run import simulate

    runs: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in runs:
            out = tmp_path_factory.mktemp(f"sim-{name}") / name
            simulate(SCENARIOS / f"{name}.yaml", out)
            runs[name] = out
        return runs[name]

    return get


@pytest.fixture(scope="session")
def spark():
    """The process's SparkSession (local unless RETRY_AUDIT_SPARK_MASTER says otherwise).

    Starting the JVM costs seconds, so every test in every package uses this one session, created
    on first use; ``assets.spark.get_spark`` caches it per process.
    """
    from assets.spark import get_spark

    return get_spark(app_name="retry-audit-tests")
