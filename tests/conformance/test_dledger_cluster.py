"""The DLedger group's bookkeeping without a broker: which node is master, from the role changes real
nodes logged, in 4.9.4's log (the harness's logs/rocketmq.log) and 5.3.3's (logs/rocketmqlogs/broker.log)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conformance.cluster import BrokerSpec, Cluster, Proc

_LINE = "Finish handling broker role change succ=true term={term} role={role} currStoreRole={store} cost=1\n"
# How each release prefixes its lines (copied from real nodes' logs), and where it writes them.
PREFIXES = {"4.9.4": ("2026-11-27 21:45:04.623 INFO  [DLegerRoleChangeHandler_1] RocketmqBroker - ",
                      Path("logs") / "rocketmq.log"),
            "5.3.3": ("2026-11-28 05:48:48 INFO DLegerRoleChangeHandler_1 - ",
                      Path("logs") / "rocketmqlogs" / "broker.log")}


def _log(version: str, *changes: tuple[int, str]) -> tuple[Path, str]:
    prefix, path = PREFIXES[version]
    text = "".join(prefix + _LINE.format(term=term, role=role,
                                         store="SYNC_MASTER" if role == "LEADER" else "SLAVE")
                   for term, role in changes)
    return path, text


@pytest.fixture
def group(tmp_path):
    """A three-node DLedger broker whose nodes are live ``sleep`` processes, their logs to be written."""
    cluster = Cluster(tmp_path, tmp_path, [BrokerSpec("broker-a", "1s", dledger_nodes=3)])
    procs = []
    for node in ("broker-a-n0", "broker-a-n1", "broker-a-n2"):
        popen = subprocess.Popen(["sleep", "60"])
        procs.append(popen)
        cluster.procs[node] = Proc(node, popen, tmp_path / f"{node}.out", tmp_path / node)
    yield cluster
    for popen in procs:
        popen.kill()
        popen.wait()


def _write(cluster: Cluster, node: str, version: str, *changes: tuple[int, str]) -> None:
    path, text = _log(version, *changes)
    log = cluster.procs[node].home / path
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)


@pytest.mark.parametrize("version", sorted(PREFIXES))
def test_the_master_is_the_live_leader_of_the_highest_term(group, version):
    """n0 led term 1 and was killed; n1 leads term 2, n2 follows it: n1 is the master. Before n1's
    line is there, n0 is (alive); once n0 is gone and n1 has no line, there is none."""
    _write(group, "broker-a-n0", version, (1, "CANDIDATE"), (1, "LEADER"))
    _write(group, "broker-a-n2", version, (1, "CANDIDATE"), (1, "FOLLOWER"), (1, "CANDIDATE"), (2, "FOLLOWER"))
    assert group.leader("broker-a") == "broker-a-n0"
    group.procs["broker-a-n0"].popen.kill()
    group.procs["broker-a-n0"].popen.wait()
    assert group.leader("broker-a") is None
    _write(group, "broker-a-n1", version, (1, "FOLLOWER"), (1, "CANDIDATE"), (2, "LEADER"))
    assert group.leader("broker-a") == "broker-a-n1"


def test_a_node_that_stepped_down_is_not_the_master(group):
    """A 5.3.3 leader whose last change made it a candidate again is not the master."""
    _write(group, "broker-a-n1", "5.3.3", (1, "LEADER"), (1, "CANDIDATE"))
    assert group.leader("broker-a") is None
