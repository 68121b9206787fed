"""Golden traces: three short seeds of tests/golden/tiny.yaml, compared line by line.

A trace lists every commit-log record and every delivery in order, with times relative to the
start. A change in the model's behaviour shows as a diff here; after reviewing it, regenerate
with ``UPDATE_GOLDEN=1 pytest tests/broker_core/sim/test_golden.py`` and commit the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from simruns import ROOT, assert_run_passes

from broker_core.export.parquet import read_table
from broker_core.sim.run import reproduce_command, simulate
from broker_core.sim.world import SIM_EPOCH_MS

GOLDEN = ROOT / "tests" / "golden"
SCENARIO = GOLDEN / "tiny.yaml"
SEEDS = (1, 2, 3)
KEY_TAIL_CHARS = 8  # the UNIQ_KEY's counter end is enough to follow a message in a trace


def _ms(ts) -> int:
    return int(ts.timestamp() * 1000) - SIM_EPOCH_MS


def trace(run_dir: Path) -> str:
    """The readable trace of a run: records then deliveries, one per line."""
    lines = ["# commitlog: +ms topic[queue]@offset key reconsume delay real_topic"]
    for r in read_table(run_dir, "commitlog").to_pylist():
        lines.append(f"+{_ms(r['store_ts'])} {r['topic']}[{r['queue_id']}]@{r['queue_offset']} "
                     f"{(r['uniq_key'] or '-')[-KEY_TAIL_CHARS:]} rt={r['reconsume_times']} "
                     f"dl={r['delay_level']} real={r['real_topic'] or '-'}")
    lines.append("# consume_attempts: +start..+end group consumer queue key rt status outcome")
    rows = read_table(run_dir, "consume_attempts").to_pylist()
    for r in rows:
        lines.append(f"+{_ms(r['start_ts'])}..+{_ms(r['end_ts'])} {r['group']} {r['consumer_id']} "
                     f"{r['queue_topic']}[{r['queue_id']}]@{r['queue_offset']} "
                     f"{(r['uniq_key'] or '-')[-KEY_TAIL_CHARS:]} rt={r['reconsume_times']} "
                     f"{r['status']} {r['outcome']}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", SEEDS)
def test_golden_trace(seed, tmp_path):
    """A short seed's full trace matches its reviewed golden file."""
    out = tmp_path / f"tiny-{seed}"
    simulate(SCENARIO, out, seed=seed)
    assert_run_passes(out, SCENARIO, seed)
    got = trace(out)
    golden = GOLDEN / f"tiny-seed{seed}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert golden.exists(), f"no golden file {golden.name}: run with UPDATE_GOLDEN=1 and review it"
    expected = golden.read_text()
    if got != expected:
        diff = [f"line {i + 1}:\n  golden: {a}\n  now:    {b}"
                for i, (a, b) in enumerate(zip(expected.splitlines(), got.splitlines(), strict=False))
                if a != b][:5]
        pytest.fail(f"SEED={seed}\nreproduce: {reproduce_command(SCENARIO, out, seed)}\n"
                    f"trace differs from {golden.name} ({len(expected.splitlines())} vs "
                    f"{len(got.splitlines())} lines):\n" + "\n".join(diff))
