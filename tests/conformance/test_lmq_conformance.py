"""Real RocketMQ 4.9.4 with LMQ on, written afresh and audited: the run that wrote
tests/data/rocketmq-lmq-4.9.4 (tests/conformance/make_lmq_fixture.py), against the audit of what it
wrote. One broker with enableLmq and enableMultiDispatch, 24 sends listing %LMQ%a and %LMQ%b, a
failing push group, two LMQ readers; about a minute of broker time (make test-long).
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from fixture_run import audit_written_store
from java_driver import needs_real_rocketmq
from make_lmq_fixture import BROKER, GROUP, TOPIC
from make_lmq_fixture import main as write_lmq_store

from assets import checks as c

pytestmark = [needs_real_rocketmq, pytest.mark.long]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    yield from audit_written_store(tmp_path_factory.mktemp("lmq-real"), write_lmq_store, BROKER, "lmq")


def test_every_position_a_reader_pulled_is_the_record_the_audit_puts_there(audited):
    """The import finds no damage; each message an LMQ reader pulled at an LMQ offset is the record lmq_dispatches has there, IN_QUEUE; each reader's commit is a consumer_offsets row of its LMQ's queue 0."""
    run, summary, _con, events = audited
    assert not summary.problems, [str(p) for p in summary.problems]
    at = {(d["dispatch_queue"], d["dispatch_offset"]): d for d in pq.read_table(run / "parquet" / "lmq_dispatches").to_pylist()}
    pulled = [e for e in events if e["ev"] == "pulled"]
    assert len(pulled) >= 20
    for e in pulled:
        row = at[(e["lmq"], e["lmq_offset"])]
        assert (row["uniq_key"], row["phys_offset"], row["state"]) == (e["uniq_key"], e["phys_offset"], "IN_QUEUE")
    offsets = {(o["group"], o["topic"], o["queue_id"]): o["offset"]
               for o in pq.read_table(run / "parquet" / "consumer_offsets").to_pylist()}
    for commit in (e for e in events if e["ev"] == "commit"):
        assert offsets[(commit["group"], commit["lmq"], 0)] == commit["offset"]


def test_one_send_is_one_message_whatever_the_queues_and_no_check_fails(audited):
    """Every SEND_OK is one PUBLISH record and one message; its dispatch_queues are the queues it listed; the parent group consumed all but the DLQ'd key; no check fails."""
    _run, _summary, con, events = audited
    sends = [e for e in events if e["ev"] == "send"]
    assert len(sends) == 24 and {e["status"] for e in sends} == {"SEND_OK"}
    rows = {k: (q, state) for k, q, state in con.execute(
        "SELECT message_key, dispatch_queues, final_state FROM message_lineage WHERE \"group\" = ?", [GROUP]).fetchall()}
    publish = dict(con.execute("SELECT uniq_key, count(*) FROM commitlog WHERE topic = ? GROUP BY 1", [TOPIC]).fetchall())
    for e in sends:
        assert publish[e["uniq_key"]] == 1
        assert rows[e["uniq_key"]] == (e["dispatch"].split(",") if e["dispatch"] else None,
                                       "DLQ" if e["keys"] == "k-7" else "CONSUMED")
    found = {o.check.name: o for o in c.run_checks(con, c.ALL_CHECKS, "lmq")}
    assert [n for n, o in found.items() if not o.passed] == []
    assert found[c.LMQ_IN_CONSUME_QUEUE].judged == con.execute("SELECT count(*) FROM lmq_dispatches").fetchone()[0]
    redelivered = con.execute("SELECT count(*) FROM anomalies WHERE kind = 'LMQ_REDELIVERED'").fetchone()[0]
    failed_listed = {e["uniq_key"] for e in events if e["ev"] == "consume" and e["status"] == "RECONSUME_LATER"}
    assert redelivered == sum(len(e["dispatch"].split(",")) for e in sends if e["dispatch"] and e["uniq_key"] in failed_listed)
