"""Transactional producers (``producers[].transaction``), simulated end to end under both rule sets."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from simruns import assert_run_passes

from broker_core.export.parquet import read_table
from broker_core.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from broker_core.sim.run import simulate

WORKLOAD = Path(__file__).resolve().parents[3] / "scenarios" / "conformance-transactions.yaml"


@pytest.mark.parametrize("semantics", ["4.9", "5.x"])
def test_each_decision_leaves_its_records_and_the_run_ends_terminal(semantics, tmp_path):
    """Every transactional message ends committed (consumed once), rolled back or discarded after
    transactionCheckMax checks, as its listener's answers say; the run ends terminal and passes every
    invariant, with nothing in flight."""
    path = tmp_path / "s.yaml"
    path.write_text(WORKLOAD.read_text().replace("  flush: async\n", f'  flush: async\n  semantics: "{semantics}"\n'))
    run = tmp_path / "run"
    summary = simulate(path, run)
    assert summary.end_reason == "terminal" and summary.in_flight == 0
    assert_run_passes(run, path, summary.seed)
    answers: dict[str, list[str]] = {}
    for c in sorted(read_table(run, "transaction_calls").to_pylist(), key=lambda c: c["check_times"]):
        answers.setdefault(c["uniq_key"], []).append(c["answer"])
    commitlog = read_table(run, "commitlog").to_pylist()
    halves = Counter(r["uniq_key"] for r in commitlog if r["topic"] == TRANS_HALF_TOPIC)
    discarded = {r["uniq_key"] for r in commitlog if r["topic"] == TRANS_CHECK_MAX_TIME_TOPIC}
    consumed = Counter(a["uniq_key"] for a in read_table(run, "consume_attempts").to_pylist())
    assert len(answers) == 24
    for key, said in answers.items():
        assert halves[key] == len(said)  # the half, then one copy per check
        if said[-1] == "COMMIT_MESSAGE":
            assert consumed[key] == 1 and key not in discarded
        elif said[-1] == "ROLLBACK_MESSAGE":
            assert consumed[key] == 0 and key not in discarded
        else:
            assert said == ["UNKNOW"] * 4 and key in discarded and consumed[key] == 0
