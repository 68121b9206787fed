"""import_store: a real 4.9.4 store into the contract tables, valid prefix by default, strict on demand."""

from __future__ import annotations

import json
import struct

import pyarrow.parquet as pq
import pytest
from testdata import STORE_MANIFEST

from broker_core import codec
from broker_core.errors import BadInputError, CorruptStoreError
from broker_core.export.parquet import read_table
from broker_core.export.schema import RAW_TABLES
from broker_core.export.store_import import commitlog_rows, import_store
from broker_core.store.config_files import save_consumer_offsets
from broker_core.store.message_store import MessageBatchInner, MessageInner, MessageStore, StoreConfig
from broker_core.store.reader import tree_digest

MANIFEST = STORE_MANIFEST


@pytest.fixture(scope="module")
def manifest_data():
    return json.loads(MANIFEST.read_text())


def _messages(manifest_data):
    return [e for e in manifest_data["commitLog"] if e["kind"] == "MESSAGE"]


def test_clean_store_rows_equal_manifest(store_fixtures, manifest_data, tmp_path):
    """store-clean gives 112 commitlog rows whose contract columns equal the manifest's records."""
    summary = import_store(store_fixtures / "store-clean", tmp_path / "clean")
    rows = read_table(tmp_path / "clean", "commitlog").to_pylist()
    want = _messages(manifest_data)
    assert summary.records == len(rows) == 112 and summary.blanks == 3
    assert summary.records_by_topic == manifest_data["recordCounts"]["byTopic"]
    for row, rec in zip(rows, want, strict=True):
        props = rec["properties"]
        assert row["run_id"] == "clean"
        assert row["phys_offset"] == rec["physicalOffset"] and row["total_size"] == rec["size"]
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (rec["topic"], rec["queueId"], rec["queueOffset"])
        assert row["msg_id"] == rec["offsetMsgId"]
        assert row["uniq_key"] == props.get("UNIQ_KEY")
        assert row["origin_msg_id"] == props.get("ORIGIN_MESSAGE_ID")
        assert row["real_topic"] == props.get("REAL_TOPIC")
        assert row["real_queue_id"] == (int(props["REAL_QID"]) if "REAL_QID" in props else None)
        assert row["retry_topic"] == props.get("RETRY_TOPIC")
        assert row["delay_level"] == int(props.get("DELAY", 0))
        assert row["reconsume_times"] == rec["reconsumeTimes"]
        assert row["tags"] == props.get("TAGS") and row["keys"] == props.get("KEYS")
        assert (row["body_size"], row["body_crc"], row["sys_flag"]) == (rec["bodyLength"], rec["bodyCRC"], rec["sysFlag"])
        assert int(row["store_ts"].timestamp() * 1000) == rec["storeTimestamp"]
        assert int(row["born_ts"].timestamp() * 1000) == rec["bornTimestamp"]
        assert (row["born_host"], row["store_host"]) == (rec["bornHost"], rec["storeHost"])
        assert row["properties"] == list(props.items())
        assert f"commitlog/{row['file_name']}" == rec["file"]


def test_every_table_exists_with_its_schema(store_fixtures, tmp_path):
    """An import writes every raw table with the contract schema, one runs row and the delay offsets."""
    import_store(store_fixtures / "store-clean", tmp_path / "run", name="broker-a")
    for table, schema in RAW_TABLES.items():
        assert pq.read_schema(next((tmp_path / "run" / "parquet" / table).glob("*.parquet"))) == schema, table
    runs = read_table(tmp_path / "run", "runs").to_pylist()
    assert len(runs) == 1 and runs[0]["source"] == "import" and runs[0]["run_id"] == "broker-a"
    assert runs[0]["records_written"] == 112
    # Levels 3 and 4 of the fixture broker's "1s 2s 3s 4s ..." table, read from its schedule queues.
    assert runs[0]["delay_levels_ms"] == [None, None, 3000, 4000]
    delay = read_table(tmp_path / "run", "delay_offsets").to_pylist()
    assert [(r["delay_level"], r["offset"]) for r in delay] == [(3, 22), (4, 8)]
    assert read_table(tmp_path / "run", "store_problems").num_rows == 0


def test_crashed_store_exports_valid_prefix(store_fixtures, tmp_path):
    """store-crashed gives 111 rows and a store_problems row for the torn record at 54903."""
    summary = import_store(store_fixtures / "store-crashed", tmp_path / "crashed")
    assert summary.records == read_table(tmp_path / "crashed", "commitlog").num_rows == 111
    problems = read_table(tmp_path / "crashed", "store_problems").to_pylist()
    torn = [p for p in problems if p["file_name"] == "commitlog/00000000000000049152"]
    assert len(torn) == 1 and torn[0]["offset"] == 54903 and torn[0]["severity"] == "error"


def test_strict_crashed_leaves_no_output(store_fixtures, tmp_path):
    """Under strict, damage raises CorruptStoreError naming file and offset, and no run directory remains."""
    out = tmp_path / "runs" / "crashed"
    with pytest.raises(CorruptStoreError) as info:
        import_store(store_fixtures / "store-crashed", out, strict=True)
    assert "commitlog/00000000000000049152@54903" in str(info.value)
    assert info.value.exit_code == 2
    assert not out.exists()
    assert list((tmp_path / "runs").iterdir()) == []


def test_strict_clean_succeeds(store_fixtures, tmp_path):
    """A clean store imports under strict with no problems."""
    assert import_store(store_fixtures / "store-clean", tmp_path / "ok", strict=True).problems == []


def _flip_body_byte(store, msgs):
    e = msgs[50]
    with open(store / e["file"], "r+b") as fh:
        fh.seek(e["filePos"] + 88)
        b = fh.read(1)
        fh.seek(e["filePos"] + 88)
        fh.write(bytes([b[0] ^ 0x01]))
    return e["file"], e["physicalOffset"]


def _bad_magic(store, msgs):
    e = msgs[60]
    with open(store / e["file"], "r+b") as fh:
        fh.seek(e["filePos"] + 4)
        fh.write(b"\x00\x00\x00\x01")
    return e["file"], e["physicalOffset"]


def _truncate_last(store, msgs):
    e = msgs[-1]
    with open(store / e["file"], "r+b") as fh:
        fh.truncate(e["filePos"] + 50)
    return e["file"], None


def _wrong_size(store, msgs):
    rel = "commitlog/00000000000000000000"
    with open(store / rel, "ab") as fh:
        fh.write(b"x")
    return rel, 16384


def _bad_config(store, msgs):
    (store / "config" / "delayOffset.json").write_text("{offsetTable: 3}")
    return "config/delayOffset.json", 1


def _cq_past_end(store, msgs):
    rel = "consumequeue/PayTopic/1/00000000000000000000"
    with open(store / rel, "r+b") as fh:
        fh.seek(2 * 20)
        fh.write(struct.pack(">qiq", 99_999, 400, 0))
    return rel, 40


@pytest.mark.parametrize("damage", [_flip_body_byte, _bad_magic, _truncate_last, _wrong_size, _bad_config,
                                    _cq_past_end], ids=lambda f: f.__name__.strip("_"))
def test_damaged_copies_fail_strict_and_report_by_default(writable_store_copy, manifest_data, tmp_path, damage):
    """Each hand-made damage is a store_problems row naming the file, and strict refuses the store."""
    store = writable_store_copy("store-clean")
    rel, offset = damage(store, _messages(manifest_data))
    summary = import_store(store, tmp_path / "lenient")
    assert any(p.file == rel and (offset is None or p.offset == offset) for p in summary.errors), \
        [str(p) for p in summary.problems]
    rows = read_table(tmp_path / "lenient", "store_problems").to_pylist()
    assert any(r["file_name"] == rel for r in rows)
    with pytest.raises(CorruptStoreError, match=rel.replace("%", ".")):
        import_store(store, tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict").exists()


def test_import_is_read_only(store_fixtures, tmp_path):
    """Importing leaves the store's files byte-identical and creates nothing inside it."""
    before = tree_digest(store_fixtures)
    import_store(store_fixtures / "store-crashed", tmp_path / "a")
    import_store(store_fixtures / "store-clean", tmp_path / "b")
    assert tree_digest(store_fixtures) == before


def test_read_only_copy_imports(writable_store_copy, tmp_path):
    """A store whose files and directories are chmod'ed read-only imports like the original."""
    store = writable_store_copy("store-clean")
    paths = sorted(store.rglob("*"), key=lambda p: -len(p.parts))
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
    store.chmod(0o555)
    try:
        assert import_store(store, tmp_path / "ro").records == 112
    finally:
        store.chmod(0o755)
        for path in paths:
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_consumer_offsets_become_restore_events(writable_store_copy, tmp_path):
    """consumerOffset.json entries become consumer_offsets rows with event RESTORE."""
    store = writable_store_copy("store-clean")
    save_consumer_offsets(store / "config", {"OrderTopic@GroupA": {0: 10, 1: 12}, "%RETRY%GroupA@GroupA": {0: 16}})
    import_store(store, tmp_path / "run")
    rows = read_table(tmp_path / "run", "consumer_offsets").to_pylist()
    got = {(r["group"], r["topic"], r["queue_id"], r["offset"], r["event"]) for r in rows}
    assert got == {("GroupA", "OrderTopic", 0, 10, "RESTORE"), ("GroupA", "OrderTopic", 1, 12, "RESTORE"),
                   ("GroupA", "%RETRY%GroupA", 0, 16, "RESTORE")}
    assert all(r["ts"] is not None for r in rows)


def test_commitlog_rows_are_the_import_rows(store_fixtures, tmp_path):
    """commitlog_rows yields, in physical order, the same rows import_store writes."""
    rows = list(commitlog_rows(store_fixtures / "store-clean", "r1", "broker-a"))
    import_store(store_fixtures / "store-clean", tmp_path / "r1", broker="broker-a")
    written = read_table(tmp_path / "r1", "commitlog").to_pylist()
    assert [r["phys_offset"] for r in rows] == sorted(r["phys_offset"] for r in rows)
    assert [(r["phys_offset"], r["msg_id"], r["broker"]) for r in rows] == \
        [(r["phys_offset"], r["msg_id"], r["broker"]) for r in written]


def test_bad_run_id_and_output_inside_store(store_fixtures, writable_store_copy, tmp_path):
    """A run id outside [A-Za-z0-9_-]+ and an output directory inside the store are bad input."""
    with pytest.raises(BadInputError, match="run id"):
        import_store(store_fixtures / "store-clean", tmp_path / "x", name="bad name!")
    store = writable_store_copy("store-clean")
    with pytest.raises(BadInputError, match="inside the store"):
        import_store(store, store / "out")
    assert not (store / "out").exists()


def test_progress_reports_every_file(store_fixtures, tmp_path):
    """The progress callback hears about each commit-log file in order, with the records so far."""
    seen = []
    import_store(store_fixtures / "store-clean", tmp_path / "p", progress=seen.append)
    assert [(p.file_index, p.file_count) for p in seen] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert [p.records for p in seen] == sorted(p.records for p in seen) and seen[0].records == 0


def test_a_batch_sends_records_import_one_row_per_message(tmp_path):
    """A store holding a batch send (put_messages) between single puts imports as one commitlog row
    per message, each with its own UNIQ_KEY (what the lineage keys on), the batch's CLUSTER, and
    consecutive queue offsets that go on across the single puts."""
    root = tmp_path / "store"
    store = MessageStore(root, StoreConfig(), lambda: 1_700_000_000_000)
    assert store.load()
    store.start()
    store.put_message(MessageInner("Orders", 0, b"single", {"UNIQ_KEY": "K-single", "TAGS": "t"}))
    keys = [f"K-batch-{i}" for i in range(3)]
    wire = codec.encode_batch_body((0, f"body {k}".encode(), f"UNIQ_KEY\x01{k}\x02TAGS\x01t") for k in keys)
    assert store.put_messages(MessageBatchInner("Orders", 0, wire, properties_string="CLUSTER\x01c1")).ok
    store.put_message(MessageInner("Orders", 0, b"after", {"UNIQ_KEY": "K-after"}))
    store.shutdown()

    summary = import_store(root, tmp_path / "out", name="batch")
    rows = read_table(tmp_path / "out", "commitlog").to_pylist()
    assert summary.records == 5
    assert [r["uniq_key"] for r in rows] == ["K-single", *keys, "K-after"]
    assert [r["queue_offset"] for r in rows] == [0, 1, 2, 3, 4]
    assert [dict(r["properties"]).get("CLUSTER") for r in rows] == [None, "c1", "c1", "c1", None]
    assert len({r["msg_id"] for r in rows}) == 5


@pytest.mark.parametrize("strict", [False, True])
def test_a_log_cut_by_retention_imports_with_its_first_offset(retained_store_copy, manifest_data, tmp_path,
                                                                strict):
    """A store whose oldest file retention deleted imports (also strictly) with first_offset in the
    summary, its JSON and the runs row; a whole store's first_offset is 0."""
    summary = import_store(retained_store_copy("store-clean", 1), tmp_path / "cut", strict=strict)
    kept = [e for e in _messages(manifest_data) if e["physicalOffset"] >= 16384]
    assert (summary.first_offset, summary.valid_end, summary.records) == (16384, 55490, len(kept))
    assert summary.problems == [] and summary.to_json()["first_offset"] == 16384
    assert read_table(tmp_path / "cut", "runs").column("first_offset").to_pylist() == [16384]
    assert read_table(tmp_path / "cut", "commitlog").column("phys_offset").to_pylist() == \
        [e["physicalOffset"] for e in kept]
    whole = import_store(MANIFEST.parent / "store-clean", tmp_path / "whole")
    assert whole.first_offset == 0
    assert read_table(tmp_path / "whole", "runs").column("first_offset").to_pylist() == [0]
