"""What the real-broker tests of a replicated broker-a whose master is killed mid-run share (a DLedger
group, test_dledger_conformance.py; a controller-mode master and slave, test_controller_conformance.py):
the checks of the conformance run's report and files that hold whichever way the copies were made."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from conformance import compare

BROKER = "broker-a"
SENDS_MIN = 100  # of the scenarios' 300 messages: enough got SEND_OK for the checks to say something


def assert_every_send_ok_is_one_publish_hop(out: Path, kill_ms: int) -> None:
    """Every message a producer got SEND_OK for is one PUBLISH hop of the merged copies, on broker-a,
    at the offset its offset msgId names; and sends succeeded both before and after the kill at
    ``kill_ms`` (wall clock)."""
    sent = [p for p in pq.read_table(out / "clients" / "produced").to_pylist() if p["status"] == "SEND_OK"]
    hops = pq.read_table(out / "runs" / "real" / "lineage" / "message_hops").to_pylist()
    publish: dict[str, list[dict]] = {}
    for h in hops:
        if h["hop_kind"] == "PUBLISH":
            publish.setdefault(h["message_key"], []).append(h)
    assert len(sent) > SENDS_MIN
    for p in sent:
        found = publish.get(p["uniq_key"], [])
        assert len(found) == 1, (p, found)
        assert found[0]["broker"] == BROKER and found[0]["phys_offset"] == int(p["msg_id"][-16:], 16)
    sent_ms = [int(p["send_ts"].timestamp() * 1000) for p in sent]
    assert min(sent_ms) < kill_ms < max(sent_ms)


def assert_the_audit_agrees_with_the_clients(report: dict) -> None:
    """Nothing the clients consumed is missing from the audit of the merged copies and nothing
    disagrees; the model's run differs from the real one only in documented ways."""
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    assert lvc["disagree"] == 0, json.dumps(lvc["examples"], indent=1, default=str)[:4000]
    assert mvr["unexplained"] == 0, json.dumps(mvr.get("differences"), indent=1, default=str)[:4000]
    assert set(mvr["explained_kinds"]) <= set(compare.EXPLAINED)
    assert lvc["messages"] > SENDS_MIN
