"""``retry-audit simulate`` and ``retry-audit swarm``: thin wrappers over broker_core.sim.

Progress goes to stderr (simulated time reached, records written) unless ``--quiet``; the summary
goes to stdout, as text or ``--json``. A failed run prints ``SEED=<n>`` and the one command that
reproduces it before the error itself.
"""

from __future__ import annotations

import json
import sys

from assets.progress import TERMINAL_PROGRESS_INTERVAL_S, Throttle
from broker_core.errors import BadInputError
from broker_core.sim.run import RunSummary, reproduce_command
from broker_core.sim.run import simulate as run_simulation
from orchestration.term import ProgressBar, paint, say

SWARM_DIR = "swarm"  # under the data home: each seed's scenario, and the runs that failed


def _format_sim_ms(ms: int) -> str:
    s, ms = divmod(int(ms), 1000)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}h{m:02d}m{s:02d}s"


class _Progress:
    """A progress bar of simulated time against the horizon, at most once per wall second."""

    def __init__(self, horizon_ms: int) -> None:
        self._throttle = Throttle(TERMINAL_PROGRESS_INTERVAL_S)
        self._horizon_ms = max(1, horizon_ms)
        self._bar = ProgressBar(self._horizon_ms, sys.stderr)

    def __call__(self, sim_ms: int, records: int) -> None:
        if not self._throttle.ready():
            return
        self._bar.update(sim_ms, f"simulated {_format_sim_ms(sim_ms)} of "
                                 f"{_format_sim_ms(self._horizon_ms)}  records {records:,}")

    def done(self) -> None:
        self._bar.done()


def format_summary(summary: RunSummary) -> str:
    """The human summary of a run."""
    s = summary
    lines = [
        f"run {s.run_id} (seed {s.seed}) -> {s.run_dir}",
        f"  simulated {_format_sim_ms(s.sim_end_ms - s.sim_start_ms)}, ended: {s.end_reason}",
        f"  produced {s.produced:,}  send failed {s.send_failed:,}",
        f"  consumed {paint(f'{s.consumed:,}', 'green')}  retried {s.retried:,}  "
        f"DLQ {paint(f'{s.dlq:,}', 'red') if s.dlq else '0'}  in flight {s.in_flight:,}",
        f"  records {s.records_written:,} in {s.wall_seconds:.1f} s ({s.records_per_second:,.0f} records/s; "
        f"CPU {s.cpu_seconds:.1f} s, {s.records_per_cpu_second:,.0f} records/CPU-s)",
    ]
    return "\n".join(lines)


def simulate(args) -> int:
    """Run one scenario into --out; exit 0, or 1/2 with SEED and the reproduce command printed."""
    from broker_core.sim.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input: reported by the CLI, no seed to print
    messages = getattr(args, "messages", None)
    if messages is not None:
        scenario = scenario.with_messages(messages)
    seed = args.seed if args.seed is not None else scenario.seed
    quiet = getattr(args, "quiet", False)
    progress = None if quiet else _Progress(scenario.horizon_ms)
    try:
        summary = run_simulation(args.scenario, args.out, seed=seed, progress=progress,
                                 scenario=scenario)
    except BaseException as exc:
        # Bad input (an impossible seed, a name the broker refuses) has nothing to reproduce.
        if not isinstance(exc, KeyboardInterrupt | BadInputError):
            print(f"SEED={seed}", file=sys.stderr)
            print(f"reproduce: {reproduce_command(args.scenario, args.out, seed, messages)}", file=sys.stderr)
        raise
    finally:
        if progress is not None:
            progress.done()
    if getattr(args, "json", False):
        print(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
    elif not quiet:
        print(format_summary(summary))
    return 0


def swarm(args) -> int:
    """Random scenarios with faults over a range of seeds, every checker on each run."""
    from broker_core.sim.swarm import parse_seed_range, run_swarm
    from orchestration.partitions import data_home

    seeds = parse_seed_range(args.seeds)
    quiet = getattr(args, "quiet", False)
    report = run_swarm(seeds, base=data_home() / SWARM_DIR,
                       log=None if quiet else say)
    if getattr(args, "json", False):
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        for item in report["failures"]:
            print(f"SEED={item['seed']} {item['summary']}")
            if item.get("detail"):
                print(item["detail"])
            print(f"reproduce: {item['reproduce']}")
        print(f"swarm: {report['runs']} runs, {len(report['failures'])} failed")
    return 0 if not report["failures"] else 1
