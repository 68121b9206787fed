"""The import of transactional records real 4.9.4 and 5.3.3 brokers wrote (tests/data/rocketmq-*-transactions).

The stores and the clients' own log (clients.jsonl: each transaction listener call with the copy
the broker checked) come from real brokers; docs/transactions.md says what the records are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from broker_core.constants import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK
from broker_core.export.store_import import DECODERS, import_store
from broker_core.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.store.transaction_op import decode_op_body, encode_op_body

DATA = Path(__file__).resolve().parents[2] / "data"
# What each real broker wrote: the op bodies' offsets, in store order (4.9.4 one per record, 5.3.3
# batched), and the messages discarded to TRANS_CHECK_MAX_TIME_TOPIC (by KEYS).
STORES = {
    "4.9.4": {"ops": [[0], [1], [6], [7], [8], [9], [10], [15], [17]], "discarded": ["p0-3", "p0-5"]},
    "5.3.3": {"ops": [[0, 1, 6, 7, 8, 9], [10], [15], [17]], "discarded": ["p0-5"]},
}


@pytest.fixture(scope="module", params=sorted(STORES))
def imported(request, tmp_path_factory):
    version = request.param
    store = DATA / f"rocketmq-{version}-transactions"
    out = tmp_path_factory.mktemp(f"tx-{version}") / "run"
    summary = import_store(store, out)
    rows = pq.read_table(out / "parquet" / "commitlog").to_pylist()
    ops = pq.read_table(out / "parquet" / "transaction_ops").to_pylist()
    clients = [json.loads(line) for line in (store / "clients.jsonl").read_text().splitlines()]
    return version, summary, rows, ops, clients, store


def test_a_commit_points_at_the_exact_half_copy_the_producer_answered_for(imported):
    """Every commit record's prepared_tx_offset names a record of the half queue with its UNIQ_KEY: the half itself for a commit at once, the n-th check copy for a commit at the n-th check."""
    version, _, rows, _, clients, _ = imported
    by_offset = {r["phys_offset"]: r for r in rows}
    commits = [r for r in rows if r["sys_flag"] & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT]
    assert len(commits) == 6
    answered = {(c["uniq_key"], c["commit_log_offset"]) for c in clients
                if c["ev"] == "txn" and c["stage"] == "check" and c["answer"] == "COMMIT_MESSAGE"}
    assert len(answered) == 2
    for commit in commits:
        half = by_offset[commit["prepared_tx_offset"]]
        assert half["topic"] == TRANS_HALF_TOPIC and half["queue_id"] == 0
        assert half["uniq_key"] == commit["uniq_key"] and half["sys_flag"] & SYSFLAG_TRANSACTION_MASK == 0
        checks = half["properties"] and dict(half["properties"]).get("TRANSACTION_CHECK_TIMES")
        if checks is None:
            assert all(u != commit["uniq_key"] for u, _ in answered)
        else:
            assert (commit["uniq_key"], half["phys_offset"]) in answered
        # The commit keeps the committed copy's stored properties as they were (REAL_TOPIC,
        # REAL_QID and TRAN_MSG included) and its born time; its topic and queue are REAL_*'s.
        assert commit["properties"] == half["properties"]
        assert (commit["topic"], commit["queue_id"]) == (half["real_topic"], half["real_queue_id"])
        assert commit["born_ts"] == half["born_ts"] and commit["store_ts"] > half["store_ts"]
    # Every other record holds 0 there.
    assert {r["prepared_tx_offset"] for r in rows if r not in commits} == {0}


def test_the_op_bodies_name_the_decided_half_queue_offsets_per_release(imported):
    """transaction_ops has one row per op record, its body's half-queue offsets (one per record on 4.9.4, batched on 5.3.3), tag d; each names a half record."""
    version, summary, rows, ops, _, _ = imported
    op_records = [r for r in rows if r["topic"] == TRANS_OP_HALF_TOPIC]
    assert [o["phys_offset"] for o in ops] == [r["phys_offset"] for r in op_records]
    assert [o["half_queue_offsets"] for o in ops] == STORES[version]["ops"]
    assert {o["tag"] for o in ops} == {"d"} and {o["queue_id"] for o in ops} == {0}
    assert [o["queue_offset"] for o in ops] == list(range(len(ops)))
    half_offsets = {r["queue_offset"] for r in rows if r["topic"] == TRANS_HALF_TOPIC}
    assert {h for o in ops for h in o["half_queue_offsets"]} <= half_offsets
    assert summary.rows_by_table["transaction_ops"] == len(ops) and not summary.problems


def test_a_message_checked_transaction_check_max_times_is_discarded_with_its_last_copy(imported):
    """A TRANS_CHECK_MAX_TIME_TOPIC record carries the properties of the copy whose TRANSACTION_CHECK_TIMES reached the maximum (3)."""
    version, _, rows, _, _, _ = imported
    discarded = [r for r in rows if r["topic"] == TRANS_CHECK_MAX_TIME_TOPIC]
    assert sorted(r["keys"] for r in discarded) == STORES[version]["discarded"]
    for r in discarded:
        last = [h for h in rows if h["topic"] == TRANS_HALF_TOPIC and h["uniq_key"] == r["uniq_key"]][-1]
        assert r["properties"] == last["properties"] and dict(r["properties"])["TRANSACTION_CHECK_TIMES"] == "3"
        assert r["queue_id"] == 0 and r["sys_flag"] == 0


def test_both_decoders_read_the_transaction_columns_alike(imported, tmp_path):
    """The columnar and the per-record decoder give the same sys_flag and prepared_tx_offset for every record."""
    _, _, rows, _, _, store = imported
    other = DECODERS[1]
    import_store(store, tmp_path / "run", decoder=other)
    again = pq.read_table(tmp_path / "run" / "parquet" / "commitlog").to_pylist()
    pick = [(r["phys_offset"], r["sys_flag"], r["prepared_tx_offset"]) for r in rows]
    assert pick == [(r["phys_offset"], r["sys_flag"], r["prepared_tx_offset"]) for r in again]


def test_an_op_body_is_read_as_the_broker_reads_it():
    """An op body is one offset (4.9.4) or a comma list with a trailing comma (5.x); pieces that are no number are set apart."""
    assert decode_op_body(b"17").offsets == (17,)
    assert decode_op_body(b"0,1,6,").offsets == (0, 1, 6)
    assert decode_op_body(encode_op_body([3, 4], batched=True)).offsets == (3, 4)
    assert encode_op_body([5], batched=False) == b"5"
    odd = decode_op_body(b"2,x,,9")
    assert odd.offsets == (2, 9) and odd.bad_pieces == ("x", "")
    assert decode_op_body(b"\xff").offsets == ()
