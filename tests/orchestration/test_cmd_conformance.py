"""The conformance command's summary lines, on hand-written reports."""

from __future__ import annotations

import json
from pathlib import Path

from orchestration.cmd_conformance import explain_failures, format_summary, verdict_failures


def _report(**extra) -> dict:
    return {"scenario": "s", "rocketmq_version": "5.5.1", "brokers": ["broker-a"],
            "lineage_vs_clients": {"messages": 2, "agree": 1, "disagree": 1, "pairs_compared": 2,
                                   "delayed_hops_checked": 0},
            "model_vs_real": {"messages": 2, "identical": 2, "explained": 0, "unexplained": 0,
                              "hops": {"model": 4, "real": 4}, "explained_kinds": {}, "unexplained_kinds": {}},
            "checks": {}, "timings": {"import_s": 0.1}, **extra}


def test_the_revives_a_broker_dropped_are_named_in_the_summary():
    """A REVIVE_LOST anomaly of the real run is counted, with the first message and group; without
    one no line is printed. It explains a disagreement but does not excuse it."""
    lost = [{"run_id": "s-real", "message_key": "K1", "group": "g", "detail": "popped from broker-a ..."}]
    text = format_summary(_report(revives_lost=lost), Path("out"))
    assert "  revives the brokers dropped (anomaly REVIVE_LOST): 1, e.g. K1 (g)" in text.splitlines()
    assert "REVIVE_LOST" not in format_summary(_report(revives_lost=[]), Path("out"))
    assert verdict_failures(_report(revives_lost=lost)) == [
        "1 message(s) where the audit and the real clients disagree"]


def test_a_failed_report_is_explained_failures_first_and_short():
    """What a failed conformance test prints: the failures, then their evidence (the first
    disagreeing message, the failed blocking check and its first violation), in a few kilobytes
    however large the report, so a clipped CI log still shows why."""
    report = _report(checks={"run-real": {
        "hop_grammar_valid": {"blocking": True, "passed": False, "verdict": "failed", "violations": 3,
                              "first": {"message_key": "K9"},
                              "trail": {"store": ["SCHEDULE S@broker-b q2 r1 L3 t17 oAB0001"], "clients": []}},
        "delay_lateness_p99_below_max": {"blocking": False, "passed": False, "verdict": "failed",
                                         "violations": 1, "first": None}}},
        faults=[{"kind": "broker_kill", "broker": "broker-a"}])
    trail = {"store": ["PUBLISH T@broker-a q0 r0"], "clients": ["17 c0 T q0#0 r0 RECONSUME_LATER SENT_BACK"]}
    report["lineage_vs_clients"]["examples"] = [{"uniq_key": "K1", "audit": "DLQ", "clients": "CONSUMED",
                                                 "trail": trail}] * 500
    text = explain_failures(report)
    lines = text.splitlines()
    assert lines[0] == ("1 message(s) where the audit and the real clients disagree; "
                        "blocking check hop_grammar_valid failed on run-real")
    assert lines[1].startswith('lineage_vs_clients examples: [{"uniq_key": "K1"') and "trail" not in lines[1]
    assert lines[-2] == "lineage_vs_clients first example's trail: " + json.dumps(trail)
    # A failed blocking check's first violation has its trail too, last.
    assert lines[-1] == ("run-real.hop_grammar_valid first violation's trail: "
                         '{"store": ["SCHEDULE S@broker-b q2 r1 L3 t17 oAB0001"], "clients": []}')
    assert 'run-real.hop_grammar_valid: failed, 3 violation(s), first {"message_key": "K9"}' in lines
    assert "delay_lateness" not in text  # a check that does not block is no failure
    assert lines[-3].startswith("faults: ") and len(text) <= 6000
    assert explain_failures(_report(lineage_vs_clients={"disagree": 0})).startswith("no failure")


def test_the_messages_an_explained_cause_agrees_are_counted_under_the_clients_line():
    """A chain whose difference from the clients' log a documented cause explains is counted, per
    cause, under the audit-vs-clients line (not under the model's); none, no line."""
    report = _report()
    report["lineage_vs_clients"]["explained"] = {"pop_dropped_by_client": 3, "offset_lost_in_broker_crash": 1}
    lines = format_summary(report, Path("out")).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  audit vs real clients:"))
    assert lines[at + 1:at + 3] == ["    explained offset_lost_in_broker_crash: 1",
                                    "    explained pop_dropped_by_client: 3"]
    assert lines[at + 3].startswith("  model vs real broker:")
    assert "    explained" not in format_summary(_report(), Path("out"))


def test_a_rejoining_old_masters_cut_is_named_in_the_summary():
    report = _report(rejoin_cuts=[{"node": "broker-a-n0", "from_offset": 43470, "to_offset": 43969}])
    assert ("  broker-a-n0 cut its log from 43,470 to 43,969 as it rejoined (records its slave never had)"
            in format_summary(report, Path("out")).splitlines())
    assert "rejoined" not in format_summary(_report(), Path("out"))
