"""The POP KV service's RocksDB (``kvStore/``, column family ``popState``), built with rocksdict in
the layout of the 5.3.3 source (PopConsumerRecord, PopConsumerRocksdbStore): its rows are the
records popped and neither acked nor revived, and an import turns them into unacked checkpoints
(pop_evidence stage ``kv``), so the lineage calls such a record RETRYING, not CONSUMED."""

from __future__ import annotations

import struct

import pyarrow.parquet as pq
import pytest

from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

rocksdict = pytest.importorskip("rocksdict")

POP_TIME_MS, INVISIBLE_MS = 1_700_000_001_000, 5000


def _record_row(group, topic, queue_id, offset, retry_flag=0):
    """(key, value) of a PopConsumerRecord as PopConsumerRocksdbStore writes it."""
    key = (struct.pack(">q", POP_TIME_MS + INVISIBLE_MS) + f"{group}@{topic}@".encode()
           + struct.pack(">i", queue_id) + b"@" + struct.pack(">q", offset))
    value = (f'{{"popTime":{POP_TIME_MS},"groupId":"{group}","topicId":"{topic}","queueId":{queue_id},'
             f'"retryFlag":{retry_flag},"invisibleTime":{INVISIBLE_MS},"offset":{offset},"attemptTimes":0,'
             f'"attemptId":"a-1"}}')
    return key, value.encode()


def _kv_store(root, rows):
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(str(root / "kvStore"), options=opts)
    state = db.create_column_family("popState", opts)
    for key, value in rows:
        state[key] = value
    db.close()
    (root / "kvStore" / "rocksdict-config.json").unlink()


def test_in_flight_pops_are_read_in_order_from_a_kv_store(tmp_path):
    """Each popState row is one popped record with its group, topic, queue, offset, pop time and
    invisible time; rows come back sorted by group, topic, queue and offset."""
    from broker_core.store.pop_kv import PopKVRecord, read_pop_kv_records

    _kv_store(tmp_path, [_record_row("pg", "PopTopic", 1, 7), _record_row("pg", "%RETRY%pg_PopTopic", 0, 2, 1),
                         _record_row("pg", "PopTopic", 0, 3)])
    assert read_pop_kv_records(tmp_path) == [
        PopKVRecord("pg", "%RETRY%pg_PopTopic", 0, 2, POP_TIME_MS, INVISIBLE_MS),
        PopKVRecord("pg", "PopTopic", 0, 3, POP_TIME_MS, INVISIBLE_MS),
        PopKVRecord("pg", "PopTopic", 1, 7, POP_TIME_MS, INVISIBLE_MS),
    ]


def _store_with_two_messages(root):
    store = MessageStore(root, StoreConfig(), lambda: 1_700_000_000_000)
    assert store.load()
    store.start()
    for i in range(2):
        store.put_message(MessageInner("PopTopic", 0, b"m", {"UNIQ_KEY": f"U{i}"}))
    store.shutdown()


def test_an_import_writes_in_flight_pops_as_unacked_checkpoints(tmp_path):
    """An in-flight pop of the KV service is a pop_evidence checkpoint (stage kv, no record); a popState row that is not a PopConsumerRecord makes the
    import warn pop-kv-not-read and write no kv rows."""
    from broker_core.export.store_import import import_store

    root = tmp_path / "store"
    _store_with_two_messages(root)
    _kv_store(root, [_record_row("pg", "PopTopic", 0, 1)])
    run = tmp_path / "run"
    summary = import_store(root, run, broker="broker-a")
    assert summary.problems == [] and "kvStore" in summary.store_items_5x, summary.problems
    rows = pq.read_table(run / "parquet" / "pop_evidence").to_pylist()
    assert [(r["stage"], r["kind"], r["group"], r["topic"], r["queue_id"], r["offsets"], r["invisible_ms"],
             r["phys_offset"], round(r["pop_ts"].timestamp() * 1000)) for r in rows] == [
        ("kv", "ck", "pg", "PopTopic", 0, [1], INVISIBLE_MS, None, POP_TIME_MS)]
    # Read whole, as the config files are, and counted: every file of kvStore/ but RocksDB's lock.
    kv_bytes = sum(f.stat().st_size for f in (root / "kvStore").rglob("*") if f.is_file() and f.name != "LOCK")
    assert summary.store_bytes_read["kvStore"] == kv_bytes > 0
    again = import_store(root, run, broker="broker-a")
    assert again.resumed_from is not None and again.store_bytes_read["kvStore"] == kv_bytes
    assert pq.read_table(run / "parquet" / "pop_evidence").to_pylist() == rows

    bad = tmp_path / "bad"
    _store_with_two_messages(bad)
    _kv_store(bad, [(b"k", b"[1, 2]")])
    summary = import_store(bad, tmp_path / "bad-run", broker="broker-a")
    assert [(p.kind, p.severity) for p in summary.problems] == [("pop-kv-not-read", "warning")]
    assert pq.read_table(tmp_path / "bad-run" / "parquet" / "pop_evidence").num_rows == 0
