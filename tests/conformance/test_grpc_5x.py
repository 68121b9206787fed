"""A gRPC SimpleConsumer (rocketmq-client-java) through a RocketMQ 5.3.3 proxy on a real 5.3.3
broker: messages not acked some times and then acked, and one never acked, which the proxy sends
to the DLQ; the store imported, its lineage built, and every message's hops and final state
compared with what the consumer got.

Needs java, javac and mvn (the broker's, the proxy's and the gRPC client's jars come from the
conformance cache); skips without them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import compile_driver, events_by_key, run_driver

from broker_core.constants import PROP_FIRST_POP_TIME, SYSTEM_TOPIC_PREFIX

pytestmark = pytest.mark.skipif(
    not (shutil.which("javac") and shutil.which("mvn") and shutil.which("java")),
    reason="real RocketMQ needs java, javac and mvn (apt-get install openjdk-17-jdk-headless maven)")

VERSION = "5.3.3"
DRIVER = Path(__file__).resolve().parents[2] / "conformance" / "driver" / "GrpcDriver.java"
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


def _handle(call: dict) -> tuple[int, int, int, int]:
    """The checkpoint's start offset, pop time (ms), invisible time (ms) and the queue offset,
    from a receipt handle (the broker's POP_CK plus the proxy's commit log offset)."""
    parts = call["receipt_handle"].split()
    return int(parts[0]), int(parts[1]), int(parts[2]), int(parts[7])


def test_a_grpc_consumer_through_the_5_3_3_proxy_is_read_message_by_message(tmp_path, spark):
    """Each message's chain is its PUBLISH then one RETRY of the group per redelivery the consumer
    got (the records it was handed, in order); an acked message is CONSUMED; the never-acked one
    has one more RETRY (popped by the proxy, never handed out) and then the proxy's DLQ record,
    and is DLQ of the group and origin topic; no checkpoint, ack or proxy system record is a hop of
    the group, and every blocking check passes."""
    from assets.lineage import run_lineage
    from broker_core.export.store_import import import_store
    from broker_core.message import decode_message_id
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve, resolve_grpc_client, resolve_proxy
    from conformance.run import _warehouse

    lib, proxy_lib, client_lib = resolve(VERSION), resolve_proxy(VERSION), resolve_grpc_client()
    # The gRPC client first: the broker's jars carry an unshaded rocketmq-proto it must not see.
    classpath = f"{client_lib / '*'}:{lib / '*'}"
    classpath = compile_driver(DRIVER, classpath, tmp_path / "classes")
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
    summary = import_store(store, run, broker="broker-a")
    assert summary.errors == [] and not [p for p in summary.problems if p.kind == "pop-body-undecodable"], \
        summary.problems
    owners = pq.read_table(run / "parquet" / "retry_topics").to_pylist()
    assert (RETRY_TOPIC, GROUP, TOPIC, "checkpoint") in {
        (o["retry_topic"], o["group"], o["origin_topic"], o["resolution"]) for o in owners}, owners
    evidence = pq.read_table(run / "parquet" / "pop_evidence").to_pylist()
    assert evidence and {e["group"] for e in evidence} == {GROUP}

    run_lineage(run, spark)
    records = {r["phys_offset"]: {**r, "properties": dict(r["properties"])}
               for r in pq.read_table(run / "parquet" / "commitlog").to_pylist()}
    hops = pq.read_table(run / "lineage" / "message_hops").to_pylist()
    lineage = pq.read_table(run / "lineage" / "message_lineage").to_pylist()

    # No checkpoint or ack is a hop; no hop is a system record; the proxy's own records (its
    # heartbeat broadcast topic) are no hop of the group.
    hop_offsets = {h["phys_offset"] for h in hops}
    assert not hop_offsets & {e["phys_offset"] for e in evidence}
    assert not [h for h in hops if records[h["phys_offset"]]["topic"].startswith(SYSTEM_TOPIC_PREFIX)]
    assert {records[h["phys_offset"]]["topic"] for h in hops if h["group"] == GROUP} == {RETRY_TOPIC, DLQ_TOPIC}
    # Each stage (the timer, then the revive topic) holds a copy of every checkpoint that reached it.
    checkpoints = list({(e["topic"], e["queue_id"], e["start_offset"], e["pop_ts"]): e
                        for e in evidence if e["kind"] == "ck"}.values())
    acks = {(e["topic"], e["queue_id"], e["start_offset"], round(e["pop_ts"].timestamp() * 1000), o)
            for e in evidence if e["kind"] == "ack" for o in e["offsets"]}
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

        chain = sorted((h for h in hops if h["message_key"] == uniq), key=lambda h: h["hop_index"])
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
            start, pop_ms, invisible_ms, queue_offset = _handle(call)
            popped_topic = records[int(call["commit_log_offset"])]["topic"]
            ck = [c for c in checkpoints
                  if (c["topic"], c["queue_id"], c["start_offset"]) == (popped_topic, call["queue_id"], start)
                  and round(c["pop_ts"].timestamp() * 1000) == pop_ms and queue_offset in c["offsets"]]
            assert len(ck) == 1 and ck[0]["invisible_ms"] == invisible_ms == INVISIBLE_MS, (keys, call, ck)
            acked = (popped_topic, call["queue_id"], start, pop_ms, queue_offset) in acks
            # An unacked delivery has no ack (the message came back by revive); an acked one has.
            assert acked == (call["status"] == "ACKED"), (keys, call)
        rows = [r for r in lineage if r["message_key"] == uniq]
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
        ck = [c for c in checkpoints if c["topic"] == RETRY_TOPIC and last_retry["queue_offset"] in c["offsets"]]
        assert len(ck) == 1, ck
        ck_pop_ms = round(ck[0]["pop_ts"].timestamp() * 1000)
        assert (RETRY_TOPIC, 0, ck[0]["start_offset"], ck_pop_ms, last_retry["queue_offset"]) in acks
        assert ck[0]["pop_ts"] <= dlq_hop["store_ts"]
        assert dead == [dlq_hop]
        assert dlq_hop["topic"] == DLQ_TOPIC and dlq_hop["reconsume_times"] == MAX_ATTEMPTS + 1
        # RETRY_TOPIC names the POP retry topic, ORIGIN_MESSAGE_ID the retry record it came from.
        assert dlq_hop["retry_topic"] == RETRY_TOPIC
        assert decode_message_id(dlq_hop["origin_msg_id"])[1] == last_retry["phys_offset"]
        assert dlq_hop["properties"]["UNIQ_KEY"] == uniq and "DELAY" in dlq_hop["properties"]
        assert [(r["group"], r["final_state"], r["retries"], r["origin_topic"]) for r in rows] == [
            (GROUP, "DLQ", MAX_ATTEMPTS, TOPIC)], (keys, rows)

    verdicts = _warehouse([run], tmp_path / "warehouse.duckdb")
    failed = {name: v for outcomes in verdicts.values() for name, v in outcomes.items()
              if v["blocking"] and not v["passed"]}
    assert failed == {}, failed
    for keys in sorted(sent):
        chain = sorted((h for h in hops if h["message_key"] == sent[keys]["uniq_key"]), key=lambda h: h["hop_index"])
        print(keys, [(c["delivery_attempt"], c["status"]) for c in calls[keys]], [h["hop_kind"] for h in chain],
              [r["final_state"] for r in lineage if r["message_key"] == sent[keys]["uniq_key"]])
