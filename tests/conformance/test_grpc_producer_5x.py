"""A gRPC Producer (rocketmq-client-java) through a RocketMQ 5.x proxy on a real 5.3.3 broker: normal,
FIFO (a message group) and delayed (a delivery timestamp) messages to topics of those message
types. The store imported, its lineage built: every message is a chain keyed by the message id
its producer got, a delayed one through the timer wheel to its topic, and every blocking check
passes. Prints each kind's properties (docs/rocketmq-5x.md, "gRPC producer: confirmed").

Needs java, javac and mvn (the broker's, the proxy's and the gRPC client's jars come from the
conformance cache); skips without them.
"""

from __future__ import annotations

import pytest
from grpc_run import failed_blocking_checks, grpc_driver_classpath, import_with_lineage
from java_driver import events_by_key, needs_real_rocketmq, run_driver

from broker_core.constants import PROP_TIMER_DELIVER_MS

pytestmark = [needs_real_rocketmq, pytest.mark.slow]

NORMAL, FIFO, DELAY = "GrpcNormalTopic", "GrpcFifoTopic", "GrpcDelayTopic"
COUNT = 4  # messages per topic
DELAY_MS = 3_000
PROXY_CONFIG = {"grpcClientConsumerMinLongPollingTimeoutMillis": 1000}
DRIVER_TIMEOUT_S = 120


def test_a_grpc_producers_messages_are_read_message_by_message(tmp_path, spark):
    """Each message's chain is keyed by the id the producer got (its UNIQ_KEY): one PUBLISH in its
    topic (a FIFO one with its message group in __SHARDINGKEY), or, delayed, a TIMER record in
    rmq_sys_wheel_timer then the DELIVER to its topic no earlier than its delivery timestamp; no
    group subscribes, so each is UNCONSUMED; every blocking check passes."""
    from conformance.cluster import BrokerSpec, Cluster

    lib, proxy_lib, classpath = grpc_driver_classpath("5.3.3", tmp_path / "classes")
    spec = BrokerSpec("broker-a", "1s 5s 10s", extra={"timerWheelEnable": "true"})
    with Cluster(tmp_path / "cluster", lib, [spec]) as cluster:
        endpoint = cluster.start_proxy(proxy_lib, PROXY_CONFIG)
        store = cluster.procs["broker-a"].store
        events = run_driver(classpath, "GrpcDriver",
                            ["produce", cluster.namesrv_addr, cluster.broker_addrs["broker-a"], endpoint,
                             NORMAL, FIFO, DELAY, COUNT, DELAY_MS],
                            cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S)
        cluster.stop_all()
    sends = {key: s[0] for key, s in events_by_key(events, "send").items()}
    assert len(sends) == 3 * COUNT

    run = tmp_path / "runs" / "grpc-producer"
    imported = import_with_lineage(store, run, spark)
    records = imported.records
    for keys, send in sorted(sends.items()):
        chain = imported.chain(send["uniq_key"])
        kinds = [h["hop_kind"] for h in chain]
        last = records[chain[-1]["phys_offset"]]
        print(keys, kinds, dict(last["properties"]))
        assert last["topic"] == send["topic"] and last["properties"]["UNIQ_KEY"] == send["uniq_key"]
        assert last["properties"]["KEYS"] == keys
        if send["message_type"] == "DELAY":
            assert kinds == ["TIMER", "DELIVER"], kinds
            timer = records[chain[0]["phys_offset"]]
            assert int(timer["properties"][PROP_TIMER_DELIVER_MS]) == send["due_ms"]
            assert last["store_ts"].timestamp() * 1000 >= send["due_ms"]
        else:
            assert kinds == ["PUBLISH"], kinds
        if send["message_type"] == "FIFO":
            assert last["properties"]["__SHARDINGKEY"] == send["message_group"]
        assert {r["final_state"] for r in imported.rows(send["uniq_key"])} <= {"UNCONSUMED"}
    assert failed_blocking_checks(run, tmp_path / "warehouse.duckdb") == {}
