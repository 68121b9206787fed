"""Transactional messages on real RocketMQ brokers against the import and the model, message by message:
scenarios/conformance-transactions.yaml played by `retry-audit conformance` (a name server, two
brokers, a real TransactionMQProducer whose listener replays the model's answers, one consumer).

The 4.9.4 case is marked long (`make test-long`, which CI runs after `make test`: 25 s of real
clients; the whole test took 2 min 6 s in a fresh-clone suite run, most of it the two runs' Spark
lineage); 5.3.3 (35 s of real clients, and its brokers take 15 to 35 s to stop; 3 min 9 s in all)
is marked slow. Without java, javac and mvn
they skip.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import needs_real_rocketmq

from broker_core.constants import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK
from broker_core.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from conformance.run import run_conformance
from orchestration.cmd_conformance import explain_failures, verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-transactions.yaml"
MESSAGES = 30  # 24 transactional, 6 plain


def _commitlog(run_dir: Path) -> list[dict]:
    return pq.read_table(run_dir / "parquet" / "commitlog").to_pylist()


def _commits(rows: list[dict]) -> dict[str, list[str | None]]:
    """Per message, the TRANSACTION_CHECK_TIMES of each half copy a commit record points at
    (None: the half itself), from the commit's prepared_tx_offset on the same broker."""
    by_offset = {(r["broker"], r["phys_offset"]): r for r in rows}
    out: dict[str, list] = {}
    for r in rows:
        if r["sys_flag"] & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT:
            half = by_offset[(r["broker"], r["prepared_tx_offset"])]
            assert half["topic"] == TRANS_HALF_TOPIC and half["uniq_key"] == r["uniq_key"], (r, half)
            out.setdefault(r["uniq_key"], []).append(dict(half["properties"]).get("TRANSACTION_CHECK_TIMES"))
    return out


def _calls(path: Path) -> Counter:
    return Counter((c["uniq_key"], c["stage"], c["check_times"], c["answer"])
                   for c in pq.read_table(path).to_pylist())


@needs_real_rocketmq
@pytest.mark.parametrize("version", [pytest.param("4.9.4", marks=pytest.mark.long),
                                     pytest.param("5.3.3", marks=pytest.mark.slow)])
def test_the_import_and_the_model_agree_on_a_real_transactional_workload(version, tmp_path, spark):
    """On real brokers, every transactional message's records (half, check copies, commit pointing at
    the copy its producer committed, discard) are the model's, the op records decide the same
    copies, the real listener was asked what the model's was, and the consumers were handed exactly
    the committed messages the import found in their topic."""
    out = tmp_path / "out"
    report = run_conformance(version, SCENARIO, out, spark=spark)
    assert verdict_failures(report) == [], explain_failures(report)
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    assert mvr["messages"] == MESSAGES and mvr["unexplained"] == 0, mvr["differences"]
    assert mvr["explained_kinds"] == {}, mvr["explained_kinds"]
    assert mvr["hops"]["model"] == mvr["hops"]["real"] > MESSAGES
    assert mvr["transaction_decisions"]["model"] == mvr["transaction_decisions"]["real"] > 0
    assert lvc["disagree"] == 0 and lvc["agree"] == lvc["messages"] > 0 and lvc["explained"] == {}
    # Every transactional message's audited state is what its producer's listener decided.
    tvp = report["transactions_vs_producers"]
    assert tvp["disagree"] == 0 and tvp["agree"] == tvp["messages"] == 24, tvp
    assert report["driver"]["end"]["reason"] == "complete", report["driver"]

    model, real = _commitlog(out / "runs" / "model"), _commitlog(out / "runs" / "real")
    # Each commit points at the copy of the same check on both sides (the half for a commit at
    # once), and the same messages were discarded after transactionCheckMax checks.
    assert _commits(model) == _commits(real) and len(_commits(real)) >= 10
    assert {None, "1", "2"} <= {t for ts in _commits(real).values() for t in ts}
    discarded = {r["uniq_key"] for r in real if r["topic"] == TRANS_CHECK_MAX_TIME_TOPIC}
    assert discarded and discarded == {r["uniq_key"] for r in model if r["topic"] == TRANS_CHECK_MAX_TIME_TOPIC}
    for side in (model, real):
        copies = Counter(r["uniq_key"] for r in side if r["topic"] == TRANS_HALF_TOPIC)
        assert all(copies[k] == 4 for k in discarded), copies  # the half and three check copies
    # The import read every op record's body into transaction_ops.
    ops = pq.read_table(out / "runs" / "real" / "parquet" / "transaction_ops").to_pylist()
    assert len(ops) == sum(r["topic"] == TRANS_OP_HALF_TOPIC for r in real) > 0
    assert all(o["tag"] == "d" and o["half_queue_offsets"] for o in ops)
    # The real listener answered the execution and each check as the model's did.
    assert _calls(out / "clients" / "transaction_calls") == _calls(out / "runs" / "model" / "parquet" /
                                                                     "transaction_calls")
    # A consumer was handed each committed message once, and no rolled-back or discarded one.
    consumed = Counter(a["uniq_key"] for a in pq.read_table(out / "clients" / "consume_attempts").to_pylist())
    committed = set(_commits(real))
    assert committed <= set(consumed) and not (set(consumed) - committed - {
        r["uniq_key"] for r in real if r["topic"] == "TxTopic" and r["sys_flag"] == 0})
