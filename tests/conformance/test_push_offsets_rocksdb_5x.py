"""A push consumer on a real RocketMQ 5.3.3 broker that keeps its metadata in RocksDB: with
``storeType=defaultRocksDB`` the group's committed offsets are only in ``config/consumerOffsets/``
(and topics and groups in ``config/topics/``, ``config/subscriptionGroups/``); with
``configManagerVersion=v2`` all three are in ``config/rdb/``. Neither writes consumerOffset.json,
topics.json or subscriptionGroup.json. The import reads them without touching the store, and
every message the group consumed without a retry is CONSUMED by it.

Needs java, javac and mvn (the jars come from the conformance cache); skips without them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import compile_driver, needs_real_rocketmq, run_driver, run_mqadmin

pytestmark = [needs_real_rocketmq, pytest.mark.long]
pytest.importorskip("rocksdict")

VERSION = "5.3.3"
DRIVER = Path(__file__).resolve().with_name("TimerDriver.java")
TOPIC, GROUP = "TimerTopic", "timer-group"
# kind:value per send (TimerDriver): a 2 s timer, a plain send and a deliver time already past.
PLAN = ("sec:2", "plain:0", "at:-1000")
DRIVER_TIMEOUT_MS = 45_000  # a limit: a broker that never delivers fails the test
# The consumer stays up this long after the last delivery: past the client's 5 s
# persistConsumerOffsetInterval, so every queue's offset reached the broker (a run with the
# driver's default 1 s left the broker with the offset of one queue of three: the client commits
# the rest one-way as it shuts down, and those did not arrive).
LINGER_MS = 6500
DRIVER_TIMEOUT_S = 90
ADMIN_TIMEOUT_S = 60
# (broker configuration, the RocksDB directory the offsets are kept in, under config/). v2 runs
# whatever the storeType (the v2 managers take precedence in BrokerController); the default one
# here. It is the longer run's second minute, so it is marked slow.
LAYOUTS = {
    "v1-rocksdb": ({"storeType": "defaultRocksDB"}, "consumerOffsets"),
    "v2-rdb": ({"configManagerVersion": "v2"}, "rdb"),
}


@pytest.mark.parametrize("layout", [pytest.param(name, marks=[pytest.mark.slow] if name == "v2-rdb" else [])
                                    for name in LAYOUTS])
def test_a_push_groups_rocksdb_offsets_make_its_messages_consumed(tmp_path, spark, layout):
    """Every message the push group's listener got is CONSUMED by the group (no retry, so only
    the offsets name it), consumer_offsets holds the group's offset past each of them (RESTORE),
    the store's topics and groups (read from RocksDB) hold the topic and the group, the import
    reports no problem, and the RocksDB directory is byte for byte as before."""
    from assets.lineage import run_lineage
    from broker_core.export.store_import import import_store
    from broker_core.store.reader import StoreReader, tree_digest
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve
    from conformance.run import _warehouse

    lib = resolve(VERSION)
    classpath = compile_driver(DRIVER, str(lib / "*"), tmp_path / "classes")
    broker_config, offsets_dir_name = LAYOUTS[layout]
    spec = BrokerSpec("broker-a", "1s 5s 10s", extra={"timerWheelEnable": "true", **broker_config})
    with Cluster(tmp_path / "cluster", lib, [spec]) as cluster:
        store = cluster.procs["broker-a"].store
        # The group is made through the admin API, as an operator would (with the broker's own
        # defaults for an unknown group): a v2 broker keeps only such groups in config/rdb/, not
        # the ones it makes itself when a client first uses them.
        run_mqadmin(lib, ["updateSubGroup", "-n", cluster.namesrv_addr, "-b", cluster.broker_addrs["broker-a"],
                          "-g", GROUP, "-m", "true", "-d", "true"], timeout_s=ADMIN_TIMEOUT_S)
        events = run_driver(classpath, "TimerDriver",
                            [cluster.namesrv_addr, cluster.broker_addrs["broker-a"], TOPIC, GROUP, ",".join(PLAN),
                             DRIVER_TIMEOUT_MS, LINGER_MS], cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S)
        cluster.stop_all()
    sent = {e["keys"]: e for e in events if e["event"] == "send"}
    seen = {e["keys"]: e for e in events if e["event"] == "consume"}
    assert sorted(sent) == sorted(seen) == [f"timer-{i}" for i in range(len(PLAN))]

    config = store / "config"
    offsets_dir = config / offsets_dir_name
    assert (offsets_dir / "CURRENT").is_file()
    assert not [f for f in ("consumerOffset.json", "topics.json", "subscriptionGroup.json") if (config / f).exists()]
    # Only one layout's RocksDB directories: v2 keeps everything in config/rdb/.
    assert {p.name for p in config.iterdir() if (p / "CURRENT").is_file()} == (
        {"rdb"} if offsets_dir_name == "rdb" else {"topics", "subscriptionGroups", "consumerOffsets"})
    before = tree_digest(config)
    run = tmp_path / "runs" / "push"
    summary = import_store(store, run, broker="broker-a")
    assert summary.errors == [] and summary.problems == [], summary.problems
    assert tree_digest(config) == before
    reader = StoreReader(store)
    assert TOPIC in reader.topics() and reader.topics()[TOPIC].read_queue_nums == 4
    assert GROUP in reader.subscription_groups(), sorted(reader.subscription_groups())

    rows = pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()
    committed = {(r["topic"], r["queue_id"]): r["offset"] for r in rows if r["group"] == GROUP}
    assert {r["event"] for r in rows} == {"RESTORE"} and all(r["ts"] is not None for r in rows), rows
    for keys, call in seen.items():
        # The broker's offset of the queue is past every record the listener was handed there.
        assert committed.get((TOPIC, call["queue_id"]), -1) > call["queue_offset"], (keys, call, committed)

    run_lineage(run, spark)
    lineage = pq.read_table(run / "lineage" / "message_lineage").to_pylist()
    for keys, send in sent.items():
        rows = [r for r in lineage if r["message_key"] == send["uniq_key"]]
        assert [(r["group"], r["final_state"], r["retries"]) for r in rows] == [(GROUP, "CONSUMED", 0)], (keys, rows)

    verdicts = _warehouse([run], tmp_path / "warehouse.duckdb")
    failed = {name: v for outcomes in verdicts.values() for name, v in outcomes.items()
              if v["blocking"] and not v["passed"]}
    assert failed == {}, failed
    print(sorted(committed.items()))
