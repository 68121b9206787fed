"""Real RocketMQ 5.5.1 (5.5.0 clients) with Lite topics and priority messages, written afresh and
audited: the run that wrote tests/data/rocketmq-lite-5.5.1 (tests/conformance/make_lite_store.py).
A few minutes of broker time (make test-long).
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from fixture_run import audit_written_store
from java_driver import needs_real_rocketmq
from make_lite_store import BROKER, LITE_GROUP, LITES, NO_ACK, PRIO_TOPIC
from make_lite_store import main as write_lite_store

from assets import checks as c

pytestmark = [needs_real_rocketmq, pytest.mark.long]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    yield from audit_written_store(tmp_path_factory.mktemp("lite-real"), write_lite_store, BROKER, "lite")


def test_lite_sends_are_one_record_each_in_their_lite_lmq(audited):
    """Every lite send is SEND_OK and one record with one IN_QUEUE position in %LMQ%$LiteTopic$<lite>; the import finds nothing wrong."""
    run, summary, _con, events = audited
    assert not summary.problems, [str(p) for p in summary.problems]
    sends = [e for e in events if e["ev"] == "send"]
    assert {e["status"] for e in sends} == {"SEND_OK"}
    positions = {(d["uniq_key"], d["dispatch_queue"], d["state"])
                 for d in pq.read_table(run / "parquet" / "lmq_dispatches").to_pylist()}
    assert positions == {(e["uniq_key"], f"%LMQ%$LiteTopic${e['lite']}", "IN_QUEUE") for e in sends if e["lite"]}


def test_what_the_lite_group_acked_is_its_offset_and_what_it_did_not_left_no_record(audited):
    """The acked lite topic's offset is its message count; the unacked one's 0, though popped again and again; no retry or DLQ record in the store."""
    run, _summary, con, events = audited
    offsets = {(o["group"], o["topic"]): o["offset"] for o in pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()}
    for lite, count in LITES:
        assert offsets[(LITE_GROUP, f"%LMQ%$LiteTopic${lite}")] == (0 if lite == NO_ACK else count)
    assert {e["result"] for e in events if e["ev"] == "ack"} == {"OK"}
    again = [e for e in events if e["ev"] == "popped" and e["lite"] == NO_ACK and e["reconsume_times"] > 0]
    assert len(again) >= 2
    topics = {t for (t,) in con.execute("SELECT DISTINCT topic FROM commitlog").fetchall()}
    assert not {t for t in topics if t.startswith(("%RETRY%", "%DLQ%"))}


def test_priority_is_the_queue_and_no_check_fails(audited):
    """A priority message sits in the queue of its priority; no check fails on the store."""
    _run, _summary, con, events = audited
    placed = dict(con.execute("SELECT uniq_key, queue_id FROM commitlog WHERE topic = ?", [PRIO_TOPIC]).fetchall())
    assert placed == {e["uniq_key"]: e["priority"] for e in events if e["ev"] == "send" and e["priority"] is not None}
    found = {o.check.name: o for o in c.run_checks(con, c.ALL_CHECKS, "lite")}
    assert [n for n, o in found.items() if not o.passed] == []
