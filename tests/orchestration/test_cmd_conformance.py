"""The conformance command's summary lines, on hand-written reports."""

from __future__ import annotations

from pathlib import Path

from orchestration.cmd_conformance import format_summary, verdict_failures


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
