"""P3: the default scenario end to end -- simulate plus Parquet, against the simulated time it covers.

Each run calls ``broker_core.sim.run.simulate`` on ``scenarios/default.yaml`` into a fresh temp
directory: the world on the virtual clock, the store files, every Parquet table and run.json.
The baseline is the simulated time of the same run: the speed-up is simulated seconds per
second of the run (target >= 700x), and records/s counts every row written (``records_written``).

Run: ``python -m bench.scenario_e2e [--quick] [--scenario PATH] [--runs N] [--profile N]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from bench.common import Stats, load_note, write_result
from broker_core.sim.run import RunSummary, simulate

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TARGET_SPEEDUP = 700.0  # simulated time per unit of real time
SCENARIO_FULL = PROJECT_ROOT / "scenarios" / "default.yaml"
SCENARIO_QUICK = PROJECT_ROOT / "scenarios" / "small.yaml"
RUNS_FULL = 3
RUNS_QUICK = 2


def one_run(scenario: Path) -> tuple[RunSummary, float, float]:
    """(summary, wall seconds, CPU seconds) of one simulation into a temp directory."""
    root = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        summary = simulate(scenario, root / "run")
        return summary, time.perf_counter() - w0, time.process_time() - c0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def profile_run(scenario: Path, top: int) -> str:
    """cProfile of one extra run (not counted): the top functions by own time, then by cumulative."""
    prof = cProfile.Profile()
    prof.runcall(one_run, scenario)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small scenario, fewer runs")
    parser.add_argument("--scenario", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the top N functions of one extra run")
    args = parser.parse_args(argv)
    scenario = args.scenario or (SCENARIO_QUICK if args.quick else SCENARIO_FULL)
    runs = args.runs or (RUNS_QUICK if args.quick else RUNS_FULL)
    summaries, walls, cpus = [], [], []
    for _ in range(runs):
        summary, wall, cpu = one_run(scenario)
        summaries.append(summary)
        walls.append(wall)
        cpus.append(cpu)
    first = summaries[0]
    assert all(s.records_written == first.records_written for s in summaries), "runs differ"
    sim_s = (first.sim_end_ms - first.sim_start_ms) / 1000
    wall, cpu = Stats(walls), Stats(cpus)
    records = first.records_written
    commitlog = first.tables.get("commitlog", 0)
    rows = []
    for label, st in (("wall", wall), ("CPU", cpu)):
        rows.append([label, f"{st.median:.2f}", f"{st.p90:.2f}", f"{st.max:.2f}",
                     f"{sim_s / st.median:,.0f}x", f"{sim_s / st.max:,.0f}x",
                     f"{sim_s / st.median / TARGET_SPEEDUP:.2f}",
                     f"{records / st.median:,.0f}", f"{commitlog / st.median:,.0f}"])
    met = sim_s / wall.median >= TARGET_SPEEDUP
    met_cpu = sim_s / cpu.median >= TARGET_SPEEDUP
    tables = ", ".join(f"{k} {v:,}" for k, v in first.tables.items())
    notes = (
        f"Scenario {scenario.relative_to(PROJECT_ROOT) if scenario.is_relative_to(PROJECT_ROOT) else scenario}"
        f" (seed {first.seed}), {runs} runs into temp dirs; ended by {first.end_reason} after "
        f"{sim_s:,.0f} s of simulated time (the baseline); {first.produced:,} messages produced, "
        f"{records:,} rows written ({tables}). {load_note()} when the table was written.\n\n"
        f"Target >= {TARGET_SPEEDUP:.0f}x real time: {'met' if met else 'MISSED'} on wall time, "
        f"{'met' if met_cpu else 'MISSED'} on CPU time (CPU counts every thread of this process, "
        "so it is what the run costs whatever else the shared machine is doing).")
    if args.profile:
        print(profile_run(scenario, args.profile))
    name = common.result_name("scenario_e2e", args.quick)
    return write_result(name, "P3 default scenario end to end (simulate + Parquet)",
                        ["clock", "median s", "p90 s", "max s", "speed-up at median",
                         "speed-up at max", "median / target", "rows/s at median",
                         "commit-log records/s at median"], rows, notes)


if __name__ == "__main__":
    main(sys.argv[1:])
