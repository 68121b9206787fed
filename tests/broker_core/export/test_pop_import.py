"""The import's POP tables on a store holding 5.x POP bookkeeping records (written here with the
model's store, in the shapes a real 5.3.3 broker wrote: docs/rocketmq-5x.md)."""

from __future__ import annotations

import pyarrow.parquet as pq

from broker_core.export.store_import import import_store
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"
WHEEL = "rmq_sys_wheel_timer"
CK = (b'{"bm":0,"bn":"broker-a","c":"pg","d":[0,1],"it":5000,"n":2,"pt":1000,"q":0,"reviveTime":6000,'
      b'"ro":0,"so":0,"t":"PopTopic"}')
ACK = b'{"ao":1,"bn":"broker-a","c":"pg","pt":1000,"q":0,"so":0,"t":"PopTopic"}'


def write_store(root):
    store = MessageStore(root, StoreConfig(), lambda: 1_700_000_000_000)
    assert store.load()
    store.start()
    store.put_message(MessageInner("PopTopic", 0, b"m0", {"UNIQ_KEY": "U0"}))
    store.put_message(MessageInner("PopTopic", 0, b"m1", {"UNIQ_KEY": "U1"}))
    # A timer message of the user's: not POP bookkeeping.
    store.put_message(MessageInner(WHEEL, 0, b"later", {"UNIQ_KEY": "U2", "REAL_TOPIC": "PopTopic", "REAL_QID": "0"}))
    ck_key = "PopTopic@0@0@pg@1000@broker-a@ck"
    store.put_message(MessageInner(WHEEL, 0, CK, {"UNIQ_KEY": ck_key, "TAGS": "ck", "REAL_TOPIC": REVIVE,
                                                   "REAL_QID": "0", "TIMER_DELIVER_MS": "5000"}))
    store.put_message(MessageInner(WHEEL, 0, ACK, {"UNIQ_KEY": "PopTopic@0@1@pg@1000@broker-a@ack", "TAGS": "ack",
                                                    "REAL_TOPIC": REVIVE, "REAL_QID": "0"}))
    store.put_message(MessageInner(REVIVE, 0, CK, {"UNIQ_KEY": ck_key, "TAGS": "ck", "REAL_TOPIC": REVIVE,
                                                    "REAL_QID": "0", "TIMER_DEQUEUE_MS": "5000"}))
    store.put_message(MessageInner(REVIVE, 0, b"{not json", {"UNIQ_KEY": "x@ck", "TAGS": "ck"}))
    store.put_message(MessageInner("%RETRY%pg_PopTopic", 0, b"m0", {"UNIQ_KEY": "U0", "1ST_POP_TIME": "1000"},
                                   reconsume_times=1))
    store.shutdown()


def test_pop_records_are_decoded_once_per_copy_and_a_bad_body_is_a_warning(tmp_path):
    """Each checkpoint and ack, in the timer and in the revive topic, is a pop_evidence row; a
    body that does not decode is a pop-body-undecodable warning; the retry topic is owned by the
    group its checkpoint names."""
    write_store(tmp_path / "store")
    summary = import_store(tmp_path / "store", tmp_path / "run", broker="broker-a")
    assert summary.errors == []
    assert [(p.kind, p.severity) for p in summary.problems] == [("pop-body-undecodable", "warning")]
    rows = pq.read_table(tmp_path / "run" / "parquet" / "pop_evidence").to_pylist()
    assert [(r["stage"], r["kind"], r["group"], r["topic"], r["start_offset"], r["offsets"], r["invisible_ms"])
            for r in rows] == [
        ("timer", "ck", "pg", "PopTopic", 0, [0, 1], 5000),
        ("timer", "ack", "pg", "PopTopic", 0, [1], None),
        ("revive", "ck", "pg", "PopTopic", 0, [0, 1], 5000),
    ]
    assert rows == sorted(rows, key=lambda r: r["phys_offset"])
    owners = pq.read_table(tmp_path / "run" / "parquet" / "retry_topics").to_pylist()
    assert [(o["retry_topic"], o["group"], o["origin_topic"], o["resolution"]) for o in owners] == [
        ("%RETRY%pg_PopTopic", "pg", "PopTopic", "checkpoint")]
    problems = pq.read_table(tmp_path / "run" / "parquet" / "store_problems").to_pylist()
    assert [p["kind"] for p in problems] == ["pop-body-undecodable"]


def test_both_decoders_write_the_same_pop_tables(tmp_path):
    """The columnar and the per-record decoder give the same POP tables."""
    write_store(tmp_path / "store")
    tables = []
    for decoder in ("columnar", "reference"):
        run = tmp_path / decoder
        import_store(tmp_path / "store", run, name="run", broker="broker-a", decoder=decoder)
        tables.append([pq.read_table(run / "parquet" / t).to_pylist() for t in ("pop_evidence", "retry_topics")])
    assert tables[0] == tables[1] and tables[0][0]
