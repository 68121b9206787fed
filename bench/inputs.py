"""Large benchmark inputs, simulated: N commit-log records as independent runs of one scenario.

The lineage (P4), memory (P5) and warehouse (P6) benchmarks need millions of commit-log records
with real retry chains. They come from the simulator, never from copied rows: the benchmark
scenario (``bench/scenarios/retry-heavy.yaml``) is run with its producers scaled to
``SHARD_MESSAGES`` messages (the scenario knob ``Scenario.with_messages``, the CLI's
``retry-audit simulate --messages``) and seeds ``seed, seed+1, ...``; each seed is one complete
run directory with its own run id. One run is single-threaded, so the runs are simulated in
parallel worker processes, one per core.

A set of about N records is the first ``ceil(N / records per run)`` of those runs, so the 10M set
reuses the 1M set's run and the 50M set reuses the 10M set's. On disk, under ``DATA_DIR/full``
(``DATA_DIR/quick`` with ``--quick``), where the other benchmarks look for them::

    runs/<name>-m<messages>-s<k>/   one simulated run each (store/ removed: only Parquet is read)
    set-<N>/parquet/<table>/        hard links to every run's Parquet files, so Spark and DuckDB
                                    read the whole set as one input (every key holds run_id)
    set-<N>/set.json                the runs of the set and their record counts

A run directory is complete or absent (``simulate`` writes it atomically), and a set directory
is built beside its place and renamed in, so an interrupted generation resumes where it stopped.

Run: ``python -m bench.inputs --records 10000000 [--data-dir var/bench] [--quick] [--workers 2]``;
``--data-dir`` means what it means to every benchmark: the root holding ``full/`` and ``quick/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import duckdb

from bench.common import DATA_ROOT_DEFAULT, bench_data_dir

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BENCH_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "retry-heavy.yaml"
# Messages per run: about 1M commit-log records with the benchmark scenario (1.97 records per
# message measured at 50,000 messages), and about 1.2 GiB of simulator memory at most.
SHARD_MESSAGES = 500_000
SET_FILE = "set.json"
RUNS_DIR = "runs"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def commitlog_rows(parquet_glob: str) -> int:
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT count(*) FROM read_parquet('{parquet_glob}')").fetchone()[0]
    finally:
        con.close()


def run_name(scenario_name: str, messages: int, k: int) -> str:
    return f"{scenario_name}-m{messages}-s{k}"


def simulate_run(scenario_path: str, out: str, messages: int, k: int) -> dict:
    """Simulate run ``k`` (seed = the scenario's seed + k) into ``out``; its summary as a dict.

    Runs in a worker process: everything it needs comes in as plain values.
    """
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario

    scenario = load_scenario(scenario_path)
    scenario = scenario.with_messages(messages).with_seed(scenario.seed + k)
    scenario = scenario.with_name(Path(out).name)
    summary = simulate(scenario_path, out, scenario=scenario)
    # The benchmarks read Parquet only; the commit-log files would double the disk a set needs.
    shutil.rmtree(Path(out) / "store", ignore_errors=True)
    return {"run_id": summary.run_id, "seed": summary.seed, "records": summary.tables["commitlog"],
            "wall_seconds": round(summary.wall_seconds, 1), "cpu_seconds": round(summary.cpu_seconds, 1)}


def ensure_runs(data_dir: Path, count: int, *, messages: int = SHARD_MESSAGES,
                scenario_path: Path = BENCH_SCENARIO, workers: int | None = None) -> list[Path]:
    """Runs 0..count-1 of the scenario at ``messages`` messages, simulating those not on disk."""
    from broker_core.sim.scenario import load_scenario

    name = load_scenario(scenario_path).name
    runs_dir = data_dir / RUNS_DIR
    runs_dir.mkdir(parents=True, exist_ok=True)
    paths = [runs_dir / run_name(name, messages, k) for k in range(count)]
    missing = [(k, p) for k, p in enumerate(paths) if not (p / "run.json").is_file()]
    if missing:
        workers = max(1, min(workers or os.cpu_count() or 1, len(missing)))
        say(f"simulating {len(missing)} run(s) of {scenario_path.name} at {messages:,} messages "
            f"({count - len(missing)} already on disk), {workers} at a time")
        start = time.perf_counter()
        # spawn: a fresh interpreter per worker, nothing inherited from a caller holding a JVM.
        # One run per worker process: each starts clean and gives its memory back when done.
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 max_tasks_per_child=1) as pool:
            futures = {pool.submit(simulate_run, str(scenario_path), str(p), messages, k): k
                       for k, p in missing}
            for done, future in enumerate(as_completed(futures), 1):
                facts = future.result()  # a failed run raises here, with its seed in the summary
                elapsed = time.perf_counter() - start
                eta = elapsed / done * (len(missing) - done)
                say(f"  run {facts['run_id']} (seed {facts['seed']}): {facts['records']:,} records "
                    f"in {facts['wall_seconds']:.0f} s, {facts['cpu_seconds']:.0f} CPU-s "
                    f"({done}/{len(missing)}; about {eta:.0f} s left)")
    return paths


def simulated_set(data_dir: Path, records: int, *, messages: int = SHARD_MESSAGES,
                  scenario_path: Path = BENCH_SCENARIO, workers: int | None = None,
                  records_per_run: int | None = None) -> Path:
    """A set directory holding about ``records`` commit-log records of simulated runs.

    ``records_per_run`` (default: measured on run 0) decides how many runs make the set.
    """
    data_dir = Path(data_dir)
    per_run = records_per_run
    if per_run is None:
        first = ensure_runs(data_dir, 1, messages=messages, scenario_path=scenario_path, workers=workers)
        per_run = commitlog_rows(f"{first[0]}/parquet/commitlog/*.parquet")
    count = max(1, round(records / per_run))  # the nearest whole number of runs
    out = data_dir / f"set-{records}-m{messages}"
    if (out / SET_FILE).is_file():
        return out
    runs = ensure_runs(data_dir, count, messages=messages, scenario_path=scenario_path,
                       workers=workers)
    tmp = out.with_name(out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    total = 0
    members = []
    for run in runs:
        for table_dir in sorted((run / "parquet").iterdir()):
            dst = tmp / "parquet" / table_dir.name
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(table_dir.glob("*.parquet")):
                _link(f, dst / f"{run.name}-{f.name}")
        rows = commitlog_rows(f"{run}/parquet/commitlog/*.parquet")
        total += rows
        members.append({"run_dir": str(run), "records": rows})
    (tmp / SET_FILE).write_text(json.dumps({
        "records_asked": records, "records": total, "messages_per_run": messages,
        "scenario": str(scenario_path), "runs": members}, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    say(f"set {out.name}: {len(runs)} simulated run(s), {total:,} commit-log records")
    return out


def set_runs(set_dir: Path) -> list[Path]:
    """The run directories a set was made of."""
    return [Path(m["run_dir"]) for m in json.loads((set_dir / SET_FILE).read_text())["runs"]]


def is_set(path: Path) -> bool:
    return (Path(path) / SET_FILE).is_file()


def split_lineage(set_dir: Path) -> None:
    """Give each run of a set the lineage rows the set's lineage holds for its run id.

    The lineage is computed per run id (every window and join is keyed by it), so the rows of one
    run are what the lineage of that run alone would be; the warehouse loads runs one by one.
    """
    from assets.lineage import LINEAGE_DIR
    from broker_core.export.schema import LINEAGE_TABLES

    con = duckdb.connect()
    try:
        for run in set_runs(set_dir):
            if all(any((run / LINEAGE_DIR / t).glob("*.parquet")) for t in LINEAGE_TABLES):
                continue
            run_id = json.loads((run / "run.json").read_text())["run_id"]
            tmp = run / (LINEAGE_DIR + ".building")
            shutil.rmtree(tmp, ignore_errors=True)
            for table in LINEAGE_TABLES:
                (tmp / table).mkdir(parents=True)
                con.execute(
                    f"COPY (SELECT * FROM read_parquet('{set_dir}/{LINEAGE_DIR}/{table}/*.parquet') "
                    f"WHERE run_id = ? ) TO '{tmp}/{table}/part-00000.parquet' "
                    "(FORMAT parquet, COMPRESSION snappy)", [run_id])
            shutil.rmtree(run / LINEAGE_DIR, ignore_errors=True)
            os.replace(tmp, run / LINEAGE_DIR)
    finally:
        con.close()


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy reads the same
        shutil.copy2(src, dst)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, required=True, help="commit-log records wanted")
    parser.add_argument("--messages", type=int, default=SHARD_MESSAGES, help="messages per run")
    parser.add_argument("--data-dir", type=Path, default=DATA_ROOT_DEFAULT,
                        help="the benchmarks' input root: the set goes to its full/ (or quick/)")
    parser.add_argument("--quick", action="store_true",
                        help="into the root's quick/, where the --quick benchmarks look")
    parser.add_argument("--workers", type=int, default=None, help="runs simulated at once (cores)")
    parser.add_argument("--records-per-run", type=int, default=None,
                        help="expected records per run, to start every run at once "
                             "(default: simulate run 0 first and count)")
    args = parser.parse_args(argv)
    out = simulated_set(bench_data_dir(args.data_dir, args.quick), args.records, messages=args.messages,
                        workers=args.workers, records_per_run=args.records_per_run)
    print(out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
