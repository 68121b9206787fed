"""scenarios/default-5x.yaml: the default scenario under the 5.x rules, deterministic and valid."""

from __future__ import annotations

import json

import pytest
from simruns import SCENARIOS, assert_run_passes, run_rows

from broker_core.export.parquet import read_table
from broker_core.export.schema import RAW_TABLES
from broker_core.sim.run import simulate
from broker_core.sim.scenario import load_scenario
from broker_core.store.pop import pop_stage
from orchestration.cli import main as cli_main

DEFAULT_5X = SCENARIOS / "default-5x.yaml"
# 1,000 producer messages (the bursts' 2,000 come on top): long enough for notice-service's poison
# messages to walk all 16 retries, short enough for a test.
SCALED_MESSAGES = 1000


@pytest.fixture(scope="module")
def run_5x(tmp_path_factory):
    """default-5x at SCALED_MESSAGES, simulated once through the CLI for the module."""
    out = tmp_path_factory.mktemp("d5x") / "run"
    assert cli_main(["-q", "simulate", str(DEFAULT_5X), "--out", str(out),
                     "--messages", str(SCALED_MESSAGES)]) == 0
    return out


def test_default_5x_runs_under_the_5x_rules_and_passes_every_check(run_5x):
    """`retry-audit simulate scenarios/default-5x.yaml` runs with semantics 5.x and every invariant holds."""
    assert json.loads((run_5x / "run.json").read_text())["semantics"] == "5.x"
    scenario = load_scenario(DEFAULT_5X)
    assert scenario.broker.semantics == "5.x"
    assert_run_passes(run_5x, DEFAULT_5X, scenario.seed, SCALED_MESSAGES)


def test_default_5x_stores_what_a_5x_broker_writes(run_5x):
    """Publishes carry MSG_REGION, TRACE_ON and WAIT=true; a client's retry at RECONSUME_TIME 16 is
    retried once more (`>`), and the retry after it is dead-lettered with DELAY=-1."""
    rows = read_table(run_5x, "commitlog").to_pylist()
    publishes = [r for r in rows if r["topic"] == "OrderTopic"]
    assert publishes and all(dict(r["properties"]).get("WAIT") == "true" and
                             dict(r["properties"]).get("MSG_REGION") == "DefaultRegion" and
                             dict(r["properties"]).get("TRACE_ON") == "true" for r in publishes)
    retried_past_max = [r for r in rows if r["topic"] == "%RETRY%notice-service" and r["reconsume_times"] == 16]
    assert retried_past_max, "a 5.x broker retries a client retry whose count reached the max"
    client_dlq = [r for r in rows if r["topic"] == "%DLQ%notice-service" and dict(r["properties"])["DELAY"] == "-1"]
    assert client_dlq, "a client's send past the max is dead-lettered with DELAY=-1"
    assert all(r["store_host"] == "10.0.0.1:10911" for r in rows)


def test_default_5x_timers_go_through_the_wheel_and_arrive_one_slot_after_their_due_time(run_5x):
    """A fifth of PayTopic's messages are timers: each is stored in rmq_sys_wheel_timer first, then
    delivered into PayTopic one precision step (1 s) after its TIMER_OUT_MS, with its timer properties
    (the POP group's bookkeeping records in the wheel aside), except the ones the producer recalled,
    which are never delivered."""
    rows = read_table(run_5x, "commitlog").to_pylist()
    # pop-service's checkpoints and acks wait in the wheel too (REAL_TOPIC the revive topic).
    timer_records = [r for r in rows
                     if r["topic"] == "rmq_sys_wheel_timer" and pop_stage(r["topic"], r["real_topic"]) is None]
    # A twentieth of the timers are recalled as soon as sent: a recall record with their UNIQ_KEY.
    recalled = {r["uniq_key"] for r in timer_records if "TIMER_DEL_UNIQKEY" in dict(r["properties"])}
    wheel = {r["uniq_key"]: dict(r["properties"]) for r in timer_records
             if "TIMER_DEL_UNIQKEY" not in dict(r["properties"])}
    assert wheel and all(p["REAL_TOPIC"] == "PayTopic" and p["TIMER_DELAY_MS"] in ("5000", "120000")
                         for p in wheel.values())
    assert recalled and recalled < set(wheel)
    delivered = [r for r in rows if r["topic"] == "PayTopic" and r["uniq_key"] in wheel]
    assert {r["uniq_key"] for r in delivered} == set(wheel) - recalled, \
        "every timer of the run but the recalled ones was delivered before its end"
    assert len(delivered) == len(wheel) - len(recalled)
    for r in delivered:
        props = dict(r["properties"])
        stored_ms = round(r["store_ts"].timestamp() * 1000)
        assert stored_ms == int(props["TIMER_OUT_MS"]) + 1000 == int(props["TIMER_DEQUEUE_MS"])
        assert "DELAY" not in props and props["REAL_TOPIC"] == "PayTopic"


def test_default_5x_is_deterministic(run_5x, tmp_path):
    """The same scenario and seed give the same rows in every table and the same store bytes."""
    scenario = load_scenario(DEFAULT_5X).with_messages(SCALED_MESSAGES)
    again = tmp_path / "again"
    simulate(DEFAULT_5X, again, scenario=scenario)
    for table in RAW_TABLES:
        assert run_rows(run_5x, table) == run_rows(again, table), f"table {table} differs"
    files = sorted(p.relative_to(run_5x / "store") for p in (run_5x / "store").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again / "store") for p in (again / "store").rglob("*") if p.is_file())
    for rel in files:
        if rel.name != "lock":
            assert (run_5x / "store" / rel).read_bytes() == (again / "store" / rel).read_bytes(), str(rel)


def test_another_seed_and_the_4_9_default_give_other_rows(run_5x, tmp_path):
    """Another seed gives another run; the 4.9 default at the same scale stores no 5.x property."""
    other = tmp_path / "seed8"
    simulate(DEFAULT_5X, other, seed=8, scenario=load_scenario(DEFAULT_5X).with_messages(SCALED_MESSAGES))
    assert run_rows(other, "consume_attempts") != run_rows(run_5x, "consume_attempts")
    old = tmp_path / "default"
    simulate(SCENARIOS / "default.yaml", old,
             scenario=load_scenario(SCENARIOS / "default.yaml").with_messages(SCALED_MESSAGES))
    assert not any("MSG_REGION" in dict(r["properties"]) for r in read_table(old, "commitlog").to_pylist())


def test_default_5x_pop_group_writes_checkpoints_acks_and_revived_retries(run_5x):
    """pop-service pops PopTopic: its checkpoints and acks are decoded into pop_evidence from the
    timer and the revive topic, and each listener failure came back as a retry record of
    %RETRY%pop-service_PopTopic carrying 1ST_POP_TIME and born on the broker; no DLQ for it."""
    evidence = read_table(run_5x, "pop_evidence").to_pylist()
    assert {(e["stage"], e["kind"]) for e in evidence} == {("timer", "ck"), ("timer", "ack"),
                                                          ("revive", "ck"), ("revive", "ack")}
    rows = read_table(run_5x, "commitlog").to_pylist()
    retries = [r for r in rows if r["topic"] == "%RETRY%pop-service_PopTopic"]
    delayed = [a for a in read_table(run_5x, "consume_attempts").to_pylist()
               if a["group"] == "pop-service" and a["outcome"] == "POP_DELAYED"]
    assert delayed and len(retries) == len(delayed)
    assert all("1ST_POP_TIME" in dict(r["properties"]) and r["born_host"] == r["store_host"] for r in retries)
    assert not any(r["topic"] == "%DLQ%pop-service" for r in rows)
