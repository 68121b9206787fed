"""A gRPC FIFO PushConsumer (rocketmq-client-java) through a RocketMQ 5.x proxy on a real 5.3.3 broker:
a group that consumes in order (consumeMessageOrderly), whose listener fails some messages a few
times and one always. A FIFO client retries a failed message itself, from the same record, and at
maxAttempts forwards it to the DLQ through the proxy (a send-back with delay level -1); the broker
pops in order, with no checkpoint, and writes no retry record. The store imported, its lineage
built, and every message's hops and final state compared with what the consumer got.

(The remoting client's POP orderly service never calls its listener on 5.3.3 or 5.5.0:
ConsumeMessagePopOrderlyService.ConsumeRequest.run takes the queue's lock and returns; so the
proxy's FIFO consumers are how a POP group consumes in order; docs/rocketmq-5x.md.)

Needs java, javac and mvn (the broker's, the proxy's and the gRPC client's jars come from the
conformance cache); skips without them.
"""

from __future__ import annotations

import pytest
from grpc_run import GrpcGroup, failed_blocking_checks, grpc_driver_classpath, import_with_lineage
from java_driver import events_by_key, needs_real_rocketmq, run_driver

from broker_core.message import decode_message_id

pytestmark = [needs_real_rocketmq, pytest.mark.slow]

TOPIC, GROUP = "FifoTopic", "fifo-group"
RETRY_MAX_TIMES = 2  # the group's on the broker: the proxy tells the client maxAttempts 3
MAX_ATTEMPTS = RETRY_MAX_TIMES + 1
ALWAYS = 9  # fails every delivery: forwarded to the DLQ
PLAN = (0, 1, 2, ALWAYS, 0)
POLICY = ["fifo-exponential", "1000,1000,1"]  # 1 s between a FIFO client's own attempts
PROXY_CONFIG = {"grpcClientConsumerMinLongPollingTimeoutMillis": 1000,
                "grpcClientConsumerMaxLongPollingTimeoutMillis": 2000}
DRIVER_TIMEOUT_MS = 100_000
DRIVER_TIMEOUT_S = 160


def test_a_grpc_fifo_consumer_retries_itself_and_forwards_to_the_dlq(tmp_path, spark):
    """Every delivery of a message is of its one PUBLISH record, in order, attempt after attempt;
    a message that always failed has the DLQ record the proxy's forward wrote right after its
    PUBLISH (ORIGIN_MESSAGE_ID that record) and is DLQ; the others are CONSUMED; the group has no
    retry record; every blocking check passes."""
    from conformance.cluster import BrokerSpec, Cluster

    lib, proxy_lib, classpath = grpc_driver_classpath("5.3.3", tmp_path / "classes")
    with Cluster(tmp_path / "cluster", lib, [BrokerSpec("broker-a", "1s 5s 10s")]) as cluster:
        endpoint = cluster.start_proxy(proxy_lib, PROXY_CONFIG)
        store = cluster.procs["broker-a"].store
        events = run_driver(classpath, "GrpcDriver",
                            ["push", cluster.namesrv_addr, cluster.broker_addrs["broker-a"], endpoint,
                             DRIVER_TIMEOUT_MS, TOPIC, GROUP, str(RETRY_MAX_TIMES), *POLICY,
                             ",".join(map(str, PLAN))],
                            cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S)
        cluster.stop_all()
    sent = {key: sends[0] for key, sends in events_by_key(events, "send").items()}
    calls = events_by_key(events, "consume")
    keys = [f"{GROUP}-{i}" for i in range(len(PLAN))]
    assert sorted(sent) == sorted(calls) == keys
    settings = next(e["settings"] for e in events if e["event"] == "settings")
    assert "fifo=true" in settings and f"maxAttempts={MAX_ATTEMPTS}" in settings, settings

    run = tmp_path / "runs" / "grpc-fifo"
    imported = import_with_lineage(store, run, spark)
    records = imported.records
    g = GrpcGroup(TOPIC, GROUP, MAX_ATTEMPTS)
    for i, failures in enumerate(PLAN):
        k = keys[i]
        uniq, seen = sent[k]["uniq_key"], calls[k]
        print(k, [(c["delivery_attempt"], c["status"], c["commit_log_offset"]) for c in seen],
              [(h["hop_kind"], records[h["phys_offset"]]["topic"], records[h["phys_offset"]]["reconsume_times"])
               for h in imported.chain(uniq)],
              [r["final_state"] for r in imported.rows(uniq)])
        # The client's own attempts, each of the one record the producer stored.
        published = imported.chain(uniq)[0]
        assert published["hop_kind"] == "PUBLISH"
        assert [c["delivery_attempt"] for c in seen] == list(range(1, min(failures, MAX_ATTEMPTS - 1) + 2))
        assert {int(c["commit_log_offset"]) for c in seen} == {published["phys_offset"]}
        chain = imported.chain(uniq)
        (row,) = imported.rows(uniq)
        if failures >= MAX_ATTEMPTS:
            assert [h["hop_kind"] for h in chain] == ["PUBLISH", "DLQ"]
            dead = records[chain[-1]["phys_offset"]]
            assert dead["topic"] == g.dlq_topic and dead["retry_topic"] == TOPIC
            assert decode_message_id(dead["origin_msg_id"])[1] == published["phys_offset"]
            assert row["final_state"] == "DLQ"
        else:
            assert [h["hop_kind"] for h in chain] == ["PUBLISH"]
            assert row["final_state"] == "CONSUMED"
    # The broker wrote no retry record, and (an orderly pop) no checkpoint of the group.
    assert not [r for r in records.values() if r["topic"].startswith("%RETRY%")]
    print("evidence", sorted({(e["kind"], e["topic"]) for e in imported.evidence}))
    assert failed_blocking_checks(run, tmp_path / "warehouse.duckdb") == {}
