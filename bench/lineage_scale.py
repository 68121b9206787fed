"""P4: the Spark lineage on growing commit logs, against the same lineage in DuckDB.

Inputs. The base run is simulated from ``bench/scenarios/retry-heavy.yaml`` (a retrying group, so
the commit log holds real chains: publish, SCHEDULE_TOPIC_XXXX, %RETRY%, ..., %DLQ%). The larger
sizes are sets of further simulated runs of the same scenario, one seed each, simulated in
parallel processes (``bench/inputs.py``): every record comes from the simulator, and each run has
its own run id, so a set is read as one input holding several runs.

Measured. Spark ``local[2]``: session start (JVM) timed once and reported apart; then the JIT
warm-up, a few untimed lineage runs on the smallest input (the first timed and reported apart:
a fresh JVM compiles as much as it computes at small sizes); then
``assets.lineage.run_lineage`` (message_hops + message_lineage, written as Parquet) per size.
DuckDB (same run, same files): the lineage's own SQL files (``assets/sql/lineage/``) run by
``assets.lineage_duckdb``, once per run_id (the whole input in one statement ran out of memory
at 50M records; ``--duckdb-mode whole`` runs it that way), both tables written as Parquet -- the
same rows in the same order as run_lineage writes, which ``tests/bench/test_duckdb_lineage.py``
checks. Beside wall time, CPU time of the Spark JVM (all threads)
and of the DuckDB process. The floor, in the same run: each engine reads the same commit-log
columns, sorts the records by message (Spark: one range shuffle) and writes them back.

Run: ``python -m bench.lineage_scale [--quick] [--sizes 1000000,10000000] [--data-dir DIR]
[--duckdb-memory-limit 4GB] [--duckdb-mode by-run|whole]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb

from assets.lineage_duckdb import write_lineage
from bench import common, inputs
from bench.common import Stats, load_note, write_result
from bench.inputs import SHARD_MESSAGES, set_runs, simulated_set

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BENCH_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "retry-heavy.yaml"
DATA_DIR_DEFAULT = common.DATA_ROOT_DEFAULT
# P4's targets: Spark within 2x DuckDB running the same SQL and 1.5x Spark's own floor.
TARGET_RATIO_TO_DUCKDB = 2.0
TARGET_RATIO_TO_FLOOR = 1.5
# "Flat" cost per record, made checkable: across the sized inputs (the sets of runs: 1M, 10M, 50M
# records, the sizes P4 names), the largest Spark us/record is at most this multiple of the smallest.
FLAT_SPREAD_MAX = 1.25
SPARK_MASTER_BENCH = "local[2]"
READ_CHUNK_BYTES = 8 * 2**20
BASE_MESSAGES_FULL = 50_000  # about 100k commit-log records with this scenario
BASE_MESSAGES_QUICK = 1_000
SIZES_FULL = (1_000_000, 10_000_000, 50_000_000)
SIZES_QUICK = ()  # quick: the simulated base run only
RUNS_BY_SIZE = ((200_000, 2), (10**12, 1))  # repeats, fewer for big inputs
# Lineage runs on the smallest input before any timing: the JVM compiles Spark's code and the
# generated classes as they get hot, and on 2 cores its JIT threads compete with the tasks (the
# first run of a fresh JVM on 98k records spent 18.9 CPU-s in the compilers, the fourth 5.9;
# bench/results/lineage_scale.md). The first is reported apart, as the session start is.
WARMUP_RUNS_FULL = 3
WARMUP_RUNS_QUICK = 1
DUCKDB_THREADS = 2  # the same two cores Spark local[2] gets
DUCKDB_MODES = ("by-run", "whole")  # assets.lineage_duckdb: one statement per run_id, or one

def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def runs_for(size: int) -> int:
    return next(runs for limit, runs in RUNS_BY_SIZE if size <= limit)


# --- inputs ------------------------------------------------------------------------------------

def base_run(data_dir: Path, messages: int) -> Path:
    """The simulated base run of ``messages`` messages (reused when it already exists)."""
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario

    out = data_dir / f"retry-heavy-{messages}"
    if (out / "run.json").is_file():
        return out
    scenario = load_scenario(BENCH_SCENARIO).with_messages(messages)
    say(f"simulating {BENCH_SCENARIO.name} with {messages:,} messages into {out}")
    summary = simulate(BENCH_SCENARIO, out, scenario=scenario)
    say(f"simulated {summary.tables.get('commitlog', 0):,} commit-log records in "
        f"{summary.wall_seconds:.0f} s")
    return out


def _duck() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB on the two cores Spark gets, without a progress bar in the logs."""
    con = duckdb.connect()
    con.execute(f"SET threads = {DUCKDB_THREADS}")
    con.execute("SET enable_progress_bar = false")
    return con


@contextmanager
def _duck_writing(out: Path, memory_limit: str | None = None):
    """``_duck()`` writing into a fresh directory ``out``, spilling into ``out/.tmp``; at most
    ``memory_limit`` of memory (a DuckDB size such as '4GB'; default DuckDB's, 80 % of RAM)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    con = _duck()
    try:
        con.execute(f"SET temp_directory = '{out}/.tmp'")
        if memory_limit:
            con.execute("SET memory_limit = ?", [memory_limit])
        yield con
    finally:
        con.close()


def commitlog_rows(run_dir: Path) -> int:
    con = _duck()
    try:
        return con.execute(f"SELECT count(*) FROM read_parquet('{run_dir}/parquet/commitlog/*.parquet')"
                           ).fetchone()[0]
    finally:
        con.close()


def ensure_lineage(run_dir: Path) -> None:
    """Give ``run_dir`` (a run or a set of runs) its lineage tables, built with Spark; a set's
    runs each get their own rows too (the warehouse loads runs one by one)."""
    from assets.lineage import LINEAGE_DIR
    from broker_core.export.schema import LINEAGE_TABLES

    if not all(any((run_dir / LINEAGE_DIR / t).glob("*.parquet")) for t in LINEAGE_TABLES):
        from assets.lineage import run_lineage
        from assets.spark import get_spark

        say(f"building the lineage of {run_dir} with Spark")
        run_lineage(run_dir, get_spark(SPARK_MASTER_BENCH, app_name="retry-audit-bench"))
    if inputs.is_set(run_dir):
        inputs.split_lineage(run_dir)


# --- DuckDB baseline ---------------------------------------------------------------------------

def duckdb_lineage(run_dir: Path, out: Path, memory_limit: str | None = None,
                   mode: str = DUCKDB_MODES[0]) -> None:
    """The whole lineage in DuckDB (assets.lineage_duckdb: the SQL files run_lineage runs, the rows
    it writes, in the same order), written as Parquet into ``out``: one run_id at a time
    (``by-run``, progress logged for inputs of many runs) or the whole input at once (``whole``)."""
    with _duck_writing(out, memory_limit) as con:
        start = time.perf_counter()

        def progress(done: int, runs: int) -> None:
            if runs >= 10 and (done % 10 == 0 or done == runs):
                say(f"  duckdb: {done}/{runs} runs, {time.perf_counter() - start:.0f} s")

        write_lineage(con, run_dir, out, by_run=mode != "whole", progress=progress)


# --- the floor: read the records, one shuffle by key, write them sorted -------------------------

FLOOR_KEY = ("run_id", "uniq_key", "store_ts", "phys_offset")


def floor_records(spark, run_dir: Path):
    """The floor's frame: the commit-log columns a Spark lineage uses, range-partitioned by message
    (one shuffle) and sorted within the partitions."""
    from assets.lineage import RECORD_COLUMNS, commitlog_parquet_bytes
    from assets.spark import SHUFFLE_PARTITIONS_KEY, shuffle_partitions_for

    # As many partitions as run_lineage gives the same input: the session's default (4) ran out of
    # its 1 GiB heap writing the 50M-record floor.
    partitions = shuffle_partitions_for(commitlog_parquet_bytes(run_dir))
    partitions = partitions or int(spark.conf.get(SHUFFLE_PARTITIONS_KEY))
    return (spark.read.parquet(f"{run_dir}/parquet/commitlog").select(*RECORD_COLUMNS)
            .repartitionByRange(partitions, *FLOOR_KEY[:2]).sortWithinPartitions(*FLOOR_KEY))


def spark_floor(spark, run_dir: Path, out: Path) -> None:
    """The least a Spark lineage does: the floor's frame (:func:`floor_records`) written as Parquet."""
    shutil.rmtree(out, ignore_errors=True)
    floor_records(spark, run_dir).write.parquet(str(out))


def duckdb_floor(run_dir: Path, out: Path, memory_limit: str | None = None) -> None:
    """The same floor in DuckDB: the same columns, sorted by the same key, written as Parquet."""
    from assets.lineage import RECORD_COLUMNS

    with _duck_writing(out, memory_limit) as con:
        con.execute(f"COPY (SELECT {', '.join(RECORD_COLUMNS)} "
                    f"FROM read_parquet('{run_dir}/parquet/commitlog/*.parquet') "
                    f"ORDER BY {', '.join(FLOOR_KEY)}) TO '{out}/records.parquet' (FORMAT parquet)")


# --- the benchmark -----------------------------------------------------------------------------

def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def jvm_cpu_clock(spark):
    """A clock of the local Spark JVM's CPU seconds (all its threads: tasks, JIT, GC, planning),
    read from /proc; None where that is not available (not Linux, not a local master)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    stat = Path(f"/proc/{pid}/stat")
    if not stat.is_file() or not spark.sparkContext.master.startswith("local"):
        return None
    ticks = os.sysconf("SC_CLK_TCK")

    def clock() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    return clock


def timed_cpu(fn, cpu_clock) -> tuple[float, float]:
    """(wall seconds, CPU seconds by ``cpu_clock``) of one call. CPU time is what a shared,
    loaded machine distorts least: wall time there also counts other people's work."""
    cpu0, start = cpu_clock(), time.perf_counter()
    fn()
    return time.perf_counter() - start, cpu_clock() - cpu0


def stats_pair(samples: list[tuple[float, float]]) -> tuple[Stats, Stats]:
    return Stats([wall for wall, _ in samples]), Stats([cpu for _, cpu in samples])


def measure(runs_dirs: list[tuple[str, Path, int]], data_dir: Path, quick: bool = False,
            done=None, duckdb_memory_limit: str | None = None,
            duckdb_mode: str = DUCKDB_MODES[0]) -> tuple[dict, list[dict]]:
    """(the session's start facts, one row of timings per input); ``done(start, rows)`` is
    called after each input, so a long run leaves a table even if it is stopped early.

    The start facts: ``jvm_s`` (JVM + first job), ``first_s`` / ``first_cpu`` (the first lineage
    run, on the smallest input, while the JIT compiles) and ``warmups`` (lineage runs before any
    timing, that first one included)."""
    from assets.lineage import run_lineage
    from assets.lineage_plan import full_record_shuffles, lineage_plans
    from assets.spark import get_spark, stop_spark

    spark_start = time.perf_counter()
    spark = get_spark(SPARK_MASTER_BENCH, app_name="retry-audit-bench")
    spark.range(1).count()  # the first job also loads the executor side
    jvm_s = time.perf_counter() - spark_start
    jvm_cpu = jvm_cpu_clock(spark)
    assert jvm_cpu is not None, "the benchmark runs Spark local[2] on Linux"
    scratch = data_dir / "lineage-scale-scratch"
    out = []
    try:
        warmups = WARMUP_RUNS_QUICK if quick else WARMUP_RUNS_FULL
        smallest = min(runs_dirs, key=lambda item: item[2])[1]
        say(f"warm-up: {warmups} lineage runs on {smallest.name}, untimed after the first")
        first_s, first_cpu = timed_cpu(lambda: run_lineage(smallest, spark), jvm_cpu)
        for _ in range(warmups - 1):
            run_lineage(smallest, spark)
        start = {"jvm_s": jvm_s, "first_s": first_s, "first_cpu": first_cpu, "warmups": warmups}
        for label, run_dir, records in runs_dirs:
            runs = 1 if quick else runs_for(records)
            say(f"{label}: {records:,} records, {runs} runs")
            cached, cache_s = read_inputs(run_dir)
            say(f"  input read once into the page cache: {cached / 2**20:,.0f} MiB in {cache_s:.1f} s")
            duck_start, duck_failed = time.perf_counter(), None
            try:
                duck = stats_pair([timed_cpu(lambda d=run_dir: duckdb_lineage(d, scratch / "duckdb",
                                                                              duckdb_memory_limit,
                                                                              duckdb_mode),
                                             time.process_time) for _ in range(runs)])
                say(f"  duckdb median {duck[0].median:.1f} s")
            except duckdb.OutOfMemoryException as exc:
                # A result, not a crash: the baseline did not fit this machine; Spark still runs.
                used = re.search(r"\(([^()]*used)\)", str(exc))
                duck, duck_failed = (None, None), (f"out of memory after "
                                                   f"{time.perf_counter() - duck_start:.0f} s"
                                                   + (f" ({used.group(1)})" if used else ""))
                say(f"  duckdb {duck_failed}")
                shutil.rmtree(scratch / "duckdb", ignore_errors=True)
            shuffles = full_record_shuffles(lineage_plans(spark, run_dir))
            say(f"  full-size shuffles of the records in the plan: {len(shuffles)}")
            spark_t = stats_pair([timed_cpu(lambda d=run_dir: run_lineage(d, spark), jvm_cpu)
                                  for _ in range(runs)])
            say(f"  spark median {spark_t[0].median:.1f} s")
            try:
                floor_duck = timed_cpu(lambda d=run_dir: duckdb_floor(d, scratch / "floor-duckdb",
                                                                      duckdb_memory_limit),
                                       time.process_time)
            except duckdb.OutOfMemoryException:
                floor_duck = (float("nan"), float("nan"))
                say("  duckdb floor: out of memory")
            floor_spark = timed_cpu(lambda d=run_dir: spark_floor(spark, d, scratch / "floor-spark"),
                                    jvm_cpu)
            say(f"  floor: spark {floor_spark[0]:.1f} s, duckdb {floor_duck[0]:.1f} s")
            out.append({"label": label, "records": records, "runs": runs, "spark": spark_t[0],
                        "spark_cpu": spark_t[1], "duckdb": duck[0], "duckdb_cpu": duck[1],
                        "duckdb_failed": duck_failed,
                        "floor_spark": floor_spark, "floor_duckdb": floor_duck,
                        "files": lineage_files(run_dir), "shuffles": shuffles})
            if done is not None:
                done(start, out)
    finally:
        stop_spark()
        shutil.rmtree(scratch, ignore_errors=True)
    return start, out


def _shuffles_cell(shuffles: list) -> str:
    """The planned shuffles of commit-log rows with no aggregate before them, counted and named
    (``assets.lineage_plan``)."""
    return f"{len(shuffles)}: " + ", ".join(f"{kind.removesuffix('partitioning')} by ({', '.join(keys)})"
                                              for kind, keys in shuffles)


def read_inputs(run_dir: Path) -> tuple[int, float]:
    """Read every input Parquet file of ``run_dir`` once, so both engines find it in the page
    cache: whichever engine ran first on files not read since they were written paid the disk
    alone (DuckDB, timed first, took 13.5 s / 16.0 CPU-s on 1M records from a cold cache,
    6.2 s / 10.2 CPU-s warm minutes later).
    Returns (bytes read, seconds)."""
    start = time.perf_counter()
    total = 0
    for path in sorted((run_dir / "parquet").rglob("*.parquet")):
        with open(path, "rb") as f:
            while chunk := f.read(READ_CHUNK_BYTES):
                total += len(chunk)
    return total, time.perf_counter() - start


def lineage_files(run_dir: Path) -> str:
    """What the lineage wrote: Parquet part files and their sizes per table."""
    from assets.lineage import LINEAGE_DIR
    from broker_core.export.schema import LINEAGE_TABLES

    parts = []
    for table in LINEAGE_TABLES:
        sizes = [f.stat().st_size for f in (run_dir / LINEAGE_DIR / table).glob("*.parquet")]
        if sizes:
            parts.append(f"{table}: {len(sizes)} files, {sum(sizes) / 2**20:,.1f} MiB "
                         f"(largest {max(sizes) / 2**20:,.1f} MiB)")
    return "; ".join(parts)


# --- a standalone cluster on loopback ----------------------------------------------------------

CLUSTER_WORKER_CORES = 1  # one core per worker: 1 vs 2 workers is 1 vs 2 cores on this machine
CLUSTER_WORKER_MEMORY = "2g"  # holds one 1g executor (assets.spark.EXECUTOR_MEMORY) and overhead
CLUSTER_READY_TIMEOUT_S = 240  # the notes measured ~7 s idle; a busy machine needs far longer
CLUSTER_STOP_TIMEOUT_S = 30
MASTER_READY = "I have been elected leader! New state: ALIVE"
WORKER_READY = "Successfully registered with master"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(log: Path, marker: str, proc) -> None:
    deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if log.is_file() and marker in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name}: process exited ({proc.returncode}) before {marker!r}")
        time.sleep(0.5)
    raise RuntimeError(f"{log.name}: no {marker!r} within {CLUSTER_READY_TIMEOUT_S} s")


class LoopbackCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, from pyspark's spark-class.

    Work and log directories live under ``root``; ``stop()`` sends SIGTERM to each process by PID
    (spark-class execs the JVM, so the PID is the JVM's).
    """

    def __init__(self, root: Path, workers: int):
        import subprocess

        import pyspark

        self.root = root
        self.procs: list = []
        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(root / "logs"),
                   SPARK_WORKER_DIR=str(root / "work"))
        root.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        self.url = f"spark://127.0.0.1:{port}"

        def launch(name: str, args: list[str]):
            log = root / f"{name}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT,
                                        env=env, cwd=root, start_new_session=True)
            self.procs.append(proc)
            return proc, log

        try:
            proc, log = launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                          "--port", str(port), "--webui-port", str(_free_port())])
            _wait_for(log, MASTER_READY, proc)
            for i in range(workers):
                work = root / f"worker-{i}"
                work.mkdir(exist_ok=True)
                proc, log = launch(f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--cores", str(CLUSTER_WORKER_CORES), "--memory", CLUSTER_WORKER_MEMORY,
                    "--work-dir", str(work), "--webui-port", str(_free_port())])
                _wait_for(log, WORKER_READY, proc)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        import signal
        import subprocess

        for proc in reversed(self.procs):  # workers first, then the master
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=CLUSTER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def cluster_child(master: str, run_dir: str, runs: int) -> dict:
    """In a fresh process: session start and ``runs`` lineage runs against ``master``."""
    from assets.lineage import run_lineage
    from assets.spark import get_spark, stop_spark

    start = time.perf_counter()
    spark = get_spark(master, app_name="retry-audit-bench-cluster")
    spark.range(1).count()
    facts = {"start_s": time.perf_counter() - start, "lineage_s": []}
    try:
        for _ in range(runs):
            facts["lineage_s"].append(timed(lambda: run_lineage(run_dir, spark)))
    finally:
        stop_spark()
    facts["files"] = lineage_files(Path(run_dir))
    return facts


def measure_cluster(inputs: list[tuple[str, Path, int]], workers_list: list[int], root: Path,
                    quick: bool) -> list[list[str]]:
    """Table rows: per worker count and input, session start and lineage seconds on the cluster."""
    import subprocess

    rows = []
    for workers in workers_list:
        say(f"starting a loopback cluster with {workers} worker(s)")
        cluster = LoopbackCluster(root / f"cluster-{workers}", workers)
        try:
            for label, shared_dir, records in inputs:
                # A private copy: the local[2] measurement may be rewriting the shared lineage/.
                run_dir = root / f"cluster-{workers}" / "input" / shared_dir.name
                shutil.copytree(shared_dir, run_dir, ignore=shutil.ignore_patterns("lineage*", "store"))
                say(f"  {label}: {records:,} records on {workers} worker(s)")
                proc = subprocess.run(
                    [sys.executable, "-m", "bench.lineage_scale", "--cluster-child", cluster.url,
                     str(run_dir), str(1 if quick else runs_for(records))], cwd=PROJECT_ROOT, capture_output=True, text=True,
                    env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable))
                if proc.returncode != 0:
                    raise RuntimeError(f"cluster lineage failed: {proc.stderr[-3000:]}")
                facts = json.loads(proc.stdout.strip().splitlines()[-1])
                st = Stats(facts["lineage_s"])
                rows.append([str(workers), f"{workers * CLUSTER_WORKER_CORES}", label, f"{records:,}",
                             str(len(st.samples)), f"{facts['start_s']:.1f}", f"{st.median:.2f}",
                             f"{st.max:.2f}", f"{st.median / records * 1e6:.2f}", facts["files"]])
                say(f"    median {st.median:.1f} s")
        finally:
            cluster.stop()
            shutil.rmtree(root / f"cluster-{workers}", ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small base run, one small size")
    parser.add_argument("--sizes", default=None, help="comma-separated commit-log record counts")
    parser.add_argument("--base-messages", type=int, default=None)
    parser.add_argument("--messages-per-run", type=int, default=SHARD_MESSAGES,
                        help="messages per simulated run in the sets of --sizes")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR_DEFAULT)
    parser.add_argument("--cluster-workers", default=None, metavar="1,2",
                        help="instead of local[2]: a loopback standalone cluster per worker count")
    parser.add_argument("--duckdb-memory-limit", default=None, metavar="SIZE",
                        help="DuckDB's memory limit for the baseline and its floor, e.g. 4GB "
                             "(default: DuckDB's own, 80%% of RAM)")
    parser.add_argument("--duckdb-mode", choices=DUCKDB_MODES, default=DUCKDB_MODES[0],
                        help="the DuckDB lineage one run_id at a time (default; the whole 50M set "
                             "at once ran out of memory) or the whole input in one statement")
    parser.add_argument("--cluster-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cluster_child:
        master, run_dir, runs = args.cluster_child
        print(json.dumps(cluster_child(master, run_dir, int(runs))))
        return Path(run_dir)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else list(SIZES_QUICK if args.quick else SIZES_FULL))
    messages = args.base_messages or (BASE_MESSAGES_QUICK if args.quick else BASE_MESSAGES_FULL)
    data_dir = common.bench_data_dir(args.data_dir, args.quick)
    base = base_run(data_dir, messages)
    base_rows = commitlog_rows(base)
    inputs = [(f"simulated ({messages:,} messages)", base, base_rows)]
    for size in sizes:
        set_dir = simulated_set(data_dir, size, messages=args.messages_per_run)
        n = len(set_runs(set_dir))
        inputs.append((f"simulated: {n} run{'s' if n > 1 else ''} of {args.messages_per_run:,} messages",
                       set_dir, commitlog_rows(set_dir)))
    if args.cluster_workers:
        workers = [int(w) for w in args.cluster_workers.split(",")]
        rows = measure_cluster(inputs, workers, data_dir, args.quick)
        notes = (f"Standalone master + N workers on 127.0.0.1 from pyspark's spark-class, each worker "
                 f"--cores {CLUSTER_WORKER_CORES} --memory {CLUSTER_WORKER_MEMORY}, work dirs in a temp "
                 "dir, stopped by PID with SIGTERM. The driver runs in the benchmark's subprocess "
                 f"(client mode). {load_note()} when the table was written (wall times; shared machine).")
        name = common.result_name("lineage_cluster", args.quick)
        return write_result(name, "Lineage on a loopback standalone cluster: 1 vs 2 workers",
                            ["workers", "cores", "input", "commit-log records", "runs",
                             "session start s", "lineage median s", "lineage max s", "us/record",
                             "files written"], rows, notes)
    planned = len(inputs)

    def report(start: dict, results: list[dict]) -> Path:
        rows = []
        for r in results:
            sp, dk, spc, dkc = r["spark"], r["duckdb"], r["spark_cpu"], r["duckdb_cpu"]
            (fs, fsc), (fd, fdc) = r["floor_spark"], r["floor_duckdb"]
            if dk is None:  # the DuckDB lineage ran out of memory: no time, no ratio
                duck_cells = [r["duckdb_failed"], "-", "-", "-", "-", "-"]
            else:
                duck_cells = [f"{dk.median:.2f}", f"{dk.max:.2f}", f"{sp.median / dk.median:.1f}x",
                              f"{dkc.median:.1f}", f"{spc.median / dkc.median:.1f}x",
                              f"{dk.median / r['records'] * 1e6:.2f}"]
            rows.append([r["label"], f"{r['records']:,}", str(r["runs"]),
                         f"{sp.median:.2f}", f"{sp.max:.2f}", *duck_cells[:3],
                         f"{spc.median:.1f}", *duck_cells[3:5],
                         f"{sp.median / r['records'] * 1e6:.2f}", duck_cells[5],
                         f"{fs:.2f} / {fd:.2f} = {fs / fd:.1f}x",
                         f"{fsc:.1f} / {fdc:.1f} = {fsc / fdc:.1f}x",
                         _shuffles_cell(r["shuffles"])])
        # The target's sizes are the sets of runs; the base run (first input) is reported beside them.
        sized = results[1:] or results
        compared = [r for r in sized if r["duckdb"] is not None]
        failed = [r for r in sized if r["duckdb"] is None]
        worst = max((r["spark"].median / r["duckdb"].median for r in compared), default=0.0)
        per_rec = [r["spark"].median / r["records"] for r in sized]
        duck_rec = [r["duckdb"].median / r["records"] for r in compared] or [float("nan")]
        spread = max(per_rec) / min(per_rec)
        base = results[0]
        base_ratio = (f"{base['spark'].median / base['duckdb'].median:.1f}x" if base["duckdb"] is not None
                      else f"DuckDB {base['duckdb_failed']}")
        duck_memory = (f"a memory limit of {args.duckdb_memory_limit}" if args.duckdb_memory_limit
                       else "its default memory limit (80 % of RAM)")
        ratio_verdict = ("no ratio: DuckDB finished none of them" if not compared else
                         f"worst ratio {worst:.1f}x: {'met' if worst <= TARGET_RATIO_TO_DUCKDB else 'MISSED'}")
        sized_records = ", ".join(f"{r['records']:,}" for r in sized)
        floor_worst = max(r["floor_spark"][0] / r["floor_duckdb"][0] for r in results)
        over_floor = max(r["spark"].median / r["floor_spark"][0] for r in sized)
        notes = (
            f"Spark {SPARK_MASTER_BENCH}, session start (JVM + first job) {start['jvm_s']:.1f} s, excluded from "
            f"the table, and so is the JIT compilers' warm-up: {start['warmups']} lineage runs on the "
            f"smallest input before any timing, the first {start['first_s']:.1f} s "
            f"({start['first_cpu']:.1f} JVM CPU-s; what a one-run process such as the CLI pays once). "
            f"DuckDB with {DUCKDB_THREADS} threads and {duck_memory}, "
            + ("the lineage one run_id at a time (--duckdb-mode by-run). " if args.duckdb_mode == "by-run"
               else "the lineage over the whole input in one statement (--duckdb-mode whole). ")
            + "Each input is read once into the page cache "
            "before either engine runs on it (DuckDB runs first). "
            f"{load_note()} when the table was written "
            "(wall times: the machine is shared). CPU s: the Spark JVM's CPU time (every thread: "
            "tasks, JIT compilers, GC, planning) and the DuckDB process's, over the same calls; "
            "a loaded machine distorts them less than wall time.\n\n"
            f"Target, on the sized inputs ({sized_records} records): "
            f"Spark <= {TARGET_RATIO_TO_DUCKDB:.0f}x DuckDB's time -- {ratio_verdict}"
            + "".join(f" (DuckDB's lineage at {r['records']:,} records: {r['duckdb_failed']}, "
                      f"Spark {r['spark'].median:.0f} s)" for r in failed)
            + f"; cost per record flat across "
            f"sizes (largest / smallest Spark us/record <= {FLAT_SPREAD_MAX}) -- "
            f"{' / '.join(f'{x * 1e6:.2f}' for x in per_rec)} us/record, spread {spread:.2f}: "
            f"{'met' if spread <= FLAT_SPREAD_MAX else 'MISSED'} (DuckDB "
            f"{' / '.join(f'{x * 1e6:.2f}' for x in duck_rec)}, spread "
            f"{max(duck_rec) / min(duck_rec):.2f}); Spark <= {TARGET_RATIO_TO_FLOOR}x Spark's floor (wall) -- "
            f"worst {over_floor:.1f}x: {'met' if over_floor <= TARGET_RATIO_TO_FLOOR else 'MISSED'}. The base run of {base['records']:,} records, "
            f"below the target's sizes: {base_ratio}, "
            f"{base['spark'].median / base['records'] * 1e6:.2f} us/record, where Spark's fixed "
            "cost per run (stages, planning, JIT) outweighs the records.\n\n"
            "Floor (same run, same input): each engine reads the commit-log columns the lineage "
            "reads, sorts the records by (run_id, uniq_key, store_ts, phys_offset) -- for Spark one "
            "range shuffle -- and writes them as Parquet; no classification, windows or joins. "
            f"Worst Spark/DuckDB floor ratio {floor_worst:.1f}x. No Spark lineage can take less "
            "than Spark's floor; the floor ratio is how far apart the engines are on reading, "
            "shuffling and writing alone.\n\n"
            "Full shuffles of the records: the shuffles of commit-log rows with no aggregate "
            "before them in the lineage's planned physical plans (assets/lineage_plan.py, which "
            "tests/assets/test_lineage_plan.py pins): the range shuffle by message, and the hash "
            "shuffle of the records without a UNIQ_KEY (an old client's; none here, so it moves no "
            "rows). Adaptive execution can drop a planned shuffle at run time, not add one.\n\n"
            "Both sides write their rows sorted (hops by run, key, hop index, group; lineage by "
            "run, key, group), as the lineage contract requires, and the same rows: the DuckDB side "
            "runs the lineage's own SQL files (assets/sql/lineage/, assets/lineage_duckdb.py; "
            "tests/bench/test_duckdb_lineage.py compares its tables with run_lineage's, in both modes). By run, DuckDB writes one file "
            "per run and table, in run_id order; every lineage key holds run_id, so the runs never "
            "meet, and Spark's single pass over the set does the same work.\n\n"
            f"Inputs: every row is simulated from {BENCH_SCENARIO.relative_to(PROJECT_ROOT)}; the "
            "first is one run, the others are sets of runs (one seed each, simulated in parallel "
            "processes by bench/inputs.py) read as one input.\n\n"
            + (f"Measured {len(results)} of {planned} planned inputs so far.\n\n"
               if len(results) < planned else "")
            + "Files the lineage wrote (last run of each size): "
            + " | ".join(f"{r['records']:,} records -> {r['files']}" for r in results))
        name = common.result_name("lineage_scale", args.quick)
        return write_result(name, "P4 lineage scale: Spark local[2] vs the same lineage in DuckDB",
                            ["input", "commit-log records", "runs", "Spark median s", "Spark max s",
                             "DuckDB median s", "DuckDB max s", "Spark / DuckDB",
                             "Spark CPU s", "DuckDB CPU s", "CPU ratio",
                             "Spark us/record", "DuckDB us/record",
                             "floor wall s (Spark / DuckDB)", "floor CPU s (Spark / DuckDB)",
                             "full shuffles of the records (plan)"],
                            rows, notes)

    paths = []
    measure(inputs, data_dir, args.quick, done=lambda st, r: paths.append(report(st, r)),
            duckdb_memory_limit=args.duckdb_memory_limit, duckdb_mode=args.duckdb_mode)
    return paths[-1]


if __name__ == "__main__":
    main(sys.argv[1:])
