"""A gRPC SimpleConsumer (rocketmq-client-java) through a RocketMQ 5.3.3 proxy on a real 5.3.3
broker: messages not acked some times and then acked, and one never acked, which the proxy sends
to the DLQ; the store imported, its lineage built, and every message's hops and final state
compared with what the consumer got.

Needs java, javac and mvn (the broker's, the proxy's and the gRPC client's jars come from the
conformance cache); skips without them.
"""

from __future__ import annotations

import shutil

import pytest
from grpc_run import (
    epoch_ms,
    failed_blocking_checks,
    grpc_driver_classpath,
    import_with_lineage,
    receipt_handle,
    retry_topic_owners,
)
from java_driver import events_by_key, run_driver

from broker_core.constants import PROP_FIRST_POP_TIME, SYSTEM_TOPIC_PREFIX

pytestmark = pytest.mark.skipif(
    not (shutil.which("javac") and shutil.which("mvn") and shutil.which("java")),
    reason="real RocketMQ needs java, javac and mvn (apt-get install openjdk-17-jdk-headless maven)")

VERSION = "5.3.3"
TOPIC, GROUP = "GrpcTopic", "grpc-group"
RETRY_TOPIC = f"%RETRY%{GROUP}_{TOPIC}"  # the v1 name: enableRetryTopicV2 is false by default
DLQ_TOPIC = f"%DLQ%{GROUP}"
# The group's retryMaxTimes (set on the broker): the proxy's maxAttempts is one more.
RETRY_MAX_TIMES = 2
MAX_ATTEMPTS = RETRY_MAX_TIMES + 1
# Deliveries not acked per message (keys grpc-<i>): acked at once, after one and after two
# unacked deliveries (the last allowed attempt), and one never acked, which the proxy dead-letters.
PLAN = (0, 1, 2, 9)
INVISIBLE_MS = 3000  # the receive's invisible duration: an unacked message comes back after it
AWAIT_MS = 2000  # the receive's long polling
# The proxy's minimums (10 s invisible, 5 s polling by default) lowered so a run is short.
PROXY_CONFIG = {"minInvisibleTimeMillsForRecv": 1000, "grpcClientConsumerMinLongPollingTimeoutMillis": 1000}
DRIVER_TIMEOUT_MS = 100_000  # a limit: a broker that never revives, or a proxy that never dead-letters, fails
DRIVER_TIMEOUT_S = 160


def test_a_grpc_consumer_through_the_5_3_3_proxy_is_read_message_by_message(tmp_path, spark):
    """Each message's chain is its PUBLISH then one RETRY of the group per redelivery the consumer
    got (the records it was handed, in order); an acked message is CONSUMED; the never-acked one
    has one more RETRY (popped by the proxy, never handed out) and then the proxy's DLQ record,
    and is DLQ of the group and origin topic; no checkpoint, ack or proxy system record is a hop of
    the group, and every blocking check passes."""
    from broker_core.message import decode_message_id
    from conformance.cluster import BrokerSpec, Cluster

    lib, proxy_lib, classpath = grpc_driver_classpath(VERSION, tmp_path / "classes")
    with Cluster(tmp_path / "cluster", lib, [BrokerSpec("broker-a", "1s 5s 10s")]) as cluster:
        endpoint = cluster.start_proxy(proxy_lib, PROXY_CONFIG)
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

    # No checkpoint or ack is a hop; no hop is a system record; the proxy's own records (its
    # heartbeat broadcast topic) are no hop of the group.
    hop_offsets = {h["phys_offset"] for h in hops}
    assert not hop_offsets & {e["phys_offset"] for e in evidence}
    assert not [h for h in hops if records[h["phys_offset"]]["topic"].startswith(SYSTEM_TOPIC_PREFIX)]
    assert {records[h["phys_offset"]]["topic"] for h in hops if h["group"] == GROUP} == {RETRY_TOPIC, DLQ_TOPIC}
    dead = [r for r in records.values() if r["topic"].startswith("%DLQ%")]

    for i, failures in enumerate(PLAN):
        keys = f"grpc-{i}"
        uniq, seen = sent[keys]["uniq_key"], calls[keys]
        never_acked = failures >= MAX_ATTEMPTS
        # What the consumer got: unacked deliveries, then the acked one; the never-acked message
        # exactly MAX_ATTEMPTS times (the proxy keeps the next one from it).
        expected_calls = MAX_ATTEMPTS if never_acked else failures + 1
        expected_statuses = (["NOT_ACKED"] * MAX_ATTEMPTS if never_acked
                             else ["NOT_ACKED"] * failures + ["ACKED"])
        assert [c["status"] for c in seen] == expected_statuses, (keys, seen)
        assert [c["delivery_attempt"] for c in seen] == list(range(1, expected_calls + 1)), (keys, seen)
        assert {c["uniq_key"] for c in seen} == {uniq} and {c["topic"] for c in seen} == {TOPIC}

        chain = imported.chain(uniq)
        expected_kinds = ([(None, "PUBLISH")] + [(GROUP, "RETRY")] * (expected_calls - 1)
                          + ([(GROUP, "RETRY"), (GROUP, "DLQ")] if never_acked else []))
        assert [(h["group"], h["hop_kind"]) for h in chain] == expected_kinds, (keys, chain)
        # The records of the chain are the records the consumer was handed, in order.
        assert [h["phys_offset"] for h in chain[:expected_calls]] == [int(c["commit_log_offset"]) for c in seen], \
            (keys, chain, seen)
        for hop, call in zip(chain[1:expected_calls], seen[1:], strict=True):
            record = records[hop["phys_offset"]]
            assert (record["topic"], hop["reconsume_times"]) == (RETRY_TOPIC, call["delivery_attempt"] - 1)
            # The revive service's record: bornHost is the broker, 1ST_POP_TIME is set, and none
            # of a push send-back's pointers.
            assert record["born_host"] == record["store_host"] and PROP_FIRST_POP_TIME in record["properties"]
            assert record["retry_topic"] is None and record["origin_msg_id"] is None
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
        rows = imported.rows(uniq)
        # The origin msgId is the published record's (not the retry record the DLQ record names).
        assert [r["origin_msg_id"] for r in rows] == [records[chain[0]["phys_offset"]]["msg_id"]], (keys, rows)
        if not never_acked:
            assert [(r["group"], r["final_state"], r["retries"], r["origin_topic"]) for r in rows] == [
                (GROUP, "CONSUMED", expected_calls - 1, TOPIC)], (keys, rows)
            continue
        # The proxy popped the retry record at reconsume times MAX_ATTEMPTS, never handed it out,
        # sent it back to the DLQ and acked that pop.
        last_retry, dlq_hop = records[chain[-2]["phys_offset"]], records[chain[-1]["phys_offset"]]
        assert (last_retry["topic"], last_retry["reconsume_times"]) == (RETRY_TOPIC, MAX_ATTEMPTS)
        assert last_retry["phys_offset"] not in {int(c["commit_log_offset"]) for c in seen}
        ck = imported.checkpoints_of(RETRY_TOPIC, 0, last_retry["queue_offset"])
        assert len(ck) == 1, ck
        assert imported.acked(ck[0], last_retry["queue_offset"])
        assert ck[0]["pop_ts"] <= dlq_hop["store_ts"]
        assert dead == [dlq_hop]
        assert dlq_hop["topic"] == DLQ_TOPIC and dlq_hop["reconsume_times"] == MAX_ATTEMPTS + 1
        # RETRY_TOPIC names the POP retry topic, ORIGIN_MESSAGE_ID the retry record it came from.
        assert dlq_hop["retry_topic"] == RETRY_TOPIC
        assert decode_message_id(dlq_hop["origin_msg_id"])[1] == last_retry["phys_offset"]
        assert dlq_hop["properties"]["UNIQ_KEY"] == uniq and "DELAY" in dlq_hop["properties"]
        assert [(r["group"], r["final_state"], r["retries"], r["origin_topic"]) for r in rows] == [
            (GROUP, "DLQ", MAX_ATTEMPTS, TOPIC)], (keys, rows)

    assert failed_blocking_checks(run, tmp_path / "warehouse.duckdb") == {}
    for keys in sorted(sent):
        uniq = sent[keys]["uniq_key"]
        print(keys, [(c["delivery_attempt"], c["status"]) for c in calls[keys]],
              [h["hop_kind"] for h in imported.chain(uniq)], [r["final_state"] for r in imported.rows(uniq)])
