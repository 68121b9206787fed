"""A gRPC SimpleConsumer (rocketmq-client-java) through a RocketMQ 5.x proxy on a real 5.3.3 (and, slow, 5.5.1)
broker: messages not acked some times and then acked, and one never acked, which the proxy sends
to the DLQ; the store imported, its lineage built, and every message's hops and final state
compared with what the consumer got.

Needs java, javac and mvn (the broker's, the proxy's and the gRPC client's jars come from the
conformance cache); skips without them.
"""

from __future__ import annotations

import pytest
from grpc_run import (
    GrpcGroup,
    check_message,
    check_proxy_dead_letter,
    epoch_ms,
    failed_blocking_checks,
    grpc_driver_classpath,
    import_with_lineage,
    receipt_handle,
    retry_topic_owners,
)
from java_driver import events_by_key, needs_real_rocketmq, run_driver

from broker_core.constants import SYSTEM_TOPIC_PREFIX

pytestmark = needs_real_rocketmq

# Both slow (make test-all): test_conformance_grpc_5x.py, in make test, plays a SimpleConsumer group
# through a real 5.3.3 proxy too (unacked deliveries, retries, the proxy's DLQ) and compares its
# store with the clients and the model; this test's own checks (receipt handles, the proxy's DLQ
# record and ack, the retry topics' owners) run with make test-all. 5.5.1's brokers run with 5.5.0's
# proxy and clients (conformance/jars.py PARTIAL_RELEASES).
# The third case runs the proxy with enableBatchAck: it acks through the broker's batch ack, whose
# record (TAGS bAck, the acked offsets in "aol") the import has decoded from the source's names.
VERSIONS = (pytest.param("5.3.3", False, marks=pytest.mark.slow), pytest.param("5.5.1", False, marks=pytest.mark.slow),
            pytest.param("5.3.3", True, marks=pytest.mark.slow, id="5.3.3-batch-ack"))
TOPIC, GROUP = "GrpcTopic", "grpc-group"
# The group's retryMaxTimes (set on the broker): the proxy's maxAttempts is one more.
RETRY_MAX_TIMES = 2
MAX_ATTEMPTS = RETRY_MAX_TIMES + 1
GRPC_GROUP = GrpcGroup(TOPIC, GROUP, MAX_ATTEMPTS)
RETRY_TOPIC, DLQ_TOPIC = GRPC_GROUP.retry_topic, GRPC_GROUP.dlq_topic
# Deliveries not acked per message (keys grpc-<i>): acked at once, after one and after two
# unacked deliveries (the last allowed attempt), and one never acked, which the proxy dead-letters.
PLAN = (0, 1, 2, 9)
INVISIBLE_MS = 3000  # the receive's invisible duration: an unacked message comes back after it
AWAIT_MS = 2000  # the receive's long polling
# The proxy's minimums (10 s invisible, 5 s polling by default) lowered so a run is short.
PROXY_CONFIG = {"minInvisibleTimeMillsForRecv": 1000, "grpcClientConsumerMinLongPollingTimeoutMillis": 1000}
DRIVER_TIMEOUT_MS = 100_000  # a limit: a broker that never revives, or a proxy that never dead-letters, fails
DRIVER_TIMEOUT_S = 160


@pytest.mark.parametrize(("version", "batch_ack"), VERSIONS)
def test_a_grpc_consumer_through_the_5x_proxy_is_read_message_by_message(version, batch_ack, tmp_path, spark):
    """Each message's chain is its PUBLISH then one RETRY of the group per redelivery the consumer
    got (the records it was handed, in order); an acked message is CONSUMED; the never-acked one
    has one more RETRY (popped by the proxy, never handed out) and then the proxy's DLQ record,
    and is DLQ of the group and origin topic; no checkpoint, ack or proxy system record is a hop of
    the group, and every blocking check passes."""
    from conformance.cluster import BrokerSpec, Cluster

    lib, proxy_lib, classpath = grpc_driver_classpath(version, tmp_path / "classes")
    with Cluster(tmp_path / "cluster", lib, [BrokerSpec("broker-a", "1s 5s 10s")]) as cluster:
        endpoint = cluster.start_proxy(proxy_lib, {**PROXY_CONFIG, "enableBatchAck": batch_ack})
        store = cluster.procs["broker-a"].store
        events = run_driver(classpath, "GrpcDriver",
                            [cluster.namesrv_addr, cluster.broker_addrs["broker-a"], endpoint, TOPIC, GROUP,
                             ",".join(map(str, PLAN)), RETRY_MAX_TIMES, INVISIBLE_MS, AWAIT_MS, DRIVER_TIMEOUT_MS],
                            cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S)
        cluster.stop_all()
    sent = {key: sends[0] for key, sends in events_by_key(events, "send").items()}
    calls = events_by_key(events, "consume")
    assert sorted(sent) == sorted(calls) == [f"grpc-{i}" for i in range(len(PLAN))]

    run = tmp_path / "runs" / "grpc"
    imported = import_with_lineage(store, run, spark)
    assert (RETRY_TOPIC, GROUP, TOPIC, "checkpoint") in retry_topic_owners(run)
    records, hops, evidence = imported.records, imported.hops, imported.evidence
    assert evidence and {e["group"] for e in evidence} == {GROUP}
    # The client's acks are of the form the proxy was set to send: single acks, or batch acks.
    assert {e["kind"] for e in evidence} == ({"ck", "ack", "bAck"} if batch_ack else {"ck", "ack"})

    # No checkpoint or ack is a hop; no hop is a system record; the proxy's own records (its
    # heartbeat broadcast topic) are no hop of the group.
    hop_offsets = {h["phys_offset"] for h in hops}
    assert not hop_offsets & {e["phys_offset"] for e in evidence}
    assert not [h for h in hops if records[h["phys_offset"]]["topic"].startswith(SYSTEM_TOPIC_PREFIX)]
    assert {records[h["phys_offset"]]["topic"] for h in hops if h["group"] == GROUP} == {RETRY_TOPIC, DLQ_TOPIC}

    dead_lettered = []
    for i, failures in enumerate(PLAN):
        keys = f"grpc-{i}"
        uniq, seen = sent[keys]["uniq_key"], calls[keys]
        chain = check_message(imported, GRPC_GROUP, uniq, seen, failures, statuses=("NOT_ACKED", "ACKED"))
        # Every delivery was popped under a checkpoint of its queue and offset with the
        # receive's invisible duration; the pop time the consumer got is the checkpoint's.
        for call in seen:
            handle = receipt_handle(call)
            popped_topic = records[handle.commit_log_offset]["topic"]
            ck = [c for c in imported.checkpoints_of(popped_topic, handle.queue_id, handle.queue_offset)
                  if c["start_offset"] == handle.start_offset and epoch_ms(c["pop_ts"]) == handle.pop_ms]
            assert len(ck) == 1 and ck[0]["invisible_ms"] == handle.invisible_ms == INVISIBLE_MS, (keys, call, ck)
            # An unacked delivery has no ack (the message came back by revive); an acked one has.
            assert imported.acked(ck[0], handle.queue_offset) == (call["status"] == "ACKED"), (keys, call)
        if failures >= MAX_ATTEMPTS:
            check_proxy_dead_letter(imported, GRPC_GROUP, chain, seen)
            assert records[chain[-1]["phys_offset"]]["properties"]["UNIQ_KEY"] == uniq
            dead_lettered.append(chain[-1]["phys_offset"])
    assert [r["phys_offset"] for r in records.values() if r["topic"].startswith("%DLQ%")] == dead_lettered
    if batch_ack:
        # Under enableBatchAck the proxy's own ack of a pop it dead-lettered stays a single ack
        # (ProducerProcessor.forwardMessageToDeadLetterQueue acks by itself): the single acks are
        # of those pops, the retry records before the DLQ ones, and of nothing else.
        singles = {(e["topic"], o) for e in evidence if e["kind"] == "ack" for o in e["offsets"]}
        last_retries = [records[h["phys_offset"]] for h in hops if h["hop_kind"] == "RETRY"]
        assert singles == {(r["topic"], r["queue_offset"]) for r in last_retries
                           if r["reconsume_times"] == MAX_ATTEMPTS}, singles

    assert failed_blocking_checks(run, tmp_path / "warehouse.duckdb") == {}
    for keys in sorted(sent):
        uniq = sent[keys]["uniq_key"]
        print(keys, [(c["delivery_attempt"], c["status"]) for c in calls[keys]],
              [h["hop_kind"] for h in imported.chain(uniq)], [r["final_state"] for r in imported.rows(uniq)])
