"""Each fault scenario runs, records its fault, and keeps every invariant RocketMQ keeps under it."""

from __future__ import annotations

import re

import pytest
from simruns import SCENARIOS, assert_run_passes

from broker_core.export.parquet import read_table
from broker_core.sim.run import simulate
from broker_core.sim.scenario import FAULT_KINDS, load_scenario

FAULT_SCENARIOS = sorted(SCENARIOS.glob("fault-*.yaml"))


def test_every_fault_kind_has_a_scenario():
    """The fault-*.yaml scenarios together inject every fault kind the loader accepts."""
    kinds = {f.kind for p in FAULT_SCENARIOS for f in load_scenario(p).faults}
    assert kinds == set(FAULT_KINDS)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem)
                                  for p in FAULT_SCENARIOS])
def test_fault_scenario_keeps_the_invariants(path, tmp_path):
    """The fault fires, is recorded in the faults table, and no checker finds a violation."""
    scenario = load_scenario(path)
    out = tmp_path / scenario.name
    simulate(path, out)
    recorded = {r["kind"] for r in read_table(out, "faults").to_pylist()}
    assert {f.kind for f in scenario.faults} <= recorded
    assert_run_passes(out, path, scenario.seed)


def test_torn_write_is_cut_by_recovery(tmp_path):
    """The half-written record left by a torn append is dropped: the next record starts where it began."""
    path = SCENARIOS / "fault-torn-write.yaml"
    out = tmp_path / "torn"
    simulate(path, out)
    detail = next(r["detail"] for r in read_table(out, "faults").to_pylist() if r["kind"] == "torn_write")
    match = re.search(r"(\d+) of (\d+) bytes at offset (\d+)", detail)
    assert match, f"nothing was torn: {detail}"
    torn_at = int(match.group(3))
    offsets = set(read_table(out, "commitlog").column("phys_offset").to_pylist())
    assert torn_at in offsets, "recovery did not truncate at the torn record"
    assert read_table(out, "store_problems").num_rows == 0


def test_put_failures_show_in_the_produced_table(tmp_path):
    """A put-failure window makes some sends fail (FAILED rows) and every failure is inside it."""
    path = SCENARIOS / "fault-put-failure.yaml"
    out = tmp_path / "put"
    summary = simulate(path, out)
    assert summary.send_failed > 0
    fault = load_scenario(path).faults[0]
    start = read_table(out, "runs").column("sim_start_ts")[0].as_py()
    for row in read_table(out, "produced").to_pylist():
        if row["status"] == "FAILED":
            offset_ms = (row["send_ts"] - start).total_seconds() * 1000
            assert fault.at_ms <= offset_ms <= fault.until_ms, row
