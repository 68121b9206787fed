"""The audit-vs-clients expectation of a listener's DLQ request (``DLQ_REQUESTED``), without a real
broker: a real DuckDB holding the few columns the comparison reads, with the rows a real store
gives for a message its listener failed once and then sent to the DLQ at delay level -1."""

from __future__ import annotations

from pathlib import Path

import pytest
from compare_rows import real_run

from broker_core.sim.scenario import load_scenario
from conformance import compare

ROOT = Path(__file__).resolve().parents[2]
LONG = ROOT / "scenarios" / "conformance-long.yaml"
REAL = "conformance-long-real"
KEY = "0A0001024C036A74CBCF000000000000"
GROUP = "dlq-service"
RETRY = f"%RETRY%{GROUP}"
# Failed once (a retry at level 3), then asked for the DLQ on the retry: reconsume times 1 + 1.
HOPS = [("PUBLISH", "DlqTopic", 0, 0), ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 1), ("RETRY", RETRY, 3, 1),
        ("DLQ", f"%DLQ%{GROUP}", 0, 2)]


def _real_run(statuses):
    return real_run(REAL, KEY, GROUP, HOPS, 1, statuses, ["SENT_BACK"] * len(statuses))


@pytest.mark.parametrize("last, agrees", [("DLQ_REQUESTED", True), ("RECONSUME_LATER", False)])
def test_a_dlq_request_expects_the_dlq_after_the_retries_before_it(last, agrees):
    """A message its listener sent to the DLQ on its first retry (max 4) is DLQ after 1 retry in the
    clients' eyes; the same store behind a plain failure would be a DLQ before the max."""
    con, attempts = _real_run(["RECONSUME_LATER", last])
    result = compare.lineage_vs_clients(con, load_scenario(LONG), attempts, [REAL])
    assert result["messages"] == 1
    assert (result["agree"], result["disagree"]) == ((1, 0) if agrees else (0, 1)), result["examples"]
    if not agrees:
        assert [e["what"] for e in result["examples"]] == ["final_state"]
