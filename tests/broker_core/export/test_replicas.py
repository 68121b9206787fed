"""import_store role="slave": a broker's master and slave stores merge into one set of rows.

The stores are written by the model's store (RocketMQ's record format): a slave is a copy of its
master's store taken while the master runs on (the slave behind), or the master is the earlier
copy (it lost a tail the slave had), or both run on from one copy with different messages (they
differ at the same offsets).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker_core.errors import BadInputError, CorruptStoreError
from broker_core.export.parquet import read_table
from broker_core.export.replicas import DIFFERENCES_LISTED_MAX
from broker_core.export.store_import import import_store
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

HOST = "10.0.0.7:10911"
T0_MS = 1_795_000_000_000


class _Broker:
    """A model store that can be stopped, copied and started again (its clock keeps counting)."""

    def __init__(self, root: Path):
        self.root = root
        self.now = T0_MS

    def put(self, *keys: str, topic: str = "OrderTopic") -> None:
        # Small files: a copy of the store copies every byte of them.
        config = StoreConfig(store_host=HOST, commitlog_file_size_bytes=64 * 1024, cq_units_per_file=64)
        store = MessageStore(self.root, config, self._tick)
        assert store.load()
        store.start()
        for key in keys:
            assert store.put_message(MessageInner(topic, 0, f"body of {key}".encode(), {"UNIQ_KEY": key},
                                                  born_ts=self.now, born_host="10.0.0.9:5000")).ok
        store.shutdown()

    def _tick(self) -> int:
        self.now += 10
        return self.now

    def copy(self, root: Path) -> _Broker:
        shutil.copytree(self.root, root)
        twin = _Broker(root)
        twin.now = self.now
        return twin


def _commitlog(run):
    return [(r["phys_offset"], r["uniq_key"]) for r in read_table(run, "commitlog").to_pylist()]


def _problems(run):
    return [(r["kind"], r["severity"], r["offset"]) for r in read_table(run, "store_problems").to_pylist()]


def test_a_slave_behind_its_master_adds_no_record_twice(tmp_path):
    """A slave that had replicated 4 of its master's 6 records merges into the master's 6 rows, each
    offset once, with one slave-behind warning at the first record it lacks; importing the slave
    first and the master after gives the same rows."""
    master = _Broker(tmp_path / "master")
    master.put("K0", "K1", "K2", "K3")
    slave = master.copy(tmp_path / "slave")
    master.put("K4", "K5")
    run = tmp_path / "run"
    import_store(master.root, run, broker="broker-a")
    alone = _commitlog(run)
    summary = import_store(slave.root, run, broker="broker-a", role="slave")
    assert [k for _o, k in alone] == ["K0", "K1", "K2", "K3", "K4", "K5"]
    assert _commitlog(run) == alone
    assert summary.merged == {"records": 6, "only_on_master": 2, "only_on_slave": 0, "offsets_differ": 0}
    assert _problems(run) == [("slave-behind", "warning", alone[4][0])]
    runs = read_table(run, "runs").to_pylist()
    assert [(r["broker"], r["records_written"]) for r in runs] == [("broker-a", 6)]
    assert sorted(p.name for p in (run / "replicas" / "broker-a").iterdir()) == ["master", "slave"]

    other = tmp_path / "other"
    import_store(slave.root, other, broker="broker-a", role="slave")
    assert _commitlog(other) == alone[:4]
    import_store(master.root, other, broker="broker-a")
    assert _commitlog(other) == alone and _problems(other) == _problems(run)


def test_records_only_the_slave_has_are_kept(tmp_path):
    """A master that lost its last records (the slave had them) merges with the slave into every
    record once; the slave's are reported as slave-only records."""
    early = _Broker(tmp_path / "early")
    early.put("K0", "K1")
    master = early.copy(tmp_path / "master")
    early.put("K2", "K3")  # the slave ran on: it is the store that kept the tail
    run = tmp_path / "run"
    import_store(master.root, run, broker="broker-a")
    summary = import_store(early.root, run, broker="broker-a", role="slave")
    assert [k for _o, k in _commitlog(run)] == ["K0", "K1", "K2", "K3"]
    assert summary.merged["only_on_slave"] == 2
    assert [p[0] for p in _problems(run)] == ["slave-only-records"]


def test_a_master_and_slave_that_differ_keep_the_masters_records_and_say_where(tmp_path):
    """Where master and slave hold different records at one offset the master's is kept and each
    offset is a replicas-differ error; under strict that is an error and the run stays as it was."""
    master = _Broker(tmp_path / "master")
    master.put("K0", "K1")
    slave = master.copy(tmp_path / "slave")
    master.put("M2", "M3")
    slave.put("S2", "S3")
    run = tmp_path / "run"
    import_store(master.root, run, broker="broker-a")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")}
    with pytest.raises(CorruptStoreError, match="master and slave differ at offset"):
        import_store(slave.root, run, broker="broker-a", role="slave", strict=True)
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")} == before
    summary = import_store(slave.root, run, broker="broker-a", role="slave")
    rows = _commitlog(run)
    assert [k for _o, k in rows] == ["K0", "K1", "M2", "M3"]
    assert summary.merged["offsets_differ"] == 2
    assert _problems(run) == [("replicas-differ", "error", rows[2][0]), ("replicas-differ", "error", rows[3][0])]
    assert DIFFERENCES_LISTED_MAX >= 2


def test_importing_the_master_again_merges_it_with_the_kept_slave(tmp_path):
    """A newer import of the master is merged with the slave imported earlier, and another broker
    of the run keeps its rows through both imports."""
    master = _Broker(tmp_path / "master")
    master.put("K0", "K1")
    slave = master.copy(tmp_path / "slave")
    other = _Broker(tmp_path / "b")
    other.put("B0")
    run = tmp_path / "run"
    import_store(master.root, run, broker="broker-a")
    import_store(other.root, run, broker="broker-b")
    import_store(slave.root, run, broker="broker-a", role="slave")
    master.put("K2", "K3", "K4")
    summary = import_store(master.root, run, broker="broker-a")
    assert summary.merged == {"records": 5, "only_on_master": 3, "only_on_slave": 0, "offsets_differ": 0}
    assert sorted(k for _o, k in _commitlog(run)) == ["B0", "K0", "K1", "K2", "K3", "K4"]
    assert summary.brokers == ["broker-a", "broker-b"]


def test_a_slave_needs_its_masters_broker_name(tmp_path):
    """role slave without a broker name, or an unknown role, is bad input and writes nothing."""
    store = _Broker(tmp_path / "s")
    store.put("K0")
    with pytest.raises(BadInputError, match="side of its master's broker"):
        import_store(store.root, tmp_path / "run", role="slave")
    with pytest.raises(BadInputError, match="unknown role 'follower'"):
        import_store(store.root, tmp_path / "run", broker="broker-a", role="follower")
    assert not (tmp_path / "run").exists()
