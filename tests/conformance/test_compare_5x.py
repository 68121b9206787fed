"""The 5.x parts of a conformance run that need no real broker: the model's rules per release, and
the audit-vs-clients expectation of a client's retry at the max under each release's rules.

The comparison runs on a real DuckDB holding the few columns it reads (message_hops, commitlog,
message_lineage), with the rows a real 5.3.3 store gave for such a message.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from compare_rows import real_run

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
    """The hops above, their lineage, and the clients' three failed attempts."""
    return real_run(REAL, KEY, "notice-service", HOPS, 2, ["RECONSUME_LATER"] * len(OUTCOMES), OUTCOMES)


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


def test_the_real_brokers_get_the_scenarios_timer_roll_window_under_5x_rules():
    """conformance-5x's broker.timer_roll_window_slot reaches the real brokers' configuration as
    timerRollWindowSlot (with timerWheelEnable), so both wheels roll alike, and its recalling
    producer turns on recallMessageEnable (off by default: the broker refuses recalls); a 5.x
    scenario without recalls leaves it off; 4.x rules set nothing."""
    from conformance.run import broker_settings

    five = load_scenario(ROOT / "scenarios" / "conformance-5x.yaml")
    assert broker_settings(_model_rules_of_release(five, "5.3.3")) == {
        "timerWheelEnable": "true", "timerRollWindowSlot": "5", "recallMessageEnable": "true"}
    pop = load_scenario(ROOT / "scenarios" / "conformance-pop.yaml")
    assert broker_settings(_model_rules_of_release(pop, "5.3.3")) == {
        "timerWheelEnable": "true", "timerRollWindowSlot": "172800"}
    assert broker_settings(_model_rules_of_release(load_scenario(CONFORMANCE), "4.9.4")) == {}


MODEL = "conformance-5x"
WHEEL = "rmq_sys_wheel_timer"


def _rolled_runs(model_hops, real_hops):
    """Model and real hops of one timer message in a DuckDB with the columns model_vs_real reads:
    (kind, topic, TIMER_ROLL_TIMES or None, dwell_ms) per hop, one shared chain, CONSUMED."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE message_hops (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   message_key VARCHAR, "group" VARCHAR, hop_index INT, hop_kind VARCHAR, topic VARCHAR,
                   queue_id INT, delay_level INT, reconsume_times INT, dwell_ms BIGINT, store_ts TIMESTAMP)""")
    con.execute("""CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   properties MAP(VARCHAR, VARCHAR), topic VARCHAR, queue_id INT, queue_offset BIGINT,
                   uniq_key VARCHAR, msg_id VARCHAR)""")
    con.execute("ALTER TABLE commitlog ADD COLUMN body_size INT DEFAULT 100")
    con.execute("""CREATE TABLE transaction_ops (run_id VARCHAR, broker VARCHAR, queue_id INT,
                   half_queue_offsets BIGINT[])""")
    con.execute("""CREATE TABLE message_lineage (run_id VARCHAR, message_key VARCHAR, "group" VARCHAR,
                   final_state VARCHAR, retries INT, path VARCHAR, forks INT)""")
    for run, hops in ((MODEL, model_hops), (REAL, real_hops)):
        for i, (kind, topic, rolls, dwell) in enumerate(hops):
            props = {"UNIQ_KEY": KEY, "TIMER_OUT_MS": str(1000 * i)}
            if rolls is not None:
                props["TIMER_ROLL_TIMES"] = rolls
            con.execute("INSERT INTO message_hops VALUES (?, 'broker-a', ?, ?, NULL, ?, ?, ?, 0, 0, 0, ?, NULL)",
                        [run, i * 100, KEY, i, kind, topic, dwell])
            con.execute("INSERT INTO commitlog (run_id, broker, phys_offset, properties) VALUES (?, 'broker-a', ?, MAP(?, ?))",
                        [run, i * 100, list(props), list(props.values())])
        con.execute("INSERT INTO message_lineage VALUES (?, ?, 'order-service', 'CONSUMED', 0, '', 0)", [run, KEY])
    return con


TWO_ROLLS = [("TIMER", WHEEL, None, 6000), ("TIMER", WHEEL, "1", 6000), ("TIMER", WHEEL, "2", 3000),
             ("DELIVER", "OrderTopic", "2", None)]


@pytest.mark.parametrize("real, kinds", [
    (TWO_ROLLS, {}),
    # The real wheel's waits differ by a slot and some ms: the same rolls.
    ([(k, t, n, None if d is None else d - 1040) for k, t, n, d in TWO_ROLLS], {}),
    # Parked half a window (2 slots of 5) where the model parked a whole one.
    ([TWO_ROLLS[0], (*TWO_ROLLS[1][:3], 2000), *TWO_ROLLS[2:]], {"timer_dwell": 1}),
    # One roll fewer: a TIMER hop fewer.
    ([TWO_ROLLS[0], TWO_ROLLS[1], ("DELIVER", "OrderTopic", "1", None)], {"hops": 1}),
])
def test_a_timers_rolls_are_compared_hop_by_hop_with_the_real_wheel(real, kinds):
    """model_vs_real compares a rolled timer's TIMER hops (one per wheel record), their
    TIMER_ROLL_TIMES and their waits (within TIMER_DWELL_TOLERANCE_MS): the same rolls are
    identical, a roll parked half a window or a roll fewer is an unexplained difference."""
    con = _rolled_runs(TWO_ROLLS, real)
    scenario = load_scenario(ROOT / "scenarios" / "conformance-5x.yaml")
    result = compare.model_vs_real(con, scenario, MODEL, [REAL])
    assert result["unexplained_kinds"] == kinds, result["differences"]
    assert result["timer_rolls"]["model"] == 2
    assert result["identical"] == (0 if kinds else 1)
