"""scenarios/pop-small.yaml: a 5.x POP group in the model, simulated, read back by the lineage and
the warehouse, and compared message by message with the model's own consume attempts."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest
from simruns import SCENARIOS, assert_run_passes, assert_same_seed_same_rows, scenario_error

from assets.checks import INVARIANTS, run_checks
from broker_core.client.pop_consumer import POP_DELAY_MS_DEFAULT, POP_DELAYED, POP_MODE, PopSettings
from broker_core.errors import ScenarioError
from broker_core.export.parquet import read_table
from broker_core.sim.run import simulate
from broker_core.sim.scenario import load_scenario, load_scenario_text
from orchestration.cli import main as cli_main

POP_SMALL = SCENARIOS / "pop-small.yaml"
# Cut the run after the first acks at the maximum and while a retry is under way (a pop of
# the retry topic every 10 s), so CONSUMED, IN_FLIGHT and POP_ACKED_AT_MAX all show: the last
# message failed at 20.006 s is invisible for 2 s, past the cut.
HORIZON_CUT_MS = 22_000
# Cut 2 s later, that message's revive time passed and its retry record is not written yet (the
# revive service writes it 2 to 3 s after): RETRYING.
HORIZON_CUT_REVIVE_PENDING_MS = 24_000
# The model's ground truth: a (group, message) ends in the state its last listener call left it.
STATE_OF_LAST_OUTCOME = {"ACKED": "CONSUMED", "POP_ACKED_AT_MAX": "CONSUMED", "POP_DELAYED": "RETRYING",
                         "SENT_BACK": "RETRYING"}


def _scenario(horizon_ms: int = HORIZON_CUT_MS):
    return dataclasses.replace(load_scenario(POP_SMALL), horizon_ms=horizon_ms)


def _ms(value) -> int:
    return round(value.timestamp() * 1000)


def model_states(con, scenario) -> dict[tuple, tuple[str, int | None]]:
    """The model's own ground truth per (group, message): (final state, invisible until, ms).

    The state its last listener call left it in (never delivered: UNCONSUMED); after a failed POP
    delivery the client set its invisible time to its retry delay from the call's end, so it is
    IN_FLIGHT until then when that is after the end of the run (runs.sim_end_ts), RETRYING once it
    is not (the revive is pending or its retry is waiting). A record popped whose listener call had
    not ended when the run stopped is not in consume_attempts: the cuts here have none."""
    pop_settings = {g.name: PopSettings(g.name, tuple(g.subscribe), retry_delays_ms=g.retry_delays_ms or
                                        POP_DELAY_MS_DEFAULT)
                    for g in scenario.groups if g.mode == POP_MODE}
    (sim_end,) = con.execute("SELECT sim_end_ts FROM runs").fetchone()
    truth = {}
    for group, key, outcome, end_ts, reconsume_times in con.execute(
            'SELECT "group", uniq_key, outcome, end_ts, reconsume_times FROM consume_attempts '
            'ORDER BY end_ts, start_ts').fetchall():
        state, until = STATE_OF_LAST_OUTCOME[outcome], None
        if outcome == POP_DELAYED:
            until = _ms(end_ts) + pop_settings[group].delay_ms(reconsume_times)
            state = "IN_FLIGHT" if until > _ms(sim_end) else "RETRYING"
        truth[(group, key)] = (state, until if state == "IN_FLIGHT" else None)
    return truth


def lineage_states(con) -> dict[tuple, tuple[str, int | None]]:
    """(final state, invisible until in ms on IN_FLIGHT rows) per (group, message) of the lineage."""
    return {(g, k): (s, _ms(until) if s == "IN_FLIGHT" else None) for g, k, s, until in con.execute(
        'SELECT "group", message_key, final_state, invisible_until FROM message_lineage').fetchall()}


@pytest.fixture(scope="module")
def pop_run(tmp_path_factory):
    """pop-small cut at HORIZON_CUT_MS: simulated, lineage built, loaded into a warehouse."""
    base = tmp_path_factory.mktemp("pop")
    run = base / "run"
    simulate(POP_SMALL, run, scenario=_scenario())
    assert cli_main(["-q", "lineage", str(run)]) == 0
    db = base / "wh.duckdb"
    assert cli_main(["-q", "warehouse", str(run), "--db", str(db)]) == 0
    return run, db


def test_the_pop_run_passes_the_models_invariants(pop_run):
    """Every run-level invariant holds on a run with a POP group (POP retries born on the broker,
    within the client's maximum; a message the client acked at its maximum is terminal)."""
    run, _ = pop_run
    assert_run_passes(run, POP_SMALL, _scenario().seed)


def test_the_pop_run_writes_checkpoints_acks_and_retries_the_import_decodes(pop_run):
    """pop_evidence holds checkpoints and acks in both stages, decoded from the model's store; the
    POP retry topic is pop-service's by its checkpoints; retries carry 1ST_POP_TIME."""
    run, _ = pop_run
    evidence = read_table(run, "pop_evidence").to_pylist()
    kinds = {(e["stage"], e["kind"]) for e in evidence}
    assert kinds == {("timer", "ck"), ("timer", "ack"), ("revive", "ck"), ("revive", "ack")}
    assert {e["group"] for e in evidence} == {"pop-service"}
    owners = {(o["retry_topic"], o["group"], o["origin_topic"], o["resolution"])
              for o in read_table(run, "retry_topics").to_pylist()}
    assert ("%RETRY%pop-service_PopTopic", "pop-service", "PopTopic", "checkpoint") in owners
    retries = [r for r in read_table(run, "commitlog").to_pylist() if r["topic"] == "%RETRY%pop-service_PopTopic"]
    assert retries and all("1ST_POP_TIME" in dict(r["properties"]) and r["born_host"] == r["store_host"]
                           for r in retries)
    assert not [r for r in read_table(run, "commitlog").to_pylist() if r["topic"].startswith("%DLQ%pop-service")]


def test_every_blocking_check_passes_and_final_states_equal_the_models(pop_run):
    """Every blocking warehouse check passes, and each message's final_state is what the model's
    own consume attempts say: CONSUMED after an ack (a success, or the client's ack at its
    maximum), IN_FLIGHT until the end of the invisible time a change of invisible time set when
    that is after the end of the run, with that time as invisible_until, UNCONSUMED when never
    delivered."""
    _, db = pop_run
    con = duckdb.connect(str(db), read_only=True)
    try:
        outcomes = run_checks(con, INVARIANTS, run_id="pop-small")
        assert all(o.passed for o in outcomes), {o.check.name: o.examples for o in outcomes if not o.passed}
        truth = model_states(con, _scenario())
        lineage = lineage_states(con)
        outcomes_seen = {o for (o,) in con.execute("SELECT DISTINCT outcome FROM consume_attempts").fetchall()}
    finally:
        con.close()
    pop_states = {s for (g, _), (s, _) in lineage.items() if g == "pop-service"}
    assert pop_states == {"CONSUMED", "IN_FLIGHT"}, pop_states
    assert {"ACKED", "POP_DELAYED", "POP_ACKED_AT_MAX"} <= outcomes_seen
    never = ("UNCONSUMED", None)
    differ = {k: (truth.get(k, never), s) for k, s in lineage.items() if truth.get(k, never) != s}
    assert differ == {}
    assert len(lineage) == 400


def test_a_pop_message_past_its_revive_time_at_the_end_is_retrying(tmp_path):
    """Cut after the in-flight message's invisible time ended and before the revive service wrote
    its retry, the lineage says RETRYING (revive pending), with the passed revive time as
    invisible_until, as the model's own consume attempts say."""
    scenario = _scenario(HORIZON_CUT_REVIVE_PENDING_MS)
    run, db = tmp_path / "run", tmp_path / "wh.duckdb"
    simulate(POP_SMALL, run, scenario=scenario)
    assert cli_main(["-q", "lineage", str(run)]) == 0
    assert cli_main(["-q", "warehouse", str(run), "--db", str(db)]) == 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        truth = model_states(con, scenario)
        lineage = lineage_states(con)
        pending = con.execute(
            "SELECT message_key, final_state, path, invisible_until < (SELECT sim_end_ts FROM runs) "
            "FROM message_lineage WHERE invisible_until IS NOT NULL").fetchall()
    finally:
        con.close()
    never = ("UNCONSUMED", None)
    assert {k: (truth.get(k, never), s) for k, s in lineage.items() if truth.get(k, never) != s} == {}
    assert {s for (g, _), (s, _) in lineage.items() if g == "pop-service"} == {"CONSUMED", "RETRYING"}
    # The one left is the message failed at 20.006 s: its retry record (popped) failed again, and
    # no retry of it is written yet.
    assert [(state, path.count(" > "), passed) for _, state, path, passed in pending] == [("RETRYING", 1, True)]


def test_the_same_seed_gives_the_same_pop_run(pop_run, tmp_path):
    """Simulating again with the same seed gives the same rows in every table, POP tables included."""
    run, _ = pop_run
    assert_same_seed_same_rows(run, POP_SMALL, tmp_path, 12, scenario=_scenario())


POP_GROUP = """name: t
broker: {semantics: "5.x"}
topics:
  - {name: PopTopic, queues: 2}
groups:
  - name: g
    subscribe: [PopTopic]
    mode: pop
    invisible_time: 5s
producers:
  - {topic: PopTopic, messages: 10}
"""


def test_a_pop_group_is_refused_under_4_9_at_its_line():
    """RocketMQ 4.9.4 has no POP: `mode: pop` under the 4.9 rules is refused at the mode's line,
    and switching a POP scenario to 4.9 (a conformance run) is refused too."""
    err = scenario_error(POP_GROUP.replace('broker: {semantics: "5.x"}\n', ""))
    assert str(err).startswith("s.yaml:7: groups[0].mode: ") and "needs broker semantics '5.x'" in str(err)
    with pytest.raises(ScenarioError, match="has no POP consumption"):
        load_scenario_text(POP_GROUP, source="s.yaml").with_semantics("4.9")


def test_what_the_pop_model_does_not_play_is_refused_at_its_line():
    """A fault other than a burst naming a POP group or no group, a hanging POP listener, POP settings on a push
    group, and a broadcasting POP group are each refused at their line."""
    err = scenario_error(POP_GROUP + "faults:\n  - {at: 1s, kind: broker_restart}\n")
    assert str(err).startswith("s.yaml:13: faults[0].kind: ") and "POP groups (g)" in str(err)
    err = scenario_error(POP_GROUP + "faults:\n  - {at: 1s, kind: consumer_crash, group: g, consumer: 0}\n")
    assert str(err).startswith("s.yaml:13: faults[0].kind: ")
    err = scenario_error(POP_GROUP.replace("    invisible_time: 5s\n", "    behavior: {hang_probability: 0.1}\n"))
    assert "s.yaml:9" in str(err) and "not modelled for a POP group" in str(err)
    err = scenario_error(POP_GROUP.replace("    mode: pop\n", ""))
    assert str(err).startswith("s.yaml:8: groups[0].invisible_time: ")
    err = scenario_error(POP_GROUP.replace("    mode: pop\n", "    mode: pop\n    model: broadcasting\n"))
    assert "a POP group is a clustering group" in str(err)
    assert load_scenario_text(POP_GROUP + "faults:\n  - {at: 1s, kind: burst, topic: PopTopic, messages: 5}\n",
                              source="s.yaml").groups[0].invisible_ms == 5000


def test_a_pop_message_acked_at_the_maximum_is_not_in_flight(tmp_path):
    """pop-small to its end: every message is terminal, the ones the client acked at its maximum
    are counted neither consumed nor in flight."""
    summary = simulate(POP_SMALL, tmp_path / "run")
    given_up = {r["uniq_key"] for r in read_table(tmp_path / "run", "consume_attempts").to_pylist()
                if r["outcome"] == "POP_ACKED_AT_MAX"}
    assert summary.end_reason == "terminal" and given_up
    assert summary.in_flight == 0
    assert summary.consumed == summary.produced - len(given_up)
