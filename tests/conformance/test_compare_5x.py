"""The 5.x parts of a conformance run that need no real broker: the model's rules per release, and
the audit-vs-clients expectation of a client's retry at the max under each release's rules.

The comparison runs on a real DuckDB holding the few columns it reads (message_hops, commitlog,
message_lineage), with the rows a real 5.3.3 store gave for such a message.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from broker_core.errors import BadInputError
from broker_core.sim.scenario import load_scenario
from conformance import compare
from conformance.run import _model_rules_of_release

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT / "scenarios" / "conformance.yaml"
DEFAULT_5X = ROOT / "scenarios" / "default-5x.yaml"
REAL = "conformance-real"
KEY = "0A0001024C036A74CBCF000000000000"


@pytest.mark.parametrize("release, rules", [("4.9.4", "4.9"), ("5.3.3", "5.x")])
def test_a_conformance_run_plays_the_model_with_its_releases_rules(release, rules):
    """The short workload (no broker.semantics) runs the model with 4.9 against 4.9.4, 5.x against 5.3.3."""
    scenario = load_scenario(CONFORMANCE)
    assert scenario.broker.semantics == "4.9"
    assert _model_rules_of_release(scenario, release).broker.semantics == rules


def test_a_scenario_asking_for_other_rules_than_the_release_is_refused():
    """broker.semantics "5.x" against RocketMQ 4.9.4 is refused, naming the file and both rule sets."""
    with pytest.raises(BadInputError) as info:
        _model_rules_of_release(load_scenario(DEFAULT_5X), "4.9.4")
    text = str(info.value)
    assert "default-5x.yaml" in text and "'5.x'" in text and "'4.9'" in text


RETRY = "%RETRY%notice-service"
DLQ = "%DLQ%notice-service"
# notice-service (max 2 retries) failed every attempt; its second send-back was refused and the
# client sent the retry itself (RECONSUME_TIME 2). The hops are what a 5.3.3 broker stored then:
# the client's retry was retried (2 > 2 is false), and the broker's send-back at 2 went to the DLQ.
HOPS = [("PUBLISH", "NoticeTopic", 0, 0), ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 1), ("RETRY", RETRY, 3, 1),
        ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 4, 2), ("RETRY", RETRY, 4, 2), ("DLQ", DLQ, 0, 3)]
OUTCOMES = ["SENT_BACK", "SENT_BACK_BY_CLIENT", "SENT_BACK"]


def _real_run():
    """A real DuckDB with the columns the comparison reads: the hops above, their lineage, and the
    clients' three failed attempts."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE message_hops (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   message_key VARCHAR, "group" VARCHAR, hop_index INT, hop_kind VARCHAR, topic VARCHAR,
                   queue_id INT, delay_level INT, reconsume_times INT, dwell_ms BIGINT)""")
    con.execute("""CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   properties MAP(VARCHAR, VARCHAR), msg_id VARCHAR)""")
    con.execute("""CREATE TABLE message_lineage (run_id VARCHAR, message_key VARCHAR, "group" VARCHAR,
                   final_state VARCHAR, retries INT, path VARCHAR)""")
    for i, (kind, topic, level, times) in enumerate(HOPS):
        group = None if kind == "PUBLISH" else "notice-service"
        con.execute("INSERT INTO message_hops VALUES (?, 'broker-a', ?, ?, ?, ?, ?, ?, 0, ?, ?, NULL)",
                    [REAL, i * 100, KEY, group, i, kind, topic, level, times])
        con.execute("INSERT INTO commitlog VALUES (?, 'broker-a', ?, MAP {'UNIQ_KEY': ?}, ?)",
                    [REAL, i * 100, KEY, f"M{i}"])
    con.execute("INSERT INTO message_lineage VALUES (?, ?, 'notice-service', 'DLQ', 2, '')", [REAL, KEY])
    consumed = [h for h in HOPS if h[0] in ("PUBLISH", "RETRY")]
    attempts = [{"uniq_key": KEY, "group": "notice-service", "model": "CLUSTERING", "queue_topic": topic,
                 "queue_id": 0, "queue_offset": n, "phys_offset": n, "reconsume_times": times,
                 "status": "RECONSUME_LATER", "outcome": outcome, "start_ts": n, "consumer_id": "c0",
                 "msg_id": f"M{n}"}
                for n, ((_, topic, _, times), outcome) in enumerate(zip(consumed, OUTCOMES, strict=True))]
    return con, attempts


@pytest.mark.parametrize("rules, agrees", [("5.x", True), ("4.9", False)])
def test_the_clients_dlq_expectation_follows_the_releases_rules(rules, agrees):
    """A client's retry with RECONSUME_TIME = max is retried once more on 5.x (`>`): the audit of
    such a 5.3.3 store agrees with its clients under the 5.x rules, and the 4.9 rules (>=, DLQ
    one retry early) would call it a disagreement."""
    con, attempts = _real_run()
    scenario = load_scenario(CONFORMANCE).with_semantics(rules)
    result = compare.lineage_vs_clients(con, scenario, attempts, [REAL])
    assert result["messages"] == 1
    assert (result["agree"], result["disagree"]) == ((1, 0) if agrees else (0, 1)), result["examples"]
    if not agrees:
        assert [e["what"] for e in result["examples"]] == ["dlq_after_max"]
