"""The audit of a real 5.3.3 controller-mode pair against what its real clients saw, on the stores and
client tables of tests/data/rocketmq-controller-5.3.3 (no broker runs): the one message whose
send-back the failover cut is explained by anomaly FAILOVER_CUT; without the epoch files it is not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from testdata import CONTROLLER_FIXTURES, CONTROLLER_NEW_MASTER, CONTROLLER_OLD_MASTER

from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store
from broker_core.sim.scenario import load_scenario
from broker_core.store.controller_files import EPOCH_FILE, IDENTITY_FILE
from conformance import compare

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = load_scenario(ROOT / "scenarios" / "conformance-controller.yaml").with_semantics("5.x")
RUN = "conformance-controller-real"


def _audit(tmp_path: Path, new: Path, old: Path) -> dict:
    run = tmp_path / "run"
    import_store(old, run, name=RUN, broker="broker-a", role="slave")
    import_store(new, run, name=RUN, broker="broker-a", role="master")
    run_lineage_duckdb(run)
    db = build_warehouse([run], tmp_path / "w.duckdb").db_path
    attempts = compare._client_attempts(CONTROLLER_FIXTURES)
    con = open_read_only(db)
    try:
        return compare.lineage_vs_clients(con, SCENARIO, attempts, [RUN])
    finally:
        con.close()


@pytest.fixture
def copies(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, new)
    shutil.copytree(CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER, old)
    return new, old


def test_the_send_back_the_failover_cut_is_the_one_explained_difference(tmp_path):
    result = _audit(tmp_path, CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER)
    assert result["disagree"] == 0, result["examples"]
    assert result["explained"] == {"send_back_cut_at_failover": 1}
    assert result["messages"] == 283 and result["agree"] == 283


def test_without_the_epochs_the_cut_send_back_is_a_disagreement(tmp_path, copies):
    """The same stores without epoch files: nothing names the cut record, and the audit disagrees."""
    new, old = copies
    for store in copies:
        for name in (EPOCH_FILE, EPOCH_FILE + ".bak", IDENTITY_FILE):
            (store / name).unlink(missing_ok=True)
    result = _audit(tmp_path, new, old)
    assert result["disagree"] == 1 and result["explained"] == {}
    assert result["examples"][0]["group"] == "notice-service"
