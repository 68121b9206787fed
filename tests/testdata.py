"""Where the real RocketMQ data the tests read lives: every path under tests/data is built here.

Imported by name (``from testdata import STORE_FIXTURES``): tests/conftest.py puts tests/ on the path.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
COMMITLOG_FIXTURES = DATA / "rocketmq-commitlog"
STORE_FIXTURES = DATA / "rocketmq-store-4.9.4"
STORE_MANIFEST = STORE_FIXTURES / "manifest.json"
CLEAN_STORE = STORE_FIXTURES / "store-clean"
# A three-node DLedger group's stores, with an uncommitted and a divergent tail (its README.md).
DLEDGER_FIXTURES = DATA / "rocketmq-dledger-4.9.4"
DLEDGER_MANIFEST = DLEDGER_FIXTURES / "manifest.json"
DLEDGER_REPLICAS = ("broker-a-n0", "broker-a-n1", "broker-a-n2")
# Another run of those steps whose DLedger directories keep their index files (cut to the used units).
DLEDGER_INDEX_FIXTURES = DATA / "rocketmq-dledger-index-4.9.4"
# The same steps on a 5.3.3 group (dledger 0.3.1.2): two terms, no uncommitted tail (its README.md).
DLEDGER_5X_FIXTURES = DATA / "rocketmq-dledger-5.3.3"
DLEDGER_5X_MANIFEST = DLEDGER_5X_FIXTURES / "manifest.json"
# A 5.3.3 master (n0) and slave (n1) in controller mode, the master killed and the slave promoted
# (its README.md): each store's epoch and identity files, commit log and config files.
CONTROLLER_FIXTURES = DATA / "rocketmq-controller-5.3.3"
CONTROLLER_MANIFEST = CONTROLLER_FIXTURES / "manifest.json"
CONTROLLER_OLD_MASTER, CONTROLLER_NEW_MASTER = "broker-a-n0", "broker-a-n1"


def data_path(*parts: str) -> Path:
    """A file or directory under tests/data, which must exist (a typo fails here, not later)."""
    path = DATA.joinpath(*parts)
    assert path.exists(), f"no test data at {path}"
    return path
