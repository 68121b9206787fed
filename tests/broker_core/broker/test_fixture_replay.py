"""Replaying the fixture store's workload through the Broker rewrites its commit log exactly.

The fixture (tests/data/rocketmq-store-4.9.4) was written by RocketMQ 4.9.4's own store and
ScheduleMessageService, with the broker's send and send-back steps replayed line by line. Sending
the same client messages and GroupA/GroupB's send-backs through this Broker, with the fixture's
store configuration, must give every record at the same physical offset with the same topic,
queue, queue offset, reconsume times, body and property bytes (timestamps aside).
"""

from __future__ import annotations

import json
from pathlib import Path

from testdata import STORE_FIXTURES

from broker_core.broker.broker import Broker, BrokerConfig
from broker_core.broker.send import SendRequest
from broker_core.clock import Simulator
from broker_core.codec import Blank, iter_records
from broker_core.message import properties_to_string
from broker_core.rng import Streams

FIXTURE = STORE_FIXTURES
GROUP_A_MAX_RECONSUME = 2  # the "client" of the fixture sent maxReconsumeTimes=2 for GroupA
GROUP_B_MAX_RECONSUME = 16  # the client default
SETTLE_MS = 30_000  # long enough for every level-3/level-4 hop of the fixture (3 s, 4 s)


def _fixture_records():
    manifest = json.loads((FIXTURE / "manifest.json").read_text())
    records = {}
    for entry in manifest["commitLogFiles"]:
        buf = (FIXTURE / "store-clean" / entry["file"]).read_bytes()
        for pos, item in iter_records(buf):
            if not isinstance(item, Blank):
                records[entry["fileFromOffset"] + pos] = item
    return manifest, records


def _client_properties(rec) -> dict[str, str]:
    """What `new Message(topic, tags, keys, body)` + setDelayTimeLevel + setUniqID put, in order."""
    props = {"TAGS": rec.properties["TAGS"], "KEYS": rec.properties["KEYS"], "WAIT": "true"}
    if "DELAY" in rec.properties:
        props["DELAY"] = rec.properties["DELAY"]
    props["UNIQ_KEY"] = rec.properties["UNIQ_KEY"]
    return props


def _replay(tmp_path: Path, manifest, records) -> Broker:
    cfg = manifest["storeConfig"]
    sim = Simulator(min(r.store_ts for r in records.values()) - 1000)
    broker = Broker(tmp_path / "replay", BrokerConfig(
        store_host=cfg["storeHost"], cluster=cfg["brokerClusterName"],
        message_delay_level=cfg["messageDelayLevel"],
        commitlog_file_size_bytes=cfg["mappedFileSizeCommitLog"],
        cq_units_per_file=cfg["mappedFileSizeConsumeQueue"] // 20), sim, Streams(0))
    broker.start()
    broker.create_topic("OrderTopic", 4)
    broker.create_topic("PayTopic", 2)
    # The client sends: first stores in OrderTopic/PayTopic, and delayed sends parked in the
    # schedule topic (reconsumeTimes 0); re-puts carry REAL_TOPIC and are not client sends.
    originals = [r for _, r in sorted(records.items())
                 if r.reconsume_times == 0 and (r.topic == "SCHEDULE_TOPIC_XXXX"
                                                or "REAL_TOPIC" not in r.properties)]
    assert len(originals) == 54
    sent_at = {}
    for rec in originals:
        topic = rec.properties.get("REAL_TOPIC", rec.topic)
        queue_id = int(rec.properties.get("REAL_QID", rec.queue_id))
        resp = broker.send_message(SendRequest(
            topic, queue_id, rec.body, _client_properties(rec), flag=rec.flag,
            sys_flag=rec.sys_flag, born_ts=rec.born_ts, born_host=rec.born_host))
        assert resp.ok, resp
        sent_at[rec.properties["KEYS"]] = resp.phys_offset

    def send_back(phys: int, group: str, max_times: int) -> None:
        resp = broker.consumer_send_msg_back(phys, group, 0, max_reconsume_times=max_times)
        assert resp.ok, resp

    group_a = [f"order-{n}" for n in (1, 6, 11, 16, 21, 26, 31, 36)]
    for key in group_a:
        send_back(sent_at[key], "GroupA", GROUP_A_MAX_RECONSUME)
    for n in range(4):
        send_back(sent_at[f"pay-{n}"], "GroupB", GROUP_B_MAX_RECONSUME)
    sim.run(until_ms=sim.now() + SETTLE_MS)
    for rec in broker.pull_message("GroupA", "%RETRY%GroupA", 0, 0, 32).records:
        send_back(rec.phys_offset, "GroupA", GROUP_A_MAX_RECONSUME)
    sim.run(until_ms=sim.now() + SETTLE_MS)
    for rec in broker.pull_message("GroupA", "%RETRY%GroupA", 0, 8, 32).records:
        send_back(rec.phys_offset, "GroupA", GROUP_A_MAX_RECONSUME)
    sim.run(until_ms=sim.now() + SETTLE_MS)
    return broker


def test_replay_matches_fixture_commit_log(tmp_path):
    """Send, delay, retry and DLQ hops of the fixture workload are stored byte-identically."""
    manifest, records = _fixture_records()
    broker = _replay(tmp_path, manifest, records)
    expected_messages = [e for e in manifest["commitLog"] if e["kind"] == "MESSAGE"]
    assert len(expected_messages) == 112
    for entry in expected_messages:
        want = records[entry["physicalOffset"]]
        got = broker.store.look_message_by_offset(entry["physicalOffset"])
        assert got is not None, f"nothing at {entry['physicalOffset']} ({entry['topic']})"
        where = f"phys {entry['physicalOffset']} {want.topic}"
        assert (got.topic, got.queue_id, got.queue_offset) == \
            (want.topic, want.queue_id, want.queue_offset), where
        assert got.reconsume_times == want.reconsume_times, where
        assert properties_to_string(got.properties) == entry["propertiesString"], where
        assert got.body == want.body, where
        assert (got.flag, got.sys_flag, got.born_ts, got.born_host, got.store_host) == \
            (want.flag, want.sys_flag, want.born_ts, want.born_host, want.store_host), where
        assert got.total_size == want.total_size, where
        assert got.msg_id == entry["offsetMsgId"], where
    assert broker.store.max_phys_offset == manifest["commitLogMaxPhysicalOffset"]
    broker.shutdown()


def test_replay_delay_offsets_match_fixture(tmp_path):
    """After the replay, delayOffset.json holds the fixture's offsets {3: 22, 4: 8}."""
    manifest, records = _fixture_records()
    broker = _replay(tmp_path, manifest, records)
    broker.shutdown()
    text = (tmp_path / "replay" / "config" / "delayOffset.json").read_text()
    assert text == (FIXTURE / "store-clean" / "config" / "delayOffset.json").read_text()


def test_replay_consume_queues_match_fixture(tmp_path):
    """Every consume queue outside the schedule topic (whose tags are deliver times) is byte-identical."""
    manifest, records = _fixture_records()
    broker = _replay(tmp_path, manifest, records)
    broker.shutdown()
    compared = 0
    for cq in manifest["consumeQueues"]:
        if cq["topic"] == "SCHEDULE_TOPIC_XXXX":
            continue
        want = (FIXTURE / "store-clean" / cq["file"]).read_bytes()
        got = (tmp_path / "replay" / cq["file"]).read_bytes()
        assert got == want, cq["file"]
        compared += 1
    assert compared == 9
