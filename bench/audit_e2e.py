"""P8: an audit end to end on a 10M-record store, the CLI one process per step, every step timed.

The store is ``bench/big_store.py``'s (simulated shards of ``retry-heavy.yaml`` laid end to end in
one broker's commit log; built once, kept under the data directory). The steps are what a user
runs, each a fresh ``retry-audit`` process:

1. ``import-store STORE --out RUN`` (the local engine);
2. ``lineage RUN --engine spark`` (the pipeline's engine, ``local[2]``);
3. ``warehouse RUN --db DB`` (build + every check);
4. ``lineage RUN --engine duckdb``: the same lineage with the other engine (the same rows), so
   the audit's total with each engine is import + that lineage + warehouse.

Per step: wall seconds, CPU seconds and peak resident memory of the step's process tree (the
CLI by ``wait4``, and the processes it starts, such as Spark's JVM, which the CLI does not wait
for, sampled from ``/proc`` every 0.25 s), and the time from the step's start to each progress line it printed
(the first Spark line is printed once the session is up: JVM start and the first job). The
warehouse exits 1 when a blocking check failed on this store (its copies of one shard share store
times); that is the audit's verdict, not a failure of the step.

Run: ``python -m bench.audit_e2e [--records 10000000] [--data-dir var/bench] [--messages N] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import big_store, common
from bench.common import load_note, write_result
from bench.memory import _descendants, _peak_kib

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RECORDS_DEFAULT = 10_000_000
QUICK_RECORDS, QUICK_MESSAGES = 400, 100  # --quick: two shards of 100 messages
TARGET_S = 240.0  # P8: the audit of a 10M-record store in 4 minutes on 2 cores


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# The output lines that mark a step's stages (the timeline below the table): the engine chosen,
# the Spark session up (its first progress line), each table written, the import's summary, the
# warehouse loaded and the checks' verdicts begun.
MILESTONE = re.compile(r"(lineage: |imported |loaded run|warehouse .*: \d+ run|checks:)")
TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.25


def _own_cpu(pid: int) -> float | None:
    """A process's own CPU seconds (a zombie keeps them until it is reaped); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class _Descendants(threading.Thread):
    """Samples the processes a step starts (``bench.memory``'s walk of /proc): the last CPU seen
    of each, and the largest peak RSS (VmHWM). PySpark's CLI does not wait for the JVM it
    launches, so the JVM's CPU is not in the step's wait4 usage; a process last seen alive, a
    zombie, or moved out of the step's tree (not reaped by the step) is counted from here."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.cpu, self.peak_kib = root, {}, 0
        self.stop = threading.Event()

    def run(self) -> None:
        last_tree: set[int] = set()
        while not self.stop.is_set():
            tree = set(_descendants(self.root))
            for pid in tree | set(self.cpu):
                cpu = _own_cpu(pid)
                if cpu is not None:
                    self.cpu[pid] = cpu
                elif pid in last_tree:
                    # Gone while the step was its parent: reaped by the step, its CPU is in the
                    # step's wait4 usage. One reparented first left the tree alive and keeps its CPU.
                    del self.cpu[pid]
            self.peak_kib = max([self.peak_kib, *(_peak_kib(pid) for pid in tree)])
            last_tree = tree
            self.stop.wait(SAMPLE_S)


def run_step(cmd: list[str], env: dict[str, str]) -> dict:
    """Run one CLI step; its wall and CPU seconds and peak RSS (the process and the processes it
    starts, such as Spark's JVM), exit code, and each output line with the seconds since the start."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    sampler = _Descendants(proc.pid)
    sampler.start()
    lines = []
    for line in proc.stdout:
        lines.append((time.perf_counter() - start, line.rstrip()))
    _, status, usage = os.wait4(proc.pid, 0)
    sampler.stop.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime + sum(sampler.cpu.values()),
            "rss_mib": max(usage.ru_maxrss, sampler.peak_kib) / 1024, "code": proc.returncode, "lines": lines}


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS_DEFAULT)
    parser.add_argument("--data-dir", type=Path, default=common.DATA_ROOT_DEFAULT)
    parser.add_argument("--messages", type=int, default=big_store.SHARD_MESSAGES, help="messages per shard")
    parser.add_argument("--quick", action="store_true",
                        help=f"a store of {QUICK_RECORDS} records; the table under results/quick/")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.messages = QUICK_RECORDS, QUICK_MESSAGES
    data_dir = common.bench_data_dir(args.data_dir, args.quick) / "import-scale"
    store = big_store.ensure_store(data_dir, args.records, messages=args.messages)
    facts = big_store.store_facts(store)
    cli = str(Path(sys.executable).parent / "retry-audit")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               RETRY_AUDIT_SPARK_MASTER="local[2]")
    work = Path(tempfile.mkdtemp(prefix="audit-e2e-", dir=data_dir))
    run, db = work / "run", work / "audit.duckdb"
    steps = [("import-store (local engine)", [cli, "import-store", str(store), "--out", str(run)]),
             ("lineage --engine spark (local[2])", [cli, "lineage", str(run), "--engine", "spark"]),
             ("warehouse (build + checks)", [cli, "warehouse", str(run), "--db", str(db)]),
             ("lineage --engine duckdb", [cli, "lineage", str(run), "--engine", "duckdb"])]
    results = {}
    try:
        for label, cmd in steps:
            say(f"{label}: {' '.join(cmd[1:])}")
            got = run_step(cmd, env)
            results[label] = got
            say(f"  {got['wall']:.1f} s wall, {got['cpu']:.1f} CPU-s, exit {got['code']}")
            if got["code"] not in (0, 1) or (got["code"] == 1 and not label.startswith("warehouse")):
                raise SystemExit(f"{label} failed (exit {got['code']}):\n"
                                 + "\n".join(text for _, text in got["lines"][-20:]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for label, got in results.items():
        last = next((text for _, text in reversed(got["lines"]) if text.strip()), "")
        rows.append([label, f"{got['wall']:.1f}", f"{got['cpu']:.1f}", f"{got['rss_mib']:,.0f}", str(got["code"]),
                     last[:150].replace("|", "/")])
    imp, spark, wh, duck = (results[label] for label, _ in steps)
    total_spark = imp["wall"] + spark["wall"] + wh["wall"]
    total_duck = imp["wall"] + duck["wall"] + wh["wall"]
    rows.append(["audit with the Spark lineage (steps 1-3)", f"{total_spark:.1f}",
                 f"{imp['cpu'] + spark['cpu'] + wh['cpu']:.1f}", "", "", ""])
    rows.append(["audit with the DuckDB lineage (steps 1, 4, 3)", f"{total_duck:.1f}",
                 f"{imp['cpu'] + duck['cpu'] + wh['cpu']:.1f}", "", "", ""])
    dominant = max((imp, "import-store"), (spark, "lineage (Spark)"), (wh, "warehouse"), key=lambda x: x[0]["wall"])[1]
    timeline = "\n".join(f"- {label}: " + "; ".join(f"{t:.1f} s {text.strip()[:110]}" for t, text in got["lines"]
                                                   if MILESTONE.match(text))
                         for label, got in results.items())
    notes = (f"Store: {facts['records']:,} records in one broker's commit log ({len(facts['shards'])} "
             f"shards of bench/scenarios/retry-heavy.yaml, bench/big_store.py). Each step a fresh "
             "`retry-audit` process, in this order; CPU and peak RSS: the step's process tree (for RSS "
             f"its largest process). {load_note()} "
             "when the table was written.\n\n"
             f"Target P8: the audit (import-store, lineage, warehouse) <= {TARGET_S:.0f} s on 2 cores. "
             f"With the Spark lineage {total_spark:.0f} s: {'met' if total_spark <= TARGET_S else 'MISSED'}; "
             f"with the DuckDB lineage {total_duck:.0f} s: {'met' if total_duck <= TARGET_S else 'MISSED'}. "
             f"The dominant step with Spark: {dominant}.\n\n"
             "Each step's milestones, seconds from the step's start (Spark's `lineage: reading` line "
             f"comes once the session is up):\n\n{timeline}")
    name = common.result_name("audit_e2e", args.quick)
    return write_result(name, "P8: an audit end to end on a 10M-record store, the CLI one process per step",
                        ["step", "wall s", "CPU s", "peak RSS MiB", "exit", "last line"], rows, notes)


if __name__ == "__main__":
    main(sys.argv[1:])
