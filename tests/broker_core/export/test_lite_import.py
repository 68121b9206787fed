"""The import and audit of a store a real RocketMQ 5.5.1 broker wrote with Lite-topic and priority
messages (tests/data/rocketmq-lite-5.5.1; its README says what happened).

A Lite message is one record of its parent topic dispatched to one LMQ, %LMQ%$<parent>$<lite>:
one message, one dispatch, read like any LMQ position; a priority message is one record with
its priority property, in the queue of its priority band. Nothing about them is damage, and no check fails on the store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from assets import checks as c
from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store

DATA = Path(__file__).resolve().parents[2] / "data" / "rocketmq-lite-5.5.1"
LITE_PROPERTY, PRIORITY_PROPERTY = "__LITE_TOPIC", "_SYS_MSG_PRIORITY_"


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lite")
    run = tmp / "lite"
    summary = import_store(DATA / "broker-a", run, name="lite")
    run_lineage_duckdb(run)
    db = tmp / "lite.duckdb"
    build_warehouse([run], db)
    with open_read_only(db) as con:
        found = {o.check.name: o for o in c.run_checks(con, c.ALL_CHECKS, "lite")}
    events = json.loads((DATA / "manifest.json").read_text())["events"]
    return run, summary, db, found, events


def test_each_lite_send_is_one_record_dispatched_to_its_lite_lmq(audited):
    """A send with __LITE_TOPIC=x to LiteTopic is one LiteTopic record with one IN_QUEUE position in %LMQ%$LiteTopic$x."""
    run, summary, _db, _found, events = audited
    assert not summary.problems, [str(p) for p in summary.problems]
    records = {r["uniq_key"]: r for r in pq.read_table(run / "parquet" / "commitlog").to_pylist()}
    dispatches = pq.read_table(run / "parquet" / "lmq_dispatches").to_pylist()
    lite_sends = [e for e in events if e["ev"] == "send" and e["lite"]]
    assert len(lite_sends) == 6 and all(e["status"] == "SEND_OK" for e in lite_sends)
    for send in lite_sends:
        record = records[send["uniq_key"]]
        assert record["topic"] == "LiteTopic" and dict(record["properties"])[LITE_PROPERTY] == send["lite"]
        own = [d for d in dispatches if d["phys_offset"] == record["phys_offset"]]
        assert [(d["dispatch_queue"], d["dispatch_queue_id"], d["state"]) for d in own] == [
            (f"%LMQ%$LiteTopic${send['lite']}", 0, "IN_QUEUE")]


def test_the_lite_group_offsets_are_read_from_a_5_5_lmq_consumer_offset_json(audited):
    """5.5's lmqConsumerOffset.json (with dataVersion and groupTopicMap) gives the lite group's offset per lite LMQ: chat-1 acked to 4, chat-2 never acked."""
    run, _summary, _db, _found, _events = audited
    offsets = {(o["group"], o["topic"], o["queue_id"]): o["offset"]
               for o in pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()}
    assert offsets == {("lite-group", "%LMQ%$LiteTopic$chat-1", 0): 4, ("lite-group", "%LMQ%$LiteTopic$chat-2", 0): 0}


def test_lite_and_priority_messages_are_one_message_each_and_no_check_fails(audited):
    """Twelve sends are twelve messages; a lite one has dispatches 1; a priority one keeps its priority in its properties; nothing fails, the LMQ check judged the 6 positions."""
    _run, _summary, db, found, events = audited
    with open_read_only(db) as con:
        rows = con.execute("SELECT message_key, dispatch_queues, dispatches FROM message_lineage").fetchall()
        priorities = dict(con.execute(f"SELECT uniq_key, properties['{PRIORITY_PROPERTY}'] FROM commitlog "
                                      "WHERE topic = 'PrioTopic'").fetchall())
    sends = {e["uniq_key"]: e for e in events if e["ev"] == "send"}
    assert sorted(k for k, _q, _d in rows) == sorted(sends)
    for key, queues, dispatches in rows:
        lite = sends[key]["lite"]
        assert (queues, dispatches) == (([f"%LMQ%$LiteTopic${lite}"], 1) if lite else (None, 0))
    assert {k: int(v) for k, v in priorities.items()} == {k: e["priority"] for k, e in sends.items() if not e["lite"]}
    # The broker puts a priority message in queue min(priority, writeQueueNums - 1) = its priority here.
    with open_read_only(db) as con:
        placed = con.execute(f"SELECT count(*) FROM commitlog WHERE topic = 'PrioTopic' "
                             f"AND queue_id = CAST(properties['{PRIORITY_PROPERTY}'] AS INT)").fetchone()[0]
    assert placed == len(priorities) == 6
    assert [n for n, o in found.items() if not o.passed] == []
    assert found[c.LMQ_IN_CONSUME_QUEUE].judged == 6
