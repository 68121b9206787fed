"""The import and audit of a store a real RocketMQ 4.9.4 broker wrote with LMQ on
(tests/data/rocketmq-lmq-4.9.4: enableLmq, enableMultiDispatch; its README says what happened).

One record dispatched to N queues is one message with N deliveries: one commitlog row, one hop,
N lmq_dispatches rows, message_lineage.dispatches = N; never N messages, never a duplicate. The
consumer offsets of such a broker are in config/lmqConsumerOffset.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from assets import checks as c
from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.lmq_dispatches import BROKEN_STATES, PROBLEM_BROKEN, parse_dispatch
from broker_core.export.store_import import import_store

DATA = Path(__file__).resolve().parents[2] / "data" / "rocketmq-lmq-4.9.4"
STORE = DATA / "broker-a"
CQ_UNIT_BYTES = 20
GROUP = "lmq-parent-group"
# The hop kind of a record an LMQ reader pulled, by the topic the pulled message carried.
HOP_KIND_OF_TOPIC = {"SCHEDULE_TOPIC_XXXX": "SCHEDULE", f"%RETRY%{GROUP}": "RETRY", f"%DLQ%{GROUP}": "DLQ"}


def manifest() -> dict:
    return json.loads((DATA / "manifest.json").read_text())


def sends() -> dict[str, dict]:
    return {e["keys"]: e for e in manifest()["events"] if e["ev"] == "send"}


def audit(tmp_path: Path, store: Path, name: str):
    run = tmp_path / name
    summary = import_store(store, run, name=name)
    run_lineage_duckdb(run)
    db = tmp_path / f"{name}.duckdb"
    build_warehouse([run], db)
    with open_read_only(db) as con:
        found = {o.check.name: o for o in c.run_checks(con, c.ALL_CHECKS, name)}
    return run, summary, db, found


def query(db: Path, sql: str, params=()) -> list[tuple]:
    with open_read_only(db) as con:
        return con.execute(sql, list(params)).fetchall()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return audit(tmp_path_factory.mktemp("lmq"), STORE, "lmq")


def test_parse_dispatch_reads_the_two_properties_as_the_broker_writes_them():
    """An %LMQ% queue is queue 0, another the record's queue; without offsets nothing was dispatched; a count mismatch is unreadable."""
    assert parse_dispatch("%LMQ%a,%LMQ%b", "3,7", 1) == ([("%LMQ%a", 0, 3), ("%LMQ%b", 0, 7)], None)
    assert parse_dispatch("other", "5", 2) == ([("other", 2, 5)], None)
    assert parse_dispatch("%LMQ%a", None, 1) == ([("%LMQ%a", 0, None)], None)
    found, why = parse_dispatch("%LMQ%a,%LMQ%b", "3", 1)
    assert found == [] and "2 queue(s)" in why and "1 offset(s)" in why


def test_each_dispatched_send_is_one_record_with_one_position_per_queue(clean):
    """Every send that listed LMQ queues is one commitlog record of its topic, and one lmq_dispatches row IN_QUEUE per listed queue."""
    run, summary, _db, _found = clean
    assert not summary.problems, [str(p) for p in summary.problems]
    records = pq.read_table(run / "parquet" / "commitlog").to_pylist()
    dispatches = pq.read_table(run / "parquet" / "lmq_dispatches").to_pylist()
    assert {d["state"] for d in dispatches} == {"IN_QUEUE"}
    for keys, send in sends().items():
        published = [r for r in records if r["uniq_key"] == send["uniq_key"] and r["topic"] == manifest()["topic"]]
        assert len(published) == 1, keys
        own = [d for d in dispatches if d["phys_offset"] == published[0]["phys_offset"]]
        listed = send["dispatch"].split(",") if send["dispatch"] else []
        assert [d["dispatch_queue"] for d in own] == listed, keys
        assert all(d["dispatch_queue_id"] == 0 and d["uniq_key"] == send["uniq_key"] for d in own)


def test_the_positions_are_what_the_lmq_readers_pulled(clean):
    """Each message an LMQ reader pulled at an LMQ offset is the record lmq_dispatches puts there."""
    run, _summary, _db, _found = clean
    at = {(d["dispatch_queue"], d["dispatch_offset"]): d for d in
          pq.read_table(run / "parquet" / "lmq_dispatches").to_pylist()}
    pulled = [e for e in manifest()["events"] if e["ev"] == "pulled"]
    assert pulled
    for e in pulled:
        row = at[(e["lmq"], e["lmq_offset"])]
        assert (row["uniq_key"], row["phys_offset"]) == (e["uniq_key"], e["phys_offset"])


def test_the_offsets_come_from_lmq_consumer_offset_json(clean):
    """A broker with enableLmq keeps its offsets in lmqConsumerOffset.json: the parent group's and both LMQ readers' commits are imported."""
    run, _summary, _db, _found = clean
    offsets = {(o["group"], o["topic"], o["queue_id"]): o["offset"]
               for o in pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()}
    for commit in (e for e in manifest()["events"] if e["ev"] == "commit"):
        assert offsets[(commit["group"], commit["lmq"], 0)] == commit["offset"]
    assert any(g == manifest()["group"] and t == manifest()["topic"] for g, t, _q in offsets)


def test_the_lineage_shows_one_message_with_its_deliveries(clean):
    """A send to N LMQ queues is one message (one lineage row per group) whose dispatch_queues lists them and dispatches counts N, plus N more per copy a retry re-dispatched; the parent group consumed it."""
    _run, _summary, db, _found = clean
    rows = {key: (queues, dispatches, state) for key, queues, dispatches, state in query(
        db, "SELECT message_key, dispatch_queues, dispatches, final_state FROM message_lineage "
            "WHERE \"group\" = ?", [manifest()["group"]])}
    copies = dict(query(db, "SELECT uniq_key, count(*) FROM commitlog GROUP BY uniq_key"))
    for keys, send in sends().items():
        queues, dispatches, state = rows[send["uniq_key"]]
        listed = send["dispatch"].split(",") if send["dispatch"] else None
        assert queues == listed, keys
        assert dispatches == len(listed or []) * copies[send["uniq_key"]], keys
        assert state in ("CONSUMED", "DLQ"), keys
    assert query(db, "SELECT count(*) FROM message_lineage WHERE \"group\" = ?", [manifest()["group"]]) == [
        (len(sends()),)]


def test_lmq_deliveries_say_which_reader_got_the_message_and_how_often(clean):
    """Each position an LMQ reader pulled is a delivery of the message it names; a message at several positions of a queue (its retry records dispatched again) is one LMQ_REDELIVERED anomaly per queue; a reader's committed offset says what it consumed."""
    _run, _summary, db, _found = clean
    rows = {(q, o): (key, kind, nth, n, consumed) for q, o, key, kind, nth, n, consumed in query(
        db, "SELECT dispatch_queue, dispatch_offset, message_key, hop_kind, delivery, deliveries_in_queue, consumed_by "
            "FROM lmq_deliveries")}
    pulled = [e for e in manifest()["events"] if e["ev"] == "pulled"]
    commits = {e["lmq"]: (e["group"], e["offset"]) for e in manifest()["events"] if e["ev"] == "commit"}
    seen: dict[tuple[str, str], int] = {}
    for e in pulled:
        key, kind, nth, n, consumed = rows[(e["lmq"], e["lmq_offset"])]
        seen[(e["lmq"], key)] = seen.get((e["lmq"], key), 0) + 1
        assert key == e["uniq_key"] and nth == seen[(e["lmq"], key)]
        assert kind == HOP_KIND_OF_TOPIC.get(e["topic"], "PUBLISH")
        group, committed = commits[e["lmq"]]
        assert consumed == ([group] if e["lmq_offset"] < committed else [])
    # Every position past %LMQ%reader's commit in %LMQ%b is consumed by nobody.
    assert query(db, "SELECT count(*) FROM lmq_deliveries WHERE dispatch_queue = '%LMQ%b' AND dispatch_offset >= 4 "
                     "AND len(consumed_by) = 0") == [(12 - 4,)]
    redelivered = query(db, "SELECT message_key, detail FROM anomalies WHERE kind = 'LMQ_REDELIVERED' ORDER BY 1, 2")
    expected = {(key, q) for (q, _o), (key, _k, _nth, n, _c) in rows.items() if n > 1}
    assert len(redelivered) == len(expected) > 0
    # k-7 (to the DLQ after one retry) is in %LMQ%a four times: its PUBLISH, SCHEDULE, RETRY and DLQ records.
    (detail,) = [d for k, d in redelivered if k == sends()["k-7"]["uniq_key"]]
    assert "%LMQ%a holds it 4 times" in detail
    assert [part.split(" (")[1].rstrip(")") for part in detail.split("offsets ")[1].split(":")[0].split(", ")] == [
        "PUBLISH", "SCHEDULE", "RETRY", "DLQ"]


def test_a_clean_lmq_store_passes_the_checks_it_judges(clean):
    """No check fails on the real LMQ store, and the LMQ check judged every position."""
    _run, _summary, db, found = clean
    assert [n for n, o in found.items() if not o.passed] == []
    positions = query(db, "SELECT count(*) FROM lmq_dispatches")[0][0]
    assert found[c.LMQ_IN_CONSUME_QUEUE].judged == positions > 0


def _unit_file(store: Path, lmq: str) -> Path:
    files = sorted((store / "consumequeue" / lmq / "0").iterdir())
    assert files, lmq
    return files[0]


def test_a_unit_naming_another_record_fails_the_check(tmp_path):
    """Two units of %LMQ%a swapped: each names a record that does not list that position; the import reports it and the check fails naming the message."""
    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    path = _unit_file(store, "%LMQ%a")
    data = bytearray(path.read_bytes())
    first, second = bytes(data[:CQ_UNIT_BYTES]), bytes(data[CQ_UNIT_BYTES:2 * CQ_UNIT_BYTES])
    data[:CQ_UNIT_BYTES], data[CQ_UNIT_BYTES:2 * CQ_UNIT_BYTES] = second, first
    path.write_bytes(bytes(data))
    _run, summary, _db, found = audit(tmp_path, store, "swapped")
    assert any(p.kind == PROBLEM_BROKEN and "%LMQ%a" in p.file for p in summary.errors)
    outcome = found[c.LMQ_IN_CONSUME_QUEUE]
    assert not outcome.passed and outcome.violations >= 2
    assert all(e["message_key"] and e["detail"].startswith("OTHER_RECORD") for e in outcome.examples)


def test_a_missing_unit_fails_the_check(tmp_path):
    """The last unit of %LMQ%b zeroed (a dispatch the consume queue lost in a store at rest): NOT_IN_QUEUE, the check fails."""
    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    path = _unit_file(store, "%LMQ%b")
    data = bytearray(path.read_bytes())
    used = next(i for i in range(0, len(data), CQ_UNIT_BYTES) if not any(data[i:i + CQ_UNIT_BYTES]))
    data[used - CQ_UNIT_BYTES:used] = bytes(CQ_UNIT_BYTES)
    path.write_bytes(bytes(data))
    _run, _summary, db, found = audit(tmp_path, store, "lost")
    assert found[c.LMQ_IN_CONSUME_QUEUE].violations == 1
    assert query(db, "SELECT state FROM lmq_dispatches WHERE state IN (SELECT unnest(?))", [list(BROKEN_STATES)]) == [
        ("NOT_IN_QUEUE",)]


def _lineage_tables(run: Path) -> dict:
    import pyarrow as pa

    return {table: pa.concat_tables([pq.read_table(p) for p in sorted((run / "lineage" / table).glob("part-*"))])
            for table in ("message_hops", "message_lineage")}


def test_spark_builds_the_same_lmq_lineage_as_duckdb(spark, tmp_path):
    """The fan-out rule is written once: Spark and DuckDB give the LMQ store the same hops and lineage, dispatch_queues and dispatches included."""
    from assets.lineage import run_lineage

    run = tmp_path / "lmq-spark"
    import_store(STORE, run, name="lmq-spark")
    run_lineage(run, spark)
    on_spark = _lineage_tables(run)
    run_lineage_duckdb(run)
    on_duckdb = _lineage_tables(run)
    for table, rows in on_spark.items():
        assert on_duckdb[table].schema == rows.schema and on_duckdb[table].equals(rows), table
    assert max(on_spark["message_lineage"].column("dispatches").to_pylist()) == 6


def test_a_unit_no_record_claims_fails_the_check(tmp_path):
    """A unit appended to %LMQ%a naming k-2's record, which lists no LMQ: STRAY, reported by the import and the check."""
    import struct

    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    phys = int(sends()["k-2"]["msg_id"][-16:], 16)
    log = sorted((store / "commitlog").iterdir())[0].read_bytes()
    size = struct.unpack_from(">i", log, phys)[0]
    path = _unit_file(store, "%LMQ%a")
    data = bytearray(path.read_bytes())
    used = next(i for i in range(0, len(data), CQ_UNIT_BYTES) if not any(data[i:i + CQ_UNIT_BYTES]))
    data[used:used + CQ_UNIT_BYTES] = struct.pack(">qiq", phys, size, 0)
    path.write_bytes(bytes(data))
    _run, summary, db, found = audit(tmp_path, store, "stray")
    assert any(p.kind == PROBLEM_BROKEN and "STRAY" not in p.reason and "does not list" in p.reason
               for p in summary.errors)
    assert found[c.LMQ_IN_CONSUME_QUEUE].violations == 1
    assert query(db, "SELECT state, phys_offset, dispatch_offset FROM lmq_dispatches WHERE state = 'STRAY'") == [
        ("STRAY", phys, used // CQ_UNIT_BYTES)]


def test_a_store_that_shows_no_lmq_has_no_dispatch_rows(tmp_path):
    """The 4.9.4 store fixture (no %LMQ% queue, no lmqConsumerOffset.json): an empty lmq_dispatches, its records' properties not read again."""
    run = tmp_path / "plain"
    summary = import_store(DATA.parent / "rocketmq-store-4.9.4" / "store-clean", run)
    assert summary.rows_by_table["lmq_dispatches"] == 0


def test_a_position_the_broker_may_not_have_written_yet_is_pending_not_missing():
    """Past the queue's last unit is PENDING while the broker runs (or crashed), NOT_IN_QUEUE at rest; below its first unit QUEUE_CUT; no queue NO_QUEUE."""
    from broker_core.export.lmq_dispatches import _Queue, _state

    queue = _Queue(units={5: (100, 40), 6: (140, 40)})
    assert _state(queue, 5, 100, settled=True) == "IN_QUEUE"
    assert _state(queue, 6, 100, settled=True) == "OTHER_RECORD"
    assert _state(queue, 4, 60, settled=True) == "QUEUE_CUT"
    assert _state(queue, 7, 180, settled=False) == "PENDING"
    assert _state(queue, 7, 180, settled=True) == "NOT_IN_QUEUE"
    assert _state(None, 0, 0, settled=True) == "NO_QUEUE"
    assert _state(queue, None, 0, settled=True) == "NOT_DISPATCHED"


def test_trace_shows_the_fan_out_of_a_message(clean):
    """`retry-audit trace` of k-7 lists its four %LMQ%a positions (PUBLISH, SCHEDULE, RETRY, DLQ), each consumed by lmq-reader."""
    from orchestration.cmd_pipeline import format_trace, trace_messages

    _run, _summary, db, _found = clean
    with open_read_only(db) as con:
        text = format_trace(trace_messages(con, sends()["k-7"]["uniq_key"]))
    assert "fan-out: 4 LMQ positions in %LMQ%a (one message; a retry record is dispatched again)" in text
    lines = [line for line in text.splitlines() if line.startswith("  %LMQ%a[0]@")]
    assert [line.split()[2] for line in lines] == ["PUBLISH", "SCHEDULE", "RETRY", "DLQ"]
    assert all(line.endswith("IN_QUEUE  consumed by lmq-reader") for line in lines)


def test_a_damaged_lmq_consumer_offset_json_is_reported_and_its_backup_read(tmp_path):
    """lmqConsumerOffset.json cut short: the import names the file in store_problems and takes the offsets from its .bak."""
    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    path = store / "config" / "lmqConsumerOffset.json"
    path.write_text(path.read_text()[:40])
    run = tmp_path / "damaged"
    summary = import_store(store, run)
    (problem,) = [p for p in summary.problems if p.kind == "bad-config-file"]
    assert problem.file == "config/lmqConsumerOffset.json" and "lmqConsumerOffset.json.bak was read instead" in problem.reason
    offsets = {(o["group"], o["topic"]) for o in pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()}
    assert ("lmq-reader", "%LMQ%a") in offsets
