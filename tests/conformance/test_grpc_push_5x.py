"""gRPC PushConsumers (rocketmq-client-java) through a RocketMQ 5.x proxy on a real 5.3.3 (and, slow, 5.5.1) broker,
one per group retry policy (customized with its own table, exponential, and customized with the
broker's default table): listeners that fail some messages a few times and one always, which the
proxy sends to the DLQ; the store imported, its lineage built, and every message's hops, final
state and retry delays compared with what the consumer got and with the group's policy.

Needs java, javac and mvn (the broker's, the proxy's and the gRPC client's jars come from the
conformance cache); skips without them.
"""

from __future__ import annotations

from dataclasses import dataclass

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
)
from java_driver import events_by_key, needs_real_rocketmq, run_driver

from broker_core.constants import MESSAGE_DELAY_LEVEL_DEFAULT, PROP_FIRST_POP_TIME, SYSTEM_TOPIC_PREFIX
from broker_core.delay_levels import parse_delay_levels

pytestmark = [needs_real_rocketmq, pytest.mark.long]

# 5.5.1's brokers run with 5.5.0's proxy and clients (conformance/jars.py PARTIAL_RELEASES): slow.
VERSIONS = ("5.3.3", pytest.param("5.5.1", marks=pytest.mark.slow))
# The broker's default CustomizedRetryPolicy table is the delay-level table (1s 5s 10s ... 2h).
CUSTOMIZED_NEXT_DEFAULT_MS = parse_delay_levels(MESSAGE_DELAY_LEVEL_DEFAULT)
# A push consumer's receive asks the proxy to renew the message itself (autoRenew), so the proxy
# pops with its defaultInvisibleTimeMills, not with a duration of the client's.
PROXY_DEFAULT_INVISIBLE_MS = 60_000
# The proxy's minimum long polling lowered and its maximum (20 s, what it tells a push consumer to
# poll with) cut, so that a retry written to the POP retry topic, which does not wake a waiting
# pop, is picked up within 2 s.
PROXY_CONFIG = {"grpcClientConsumerMinLongPollingTimeoutMillis": 1000,
                "grpcClientConsumerMaxLongPollingTimeoutMillis": 2000}
DRIVER_TIMEOUT_MS = 100_000  # a limit: a broker that never revives, or a proxy that never dead-letters, fails
DRIVER_TIMEOUT_S = 160
ALWAYS = 9  # a plan's failure count that is at least every group's maxAttempts: the listener always fails


@dataclass(frozen=True)
class Customized:
    """CUSTOMIZED: the ``next`` delays in ms (None: the broker's default table)."""

    next_ms: tuple[int, ...] | None = None

    def driver_args(self) -> list[str]:
        return ["customized", "default" if self.next_ms is None else ",".join(map(str, self.next_ms))]

    def delay_ms(self, attempt: int) -> int:
        # The client's CustomizedBackoffRetryPolicy: the attempt-th entry, the last one beyond.
        table = self.next_ms or CUSTOMIZED_NEXT_DEFAULT_MS
        return table[min(attempt, len(table)) - 1]


@dataclass(frozen=True)
class Exponential:
    """EXPONENTIAL: ``initial * multiplier^(attempt-1)`` ms, capped at ``max``."""

    initial_ms: int
    max_ms: int
    multiplier: int

    def driver_args(self) -> list[str]:
        return ["exponential", f"{self.initial_ms},{self.max_ms},{self.multiplier}"]

    def delay_ms(self, attempt: int) -> int:
        return min(self.max_ms, self.initial_ms * self.multiplier ** (attempt - 1))


@dataclass(frozen=True)
class PushGroup:
    topic: str
    group: str
    retry_max_times: int  # the group's on the broker: the proxy's maxAttempts is one more
    policy: Customized | Exponential
    plan: tuple[int, ...]  # failures per message (keys <group>-<i>); ALWAYS: until the DLQ

    @property
    def grpc(self) -> GrpcGroup:
        return GrpcGroup(self.topic, self.group, self.retry_max_times + 1)

    def driver_args(self) -> list[str]:
        return [self.topic, self.group, str(self.retry_max_times), *self.policy.driver_args(),
                ",".join(map(str, self.plan))]


# All three consume at once in one run. The customized table is not monotone and differs from
# the broker's own reading of it (RetryPolicy.nextDelayDuration takes entry reconsumeTimes + 2), so
# a checkpoint's invisible time says which entry was used.
GROUPS = (
    PushGroup("PushCustomTopic", "push-custom", 2, Customized((2000, 1000, 3000)), (0, 1, 2, ALWAYS)),
    PushGroup("PushExpTopic", "push-exp", 3, Exponential(1000, 3000, 2), (0, 2, ALWAYS)),
    PushGroup("PushDefaultTopic", "push-default", 2, Customized(), (1, ALWAYS)),
)


@pytest.mark.parametrize("version", VERSIONS)
def test_grpc_push_consumers_through_the_5x_proxy_retry_by_their_groups_policy(version, tmp_path, spark):
    """Each message's chain is its PUBLISH then one RETRY of the group per failed delivery (the
    records the listener was handed, in order), CONSUMED after the success; the always-failing
    one has one more RETRY (popped by the proxy, never handed out) and the proxy's DLQ record, and
    is DLQ of the group and origin topic; every failure changed the record's invisible time to the
    group policy's next delay, and no retry was stored before that delay had passed; every
    blocking check passes."""
    from conformance.cluster import BrokerSpec, Cluster

    lib, proxy_lib, classpath = grpc_driver_classpath(version, tmp_path / "classes")
    with Cluster(tmp_path / "cluster", lib, [BrokerSpec("broker-a", "1s 5s 10s")]) as cluster:
        endpoint = cluster.start_proxy(proxy_lib, PROXY_CONFIG)
        store = cluster.procs["broker-a"].store
        events = run_driver(classpath, "GrpcDriver",
                            ["push", cluster.namesrv_addr, cluster.broker_addrs["broker-a"], endpoint,
                             DRIVER_TIMEOUT_MS, *[a for g in GROUPS for a in g.driver_args()]],
                            cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S)
        cluster.stop_all()
    sent = {key: sends[0] for key, sends in events_by_key(events, "send").items()}
    calls = events_by_key(events, "consume")
    assert sorted(sent) == sorted(calls) == sorted(f"{g.group}-{i}" for g in GROUPS for i in range(len(g.plan)))
    # The proxy gave each client its group's policy and maxAttempts (retryMaxTimes + 1).
    settings = {e["group"]: e["settings"] for e in events if e["event"] == "settings"}
    for g in GROUPS:
        expected_class = "Exponential" if isinstance(g.policy, Exponential) else "Customized"
        assert f"retryPolicy={expected_class}BackoffRetryPolicy" in settings[g.group], settings[g.group]
        assert f"maxAttempts={g.grpc.max_attempts}" in settings[g.group], settings[g.group]

    run = tmp_path / "runs" / "grpc-push"
    imported = import_with_lineage(store, run, spark)
    records, hops = imported.records, imported.hops
    # No checkpoint or ack is a hop; no hop is a system record; each group's hops are in its POP
    # retry topic and its DLQ.
    assert not {h["phys_offset"] for h in hops} & {e["phys_offset"] for e in imported.evidence}
    assert not [h for h in hops if records[h["phys_offset"]]["topic"].startswith(SYSTEM_TOPIC_PREFIX)]
    for g in GROUPS:
        assert {records[h["phys_offset"]]["topic"] for h in hops if h["group"] == g.group} == {
            g.grpc.retry_topic, g.grpc.dlq_topic}

    delays = []  # (keys, attempt, configured delay, retry stored after the checkpoint's pop, after the delivery)
    for g in GROUPS:
        for i, failures in enumerate(g.plan):
            keys = f"{g.group}-{i}"
            uniq, seen = sent[keys]["uniq_key"], calls[keys]
            chain = check_message(imported, g.grpc, uniq, seen, failures, statuses=("FAILURE", "SUCCESS"))
            for attempt, call in enumerate(seen, 1):
                handle = receipt_handle(call)
                cks = imported.checkpoints_of(records[handle.commit_log_offset]["topic"], handle.queue_id,
                                              handle.queue_offset)
                # The receive's checkpoint (the proxy's default invisible time: the client asked
                # for auto renewal) is acked for this record in both cases: by the client's ack,
                # or by the change of invisible time, which acks the checkpoint it replaces.
                assert epoch_ms(cks[0]["pop_ts"]) == handle.pop_ms, (keys, call, cks)
                assert cks[0]["invisible_ms"] == handle.invisible_ms == PROXY_DEFAULT_INVISIBLE_MS
                assert imported.acked(cks[0], handle.queue_offset), (keys, call)
                if call["status"] == "SUCCESS":
                    assert len(cks) == 1, (keys, call, cks)
                    continue
                # A failure: one new checkpoint of this record alone whose invisible time is the
                # policy's next delay for this attempt; never acked, so the revive service writes
                # the next retry from it, no earlier than its revive time.
                assert len(cks) == 2, (keys, call, cks)
                changed = cks[1]
                assert (changed["start_offset"], changed["offsets"]) == (handle.queue_offset, [handle.queue_offset])
                assert changed["invisible_ms"] == g.policy.delay_ms(attempt), (keys, attempt, changed)
                assert not imported.acked(changed, handle.queue_offset)
                retry = records[chain[attempt]["phys_offset"]]
                assert retry["store_ts"] >= changed["revive_ts"], (keys, attempt, retry["store_ts"], changed)
                assert epoch_ms(retry["store_ts"]) - call["seen_ms"] >= changed["invisible_ms"]
                # 1ST_POP_TIME is the pop time of the checkpoint the first revive read (the
                # change's), copied unchanged to the later retries.
                if attempt == 1:
                    first_pop_ms = epoch_ms(changed["pop_ts"])
                assert int(retry["properties"][PROP_FIRST_POP_TIME]) == first_pop_ms, (keys, attempt, retry)
                delays.append((keys, attempt, changed["invisible_ms"],
                               epoch_ms(retry["store_ts"]) - epoch_ms(changed["pop_ts"]),
                               epoch_ms(retry["store_ts"]) - call["seen_ms"]))
            if failures >= g.grpc.max_attempts:
                ck = check_proxy_dead_letter(imported, g.grpc, chain, seen)
                assert ck["invisible_ms"] == PROXY_DEFAULT_INVISIBLE_MS
    # The DLQ records are the always-failing messages' last hops, and nothing else.
    assert {r["phys_offset"] for r in records.values() if r["topic"].startswith("%DLQ%")} == {
        imported.chain(sent[f"{g.group}-{i}"]["uniq_key"])[-1]["phys_offset"]
        for g in GROUPS for i, f in enumerate(g.plan) if f >= g.grpc.max_attempts}

    assert failed_blocking_checks(run, tmp_path / "warehouse.duckdb") == {}
    for keys, attempt, delay_ms, after_change_ms, after_delivery_ms in delays:
        print(f"{keys:<14} attempt {attempt}: delay {delay_ms:5d} ms; retry stored {after_change_ms:5d} ms after "
              f"the change, {after_delivery_ms:5d} ms after the delivery")
    for keys in sorted(sent):
        uniq = sent[keys]["uniq_key"]
        print(keys, [(c["delivery_attempt"], c["status"]) for c in calls[keys]],
              [h["hop_kind"] for h in imported.chain(uniq)], [r["final_state"] for r in imported.rows(uniq)])
