"""Run every benchmark (P1-P7), each in its own process, and print one summary.

``python -m bench.run_all`` writes the full result tables under ``bench/results/`` (committed, so
a regression shows in review); ``--quick`` runs small sizes in a few minutes and writes its
tables under ``bench/results/quick/`` so that it never overwrites the committed numbers.
``--only NAME`` (repeatable) picks benchmarks by module name.

Each benchmark runs in a fresh interpreter: one that fails (or whose inputs are not there yet)
is reported and the others still run, and peak memory or a JVM from one never leaks into the next.
The exit code is 0 when every benchmark produced its table, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from bench.common import RESULTS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
QUICK_RESULTS = RESULTS / "quick"
BENCH_TIMEOUT_S_FULL = 3 * 3600
# P4's first full run simulates its 50M-record input (about 50 runs of 1M records; cached after),
# which alone takes hours on 2 cores: see bench/inputs.py.
BENCH_TIMEOUT_S_LINEAGE_FULL = 10 * 3600
BENCH_TIMEOUT_S_QUICK = 600
TAIL_LINES = 40


@dataclass(frozen=True)
class Bench:
    """One benchmark module and the arguments of its full and quick runs."""

    key: str  # P1..P6, the targets' numbering
    module: str
    full_args: tuple[str, ...] = ()
    quick_args: tuple[str, ...] = ("--quick",)
    # The result file a benchmark always writes under its own name (store_append has no quick
    # mode of its own: its quick run is kept out of the committed file, see _run).
    fixed_result: str | None = None
    timeout_s_full: int = BENCH_TIMEOUT_S_FULL


BENCHES = (
    Bench("P1", "store_append", quick_args=("--records", "20000", "--runs", "3", "--no-instructions"),
          fixed_result="store_append.md"),
    Bench("P2", "schedule_drain"),
    Bench("P3", "scenario_e2e"),
    Bench("P4", "lineage_scale", timeout_s_full=BENCH_TIMEOUT_S_LINEAGE_FULL),
    Bench("P4 first run", "first_run"),
    Bench("P5", "memory"),
    Bench("P6", "warehouse_build"),
    Bench("P7", "import_scale"),
)


@dataclass
class Outcome:
    bench: Bench
    returncode: int
    seconds: float
    tail: str


def _env() -> dict[str, str]:
    """The Makefile's environment, also when run directly: loopback Spark, the venv's Python."""
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYTHONPATH", str(PROJECT_ROOT))
    return env


def _run(bench: Bench, quick: bool) -> Outcome:
    args = list(bench.quick_args if quick else bench.full_args)
    kept = None
    fixed = RESULTS / bench.fixed_result if bench.fixed_result else None
    if quick and fixed is not None and fixed.exists():
        kept = fixed.read_bytes()
    cmd = [sys.executable, "-m", f"bench.{bench.module}", *args]
    print(f"== {bench.key} {bench.module}: {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    timeout = BENCH_TIMEOUT_S_QUICK if quick else bench.timeout_s_full
    # The benchmark's lines are passed through as they come (a long one shows its progress); the
    # last of them are kept for the summary.
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    last: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            last.append(line)
        code = proc.wait()
    finally:
        timer.cancel()
    if code == -signal.SIGKILL and time.perf_counter() - start >= timeout:
        code = 124
        last.append(f"timed out after {timeout} s")
    out = "".join(last)
    seconds = time.perf_counter() - start
    if quick and fixed is not None and fixed.exists():
        QUICK_RESULTS.mkdir(parents=True, exist_ok=True)
        (QUICK_RESULTS / fixed.name).write_bytes(fixed.read_bytes())
        if kept is not None:
            fixed.write_bytes(kept)  # the committed full-size table stays as it was
        else:
            fixed.unlink()
    return Outcome(bench, code, seconds, out.strip().splitlines()[-1] if out.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few minutes in all")
    parser.add_argument("--only", action="append", default=[], metavar="MODULE",
                        help="run only this benchmark module (repeatable)")
    args = parser.parse_args(argv)
    known = {b.module for b in BENCHES}
    unknown = [m for m in args.only if m not in known]
    if unknown:
        parser.error(f"unknown benchmark {unknown}; known: {sorted(known)}")
    chosen = [b for b in BENCHES if not args.only or b.module in args.only]
    outcomes = [_run(b, args.quick) for b in chosen]
    print("\n| # | benchmark | result | seconds |\n|---|---|---|---|")
    for o in outcomes:
        status = "ok" if o.returncode == 0 else f"FAILED (exit {o.returncode}): {o.tail[:120]}"
        print(f"| {o.bench.key} | {o.bench.module} | {status} | {o.seconds:.0f} |")
    where = QUICK_RESULTS if args.quick else RESULTS
    print(f"\nResult tables: {where.relative_to(PROJECT_ROOT)}/")
    return 0 if all(o.returncode == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
