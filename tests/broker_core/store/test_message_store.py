"""MessageStore against RocketMQ 4.9.4's own store: reading it, and writing the same bytes again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testdata import STORE_FIXTURES

from broker_core import codec
from broker_core.constants import SCHEDULE_TOPIC, SYSFLAG_TRANSACTION_PREPARED
from broker_core.errors import InvalidNameError
from broker_core.message import (
    JavaHashMap,
    broker_receive_properties,
    create_message_id,
    schedule_deliver_properties,
    send_back_map,
)
from broker_core.store import mapped_file
from broker_core.store.consume_queue import CQ_UNIT
from broker_core.store.message_store import (
    MessageInner,
    MessageStore,
    PutStatus,
    StoreConfig,
)

STORE_DIR = STORE_FIXTURES
MANIFEST = json.loads((STORE_DIR / "manifest.json").read_text())
CLUSTER = MANIFEST["storeConfig"]["brokerClusterName"]


def fixture_config(**overrides) -> StoreConfig:
    """The MessageStoreConfig the fixture was written with (16 KiB files, 1000 CQ units)."""
    cfg = MANIFEST["storeConfig"]
    values = dict(commitlog_file_size_bytes=cfg["mappedFileSizeCommitLog"],
                  cq_units_per_file=cfg["mappedFileSizeConsumeQueue"] // 20,
                  message_delay_level=cfg["messageDelayLevel"], store_host=cfg["storeHost"])
    values.update(overrides)
    return StoreConfig(**values)


class Clock:
    """A settable clock standing in for the broker's time source."""

    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_store(root: Path, clock=None, **overrides) -> MessageStore:
    store = MessageStore(root, fixture_config(**overrides), clock or Clock())
    assert store.load(), store.load_error
    return store


def messages():
    return [r for r in MANIFEST["commitLog"] if r["kind"] == "MESSAGE"]


def test_every_fixture_record_reads_back_as_the_manifest_lists_it(writable_store_copy):
    """Each of the 112 records of the 4.9.4 store decodes with the manifest's fields at its offset."""
    store = open_store(writable_store_copy("store-clean"))
    assert store.max_phys_offset == MANIFEST["commitLogMaxPhysicalOffset"]
    for entry in messages():
        rec = store.look_message_by_offset(entry["physicalOffset"])
        assert rec is not None, entry["physicalOffset"]
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size) == (
            entry["topic"], entry["queueId"], entry["queueOffset"], entry["size"])
        assert (rec.store_ts, rec.born_ts, rec.reconsume_times, rec.sys_flag, rec.body_crc) == (
            entry["storeTimestamp"], entry["bornTimestamp"], entry["reconsumeTimes"],
            entry["sysFlag"], entry["bodyCRC"])
        assert rec.properties == entry["properties"]
        assert rec.msg_id == entry["offsetMsgId"]
    assert store.check() == []


def test_every_fixture_cq_unit_is_served_by_the_store(writable_store_copy):
    """Each consume queue has the manifest's units, and get_messages returns their records in order."""
    store = open_store(writable_store_copy("store-clean"))
    listed = {(q["topic"], q["queueId"]): q["entries_physOffset_size_tagsCode"]
              for q in MANIFEST["consumeQueues"]}
    assert sorted(store.queues) == sorted(listed)
    for (topic, queue_id), units in listed.items():
        assert store.min_offset(topic, queue_id) == 0
        assert store.max_offset(topic, queue_id) == len(units)
        assert store.get_units(topic, queue_id, 0, 1000) == [tuple(u) for u in units]
        records = store.get_messages(topic, queue_id, 0, 1000)
        assert [(r.phys_offset, r.total_size, r.queue_offset) for r in records] == [
            (u[0], u[1], i) for i, u in enumerate(units)]
    assert store.topics() == sorted({t for t, _ in listed})
    assert store.queue_ids("OrderTopic") == [0, 1, 2, 3]
    assert store.get_messages("OrderTopic", 0, 5, 3)[0].queue_offset == 5


def _client_map(entry: dict, delay: str | None) -> JavaHashMap:
    """The client's Message map: TAGS, KEYS, WAIT from the constructor, then DELAY, then UNIQ_KEY."""
    props = entry["properties"]
    items = [("TAGS", props["TAGS"]), ("KEYS", props["KEYS"]), ("WAIT", "true")]
    if delay is not None:
        items.append(("DELAY", delay))
    items.append(("UNIQ_KEY", props["UNIQ_KEY"]))
    return JavaHashMap.from_items(items)


def _replay_input(entry: dict, by_phys: dict, previous_hop: dict, fixture: MessageStore) -> MessageInner:
    """The MessageInner the 4.9.4 broker handed its store for this fixture record."""
    rec = fixture.look_message_by_offset(entry["physicalOffset"])
    props = entry["properties"]
    base = dict(body=rec.body, flag=rec.flag, sys_flag=rec.sys_flag, born_ts=rec.born_ts,
                born_host=rec.born_host, reconsume_times=rec.reconsume_times)
    prev = by_phys.get(previous_hop.get(entry["physicalOffset"]))
    if entry["topic"] == SCHEDULE_TOPIC and "RETRY_TOPIC" not in props:
        # A delayed client send: the broker parsed the wire string, added CLUSTER, kept WAIT.
        wire = _client_map(entry, props["DELAY"]).to_properties_string()
        _stored, mem = broker_receive_properties(wire, CLUSTER)
        return MessageInner(props["REAL_TOPIC"], int(props["REAL_QID"]), properties=mem,
                            properties_string=_stored, **base)
    if entry["topic"] == SCHEDULE_TOPIC or entry["topic"].startswith("%DLQ%"):
        # A consumer send-back of the previous hop: to %RETRY% (delayed) or straight to %DLQ%.
        mem = send_back_map(prev["propertiesString"], original_topic=prev["topic"],
                            delay_level=int(props["DELAY"]), offset_msg_id=prev["offsetMsgId"])
        topic = props["REAL_TOPIC"] if entry["topic"] == SCHEDULE_TOPIC else entry["topic"]
        return MessageInner(topic, 0, properties=mem, **base)
    if "REAL_TOPIC" in props:
        # The schedule service re-puts its copy: the stored string keeps DELAY, the map does not.
        stored = schedule_deliver_properties(prev["propertiesString"])
        mem = JavaHashMap.from_properties_string(stored)
        mem.remove("DELAY")
        return MessageInner(entry["topic"], entry["queueId"], properties=mem,
                            properties_string=stored, delay_level=0, **base)
    wire = _client_map(entry, None).to_properties_string()
    stored, mem = broker_receive_properties(wire, CLUSTER)
    return MessageInner(entry["topic"], entry["queueId"], properties=mem, properties_string=stored,
                        **base)


@pytest.mark.parametrize("spill_bytes", [None, 700], ids=["buffered", "spilled-every-few-records"])
def test_replaying_the_fixture_through_put_message_writes_the_same_bytes(writable_store_copy, tmp_path,
                                                                         monkeypatch, spill_bytes):
    """Putting the fixture's 112 messages again, in order, reproduces its commit log and CQ files byte for byte.

    Also when the write buffers are written out every few records, so puts take both the inline
    path and ``reserve``/``append``.
    """
    if spill_bytes is not None:
        monkeypatch.setattr(mapped_file, "WRITE_BUFFER_SPILL_BYTES_MAX", spill_bytes)
    fixture = open_store(writable_store_copy("store-clean"))
    by_phys = {e["physicalOffset"]: e for e in messages()}
    previous_hop = {}
    for info in MANIFEST["uniqKeys"].values():
        for before, after in zip(info["records"], info["records"][1:], strict=False):
            previous_hop[after] = before
    clock = Clock()
    store = open_store(tmp_path / "replay", clock)
    store.start()
    for entry in messages():
        clock.now = entry["storeTimestamp"]
        result = store.put_message(_replay_input(entry, by_phys, previous_hop, fixture))
        assert result.status is PutStatus.PUT_OK, result
        assert (result.phys_offset, result.topic, result.queue_id, result.queue_offset) == (
            entry["physicalOffset"], entry["topic"], entry["queueId"], entry["queueOffset"])
        assert result.msg_id == entry["offsetMsgId"]
    store.shutdown()
    for item in MANIFEST["storeClean"]["files"]:
        path = item["path"]
        if path.startswith(("commitlog/", "consumequeue/")):
            ours = (tmp_path / "replay" / path).read_bytes()
            theirs = (STORE_DIR / "store-clean" / path).read_bytes()
            assert ours == theirs, f"{path} differs"


def test_delay_rewrite_clamps_the_level_and_keeps_the_real_topic(tmp_path):
    """A DELAY above the table is stored as the last level in SCHEDULE_TOPIC_XXXX with REAL_TOPIC/REAL_QID."""
    clock = Clock(1_000_000)
    store = open_store(tmp_path / "s", clock)
    store.start()
    result = store.put_message(MessageInner("OrderTopic", 3, b"x", {"TAGS": "TagA", "DELAY": "99"}))
    assert (result.status, result.topic, result.queue_id) == (PutStatus.PUT_OK, SCHEDULE_TOPIC, 17)
    rec = store.look_message_by_offset(result.phys_offset)
    assert rec.properties["DELAY"] == "18"
    assert (rec.properties["REAL_TOPIC"], rec.properties["REAL_QID"]) == ("OrderTopic", "3")
    unit = store.get_units(SCHEDULE_TOPIC, 17, 0, 1)[0]
    assert unit == (result.phys_offset, result.total_size, 1_000_000 + 18_000)
    store.shutdown()


def test_prepared_transaction_is_stored_without_queue_offset_or_dispatch(tmp_path):
    """A PREPARED record gets queue offset 0, no consume-queue unit, and no delay rewrite."""
    store = open_store(tmp_path / "s")
    store.start()
    first = store.put_message(MessageInner("T", 0, b"a", {"TAGS": "x"}))
    half = store.put_message(MessageInner("T", 0, b"b", {"DELAY": "2"},
                                          sys_flag=SYSFLAG_TRANSACTION_PREPARED))
    second = store.put_message(MessageInner("T", 0, b"c", {}))
    assert (first.queue_offset, half.queue_offset, second.queue_offset) == (0, 0, 1)
    assert half.topic == "T"
    assert store.max_offset("T", 0) == 2
    assert [r.body for r in store.get_messages("T", 0, 0, 10)] == [b"a", b"c"]
    store.shutdown()


def test_put_statuses_for_bad_messages(tmp_path):
    """Oversized bodies and properties are refused with RocketMQ's statuses, and a stopped store is unavailable."""
    store = open_store(tmp_path / "s", max_message_size=1024)
    assert store.put_message(MessageInner("T", 0, b"x", {})).status is PutStatus.SERVICE_NOT_AVAILABLE
    store.start()
    assert store.put_message(MessageInner("T", 0, b"x" * 1025, {})).status is PutStatus.MESSAGE_ILLEGAL
    big = {"K": "v" * 32767}
    assert store.put_message(MessageInner("T", 0, b"x", big)).status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_message(MessageInner("T", 0, b"x", {}, properties_string="a\x01" + "b" * 32766)
                             ).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_message(MessageInner("T", 0, b"x", {"DELAY": "soon"})).status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_message(MessageInner("T", 0, b"x" * 1024, {"K": "v" * 100})).ok
    assert store.max_offset("T", 0) == 1
    store.shutdown()


@pytest.mark.parametrize("topic", ["../x", "/abs", "a\x00b", "t" * 300, "", "a/b", ".."])
def test_hostile_topic_names_are_refused_before_touching_disk(tmp_path, topic):
    """A topic outside [%|a-zA-Z0-9_-]{1,127} raises InvalidNameError and writes nothing."""
    root = tmp_path / "root" / "store"
    store = open_store(root)
    store.start()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(InvalidNameError):
        store.put_message(MessageInner(topic, 0, b"x", {}))
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before
    assert store.max_phys_offset == 0
    store.shutdown()


def test_look_message_by_offset_out_of_bound_first_and_last(tmp_path):
    """lookMessageByOffset: the max offset gives None; the first and last offsets give their bodies."""
    store = open_store(tmp_path / "s")
    store.start()
    results = [store.put_message(MessageInner("T", 0, f"body-{i}".encode(), {})) for i in range(10)]
    assert store.look_message_by_offset(store.max_phys_offset) is None
    assert store.look_message_by_offset(store.max_phys_offset + 100) is None
    assert store.look_message_by_offset(results[0].phys_offset).body == b"body-0"
    assert store.look_message_by_offset(results[-1].phys_offset).body == b"body-9"
    assert results[-1].msg_id == create_message_id(store.config.store_host, results[-1].phys_offset)
    store.shutdown()


def test_tags_code_of_a_normal_message_is_the_java_hash_of_its_tags(tmp_path):
    """The CQ unit of a message with TAGS TagA carries 2598919, and 0 without tags."""
    store = open_store(tmp_path / "s")
    store.start()
    a = store.put_message(MessageInner("T", 1, b"a", {"TAGS": "TagA"}))
    b = store.put_message(MessageInner("T", 1, b"b", {}))
    units = store.get_units("T", 1, 0, 10)
    assert units == [(a.phys_offset, a.total_size, 2598919), (b.phys_offset, b.total_size, 0)]
    raw = store.commit_log.files.read(a.phys_offset, a.total_size)
    assert codec.decode_record(raw, 0).queue_offset == 0
    assert CQ_UNIT.size == 20
    store.shutdown()


@pytest.mark.parametrize("born_host, store_host", [
    ("10.0.0.2:50000", "192.168.0.1:10911"),
    ("[2001:db8::10]:50000", "192.168.0.1:10911"),
    ("10.0.0.2:50000", "[2001:db8::1]:10911"),
    ("[::1]:1", "[2001:db8::1]:10911"),
    # None: the store's own host (StoreConfig.store_host), found by born host alone.
    ("10.0.0.2:50000", None),
    ("[2001:db8::10]:50000", None),
])
def test_put_path_bytes_equal_the_codec_encoding(tmp_path, born_host, store_host):
    """The bytes put_message writes equal codec.encode_record of the same fields, IPv6 hosts included."""
    clock = Clock(1_234_567)
    store = open_store(tmp_path / "s", clock)
    store.start()
    store.put_message(MessageInner("T", 0, b"first", {}))
    # The same born host under the other store host first, so a cache keyed on the born host
    # alone would hand this put the wrong store host.
    store.put_message(MessageInner("T", 1, b"other", {}, born_host=born_host,
                                   store_host="[2001:db8::99]:1" if store_host is None else None))
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB" * 16, "ÜNI": "ключ"}
    msg = MessageInner("T", 2, "body ✓".encode(), props, flag=7, sys_flag=0x1, born_ts=99,
                       born_host=born_host, store_host=store_host, reconsume_times=3,
                       prepared_tx_offset=5)
    result = store.put_message(msg)
    raw = store.commit_log.files.read(result.phys_offset, result.total_size)
    stored_host = store_host or store.config.store_host
    expected = codec.encode_record(codec.Record(
        "T", 2, 7, 0, result.phys_offset, 0x1, 99, born_host, 1_234_567, stored_host, 3, 5,
        msg.body, props))
    assert raw == expected
    decoded = codec.decode_record(raw, 0)
    assert (decoded.born_host, decoded.store_host, decoded.properties) == (born_host, stored_host, props)
    assert result.msg_id == create_message_id(stored_host, result.phys_offset)
    store.shutdown()


def test_get_messages_reads_unflushed_and_flushed_records_alike(tmp_path):
    """A record is readable right after its put, before and after a flush, and after a restart."""
    store = open_store(tmp_path / "s")
    store.start()
    for i in range(5):
        store.put_message(MessageInner("Q", 0, f"m{i}".encode(), {}))
    assert [r.body for r in store.get_messages("Q", 0, 0, 10)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    store.flush()
    assert store.flushed_offset == store.max_phys_offset
    store.put_message(MessageInner("Q", 0, b"m5", {}))
    assert [r.queue_offset for r in store.get_messages("Q", 0, 3, 10)] == [3, 4, 5]
    store.shutdown()
    again = open_store(tmp_path / "s")
    assert [r.body for r in again.get_messages("Q", 0, 4, 2)] == [b"m4", b"m5"]
    assert again.get_messages("Q", 0, 6, 10) == [] and again.get_messages("missing", 0, 0, 1) == []


def test_iter_records_walks_the_fixture_in_physical_order(writable_store_copy):
    """iter_records yields the 112 fixture records in the manifest's physical order, BLANKs skipped."""
    store = open_store(writable_store_copy("store-clean"))
    assert [r.phys_offset for r in store.iter_records()] == [e["physicalOffset"] for e in messages()]
    assert [r.phys_offset for r in store.iter_records(49152)][:1] == [49152]
