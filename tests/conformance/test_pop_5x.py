"""A 5.x remoting POP consumer on a real RocketMQ 5.3.3 broker: messages failed some times and
then acked, one failed until the client gave up, and one still invisible when the broker stops; the
store imported, its lineage built, and every message's hops and final state compared with what its
listener saw and what the store holds. Broker setups differ in what POP bookkeeping they store (a
checkpoint per pop, only the unacked ones, or none); a second test stops the broker with a message
popped and not acked.

Needs java, javac and mvn (the jars come from the conformance cache); skips without them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import compile_driver, events_by_key, needs_real_rocketmq, run_driver

from broker_core.constants import (
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PROP_FIRST_POP_TIME,
    SYSTEM_TOPIC_PREFIX,
)

pytestmark = [needs_real_rocketmq, pytest.mark.long]

VERSION = "5.3.3"
DRIVER = Path(__file__).resolve().with_name("PopDriver.java")
TOPIC, GROUP = "PopTopic", "pop-group"
# A group of 120 characters (the longest a group may be, ROCKETMQ_5X.md): its v1 retry topic
# %RETRY%<group>_PopTopic is 136 bytes, over 127, so the broker writes its records with the v2 magic.
LONG_GROUP = ("pop-group-" + "x" * 120)[:120]
# Which POP bookkeeping the broker writes to the commit log (docs/rocketmq-5x.md):
# EVERY: a checkpoint per pop and per change of invisible time, an ack record per ack;
# UNACKED: enablePopBufferMerge=true, the merge service keeps checkpoints in memory and stores only
#   those still unacked popCkStayBufferTimeOut (3 s) before their revive time; a change of
#   invisible time (POP_DELAY_SEC, under 4.5 s) is stored at once, an ack within the buffer is not;
# NONE: the POP KV service, no checkpoint or ack record at all; its in-flight pops are rows of
#   kvStore/ (broker_core.store.pop_kv), which the import reads as unacked checkpoints (stage kv).
EVERY, UNACKED, NONE = "every", "unacked", "none"
# (broker configuration, group, retry topic, bookkeeping): the broker's defaults (the v1 retry name
# %RETRY%<group>_<topic>, file consume queues); the v2 retry name %RETRY%<group>+<topic> with
# RocksDB consume queues and metadata; the defaults with a retry topic over 127 bytes; the v1
# retry name with configManagerVersion=v2 (topics, groups and offsets in config/rdb/); the buffer
# merge service; the KV service (Init builds it, Enable routes pops and acks to it).
LAYOUTS = {
    "v1-files": ({}, GROUP, f"%RETRY%{GROUP}_{TOPIC}", EVERY),
    "v2-rocksdb": ({"enableRetryTopicV2": "true", "storeType": "defaultRocksDB"}, GROUP,
                   f"%RETRY%{GROUP}+{TOPIC}", EVERY),
    "v1-long-group": ({}, LONG_GROUP, f"%RETRY%{LONG_GROUP}_{TOPIC}", EVERY),
    "v1-config-v2": ({"configManagerVersion": "v2"}, GROUP, f"%RETRY%{GROUP}_{TOPIC}", EVERY),
    "buffer-merge": ({"enablePopBufferMerge": "true"}, GROUP, f"%RETRY%{GROUP}_{TOPIC}", UNACKED),
    "kv-service": ({"popConsumerKVServiceInit": "true", "popConsumerKVServiceEnable": "true"}, GROUP,
                   f"%RETRY%{GROUP}_{TOPIC}", NONE),
}
# Marked slow: each is another 1.7 minutes of a setup the others mostly cover.
SLOW_LAYOUTS = {"v1-long-group", "v1-config-v2", "buffer-merge", "kv-service"}
# Failures per message (keys pop-<i>): acked at once, after one and two failures, one that always
# fails, which the client gives up at MAX_RECONSUME_TIMES and acks, and (-1) one sent last that
# always fails and is still in flight when the run stops.
PLAN = (0, 1, 2, 9, -1)
# The client's retry delay for the message left in flight (set before it is sent): its failure
# makes it invisible for this long, far past the few seconds the run goes on after it.
IN_FLIGHT_DELAY_SEC = 120
MAX_RECONSUME_TIMES = 2
# The client's retry delay (its popDelayLevel table, shortened by the driver) and the pop's
# invisible time (the client's minimum is 5000 ms).
POP_DELAY_SEC = 2
INVISIBLE_MS = 5000
DRIVER_TIMEOUT_MS = 90_000  # a limit: a broker that never revives fails the test
DRIVER_TIMEOUT_S = 150


def run_on_a_broker(tmp_path, layout: str, driver: Path, args) -> tuple[Path, list[dict]]:
    """Run ``driver`` (its class named as its file) against one 5.3.3 broker of ``layout``, with the
    name server, the broker's address, TOPIC and the layout's group before ``args``; stop the
    broker; return its store and the driver's events."""
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve

    broker_config, group = LAYOUTS[layout][:2]
    lib = resolve(VERSION)
    classpath = compile_driver(driver, str(lib / "*"), tmp_path / "classes")
    with Cluster(tmp_path / "cluster", lib, [BrokerSpec("broker-a", "1s 5s 10s", extra=broker_config)]) as cluster:
        store = cluster.procs["broker-a"].store
        events = run_driver(classpath, driver.stem,
                            [cluster.namesrv_addr, cluster.broker_addrs["broker-a"], TOPIC, group, *args],
                            cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S)
        cluster.stop_all()
    return store, events


@pytest.mark.parametrize("layout", [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW_LAYOUTS else [])
                                    for name in sorted(LAYOUTS)])
def test_a_pop_consumer_on_a_real_5_3_3_broker_is_read_message_by_message(tmp_path, spark, layout):
    """Each POP message's chain is its PUBLISH then one RETRY of the group per retry the listener
    got (the records it was handed, in order), every message acked by the client is CONSUMED (the
    one it gave up on too), the one in flight at the end is IN_FLIGHT until its last checkpoint's
    revive time when the store's snapshot is before that time (RETRYING when it is not, or when
    its retry record is waiting unpopped), no checkpoint or ack is a hop, and every blocking check
    passes, whichever checkpoints the broker's POP service stores."""
    from assets.lineage import run_lineage
    from broker_core.export.store_import import import_store
    from broker_core.store.reader import StoreReader
    from conformance.run import _warehouse

    broker_config, group, retry_topic, bookkeeping = LAYOUTS[layout]
    store, events = run_on_a_broker(tmp_path, layout, DRIVER, [",".join(map(str, PLAN)), MAX_RECONSUME_TIMES,
                                                               POP_DELAY_SEC, INVISIBLE_MS, DRIVER_TIMEOUT_MS,
                                                               IN_FLIGHT_DELAY_SEC])
    sent = {key: sends[0] for key, sends in events_by_key(events, "send").items()}
    calls = events_by_key(events, "consume")
    assert sorted(sent) == sorted(calls) == [f"pop-{i}" for i in range(len(PLAN))]

    run = tmp_path / "runs" / "pop"
    summary = import_store(store, run, broker="broker-a")
    rocksdb = broker_config.get("storeType") == "defaultRocksDB"
    config = store / "config"
    if rocksdb:
        # RocksDB consume queues and metadata: consumequeue/ is one RocksDB directory (no
        # <topic>/<queueId>/), config/ has RocksDB topics, groups and offsets and none of their
        # JSON files. The import names them, reads the commit log and the RocksDB offsets
        # (config/consumerOffsets/, with rocksdict), topics and groups and reports no problem.
        assert (store / "consumequeue" / "CURRENT").is_file()
        assert not [p for p in (store / "consumequeue").iterdir() if p.is_dir()]
        assert {"consumequeue", "config/topics", "config/subscriptionGroups", "config/consumerOffsets"} <= set(
            summary.store_items_5x), summary.store_items_5x
        assert not [f for f in ("topics.json", "subscriptionGroup.json", "consumerOffset.json")
                    if (config / f).exists()]
        assert summary.problems == [] and summary.records > 0, summary.problems
        # The broker's topics and groups, read from config/topics/ and config/subscriptionGroups/.
        reader = StoreReader(store)
        assert {TOPIC, retry_topic} <= set(reader.topics()) and group in reader.subscription_groups()
    elif broker_config.get("configManagerVersion") == "v2":
        # configManagerVersion=v2: topics, groups and offsets only in config/rdb/. The revive
        # service writes its retry topic there; a group the broker made itself is not (the group's
        # offsets still name it), and the import reports no problem.
        assert (config / "rdb" / "CURRENT").is_file()
        assert not [f for f in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "topics",
                                "subscriptionGroups", "consumerOffsets") if (config / f).exists()]
        assert summary.problems == [], summary.problems
        reader = StoreReader(store)
        assert {TOPIC, retry_topic} <= set(reader.topics()), sorted(reader.topics())
        offsets = pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()
        assert {(o["topic"], o["event"]) for o in offsets if o["group"] == group} >= {
            (TOPIC, "RESTORE"), (retry_topic, "RESTORE")}, offsets
    else:
        assert "consumequeue" not in summary.store_items_5x and (config / "consumerOffset.json").is_file()
    offsets = pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()
    # The POP group's offsets (the broker commits them as it pops; read from the JSON file or
    # RocksDB) are past every message popped from the topic (in the runs: PopTopic 0:2 or 0:3 and
    # 1:2 or 1:3, the retry topic 0:5). A message's first delivery is popped from the topic itself
    # (its retries from the retry topic). Where no checkpoint covers a popped record (buffer merge,
    # KV service), these offsets are what names the group its consumer.
    popped = {(TOPIC, seen[0]["queue_id"], seen[0]["queue_offset"]) for seen in calls.values()}
    committed = {(o["topic"], o["queue_id"]): o["offset"] for o in offsets
                 if o["group"] == group and o["event"] == "RESTORE"}
    assert popped and all(committed.get((t, q), -1) > qo for t, q, qo in popped), (popped, committed)
    assert summary.errors == [] and not [p for p in summary.problems if p.kind == "pop-body-undecodable"], \
        summary.problems
    evidence = pq.read_table(run / "parquet" / "pop_evidence").to_pylist()
    assert {e["group"] for e in evidence} <= {group}
    if bookkeeping == NONE:
        # The KV service: no checkpoint or ack record (no timer or revive record at all); its
        # RocksDB is kvStore/ under the store, and its rows (pops in flight when the broker
        # stopped, if any) are the only evidence, each an unacked checkpoint.
        assert "kvStore" in summary.store_items_5x and summary.problems == [], summary.problems
        assert {e["stage"] for e in evidence} <= {"kv"}, evidence
    else:
        assert evidence and {e["stage"] for e in evidence} == {"timer", "revive"}, evidence
    # A checkpoint of the topic names its retry topic's owner; without one the store's config does.
    named_by = "checkpoint" if [e for e in evidence if e["topic"] == TOPIC] else "config"
    owners = pq.read_table(run / "parquet" / "retry_topics").to_pylist()
    assert {(o["retry_topic"], o["group"], o["origin_topic"], o["resolution"]) for o in owners} >= {
        (retry_topic, group, TOPIC, named_by)}, owners
    # Importing the store again goes on from the last import's end (nothing new): the POP tables are
    # rebuilt from the commitlog it carries over, row for row.
    again = import_store(store, run, broker="broker-a")
    assert again.resumed_from is not None and again.records_added == 0, again
    assert pq.read_table(run / "parquet" / "pop_evidence").to_pylist() == evidence
    assert pq.read_table(run / "parquet" / "retry_topics").to_pylist() == owners
    # A retry topic over 127 bytes: the other decoder reads the store into the same tables.
    long_name = len(retry_topic.encode()) > 127
    if long_name:
        other = tmp_path / "runs-reference" / "pop"
        import_store(store, other, broker="broker-a", decoder="reference")
        for table in ("commitlog", "pop_evidence", "retry_topics"):
            assert pq.read_table(other / "parquet" / table).to_pylist() == \
                pq.read_table(run / "parquet" / table).to_pylist(), table

    run_lineage(run, spark)
    records = {r["phys_offset"]: {**r, "properties": dict(r["properties"])}
               for r in pq.read_table(run / "parquet" / "commitlog").to_pylist()}
    hops = pq.read_table(run / "lineage" / "message_hops").to_pylist()
    lineage = pq.read_table(run / "lineage" / "message_lineage").to_pylist()

    # The store's snapshot: the store time of its last record, which the import gives as runs.sim_end_ts.
    snapshot = records[max(records)]["store_ts"]
    assert [r["sim_end_ts"] for r in pq.read_table(run / "parquet" / "runs").to_pylist()] == [snapshot]
    states_seen: dict[str, str] = {}

    # No checkpoint or ack (in the timer or the revive topic) is a hop; no hop is a system record.
    hop_offsets = {h["phys_offset"] for h in hops}
    assert not hop_offsets & {e["phys_offset"] for e in evidence}
    assert not [h for h in hops if records[h["phys_offset"]]["topic"].startswith(SYSTEM_TOPIC_PREFIX)]
    if bookkeeping == NONE:
        assert not [r for r in records.values() if r["topic"].startswith(SYSTEM_TOPIC_PREFIX)]
    # Each stage holds a copy of every checkpoint and ack that reached it: the timer one first.
    checkpoints = {(e["topic"], e["queue_id"], e["start_offset"], e["pop_ts"]): e
                   for e in evidence if e["kind"] == "ck"}
    acks = {(e["topic"], e["queue_id"], e["start_offset"], e["pop_ts"], o)
            for e in evidence if e["kind"] == "ack" for o in e["offsets"]}

    for i, failures in enumerate(PLAN):
        keys = f"pop-{i}"
        uniq, seen = sent[keys]["uniq_key"], calls[keys]
        # What the listener saw: failures until it succeeded, until the client gave up, or (in
        # flight) until the run stopped.
        statuses = [c["status"] for c in seen]
        # The one left in flight may have come back fast enough to reach MAX_RECONSUME_TIMES before
        # the run stopped: then the client gave up on it like any other.
        in_flight = failures < 0 and seen[-1]["reconsume_times"] < MAX_RECONSUME_TIMES
        gave_up = failures > MAX_RECONSUME_TIMES or (failures < 0 and not in_flight)
        expected_calls = (len(seen) if in_flight else MAX_RECONSUME_TIMES + 1 if gave_up else failures + 1)
        expected_statuses = (["RECONSUME_LATER"] * expected_calls if in_flight or gave_up
                             else ["RECONSUME_LATER"] * failures + ["CONSUME_SUCCESS"])
        assert statuses == expected_statuses, (keys, statuses)
        assert [c["reconsume_times"] for c in seen] == list(range(expected_calls)), (keys, seen)

        chain = sorted((h for h in hops if h["message_key"] == uniq), key=lambda h: h["hop_index"])
        # In flight, the revive service may have written the next retry before the broker stopped.
        retries = len(chain) - 1 if in_flight and len(chain) == expected_calls + 1 else expected_calls - 1
        assert [(h["group"], h["hop_kind"]) for h in chain] == \
            [(None, "PUBLISH")] + [(group, "RETRY")] * retries, (keys, chain)
        # The records of the chain are the records the listener was handed, in order.
        assert [h["phys_offset"] for h in chain[:expected_calls]] == [c["commit_log_offset"] for c in seen], \
            (keys, chain, seen)
        for hop, call in zip(chain[1:expected_calls], seen[1:], strict=True):
            record = records[hop["phys_offset"]]
            assert (record["topic"], hop["reconsume_times"]) == (retry_topic, call["reconsume_times"])
            # The revive service's record: bornHost is the broker, 1ST_POP_TIME is set, and none
            # of a push send-back's pointers.
            assert record["born_host"] == record["store_host"] and PROP_FIRST_POP_TIME in record["properties"]
            assert record["retry_topic"] is None and record["origin_msg_id"] is None

        # Every delivery was popped under a checkpoint of its queue and offset; the pop time and
        # invisible time the client got (POP_CK) are the checkpoint's. (With the buffer merge, a
        # checkpoint acked within the buffer is never stored; with the KV service none is.)
        for call in seen if bookkeeping == EVERY else ():
            start, pop_ms, invisible_ms = (int(x) for x in call["pop_ck"].split()[:3])
            popped_topic = records[call["commit_log_offset"]]["topic"]
            ck = [c for (topic, q, so, pt), c in checkpoints.items()
                  if (topic, q, so) == (popped_topic, call["queue_id"], start)
                  and round(pt.timestamp() * 1000) == pop_ms and call["queue_offset"] in c["offsets"]]
            assert len(ck) == 1 and ck[0]["invisible_ms"] == invisible_ms == INVISIBLE_MS, (keys, call, ck)
        # A failed delivery that was retried: the client set a new invisible time (a checkpoint of
        # its retry delay, stored at once by the buffer merge too), and the retry record came after
        # that checkpoint's revive time.
        delay_sec = IN_FLIGHT_DELAY_SEC if failures < 0 else POP_DELAY_SEC
        for call, nxt in zip(seen, chain[1:], strict=False) if bookkeeping != NONE else ():
            popped_topic = records[call["commit_log_offset"]]["topic"]
            later = [c for (topic, q, so, pt), c in checkpoints.items()
                     if (topic, q, so) == (popped_topic, call["queue_id"], call["queue_offset"])
                     and c["offsets"] == [so]
                     and c["invisible_ms"] == delay_sec * 1000
                     and round(pt.timestamp() * 1000) >= int(call["pop_ck"].split()[1])]
            assert later, (keys, call)
            assert nxt["store_ts"] >= min(c["revive_ts"] for c in later), (keys, nxt, later)
        last = seen[-1]
        start, pop_ms = (int(x) for x in last["pop_ck"].split()[:2])
        last_topic = records[last["commit_log_offset"]]["topic"]
        rows = [r for r in lineage if r["message_key"] == uniq]
        if in_flight:
            # The chain's last record: the last one handed to the listener, or a retry record the
            # revive service wrote after it that was not popped before the broker stopped.
            end = records[chain[-1]["phys_offset"]]
            covering = sorted((c["pop_ts"], c["start_offset"], c["revive_ts"], key) for key, c in checkpoints.items()
                              if (key[0], key[1]) == (end["topic"], end["queue_id"])
                              and end["queue_offset"] in c["offsets"])
            if retries == expected_calls - 1:
                # Its last checkpoint is the change of invisible time its failure made, not acked.
                *_, revive_ts, latest = covering[-1]
                assert latest[2] == end["queue_offset"] and (*latest, end["queue_offset"]) not in acks, (keys, latest)
                assert checkpoints[latest]["invisible_ms"] == delay_sec * 1000, (keys, checkpoints[latest])
                # The store's snapshot is its last record (the import's runs.sim_end_ts): before the
                # revive time the record is still invisible; after it the revive is pending.
                expected = ("IN_FLIGHT", revive_ts) if snapshot < revive_ts else ("RETRYING", revive_ts)
            else:
                # The revive service's retry record, not popped: no checkpoint holds it.
                assert covering == [], (keys, covering)
                expected = ("RETRYING", None)
            assert [(r["group"], r["final_state"], r["invisible_until"], r["retries"]) for r in rows] == [
                (group, *expected, retries)], (keys, rows, snapshot)
            states_seen[keys] = expected[0]
            continue
        # The last record handed out was acked: after success, and after the client gave up. (The
        # buffer merge stores the ack only of a checkpoint it stored.)
        assert bookkeeping != EVERY or any(a[0] == last_topic and a[1] == last["queue_id"] and a[2] == start
                   and round(a[3].timestamp() * 1000) == pop_ms and a[4] == last["queue_offset"]
                   for a in acks), (keys, last)
        assert [(r["group"], r["final_state"], r["retries"], r["origin_topic"], r["invisible_until"])
                for r in rows] == [(group, "CONSUMED", expected_calls - 1, TOPIC, None)], (keys, rows)
        states_seen[keys] = "CONSUMED"
    # The broker wrote its retries under one name only: v1 or v2, as configured.
    assert {r["topic"] for r in records.values() if r["topic"].startswith("%RETRY%")} == {retry_topic}
    # Its records carry the v2 magic (a 2-byte topic length) when the name is over 127 bytes.
    magic = MESSAGE_MAGIC_CODE_V2 if long_name else MESSAGE_MAGIC_CODE_V1
    assert {r["magic"] for r in records.values() if r["topic"] == retry_topic} == {f"0x{magic:08X}"}
    # Every other record (short topic names) keeps the v1 magic.
    assert {r["magic"] for r in records.values() if len(r["topic"].encode()) <= 127} == {
        f"0x{MESSAGE_MAGIC_CODE_V1:08X}"}
    # The client popped the retry topic: checkpoints of it by the group name it in full (the
    # failed retries' changes of invisible time, under the buffer merge).
    assert bookkeeping == NONE or [e for e in evidence
                                   if e["kind"] == "ck" and e["topic"] == retry_topic and e["group"] == group]
    # Remoting POP clients never dead-letter: no %DLQ% record at all.
    assert not [r for r in records.values() if r["topic"].startswith("%DLQ%")]

    verdicts = _warehouse([run], tmp_path / "warehouse.duckdb")
    failed = {name: v for outcomes in verdicts.values() for name, v in outcomes.items()
              if v["blocking"] and not v["passed"]}
    assert failed == {}, failed
    for keys in sorted(sent):
        chain = sorted((h for h in hops if h["message_key"] == sent[keys]["uniq_key"]), key=lambda h: h["hop_index"])
        print(keys, [(c["reconsume_times"], c["status"]) for c in calls[keys]], [h["hop_kind"] for h in chain],
              [(r["final_state"], r["invisible_until"]) for r in lineage if r["message_key"] == sent[keys]["uniq_key"]],
              "snapshot", snapshot)
    print(layout, "evidence (stage, kind, invisible ms):",
          sorted(Counter((e["stage"], e["kind"], e["invisible_ms"]) for e in evidence).items()),
          "committed:", sorted(committed.items()))
    assert set(states_seen) == set(sent), states_seen


HOLD_DRIVER = DRIVER.with_name("PopHoldDriver.java")
# Long enough that the broker cannot revive the held message before it stops (within the client's
# [5000, 300000] ms).
HOLD_INVISIBLE_MS = 120_000
HOLD_TIMEOUT_MS = 60_000  # a limit on each of the driver's waits


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["v1-files", "kv-service"])
def test_a_pop_message_in_flight_when_the_broker_stops_is_in_flight(tmp_path, spark, layout):
    """A message popped and never acked when the broker stops is IN_FLIGHT until its pop's revive
    time, and one acked is CONSUMED, whether the broker stores the pop as a checkpoint record or (KV service) as a row of
    kvStore/; the group's committed offset is past both."""
    from assets.lineage import run_lineage
    from broker_core.export.store_import import import_store

    _config, group, _retry_topic, bookkeeping = LAYOUTS[layout]
    store, events = run_on_a_broker(tmp_path, layout, HOLD_DRIVER, [HOLD_INVISIBLE_MS, HOLD_TIMEOUT_MS])
    sent = {key: sends[0] for key, sends in events_by_key(events, "send").items()}
    held = events_by_key(events, "consume")["held"][0]
    assert sorted(sent) == ["acked", "held"]

    run = tmp_path / "runs" / "pop"
    summary = import_store(store, run, broker="broker-a")
    assert summary.problems == [] and ("kvStore" in summary.store_items_5x) == (bookkeeping == NONE), summary
    evidence = pq.read_table(run / "parquet" / "pop_evidence").to_pylist()
    pop_ms = int(held["pop_ck"].split()[1])
    # The held pop: a kvStore row (the KV service) or a checkpoint still in the timer (its revive
    # time is HOLD_INVISIBLE_MS away), with no ack either way.
    of_held = [e for e in evidence if held["queue_offset"] in e["offsets"]]
    assert [(e["stage"], e["kind"], e["group"], e["topic"], e["invisible_ms"], round(e["pop_ts"].timestamp() * 1000))
            for e in of_held] == [("kv" if bookkeeping == NONE else "timer", "ck", group, TOPIC, HOLD_INVISIBLE_MS,
                                   pop_ms)], evidence
    offsets = pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()
    assert [o["offset"] for o in offsets if (o["group"], o["topic"]) == (group, TOPIC)] == [held["queue_offset"] + 1]

    run_lineage(run, spark)
    lineage = pq.read_table(run / "lineage" / "message_lineage").to_pylist()
    # The store's snapshot (its last record) is long before the held pop's revive time.
    revive_ms = pop_ms + HOLD_INVISIBLE_MS
    assert sorted((r["message_key"], r["group"], r["final_state"],
                   r["invisible_until"] and round(r["invisible_until"].timestamp() * 1000)) for r in lineage) == sorted([
        (sent["acked"]["uniq_key"], group, "CONSUMED", None),
        (sent["held"]["uniq_key"], group, "IN_FLIGHT", revive_ms)]), lineage
    print(layout, "evidence:", [(e["stage"], e["kind"], e["offsets"]) for e in evidence], "lineage:",
          [(r["final_state"]) for r in lineage])
