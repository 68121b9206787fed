"""The model's remoting POP consumer against real 5.x brokers and clients, message by message:
scenarios/conformance-pop.yaml played by `retry-audit conformance` (a name server, two brokers,
the release's DefaultMQPushConsumer served by POP, replaying the model's listener verdicts).

The 5.3.3 case is in `make test` (about two and a half minutes); 5.5.1 (its broker side, with
5.5.0's clients) is marked slow. Without java, javac and mvn the real-broker tests skip; the plan's
refusals run everywhere.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from java_driver import needs_real_rocketmq

from broker_core.errors import BadInputError
from broker_core.sim.scenario import load_scenario
from conformance.observed import pop_queue
from conformance.plan import check_groups
from conformance.run import real_run_id, run_conformance
from orchestration.cmd_conformance import explain_failures, verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-pop.yaml"
GROUP = "pop-service"
RETRY_TOPIC = "%RETRY%pop-service_PopTopic"


@needs_real_rocketmq
@pytest.mark.long
@pytest.mark.parametrize("version", ["5.3.3", pytest.param("5.5.1", marks=pytest.mark.slow)])
def test_the_models_pop_consumer_matches_a_real_one(version, tmp_path, spark):
    """Every message's hops (the publish, each revive into the group's POP retry topic) and
    properties (in the real broker's order; the first pop time aside) are the same in the model's
    run and the real one, the audit agrees with what the real listeners were handed, and a message
    the client gave up on at its maximum (acked, no DLQ) reads CONSUMED on both sides."""
    out = tmp_path / "out"
    report = run_conformance(version, SCENARIO, out, spark=spark)
    assert verdict_failures(report) == [], explain_failures(report)
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    assert lvc["messages"] == lvc["agree"] == 30 and lvc["disagree"] == 0
    assert mvr["messages"] == mvr["identical"] == 30 and mvr["unexplained"] == 0
    assert mvr["hops"]["model"] == mvr["hops"]["real"] > 30
    # The clients stopped when idle with every listener call the model made (not at the time limit).
    assert report["driver"]["end"]["reason"] == "complete", report["driver"]

    clients = pq.read_table(out / "clients" / "consume_attempts").to_pylist()
    model = pq.read_table(out / "runs" / "model" / "parquet" / "consume_attempts").to_pylist()
    # The real listeners were handed the retries from the POP retry topic, and the outcomes per
    # attempt are the model's: acked, delayed, or acked at the maximum (given up).
    assert {(a["queue_topic"], a["reconsume_times"]) for a in clients} == {
        (a["queue_topic"], a["reconsume_times"]) for a in model}
    assert sorted((a["uniq_key"], a["reconsume_times"], a["outcome"]) for a in clients) == sorted(
        (a["uniq_key"], a["reconsume_times"], a["outcome"]) for a in model)
    gave_up = {a["uniq_key"] for a in clients if a["outcome"] == "POP_ACKED_AT_MAX"}
    assert gave_up and any(a["queue_topic"] == RETRY_TOPIC for a in clients)

    con = duckdb.connect(str(out / "warehouse.duckdb"), read_only=True)
    try:
        states = dict(con.execute("""SELECT message_key, final_state FROM message_lineage
                                     WHERE run_id = ? AND "group" = ?""", [real_run_id("conformance-pop"),
                                                                           GROUP]).fetchall())
        retry_properties = [list(p) for (p,) in con.execute(
            "SELECT properties FROM commitlog WHERE run_id = ? AND topic = ?",
            [real_run_id("conformance-pop"), RETRY_TOPIC]).fetchall()]
    finally:
        con.close()
    assert {states[k] for k in gave_up} == {"CONSUMED"}
    # The revive service's map: TAGS went in first, 1ST_POP_TIME last, and neither leads.
    assert retry_properties and all("1ST_POP_TIME" in p and p[0] != "TAGS" for p in retry_properties)


def test_a_pop_handle_names_the_queue_the_message_was_popped_from():
    """The listener context of a POP consumer names the subscribed topic with queue -1; the
    POP_CK handle (as a real 5.3.3 client got it) names the queue and whether it was the retry topic."""
    call = {"group": GROUP, "topic": "PopTopic", "uniq_key": "U"}
    assert pop_queue({**call, "pop_ck": "0 1795686224731 5000 2 0 broker-b 1 0"}) == ("PopTopic", 1)
    assert pop_queue({**call, "pop_ck": "3 1795686231000 5000 4 1 broker-a 0 3"}) == (RETRY_TOPIC, 0)
    assert pop_queue({**call, "pop_ck": "3 1795686231000 5000 4 2 broker-a 0 3"}) == (
        "%RETRY%pop-service+PopTopic", 0)
    with pytest.raises(Exception, match="POP_CK"):
        pop_queue({**call, "pop_ck": None})


def test_the_plan_refuses_a_group_the_driver_cannot_play():
    """The real POP client's retry delays are whole seconds: other delays are refused before
    anything starts."""
    scenario = load_scenario(SCENARIO)
    (group,) = scenario.groups
    check_groups(scenario)
    with pytest.raises(BadInputError, match="whole seconds"):
        check_groups(replace(scenario, groups=(replace(group, retry_delays_ms=(1500,)),)))


def test_a_pop_only_plan_waits_for_pop_retries_not_for_delay_levels(tmp_path):
    """The driver stops once no listener was called for the plan's idle time: for a POP group,
    twice its longest wait (5 s invisible time) plus the client's 15 s long polling, not twice the
    default delay levels' 2 h, which no record of a POP-only scenario waits in."""
    from broker_core.sim.run import simulate
    from conformance.plan import build_plan

    scenario = load_scenario(SCENARIO)
    simulate(SCENARIO, tmp_path / "model", scenario=scenario)
    plan = build_plan(scenario, tmp_path / "model", namesrv="127.0.0.1:9876", brokers={"broker-a": "127.0.0.1:10911"})
    settings = dict(line.split("\t")[1:] for line in plan.text.splitlines() if line.startswith("setting\t"))
    assert int(settings["idle_ms"]) == 2 * 5_000 + 15_000
    (group_line,) = [line.split("\t") for line in plan.text.splitlines() if line.startswith("group\t")]
    assert group_line[3:] == ["POP", "2", "2", "1", "PopTopic", "5000", "2"]
