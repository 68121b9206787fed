"""The lineage of transactional messages on the stores real 4.9.4 and 5.3.3 brokers wrote
(tests/data/rocketmq-*-transactions): each message's transaction_state is what its producer
decided (plan.tsv), and the consuming group's chain of a committed message ends CONSUMED.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from assets.lineage import run_lineage
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store
from broker_core.names import TRANS_GROUP
from conformance.compare import producer_decision, transactions_vs_producers
from orchestration.cmd_pipeline import format_trace, trace_messages

DATA = Path(__file__).resolve().parents[1] / "data"
VERSIONS = ("4.9.4", "5.3.3")
# transactionCheckMax the probe's brokers ran with (docs/transactions.md): a message never decided
# is discarded with this many checks.
CHECK_MAX = 3
GROUP = "tx-service"


def planned(store: Path) -> dict[str, tuple[str | None, int | None]]:
    """KEYS -> (transaction_state, transaction_checks) the producer's answers in plan.tsv give: the
    first answer is executeLocalTransaction's, the n-th after it the n-th check's."""
    out = {}
    for line in (store / "plan.tsv").read_text().splitlines():
        fields = line.split("\t")
        if fields[0] != "msg":
            continue
        keys, answers = fields[6], fields[-1]
        if answers == "-":
            out[keys] = (None, None)
            continue
        answers = answers.split(",")
        decided = [k for k, a in enumerate(answers) if a != "UNKNOW"]
        if not decided or decided[0] > CHECK_MAX:
            out[keys] = ("DISCARDED", CHECK_MAX)
        else:
            k = decided[0]
            out[keys] = ("COMMITTED" if answers[k] == "COMMIT_MESSAGE" else "ROLLED_BACK", k)
    return out


@pytest.fixture(scope="module", params=VERSIONS)
def lineage(request, spark, tmp_path_factory):
    store = DATA / f"rocketmq-{request.param}-transactions"
    run = tmp_path_factory.mktemp("tx") / f"tx-{request.param.replace('.', '')}"
    import_store(store, run)
    run_lineage(run, spark)
    keys = {r["uniq_key"]: r["keys"] for r in pq.read_table(run / "parquet" / "commitlog").to_pylist()
            if r["uniq_key"]}
    rows = pq.read_table(run / "lineage" / "message_lineage").to_pylist()
    hops = pq.read_table(run / "lineage" / "message_hops").to_pylist()
    db = run.parent / "warehouse.duckdb"
    build_warehouse([run], db)
    return store, keys, rows, hops, db


def test_each_message_has_the_transaction_state_its_producer_decided(lineage):
    """transaction_state and transaction_checks per message match the plan's answers, and a plain send has none."""
    store, keys, rows, _, _ = lineage
    expected = planned(store)
    got = {keys[r["message_key"]]: (r["transaction_state"], r["transaction_checks"]) for r in rows}
    assert got == expected


def test_the_consuming_group_consumed_every_committed_message(lineage):
    """Every row is the consuming group's (the broker's own group is none), and a committed message's row is CONSUMED."""
    _, keys, rows, _, _ = lineage
    assert {r["group"] for r in rows} == {GROUP}
    assert TRANS_GROUP not in {r["group"] for r in rows}
    for row in rows:
        assert row["origin_topic"] == "TxTopic" and not row["truncated"], row
        if row["transaction_state"] in ("COMMITTED", None):
            assert row["final_state"] == "CONSUMED", (keys[row["message_key"]], row)
            assert row["final_topic"] == "TxTopic"
        else:
            assert row["final_state"] == "UNCONSUMED", row


def test_half_copies_and_discards_are_shared_hops_and_op_records_are_none(lineage):
    """Every transactional record is a shared hop of its message (HALF, DISCARD, the commit a PUBLISH); no op record is a hop."""
    _, _, _, hops, _ = lineage
    assert {h["group"] for h in hops} == {None}
    kinds = {(h["topic"], h["hop_kind"]) for h in hops}
    assert kinds == {("RMQ_SYS_TRANS_HALF_TOPIC", "HALF"), ("TRANS_CHECK_MAX_TIME_TOPIC", "DISCARD"),
                     ("TxTopic", "PUBLISH")}
    for message in {h["message_key"] for h in hops}:
        chain = sorted((h for h in hops if h["message_key"] == message), key=lambda h: h["hop_index"])
        # The half first; a chain ends in its commit or the discard, or a copy.
        assert chain[0]["hop_kind"] in ("HALF", "PUBLISH") and [h["hop_index"] for h in chain] == list(
            range(len(chain)))


def test_trace_prints_the_transaction_part_of_a_journey(lineage):
    """trace shows a transactional message's outcome, its half and check copies, its commit with
    the copy it commits, and the op record that decided it; a plain message shows none."""
    _, keys, _, _, db = lineage
    by_keys = {v: k for k, v in keys.items()}
    with open_read_only(db) as con:
        (committed,) = trace_messages(con, by_keys["p0-2"])
        (plain,) = trace_messages(con, by_keys["p0-7"])
    tx = committed["transaction"]
    assert (tx["transaction_state"], tx["transaction_checks"], tx["commits"]) == ("COMMITTED", 1, 1)
    assert [r["kind"] for r in tx["records"]] == ["half", "half", "commit"]
    copy = tx["records"][1]
    assert tx["records"][2]["commits_copy"] == copy["phys_offset"] and copy["check_times"] == 1
    assert [o["half_queue_offsets"] for o in tx["ops"]] in ([[10]], [[10]])
    text = format_trace([committed])
    assert "transaction: COMMITTED after 1 check (producer group tx-producer)" in text
    assert f"commits the copy at {copy['broker']}@{copy['phys_offset']}" in text
    assert "decided half queue offsets 10" in text
    assert plain["transaction"] is None and "transaction:" not in format_trace([plain])


def _listener_calls(store: Path) -> list[dict]:
    """The real producer's listener calls (clients.jsonl) as transaction_calls rows."""
    events = [json.loads(line) for line in (store / "clients.jsonl").read_text().splitlines()]
    return [{"uniq_key": e["uniq_key"], "stage": e["stage"], "check_times": e["n"], "answer": e["answer"],
             "ts": e["ts"]} for e in events if e["ev"] == "txn"]


def test_the_conformance_comparison_finds_every_transaction_state_the_producer_decided(lineage):
    """The audit's transaction_state of every transactional message agrees with what the real
    producer's listener answered; a changed answer is a disagreement naming the message."""
    store, keys, _, _, db = lineage
    calls = _listener_calls(store)
    with open_read_only(db) as con:
        run_ids = [r[0] for r in con.execute("SELECT DISTINCT run_id FROM runs").fetchall()]
        report = transactions_vs_producers(con, run_ids, calls)
        assert (report["messages"], report["agree"], report["disagree"]) == (10, 10, 0), report
        assert report["audit_states"] == {"COMMITTED": 6, "DISCARDED": 1, "ROLLED_BACK": 3}
        key = next(k for k, v in keys.items() if v == "p0-1")
        flipped = [{**c, "answer": "COMMIT_MESSAGE"} if c["uniq_key"] == key else c for c in calls]
        report = transactions_vs_producers(con, run_ids, flipped)
    assert report["disagree"] == 1
    assert report["examples"] == [{"uniq_key": key, "audit": "ROLLED_BACK", "producer": ["COMMITTED"]}]
    assert producer_decision([{"check_times": 1, "ts": 2, "answer": "COMMIT_MESSAGE"},
                              {"check_times": 0, "ts": 1, "answer": "UNKNOW"}]) == "COMMITTED"
