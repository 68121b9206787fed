"""Shared test options and fixtures: the --seed option, the paths of the real RocketMQ data, and
the test run's one Spark session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
COMMITLOG_FIXTURES = DATA / "rocketmq-commitlog"
STORE_FIXTURES = DATA / "rocketmq-store-4.9.4"


def pytest_addoption(parser):
    parser.addoption("--seed", action="store", type=int, default=None,
                     help="seed for simulation tests (default: each test's own fixed seeds)")


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


@pytest.fixture(scope="session")
def spark():
    """The process's SparkSession (local unless RETRY_AUDIT_SPARK_MASTER says otherwise).

    Starting the JVM costs seconds, so every test in every package uses this one session, created
    on first use; ``assets.spark.get_spark`` caches it per process.
    """
    from assets.spark import get_spark

    return get_spark(app_name="retry-audit-tests")
