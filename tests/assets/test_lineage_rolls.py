"""The model's timer rolls read back like a real broker's: a 5.x simulation with a 5-slot roll
window (as tests/conformance/test_timer_5x.py ran a real 5.3.3 broker) is imported from its store
directory and its lineage built; each timer past the window is one TIMER hop per wheel record (the
first and each roll), then one DELIVER, and every blocking check passes."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from broker_core.constants import PROP_TIMER_ROLL_TIMES, TIMER_TOPIC
from broker_core.export.store_import import import_store
from broker_core.sim.run import simulate
from broker_core.sim.scenario import load_scenario_text

SCENARIO = """\
name: rolls
seed: 3
horizon: 2m
broker: {semantics: "5.x", timer_roll_window_slot: 5}
topics:
  - {name: TimerTopic, queues: 2}
groups:
  - {name: timer-group, subscribe: [TimerTopic], behavior: {consume_time: 1ms}}
producers:
  - {topic: TimerTopic, messages: 12, rate: 4/s, timer: {0s: 0.25, 4s: 0.25, 7s: 0.25, 14s: 0.25}}
"""
# Rolls a 5 s window gives a timer this far ahead (docs/rocketmq-5x.md: 6 s ahead rolled once on a
# real 5.3.3 broker, 14 s ahead twice).
ROLLS_BY_DELAY = {"4000": 0, "7000": 1, "14000": 2}


def _commitlog(run):
    return [{**r, "properties": dict(r["properties"] or ())}
            for r in pq.read_table(run / "parquet" / "commitlog").to_pylist()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, spark):
    """The scenario simulated, then its store imported as a real store is; lineage built for both."""
    from assets.lineage import run_lineage

    root = tmp_path_factory.mktemp("rolls")
    scenario = load_scenario_text(SCENARIO, source="rolls.yaml")
    simulate("rolls.yaml", root / "model", scenario=scenario)
    summary = import_store(root / "model" / "store", root / "imported", name="rolls-imported")
    assert summary.errors == [], summary.errors
    for run in (root / "model", root / "imported"):
        run_lineage(run, spark)
    return root


def test_rolled_timers_are_timer_hops_then_one_deliver_with_the_last_roll_count(runs):
    """A timer 7 s ahead has two TIMER hops (the first record, roll 1), one 14 s ahead three; the
    wheel records carry TIMER_ROLL_TIMES none, 1, 2 and the DELIVER the last count; every such
    message is CONSUMED."""
    run = runs / "model"
    records = {r["phys_offset"]: r for r in _commitlog(run)}
    hops = pq.read_table(run / "lineage" / "message_hops").to_pylist()
    lineage = {r["message_key"]: r for r in pq.read_table(run / "lineage" / "message_lineage").to_pylist()}
    timers = {r["uniq_key"]: r["properties"]["TIMER_DELAY_MS"] for r in records.values()
              if r["topic"] == TIMER_TOPIC and PROP_TIMER_ROLL_TIMES not in r["properties"]}
    assert sorted(set(timers.values())) == ["14000", "4000", "7000"], timers
    for key, delay in timers.items():
        chain = sorted((h for h in hops if h["message_key"] == key), key=lambda h: h["hop_index"])
        rolls = ROLLS_BY_DELAY[delay]
        assert [h["hop_kind"] for h in chain] == ["TIMER"] * (rolls + 1) + ["DELIVER"], (key, delay, chain)
        counts = [records[h["phys_offset"]]["properties"].get(PROP_TIMER_ROLL_TIMES) for h in chain]
        last = str(rolls) if rolls else None
        assert counts == [None] + [str(i) for i in range(1, rolls + 1)] + [last], (key, counts)
        assert {records[h["phys_offset"]]["topic"] for h in chain[:-1]} == {TIMER_TOPIC}
        assert records[chain[-1]["phys_offset"]]["topic"] == "TimerTopic"
        assert lineage[key]["final_state"] == "CONSUMED" and lineage[key]["retries"] == 0


def test_the_imported_store_holds_the_same_records_and_hops_as_the_simulation(runs):
    """Importing the model's store directory gives the records (topic, queue, offsets, properties in
    order, store time) and the hops the simulation recorded: the rolls are in the store's bytes."""
    def shape(run):
        return sorted((r["phys_offset"], r["topic"], r["queue_id"], r["queue_offset"], r["store_ts"],
                       list(r["properties"].items())) for r in _commitlog(run))

    def hop_rows(run):
        return sorted((h["message_key"], h["group"] or "", h["hop_index"], h["hop_kind"], h["phys_offset"])
                      for h in pq.read_table(run / "lineage" / "message_hops").to_pylist())

    assert shape(runs / "model") == shape(runs / "imported")
    assert hop_rows(runs / "model") == hop_rows(runs / "imported")
    assert sum(1 for h in hop_rows(runs / "model") if h[3] == "TIMER") > len(ROLLS_BY_DELAY)


def test_every_blocking_check_passes_on_a_run_with_rolls(runs):
    """hop_grammar_valid (TIMER+ > DELIVER), no_delivery_before_due_time, lineage_matches_commitlog
    and the other blocking checks pass on the model's run and on its imported store."""
    from conformance.run import _warehouse

    verdicts = _warehouse([runs / "model", runs / "imported"], runs / "warehouse.duckdb")
    failed = {(run, name): v for run, outcomes in verdicts.items() for name, v in outcomes.items()
              if v["blocking"] and not v["passed"]}
    assert failed == {}, failed


def test_the_simulations_invariants_hold_with_rolls(runs):
    """The run-wide checkers (no loss, hop grammar, offsets, no early delivery) find nothing in a
    run whose timers roll."""
    from broker_core.sim.invariants import check_run, format_violations

    violations = check_run(runs / "model")
    assert violations == [], format_violations(violations)


def test_the_same_seed_writes_the_same_store_bytes(tmp_path):
    """Same scenario and seed, same commit-log bytes, rolls included."""
    scenario = load_scenario_text(SCENARIO, source="rolls.yaml")
    for name in ("a", "b"):
        simulate("rolls.yaml", tmp_path / name, scenario=scenario)

    def log_bytes(run):
        return b"".join(p.read_bytes() for p in sorted((run / "store" / "commitlog").iterdir()))

    assert log_bytes(tmp_path / "a") == log_bytes(tmp_path / "b")
    assert TIMER_TOPIC.encode() in log_bytes(tmp_path / "a") and b"TIMER_ROLL_TIMES" in log_bytes(tmp_path / "a")
