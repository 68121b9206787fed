"""Batch sends: the client's batch body, and MessageStore.put_messages (4.9.4 asyncPutMessages).

The two AppendCallbackTest cases for a batch (§10.2 in docs/rocketmq-references.md) are restated on the
store: a batch that fits is written as consecutive records sharing one store time; a batch that
does not fit the rest of a file leaves only the 8-byte BLANK there and moves whole.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from broker_core import codec
from broker_core.constants import BLANK_MAGIC_CODE, SCHEDULE_TOPIC, SYSFLAG_TRANSACTION_PREPARED
from broker_core.errors import BadInputError, InvalidNameError
from broker_core.message import create_message_id, java_string_hash, string_to_properties
from broker_core.store import message_store
from broker_core.store.message_store import (
    MessageBatchInner,
    MessageInner,
    MessageStore,
    PutStatus,
    StoreConfig,
)

STORE_HOST = "192.168.0.1:10911"
BORN_HOST = "10.0.0.2:50000"


def open_store(root: Path, now: int = 1_700_000_000_000, **overrides) -> MessageStore:
    store = MessageStore(root, StoreConfig(store_host=STORE_HOST, **overrides), lambda: now)
    assert store.load(), store.load_error
    store.start()
    return store


def batch_of(n: int, *, body: bytes = b"body", props: str = "TAGS\x01abc", topic: str = "test-topic",
             queue_id: int = 0, batch_props: dict | None = None, **fields) -> MessageBatchInner:
    wire = codec.encode_batch_body((0, body, props) for _ in range(n))
    fields = {"born_ts": 1_600_000_000_000, "born_host": BORN_HOST, **fields}
    return MessageBatchInner(topic, queue_id, wire, batch_props if batch_props is not None else {},
                             **fields)


# --- the batch body ---------------------------------------------------------------------------

def test_batch_body_is_encode_message_per_message():
    """encodeMessage: int32 size, magic 0, crc 0, flag, body length + body, int16 length + properties."""
    wire = codec.encode_batch_body([(7, b"body", "TAGS\x01abc"), (0, b"", "")])
    assert wire == (struct.pack(">iiiii", 34, 0, 0, 7, 4) + b"body" + struct.pack(">h", 8) + b"TAGS\x01abc"
                    + struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", 0))
    assert codec.decode_batch_body(wire) == [(7, b"body", b"TAGS\x01abc"), (0, b"", b"")]
    assert codec.decode_batch_body(b"") == []


@pytest.mark.parametrize("cut, problem", [
    (lambda w: w[:10], "bytes left"),
    (lambda w: w[:52], "body length 4 runs past"),
    (lambda w: w[:-1], "properties length 8 runs past"),
    (lambda w: w[:16] + struct.pack(">i", -5) + w[20:], "body length -5"),
    (lambda w: w[:-8] + b"TAGS\x01\xff\xfe\x00", "not UTF-8"),
])
def test_a_malformed_batch_body_names_the_message_and_byte(cut, problem):
    wire = codec.encode_batch_body([(0, b"first", "A\x01b"), (0, b"body", "TAGS\x01abc")])
    with pytest.raises(BadInputError) as err:
        codec.decode_batch_body(cut(wire))
    text = str(err.value)
    assert problem in text
    assert "batch message" in text and "at byte" in text


# --- AppendCallbackTest -----------------------------------------------------------------------

def test_append_message_batch_succ(tmp_path):
    """testAppendMessageBatchSucc: 10 messages, PUT_OK at offset 0 and queue offset 0, 10 distinct ids,
    each record keeping topic, body and tags, sharing the batch's born host, born time and one
    store time, with consecutive queue offsets."""
    store = open_store(tmp_path / "s", now=1_700_000_000_123)
    result = store.put_messages(batch_of(10))
    assert result.status is PutStatus.PUT_OK
    assert (result.phys_offsets[0], result.queue_offset, result.msg_num) == (0, 0, 10)
    ids = result.msg_ids.split(",")
    assert len(ids) == 10 == len(set(ids)) and all(len(i) == 32 for i in ids)
    assert ids == [create_message_id(STORE_HOST, p) for p in result.phys_offsets]
    records = store.get_messages("test-topic", 0, 0, 32)
    assert [r.queue_offset for r in records] == list(range(10))
    assert [r.phys_offset for r in records] == list(result.phys_offsets)
    assert {(r.topic, r.body, r.properties["TAGS"], r.born_host, r.born_ts, r.store_ts) for r in records} == {
        ("test-topic", b"body", "abc", BORN_HOST, 1_600_000_000_000, 1_700_000_000_123)}
    assert result.total_size == sum(r.total_size for r in records) == store.max_phys_offset
    units = store.get_units("test-topic", 0, 0, 32)
    assert units == [(r.phys_offset, r.total_size, java_string_hash("abc")) for r in records]
    store.shutdown()


def test_append_message_batch_end_of_file(tmp_path):
    """testAppendMessageBatchEndOfFile: with 1000 bytes left and a batch needing more, only the 8-byte
    BLANK (int32 1000, BLANK magic) is written; the whole batch goes to the next file."""
    file_size = 4096
    store = open_store(tmp_path / "s", commitlog_file_size_bytes=file_size)
    filler = store.put_message(MessageInner("F", 0, b"", {}))
    pad = file_size - 1000 - filler.total_size - filler.total_size
    store.put_message(MessageInner("F", 0, b"x" * pad, {}))
    assert store.max_phys_offset == file_size - 1000
    one = len(codec.encode_batch_body([(0, b"body" * 20, "TAGS\x01abc")]))
    result = store.put_messages(batch_of(10, body=b"body" * 20))
    assert result.ok and one * 10 < 1000 + 1000  # the batch needs more than 1000 bytes, not more than a file
    assert result.total_size + 8 > 1000
    assert result.phys_offsets[0] == file_size and result.queue_offset == 0
    store.flush()
    first = (tmp_path / "s" / "commitlog" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">iI", first, file_size - 1000) == (1000, BLANK_MAGIC_CODE)
    assert first[file_size - 992:] == bytes(992)
    assert [r.body for r in store.get_messages("test-topic", 0, 0, 32)] == [b"body" * 20] * 10
    store.shutdown()


# --- the rules of a batch put -----------------------------------------------------------------

def test_records_of_a_batch_are_the_records_of_single_puts(tmp_path):
    """Each record is byte for byte the record encoder's output for the batch's and message's fields."""
    store = open_store(tmp_path / "s", now=42)
    wire = codec.encode_batch_body([(3, b"a", "KEYS\x01k1"), (0, b"", "TAGS\x01t\x02UNIQ_KEY\x01U")])
    result = store.put_messages(MessageBatchInner("T", 2, wire, {"CLUSTER": "c"}, sys_flag=0, born_ts=7,
                                                  born_host="[2001:db8::10]:1", reconsume_times=4))
    assert result.ok
    expected = [
        codec.Record("T", 2, 3, 0, result.phys_offsets[0], 0, 7, "[2001:db8::10]:1", 42, STORE_HOST, 4, 0,
                     b"a", {"KEYS": "k1", "CLUSTER": "c"}),
        codec.Record("T", 2, 0, 1, result.phys_offsets[1], 0, 7, "[2001:db8::10]:1", 42, STORE_HOST, 4, 0,
                     b"", {"TAGS": "t", "UNIQ_KEY": "U", "CLUSTER": "c"}),
    ]
    raw = store.commit_log.files.read(0, result.total_size)
    assert raw == b"".join(codec.encode_record(r) for r in expected)
    store.shutdown()


@pytest.mark.parametrize("own, batch, stored", [
    ("A\x01x", "CLUSTER\x01c", "A\x01x\x02CLUSTER\x01c"),
    ("A\x01x\x02", "CLUSTER\x01c", "A\x01x\x02CLUSTER\x01c"),  # a 5.x client's trailing separator
    ("", "CLUSTER\x01c", "CLUSTER\x01c"),
    ("A\x01x", "", "A\x01x"),
])
def test_batch_properties_are_appended_to_each_message(tmp_path, own, batch, stored):
    """needAppendLastPropertySeparator: a separator only between two non-empty strings that lack one."""
    store = open_store(tmp_path / "s")
    wire = codec.encode_batch_body([(0, b"m", own)])
    result = store.put_messages(MessageBatchInner("T", 0, wire, {}, properties_string=batch))
    raw = store.commit_log.files.read(0, result.total_size)
    (length,) = struct.unpack_from(">h", raw, result.total_size - len(stored.encode()) - 2)
    assert length == len(stored.encode())
    assert raw.endswith(stored.encode())
    store.shutdown()


def test_batch_tags_win_over_a_messages_own(tmp_path):
    """The stored properties hold both TAGS; the map (and the CQ tags code) keeps the later, the batch's."""
    store = open_store(tmp_path / "s")
    store.put_messages(batch_of(2, props="TAGS\x01own", topic="T", batch_props={"TAGS": "batch"}))
    store.put_messages(batch_of(1, props="X\x01y", topic="T"))
    codes = [u[2] for u in store.get_units("T", 0, 0, 10)]
    assert codes == [java_string_hash("batch")] * 2 + [0]
    store.shutdown()


def test_tags_read_from_a_batch_record_are_the_tags_its_properties_parse_to():
    """The dispatch's TAGS scan agrees with string2messageProperties on every string of the
    property alphabet (malformed segments, empty values, repeated and embedded keys)."""
    seed = 20261122
    rng = random.Random(seed)
    pieces = ["TAGS", "\x01", "\x02", "x", "TAGS\x01", "\x02TAGS\x01", "A", "é"]
    for case in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        found = message_store._last_tags(text.encode())
        expected = string_to_properties(text).get("TAGS")
        assert (found.decode() if found is not None else None) == expected, (
            f"seed {seed}, case {case}: {text!r}")


def test_queue_offsets_run_on_across_single_and_batch_puts(tmp_path):
    store = open_store(tmp_path / "s")
    a = store.put_message(MessageInner("T", 1, b"a", {}))
    batch = store.put_messages(batch_of(3, topic="T", queue_id=1))
    b = store.put_message(MessageInner("T", 1, b"b", {}))
    assert (a.queue_offset, batch.queue_offset, b.queue_offset) == (0, 1, 4)
    assert store.max_offset("T", 1) == 5
    assert [r.queue_offset for r in store.get_messages("T", 1, 0, 10)] == [0, 1, 2, 3, 4]
    store.shutdown()


@pytest.mark.parametrize("make, status, detail", [
    (lambda: batch_of(2, batch_props={"DELAY": "3"}), PutStatus.MESSAGE_ILLEGAL, "cannot be delayed"),
    (lambda: batch_of(2, batch_props={"DELAY": "soon"}), PutStatus.MESSAGE_ILLEGAL, "not an int"),
    (lambda: batch_of(2, sys_flag=SYSFLAG_TRANSACTION_PREPARED), PutStatus.MESSAGE_ILLEGAL, "transaction"),
    (lambda: batch_of(3000, body=b"x" * 10), PutStatus.MESSAGE_ILLEGAL, "exceeds 65536"),
    (lambda: batch_of(0), PutStatus.MESSAGE_ILLEGAL, "no message"),
    (lambda: MessageBatchInner("T", 0, codec.encode_batch_body([(0, b"b", "")])[:-3]),
     PutStatus.MESSAGE_ILLEGAL, "batch message 0 at byte 0"),
    (lambda: batch_of(2, props="K\x01" + "v" * 32000, batch_props={"CLUSTER": "c" * 1000}),
     PutStatus.PROPERTIES_SIZE_EXCEEDED, "message 0"),
    (lambda: batch_of(1, batch_props={"K": "v" * 32767}), PutStatus.PROPERTIES_SIZE_EXCEEDED, "batch properties"),
])
def test_a_refused_batch_writes_nothing(tmp_path, make, status, detail):
    """Every refusal names its reason, and no record, queue unit or queue offset is left behind."""
    store = open_store(tmp_path / "s", max_message_size=65536)
    result = store.put_messages(make())
    assert result.status is status and detail in result.detail
    assert result.msg_num == 0 and result.msg_ids == ""
    assert store.max_phys_offset == 0
    assert store.commit_log.topic_queue_table == {}
    assert store.put_message(MessageInner("T", 0, b"after", {})).queue_offset == 0
    store.shutdown()


def test_a_batch_larger_than_a_file_is_refused(tmp_path):
    store = open_store(tmp_path / "s", commitlog_file_size_bytes=2048)
    result = store.put_messages(batch_of(40))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "cannot fit a commit-log file" in result.detail
    assert store.max_phys_offset == 0
    store.shutdown()


def test_a_stopped_store_takes_no_batch(tmp_path):
    store = MessageStore(tmp_path / "s", StoreConfig(), lambda: 0)
    assert store.load()
    assert store.put_messages(batch_of(2)).status is PutStatus.SERVICE_NOT_AVAILABLE


@pytest.mark.parametrize("exit_", ["shutdown", "crash"])
def test_batch_records_survive_a_restart(tmp_path, exit_):
    """Recovery reads batch records like any others: the same records and units after a restart,
    the consume queue rebuilt from the commit log after a crash."""
    store = open_store(tmp_path / "s", flush="sync")
    store.put_messages(batch_of(5, topic="T"))
    before = [(r.phys_offset, r.queue_offset, r.body) for r in store.get_messages("T", 0, 0, 10)]
    units = store.get_units("T", 0, 0, 10)
    getattr(store, exit_)()
    again = open_store(tmp_path / "s")
    assert [(r.phys_offset, r.queue_offset, r.body) for r in again.get_messages("T", 0, 0, 10)] == before
    assert again.get_units("T", 0, 0, 10) == units
    assert again.put_messages(batch_of(1, topic="T")).queue_offset == 5
    again.shutdown()


def test_a_batch_spanning_consume_queue_files_gets_every_unit(tmp_path):
    """Units of one batch cross consume-queue file ends (4 units per file here) and all arrive."""
    store = open_store(tmp_path / "s", cq_units_per_file=4)
    store.put_message(MessageInner("T", 0, b"first", {}))
    result = store.put_messages(batch_of(10, topic="T"))
    units = store.get_units("T", 0, 0, 20)
    assert [u[0] for u in units[1:]] == list(result.phys_offsets)
    assert len(list((tmp_path / "s" / "consumequeue" / "T" / "0").iterdir())) == 3
    store.shutdown()


@pytest.mark.parametrize("topic", ["../x", "a/b", "t" * 300, ""])
def test_hostile_topic_names_in_a_batch_are_refused_before_touching_disk(tmp_path, topic):
    root = tmp_path / "root" / "store"
    store = open_store(root)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(InvalidNameError):
        store.put_messages(batch_of(2, topic=topic))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert store.max_phys_offset == 0
    store.shutdown()


@pytest.mark.parametrize("bad", [
    lambda: MessageInner("T", 0, b"x", {}, born_ts=2**63),
    lambda: MessageInner("T", 0, b"x", {}, reconsume_times=2**31),
    lambda: batch_of(3, topic="T", born_ts=2**63),
    lambda: batch_of(3, topic="T", reconsume_times=-2**31 - 1),
])
def test_a_field_out_of_java_range_is_refused_without_a_queue_gap(tmp_path, bad):
    """The refused put gives its queue offsets back: the next message takes offset 0, its record and
    its consume-queue slot agree, and nothing was written for the refused one."""
    store = open_store(tmp_path / "s")
    item = bad()
    put = store.put_messages if isinstance(item, MessageBatchInner) else store.put_message
    with pytest.raises(BadInputError) as err:
        put(item)
    assert "out of its Java type's range" in str(err.value)
    assert store.max_phys_offset == 0
    after = store.put_message(MessageInner("T", 0, b"after", {}))
    assert after.queue_offset == 0 and store.min_offset("T", 0) == 0 and store.max_offset("T", 0) == 1
    assert [(r.queue_offset, r.body) for r in store.get_messages("T", 0, 0, 10)] == [(0, b"after")]
    store.shutdown()


def test_a_batch_to_the_schedule_topic_is_dispatched_by_deliver_time(tmp_path):
    """checkMessageAndReturnSize reads a SCHEDULE_TOPIC_XXXX record's DELAY: its unit carries the
    deliver time (store time + the level's delay), as a single put's does; a DELAY that is not an
    int refuses the batch before anything is written."""
    now = 1_700_000_000_000
    store = open_store(tmp_path / "s", now=now)
    wire = codec.encode_batch_body([(0, b"a", "DELAY\x012"), (0, b"b", "DELAY\x011")])
    result = store.put_messages(MessageBatchInner(SCHEDULE_TOPIC, 1, wire))
    assert result.ok
    assert [u[2] for u in store.get_units(SCHEDULE_TOPIC, 1, 0, 10)] == [now + 5_000, now + 1_000]
    bad = codec.encode_batch_body([(0, b"c", "DELAY\x011"), (0, b"d", "DELAY\x01soon")])
    refused = store.put_messages(MessageBatchInner(SCHEDULE_TOPIC, 1, bad))
    assert refused.status is PutStatus.MESSAGE_ILLEGAL and refused.detail.startswith("message 1:")
    assert store.max_offset(SCHEDULE_TOPIC, 1) == 2 and store.max_phys_offset == result.total_size
    store.shutdown()
