"""A run's summary counts read back from Parquet, bucket by bucket."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker_core import names
from broker_core.export.counts import run_counts
from broker_core.export.parquet import read_table
from broker_core.sim.run import CONSUMED_OUTCOMES, simulate
from broker_core.sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / "scenarios" / "fault-put-failure.yaml"
HORIZON_MS = 150_000  # cut while messages are still in flight, after the first dead letters


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """A run with failed sends, retries, dead letters and messages still in flight."""
    scenario = dataclasses.replace(load_scenario(SCENARIO), horizon_ms=HORIZON_MS)
    out = tmp_path_factory.mktemp("counts") / "run"
    simulate(SCENARIO, out, scenario=scenario)
    subscriptions = {g.name: list(g.subscribe) for g in scenario.groups if g.model == "clustering"}
    return out, subscriptions


def reference_counts(run_dir: Path, subscriptions: dict[str, list[str]]) -> dict[str, int]:
    """The same counts from whole columns in Python sets: plain, and memory-hungry on a big run."""
    produced = read_table(run_dir, "produced").to_pylist()
    ok_keys: dict[str, set[str]] = {}
    for r in produced:
        if r["status"] == "SEND_OK":
            ok_keys.setdefault(r["topic"], set()).add(r["uniq_key"])
    consumed_pairs = {(r["group"], r["uniq_key"]) for r in read_table(run_dir, "consume_attempts").to_pylist()
                      if r["status"] == "CONSUME_SUCCESS" and r["outcome"] in CONSUMED_OUTCOMES}
    commitlog = read_table(run_dir, "commitlog").to_pylist()
    dlq_pairs = {(names.group_of(r["topic"]), r["uniq_key"]) for r in commitlog
                 if names.is_dlq_topic(r["topic"])}
    consumed = in_flight = 0
    for group, topics in subscriptions.items():
        for topic in topics:
            for key in ok_keys.get(topic, ()):
                if (group, key) in consumed_pairs:
                    consumed += 1
                elif (group, key) not in dlq_pairs:
                    in_flight += 1
    return {"produced": sum(len(v) for v in ok_keys.values()),
            "send_failed": sum(r["status"] != "SEND_OK" for r in produced),
            "consumed": consumed,
            "retried": sum(names.is_retry_topic(r["topic"]) for r in commitlog),
            "dlq": sum(names.is_dlq_topic(r["topic"]) for r in commitlog),
            "in_flight": in_flight}


def test_counts_match_counting_in_python_sets(cut_run):
    """The streamed counts equal the counts taken from whole tables in Python sets."""
    run_dir, subscriptions = cut_run
    expected = reference_counts(run_dir, subscriptions)
    assert all(expected[k] > 0 for k in ("send_failed", "retried", "dlq", "in_flight")), expected
    assert run_counts(run_dir, subscriptions, CONSUMED_OUTCOMES) == expected


@pytest.mark.parametrize("bucket_rows", [1, 100, 1000])
def test_counts_do_not_depend_on_the_bucket_size(cut_run, bucket_rows):
    """Splitting the keys into 2..256 buckets (one pass each) gives the same counts as one pass."""
    run_dir, subscriptions = cut_run
    whole = run_counts(run_dir, subscriptions, CONSUMED_OUTCOMES)
    assert run_counts(run_dir, subscriptions, CONSUMED_OUTCOMES, bucket_rows=bucket_rows) == whole
