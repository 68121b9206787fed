"""The audit-vs-clients expectation of a listener's DLQ request (``DLQ_REQUESTED``), without a real
broker: a real DuckDB holding the few columns the comparison reads, with the rows a real store
gives for a message its listener failed once and then sent to the DLQ at delay level -1."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

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
    con = duckdb.connect()
    con.execute("""CREATE TABLE message_hops (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   message_key VARCHAR, "group" VARCHAR, hop_index INT, hop_kind VARCHAR, topic VARCHAR,
                   queue_id INT, delay_level INT, reconsume_times INT, dwell_ms BIGINT)""")
    con.execute("""CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   properties MAP(VARCHAR, VARCHAR), msg_id VARCHAR)""")
    con.execute("""CREATE TABLE message_lineage (run_id VARCHAR, message_key VARCHAR, "group" VARCHAR,
                   final_state VARCHAR, retries INT, path VARCHAR)""")
    for i, (kind, topic, level, times) in enumerate(HOPS):
        group = None if kind == "PUBLISH" else GROUP
        con.execute("INSERT INTO message_hops VALUES (?, 'broker-a', ?, ?, ?, ?, ?, ?, 0, ?, ?, NULL)",
                    [REAL, i * 100, KEY, group, i, kind, topic, level, times])
        con.execute("INSERT INTO commitlog VALUES (?, 'broker-a', ?, MAP {'UNIQ_KEY': ?}, ?)",
                    [REAL, i * 100, KEY, f"M{i}"])
    con.execute("INSERT INTO message_lineage VALUES (?, ?, ?, 'DLQ', 1, '')", [REAL, KEY, GROUP])
    consumed = [h for h in HOPS if h[0] in ("PUBLISH", "RETRY")]
    attempts = [{"uniq_key": KEY, "group": GROUP, "model": "CLUSTERING", "queue_topic": topic,
                 "queue_id": 0, "queue_offset": n, "phys_offset": n, "reconsume_times": times,
                 "status": status, "outcome": "SENT_BACK", "start_ts": n, "consumer_id": "c0",
                 "msg_id": f"M{n}"}
                for n, ((_, topic, _, times), status) in enumerate(zip(consumed, statuses, strict=True))]
    return con, attempts


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
