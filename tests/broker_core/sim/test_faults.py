"""Each fault scenario runs, records its fault, and keeps every invariant RocketMQ keeps under it."""

from __future__ import annotations

import re

import pytest
from simruns import SCENARIOS, assert_run_passes

from broker_core.export.parquet import read_table
from broker_core.sim.scenario import FAULT_KINDS, load_scenario

FAULT_SCENARIOS = sorted(SCENARIOS.glob("fault-*.yaml"))


def test_every_fault_kind_has_a_scenario():
    """The fault-*.yaml scenarios together inject every fault kind the loader accepts."""
    kinds = {f.kind for p in FAULT_SCENARIOS for f in load_scenario(p).faults}
    assert kinds == set(FAULT_KINDS)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem)
                                  for p in FAULT_SCENARIOS])
def test_fault_scenario_keeps_the_invariants(path, simulated_run):
    """The fault fires, is recorded in the faults table, and no checker finds a violation."""
    scenario = load_scenario(path)
    out = simulated_run(path.stem)
    recorded = {r["kind"] for r in read_table(out, "faults").to_pylist()}
    assert {f.kind for f in scenario.faults} <= recorded
    assert_run_passes(out, path, scenario.seed)


def test_torn_write_is_cut_by_recovery(simulated_run):
    """The half-written record left by a torn append is dropped: the next record starts where it began."""
    out = simulated_run("fault-torn-write")
    detail = next(r["detail"] for r in read_table(out, "faults").to_pylist() if r["kind"] == "torn_write")
    match = re.search(r"(\d+) of (\d+) bytes at offset (\d+)", detail)
    assert match, f"nothing was torn: {detail}"
    torn_at = int(match.group(3))
    offsets = set(read_table(out, "commitlog").column("phys_offset").to_pylist())
    assert torn_at in offsets, "recovery did not truncate at the torn record"
    assert read_table(out, "store_problems").num_rows == 0


def test_put_failures_show_in_the_produced_table(simulated_run):
    """A put-failure window makes some sends fail (FAILED rows) and every failure is inside it."""
    path = SCENARIOS / "fault-put-failure.yaml"
    out = simulated_run(path.stem)
    produced = read_table(out, "produced").to_pylist()
    assert any(row["status"] == "FAILED" for row in produced)
    fault = load_scenario(path).faults[0]
    start = read_table(out, "runs").column("sim_start_ts")[0].as_py()
    for row in produced:
        if row["status"] == "FAILED":
            offset_ms = (row["send_ts"] - start).total_seconds() * 1000
            assert fault.at_ms <= offset_ms <= fault.until_ms, row
