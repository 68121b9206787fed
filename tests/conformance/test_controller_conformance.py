"""Real RocketMQ 5.3.3 in controller mode: a master and its slave, the master killed mid-run, audited.

scenarios/conformance-controller.yaml (300 messages, failing consumers, 1 s delay levels) is played on
one broker name, broker-a, as two 5.3.3 brokers in controller mode (``enableControllerMode``; the
controller embedded in the name server, ``enableControllerInNamesrv``): node n0 starts first and is
elected master (epoch 1), n1 becomes its slave. 9 s after the first send n0 is killed with SIGKILL;
the controller makes n1 the master (epoch 2) and the clients finish on it. Both stores are imported
as broker-a (n1, the master at the end, with ``--role master``; n0 with ``--role slave``), merged by
their epoch files, and the conformance runner compares the audit with the clients message by message.
Broker time is a few minutes; the module is long (make test-long).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import needs_real_rocketmq
from replicated_run import assert_every_send_ok_is_one_publish_hop, assert_the_audit_agrees_with_the_clients

from conformance.play import Outage
from conformance.run import real_run_id, run_conformance

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-controller.yaml"
VERSION = "5.3.3"
NODES = ("broker-a-n0", "broker-a-n1")
KILL_AT_MS = 9_000  # of 30 s of sends

pytestmark = [needs_real_rocketmq, pytest.mark.long]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, spark):
    out = tmp_path_factory.mktemp("controller") / "out"
    report = run_conformance(VERSION, SCENARIO, out, spark=spark, controller_nodes=2,
                             outages=(Outage("broker-a", KILL_AT_MS, None),))
    return out, report


def test_the_slave_is_promoted_after_the_master_is_killed(real_run):
    """n0 was the master of epoch 1 and was killed; the controller made n1 the master of a later epoch."""
    _out, report = real_run
    kinds = [f["kind"] for f in report["faults"]]
    assert kinds[:2] == ["broker_kill", "master_elected"], report["faults"]
    killed, elected = report["faults"][:2]
    assert killed["node"] == "broker-a-n0" and elected["node"] == "broker-a-n1"
    assert elected["epoch"] > 1 and elected["after_kill_ms"] > 0
    n0_roles = report["controller"]["broker-a-n0"]
    assert n0_roles[0]["role"] == "SYNC_MASTER" and n0_roles[0]["epoch"] == 1


def test_every_send_ok_record_is_one_publish_hop_across_the_failover(real_run):
    """Every message a producer got SEND_OK for, before the kill and after the promotion, is one
    PUBLISH hop of the merged copies, at the offset its offset msgId names."""
    out, report = real_run
    assert_every_send_ok_is_one_publish_hop(out, report["faults"][0]["wall_ts_ms"])


def test_the_audit_agrees_with_the_real_clients_across_the_failover(real_run):
    """Nothing the clients consumed is missing and nothing disagrees; the model's run differs from the
    real one only in documented ways."""
    _out, report = real_run
    assert_the_audit_agrees_with_the_clients(report)


def test_the_two_copies_merge_by_their_epochs(real_run):
    """Both stores are broker-a: n1's epoch file holds epoch 1 from 0 and its own epoch from where its
    copy ended; n0's only epoch 1. The merge takes n1's history; no error; each epoch's records carry
    the address of the node that was its master."""
    out, report = real_run
    imports = report["imports"]
    assert sorted(imports) == list(NODES) and all(i["errors"] == 0 for i in imports.values())
    real = out / "runs" / "real"
    epochs = pq.read_table(real / "parquet" / "replica_epochs").to_pylist()
    by_role = {r: sorted((e for e in epochs if e["role"] == r), key=lambda e: e["epoch"]) for r in ("master", "slave")}
    assert [e["epoch"] for e in by_role["slave"]] == [1]
    assert by_role["master"][0]["epoch"] == 1 and by_role["master"][0]["start_offset"] == 0
    assert by_role["master"][-1]["epoch"] == report["faults"][1]["epoch"]
    promoted_at = by_role["master"][-1]["start_offset"]
    assert by_role["slave"][0]["end_offset"] >= promoted_at
    addrs = report["node_addrs"]
    assert by_role["master"][0]["store_hosts"] == [addrs["broker-a-n0"]]
    assert by_role["master"][-1]["store_hosts"] == [addrs["broker-a-n1"]]
    truncated = by_role["slave"][0]["truncated_records"]
    problems = pq.read_table(real / "parquet" / "store_problems").to_pylist()
    cut = [p for p in problems if p["kind"] == "failover-truncated"]
    assert len(cut) == (1 if truncated else 0)
    for node in NODES:
        assert (out / "stores" / node / "abort").exists() == (node == "broker-a-n0")
        assert (out / "stores" / node / "epochFileCheckpoint").is_file()
    assert report["checks"][real_run_id("conformance-controller")]
