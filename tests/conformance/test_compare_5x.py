"""The 5.x parts of a conformance run that need no real broker: the model's rules per release, and
the comparison's explanation of the '<group>@broadcast' offsets a 5.x store keeps.

The comparison runs on a real DuckDB holding the few columns it reads (message_hops, commitlog,
message_lineage), written as the warehouse writes them.
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
MODEL, REAL = "conformance", "conformance-real"
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


def _warehouse(lineage_rows: list[tuple[str, str, str | None]]):
    """One PUBLISH hop per run and the given (run, group, final_state) lineage rows."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE message_hops (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   message_key VARCHAR, "group" VARCHAR, hop_index INT, hop_kind VARCHAR, topic VARCHAR,
                   queue_id INT, delay_level INT, reconsume_times INT, dwell_ms BIGINT)""")
    con.execute("""CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   properties MAP(VARCHAR, VARCHAR))""")
    con.execute("""CREATE TABLE message_lineage (run_id VARCHAR, message_key VARCHAR, "group" VARCHAR,
                   final_state VARCHAR, retries INT, path VARCHAR)""")
    for run in (MODEL, REAL):
        con.execute("INSERT INTO message_hops VALUES (?, 'broker-a', 0, ?, NULL, 0, 'PUBLISH', 'OrderTopic', 0, 0, 0, NULL)",
                    [run, KEY])
        con.execute("INSERT INTO commitlog VALUES (?, 'broker-a', 0, MAP {'UNIQ_KEY': ?})", [run, KEY])
    for run, group, state in lineage_rows:
        con.execute("INSERT INTO message_lineage VALUES (?, ?, ?, ?, 0, '')", [run, KEY, group, state])
    return con


def test_the_broadcast_offsets_of_a_5x_store_are_explained():
    """A group '<broadcasting group>@broadcast' only the real store has is explained, not a failure."""
    con = _warehouse([(MODEL, "audit-broadcast", "CONSUMED"), (REAL, "audit-broadcast@broadcast", "CONSUMED")])
    result = compare.model_vs_real(con, load_scenario(CONFORMANCE), MODEL, [REAL])
    assert result["unexplained"] == 0 and result["explained"] == 1
    assert set(result["explained_kinds"]) == {"broadcast_group_absent_from_store", "broadcast_offsets_in_5x_store"}


def test_an_at_broadcast_group_of_a_clustering_group_is_not_explained():
    """The suffix alone explains nothing: 'order-service@broadcast' (a clustering group) is a difference."""
    con = _warehouse([(REAL, "order-service@broadcast", "CONSUMED")])
    result = compare.model_vs_real(con, load_scenario(CONFORMANCE), MODEL, [REAL])
    assert result["unexplained"] == 1
    assert result["unexplained_kinds"] == {"final_state": 1}
