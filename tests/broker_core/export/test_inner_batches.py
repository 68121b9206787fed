"""The import unwraps 5.x inner batches into ``inner_messages``: one row per message of the
batch record's body, as the consumer's client unwraps it (docs/rocketmq-5x.md, "Record forms").

The bodies are encoded here byte by byte as the Java client writes them
(``MessageDecoder.encodeMessage``: totalSize, magic 0, bodyCRC 0, flag, bodyLen, body, int16
propertiesLen, properties), not with the project's codec, and stored as the broker stores an
inner batch: one record, sysFlag 0x40 | 0x80, INNER_NUM, INNER_BASE and the batch's own UNIQ_KEY.
"""

from __future__ import annotations

import struct
import zlib

import pyarrow.parquet as pq
import pytest

from broker_core.export.parquet import read_table
from broker_core.export.store_import import import_store
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

NEED_UNWRAP, INNER_BATCH = 0x40, 0x80
STORE_TS = 1_700_000_000_000
BORN_TS = 1_699_999_999_000


def java_encode_message(flag: int, body: bytes, properties: list[tuple[str, str]]) -> bytes:
    """``MessageDecoder.encodeMessage`` of one message (messageProperties2String: name \\x01
    value \\x02 for each property, the last one's \\x02 too)."""
    props = "".join(f"{k}\x01{v}\x02" for k, v in properties).encode("utf-8")
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(props)) + props


def inner_props(i: int, prefix: str) -> list[tuple[str, str]]:
    return [("KEYS", f"{prefix}-key-{i}"), ("UNIQ_KEY", f"{prefix}-U{i}"), ("TAGS", "tagA"), ("WAIT", "true")]


def batch_message(topic: str, queue_id: int, body: bytes, uniq: str, inner_num: int, inner_base: int) -> MessageInner:
    return MessageInner(topic, queue_id, body, {"INNER_NUM": str(inner_num), "INNER_BASE": str(inner_base),
                                                "UNIQ_KEY": uniq, "CLUSTER": "DefaultCluster"},
                        sys_flag=NEED_UNWRAP | INNER_BATCH, born_ts=BORN_TS, born_host="10.0.0.7:50000")


GOOD = [(0, b"batch body 0", inner_props(0, "good")), (3, b"", inner_props(1, "good")),
        (0, "ünïcode body 2".encode(), inner_props(2, "good"))]


def write_store(root, *, truncated: bool = False, inner_num: int | None = None):
    """A store: a plain message, a good inner batch of three (queue 0), then a second batch of two
    (queue 1) whose body is cut short when ``truncated``; ``inner_num`` overrides the good batch's
    INNER_NUM."""
    store = MessageStore(root, StoreConfig(), lambda: STORE_TS)
    assert store.load()
    store.start()
    store.put_message(MessageInner("BatchTopic", 0, b"plain", {"UNIQ_KEY": "PLAIN"}, born_ts=BORN_TS))
    good = b"".join(java_encode_message(*m) for m in GOOD)
    # The plain message took queue offset 0, so the batch starts at 1 (the store assigns it).
    store.put_message(batch_message("BatchTopic", 0, good, "BATCH-GOOD", inner_num or len(GOOD), 1))
    second = b"".join(java_encode_message(0, f"second {i}".encode(), inner_props(i, "second")) for i in range(2))
    if truncated:
        second = second[:-7]  # the last message's properties run past the end
    store.put_message(batch_message("BatchTopic", 1, second, "BATCH-SECOND", 2, 0))
    store.shutdown()


def commitlog_by_uniq(run):
    return {r["uniq_key"]: r for r in read_table(run, "commitlog").to_pylist()}


def test_an_inner_batch_imports_one_row_per_message_the_client_unwraps(tmp_path):
    """Each message of a batch body is an inner_messages row: its own UNIQ_KEY, TAGS, KEYS, flag,
    body size and CRC and properties in stored order; the batch record's topic, queue, times and
    commit-log offset; queue offsets from the record's on. The batch record stays in commitlog."""
    write_store(tmp_path / "store")
    summary = import_store(tmp_path / "store", tmp_path / "run", broker="broker-a")
    assert summary.problems == []
    records = commitlog_by_uniq(tmp_path / "run")
    assert set(records) == {"PLAIN", "BATCH-GOOD", "BATCH-SECOND"}
    good, second = records["BATCH-GOOD"], records["BATCH-SECOND"]
    rows = read_table(tmp_path / "run", "inner_messages").to_pylist()
    assert summary.rows_by_table["inner_messages"] == len(rows) == 5
    want = [(good["phys_offset"], i, "BatchTopic", 0, 1 + i, f"good-U{i}", "tagA", f"good-key-{i}", flag, len(body),
             zlib.crc32(body) & 0x7FFFFFFF, props)
            for i, (flag, body, props) in enumerate(GOOD)]
    want += [(second["phys_offset"], i, "BatchTopic", 1, i, f"second-U{i}", "tagA", f"second-key-{i}", 0,
              len(f"second {i}"), zlib.crc32(f"second {i}".encode()) & 0x7FFFFFFF, inner_props(i, "second"))
             for i in range(2)]
    assert [(r["phys_offset"], r["inner_index"], r["topic"], r["queue_id"], r["queue_offset"], r["uniq_key"],
             r["tags"], r["keys"], r["flag"], r["body_size"], r["body_crc"], r["properties"]) for r in rows] == want
    assert {(r["run_id"], r["broker"]) for r in rows} == {("run", "broker-a")}
    assert {(int(r["born_ts"].timestamp() * 1000), int(r["store_ts"].timestamp() * 1000)) for r in rows} == {
        (BORN_TS, STORE_TS)}


def test_both_decoders_write_the_same_inner_messages(tmp_path):
    write_store(tmp_path / "store")
    for decoder in ("reference", "columnar"):
        import_store(tmp_path / "store", tmp_path / decoder, name="run", broker="broker-a", decoder=decoder)
    ref = pq.read_table(tmp_path / "reference" / "parquet" / "inner_messages")
    col = pq.read_table(tmp_path / "columnar" / "parquet" / "inner_messages")
    assert ref.num_rows == 5 and ref.equals(col)


@pytest.mark.parametrize("strict", [False, True])
def test_a_truncated_batch_body_is_a_warning_naming_broker_and_offset_and_loses_nothing(tmp_path, strict):
    """A body cut short is not unwrapped (the client's decode throws and it delivers the record
    as it is): an inner-batch-undecodable warning names the broker and the record's offset, the
    record stays in commitlog, the other batch is unwrapped; not an error, under --strict either."""
    write_store(tmp_path / "store", truncated=True)
    summary = import_store(tmp_path / "store", tmp_path / "run", broker="broker-a", strict=strict)
    records = commitlog_by_uniq(tmp_path / "run")
    assert set(records) == {"PLAIN", "BATCH-GOOD", "BATCH-SECOND"}
    cut = records["BATCH-SECOND"]
    (problem,) = summary.problems
    assert (problem.kind, problem.severity, problem.offset) == ("inner-batch-undecodable", "warning",
                                                                cut["phys_offset"])
    assert f"broker broker-a: inner-batch record at commit-log offset {cut['phys_offset']}" in problem.reason
    assert "BATCH-SECOND" in problem.reason and "stays one message" in problem.reason
    stored = read_table(tmp_path / "run", "store_problems").to_pylist()
    assert [(p["broker"], p["offset"], p["kind"], p["severity"]) for p in stored] == [
        ("broker-a", cut["phys_offset"], "inner-batch-undecodable", "warning")]
    rows = read_table(tmp_path / "run", "inner_messages").to_pylist()
    assert [(r["phys_offset"], r["uniq_key"]) for r in rows] == [
        (records["BATCH-GOOD"]["phys_offset"], f"good-U{i}") for i in range(3)]


def test_an_inner_num_the_body_does_not_hold_is_a_warning_and_the_body_wins(tmp_path):
    """INNER_NUM 5 on a body of three: unwrapped as the body says (the client does the same),
    with an inner-batch-count-mismatch warning."""
    write_store(tmp_path / "store", inner_num=5)
    summary = import_store(tmp_path / "store", tmp_path / "run", broker="broker-a")
    good = commitlog_by_uniq(tmp_path / "run")["BATCH-GOOD"]
    assert [(p.kind, p.offset) for p in summary.problems] == [("inner-batch-count-mismatch", good["phys_offset"])]
    assert "INNER_NUM is 5, the body holds 3 messages" in summary.problems[0].reason
    rows = read_table(tmp_path / "run", "inner_messages").to_pylist()
    assert [r["uniq_key"] for r in rows if r["phys_offset"] == good["phys_offset"]] == [f"good-U{i}" for i in range(3)]
