"""The controller-mode cluster's bookkeeping without a broker: reading the role changes a real 5.3.3
broker logged, and the arguments a controller-mode run refuses before anything starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from broker_core.errors import BadInputError
from conformance.cluster import BrokerSpec, Cluster, Proc
from conformance.run import run_conformance

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-controller.yaml"
# Two lines a real 5.3.3 slave (broker id 2) logged in broker.log: joining as the slave of epoch 1,
# then taking over as the master of epoch 2 after its master was killed.
LINES = (
    "2026-11-28 01:57:39 INFO ReplicasManager_ExecutorService_1 - Change broker [id:2][address:127.0.0.1:44021] "
    "to SLAVE, newMasterBrokerId:1, newMasterAddress:127.0.0.1:44011, newMasterEpoch:1, syncStateSetEpoch:0\n"
    "2026-11-28 01:57:58 INFO ReplicasManager_ExecutorService_3 - Change broker [id:2][address:127.0.0.1:44021] "
    "to SYNC_MASTER, newMasterBrokerId:2, newMasterAddress:127.0.0.1:44021, newMasterEpoch:2, syncStateSetEpoch:3\n")


def test_the_role_changes_a_real_broker_logged(tmp_path):
    spec = BrokerSpec("broker-a", "1s", controller_nodes=2)
    cluster = Cluster(tmp_path, tmp_path, [spec])
    logs = tmp_path / "broker-a-n1" / "logs" / "rocketmqlogs"
    logs.mkdir(parents=True)
    (logs / "broker.log").write_text(LINES)
    popen = subprocess.Popen(["sleep", "30"])
    try:
        cluster.procs["broker-a-n1"] = Proc("broker-a-n1", popen, tmp_path / "out.log", tmp_path / "broker-a-n1")
        roles = cluster.controller_roles("broker-a-n1")
        assert [(r["role"], r["epoch"], r["broker_id"]) for r in roles] == [("SLAVE", 1, 2), ("SYNC_MASTER", 2, 2)]
        assert cluster.leader("broker-a") == "broker-a-n1" and cluster.is_controller_mode("broker-a")
        assert spec.node_names() == ["broker-a-n0", "broker-a-n1"]
    finally:
        popen.kill()
        popen.wait()


def test_controller_mode_needs_a_5x_release(tmp_path):
    with pytest.raises(BadInputError, match="controller mode"):
        run_conformance("4.9.4", SCENARIO, tmp_path / "out", controller_nodes=2)


def test_a_broker_is_not_both_a_dledger_group_and_controller_nodes(tmp_path):
    with pytest.raises(BadInputError, match="not both"):
        run_conformance("5.3.3", SCENARIO, tmp_path / "out", controller_nodes=2, dledger_nodes=3)
