"""A concurrent listener that asks for the DLQ (``behavior.dlq_probability``), simulated end to end."""

from __future__ import annotations

from collections import defaultdict

from simruns import assert_run_passes, assert_same_seed_same_rows, scenario_error

from broker_core.client.behavior import DLQ_REQUESTED
from broker_core.export.parquet import read_table
from broker_core.sim.run import simulate
from broker_core.sim.scenario import load_scenario_text

SEED = 7
MAX_RECONSUME_TIMES = 4
SCENARIO = f"""\
name: dlq-request
seed: {SEED}
horizon: 10m
broker: {{message_delay_level: "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"}}
topics:
  - {{name: T, queues: 2}}
groups:
  - name: g
    subscribe: [T]
    max_reconsume_times: {MAX_RECONSUME_TIMES}
    consumers: 2
    behavior: {{consume_time: 2ms, fail_probability: 0.4, dlq_probability: 0.2}}
  - name: plain
    subscribe: [T]
    behavior: {{consume_time: 2ms, fail_probability: 0.4}}
producers:
  - {{topic: T, messages: 120, rate: 40/s}}
"""


def _simulate(tmp_path, text: str = SCENARIO, name: str = "s.yaml"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(text)
    run = tmp_path / "run"
    simulate(path, run)
    return path, run


def test_a_dlq_request_dead_letters_after_any_number_of_retries(tmp_path):
    """Each DLQ_REQUESTED delivery puts one %DLQ%g record with its reconsume times + 1, after 0 or
    more retries and before the max; the message is never delivered to the group again, and the
    run's invariants hold."""
    path, run = _simulate(tmp_path)
    assert_run_passes(run, path, SEED)
    attempts = read_table(run, "consume_attempts").to_pylist()
    requests = [a for a in attempts if a["status"] == DLQ_REQUESTED]
    assert requests and {a["group"] for a in requests} == {"g"}
    assert {a["outcome"] for a in requests} == {"SENT_BACK"}
    dlq = defaultdict(list)
    for r in read_table(run, "commitlog").to_pylist():
        if r["topic"] == "%DLQ%g":
            dlq[r["uniq_key"]].append(r)
    by_key = {a["uniq_key"]: a for a in requests}
    assert set(by_key) <= set(dlq)
    for key, a in by_key.items():
        (record,) = dlq[key]
        assert record["reconsume_times"] == a["reconsume_times"] + 1
        assert dict(record["properties"])["DELAY"] == "0"
        later = [b for b in attempts if b["group"] == "g" and b["uniq_key"] == key
                 and b["start_ts"] > a["start_ts"]]
        assert later == [], f"{key} delivered again after its DLQ request"
    retries = {a["reconsume_times"] for a in requests}
    assert 0 in retries and any(0 < r < MAX_RECONSUME_TIMES for r in retries)
    # The other group's listener never asks for it: its DLQ records all come at the max.
    assert {r["reconsume_times"] for r in read_table(run, "commitlog").to_pylist()
            if r["topic"] == "%DLQ%plain"} <= {MAX_RECONSUME_TIMES + 1, 17}


def test_a_dlq_request_run_is_a_function_of_its_seed(tmp_path):
    """The same seed gives the same rows in every table; another seed other consume attempts."""
    path, run = _simulate(tmp_path)
    assert_same_seed_same_rows(run, path, tmp_path, other_seed=SEED + 1)


def test_a_zero_dlq_probability_changes_nothing(tmp_path):
    """Writing dlq_probability: 0 gives the same consume attempts as leaving it out."""
    _, without = _simulate(tmp_path / "a", SCENARIO.replace(", dlq_probability: 0.2", ""))
    _, zero = _simulate(tmp_path / "b", SCENARIO.replace("dlq_probability: 0.2", "dlq_probability: 0"))
    assert read_table(without, "consume_attempts").to_pylist() == read_table(zero, "consume_attempts").to_pylist()


def test_a_dlq_request_outside_a_concurrent_clustering_group_is_refused_at_its_line():
    """Orderly, broadcasting and POP groups have no delay level to send back: the field is refused
    there, naming its file and line."""
    for change in ("    mode: orderly\n", "    model: broadcasting\n"):
        err = scenario_error(SCENARIO.replace("    max_reconsume_times", change + "    max_reconsume_times"))
        assert str(err).startswith("s.yaml:13: groups[0].behavior.dlq_probability: 0.2 is a concurrent "
                                   "clustering push group's setting"), str(err)
    pop = SCENARIO.replace('broker: {', 'broker: {semantics: "5.x", ').replace(
        f"    max_reconsume_times: {MAX_RECONSUME_TIMES}\n", "    mode: pop\n")
    err = scenario_error(pop)
    assert "s.yaml:12: groups[0].behavior.dlq_probability" in str(err) and "a POP group" in str(err)
    assert load_scenario_text(SCENARIO, source="s.yaml").groups[0].behavior.dlq_probability == 0.2
