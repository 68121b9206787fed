"""P7 at scale: import-store on 1M- and 10M-record stores, local and Spark, beside two floors.

Inputs: stores made by ``bench/big_store.py`` (simulated shards of ``retry-heavy.yaml`` laid end
to end in one commit log; 1M records is one shard, 10M ten; ``--shape mixed-traffic``: larger
records, a quarter of them in the schedule and retry topics, two topics, delayed sends).

For each store, timed in turns in this one process (``--runs`` times): the local engine's
``import_store`` (columnar decoder), the columnar decode alone, and the two floors: reading the
commit-log files from the page cache into one reused buffer, and writing the import's commitlog
table (already in memory) to Parquet with the project's settings (snappy, 64Ki-row groups).
Rates are per core: records and commit-log MB (10^6 bytes of records) per CPU second of this
process. The peak RSS of one import is measured apart, in a child process (``ru_maxrss`` from
``os.wait4``), since the floors hold the whole table in this one.

Then ``--engine spark`` on the same store (each in a fresh driver process, one SparkContext per
process): ``local[2]``, and a standalone cluster on 127.0.0.1 with 1 and 2 one-core workers
(``bench.lineage_scale.LoopbackCluster``). Start-up (session, or the cluster's executors'
first job) is reported apart from the imports that follow in the same session; CPU there is every
process of the driver's and the cluster's trees (JVMs and Python workers), from /proc.

``--e2e`` runs the audit end to end on the largest store through the CLI, one process per step
as a user runs it: import-store, lineage (local[2]), warehouse (build + checks), each timed.

A cProfile of one local import of the first store follows the table.

Run: ``python -m bench.import_large [--sizes 1000000,10000000] [--runs N] [--spark] [--e2e] [--shape S]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench import big_store, common
from bench.common import DATA_ROOT_DEFAULT, Stats, load_note, write_result
from bench.import_scale import TARGET_WRITE_FLOOR_RATIO, _profile_text, floors, timed
from broker_core.export.store_import import import_store

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SIZES_DEFAULT = (1_000_000, 10_000_000)
RUNS_DEFAULT = 3
SPARK_RUNS = 2  # imports per Spark session after the start-up
CLUSTER_WORKERS = (1, 2)
FLAT_SPREAD_MAX = 1.25  # "flat per record": the largest store's CPU per record within 25 % of 1M's


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_of(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])  # + reaped children
    return total / ticks


def _tree(root_pids: list[int]) -> list[int]:
    from bench.memory import _descendants

    found = list(root_pids)
    for pid in root_pids:
        found += _descendants(pid)
    return found


# --- the Spark child: one driver process per master --------------------------------------------

def spark_child(master: str, store: str, work: str, runs: int, cluster_pids: list[int]) -> dict:
    """Session start, then ``runs`` imports of ``store`` with ``--engine spark``, in this process."""
    from assets.spark import get_spark, stop_spark
    from assets.spark_import import SparkStoreReader

    roots = [os.getpid(), *cluster_pids]

    def cpu() -> float:
        return _cpu_of(_tree(roots))

    wall0, cpu0 = time.perf_counter(), cpu()
    spark = get_spark(master, app_name="retry-audit-bench-import")
    # The executors start with the first job (a cluster's, and each Python worker): a trivial job
    # on every slot stands for that fixed cost, so the imports below measure the import alone.
    slots = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(slots), slots).map(lambda x: x).collect()
    facts = {"start_s": time.perf_counter() - wall0, "start_cpu_s": cpu() - cpu0, "runs": []}
    try:
        for i in range(runs):
            out = Path(work) / f"spark-{i}"
            wall0, cpu0 = time.perf_counter(), cpu()
            summary = import_store(store, out, name="bench", reader_factory=lambda root, o=out, **kw: SparkStoreReader(
                root, spark, stage_parent=o.parent, **kw))
            facts["runs"].append([time.perf_counter() - wall0, cpu() - cpu0])
            facts["records"] = summary.records
            shutil.rmtree(out, ignore_errors=True)
    finally:
        stop_spark()
    return facts


def run_spark(master: str, store: Path, work: Path, runs: int, cluster_pids: list[int]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.import_large", "--spark-child", master, str(store), str(work), str(runs),
         ",".join(map(str, cluster_pids))], cwd=PROJECT_ROOT, capture_output=True, text=True,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable))
    if proc.returncode != 0:
        raise RuntimeError(f"spark import on {master} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the local child: peak RSS of one import ----------------------------------------------------

def rss_child(store: str, out: str) -> dict:
    """One import; the peak resident set of this process (VmHWM) in KiB.

    Not ``ru_maxrss`` from the parent's wait4: that keeps the high-water mark across exec, so a
    child forked from this benchmark's process, which holds the whole commitlog table for the
    write floor, reported the parent's size (7.4 GiB at 10M records for a 0.3 GiB import).
    """
    summary = import_store(store, out, name="bench")
    peak = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:"))
    return {"records": summary.records, "peak_kib": peak}


def peak_rss_mib(store: Path, out: Path) -> float:
    proc = subprocess.run([sys.executable, "-m", "bench.import_large", "--rss-child", str(store), str(out)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"rss child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_kib"] / 1024


# --- the local measurement ------------------------------------------------------------------------

def measure_local(store: Path, work: Path, runs: int, profile_it: bool) -> dict:
    files = sorted((store / "commitlog").iterdir())
    import_store(store, work / "out", name="bench")
    table = pq.read_table(work / "out" / "parquet" / "commitlog")
    records = table.num_rows
    record_bytes = int(pq.read_table(work / "out" / "parquet" / "commitlog", columns=["total_size"])
                       ["total_size"].combine_chunks().to_numpy().astype("int64").sum())
    shutil.rmtree(work / "out")
    read_files, write_parquet, decode_only = floors(store, files, table, work)

    def local_import():
        import_store(store, work / "col", name="bench")
        shutil.rmtree(work / "col")

    paths = {
        "import-store, local engine (columnar)": local_import,
        "columnar decode alone (no Parquet)": decode_only,
        "floor: read the commit-log files": read_files,
        "floor: write the commitlog table to Parquet": write_parquet,
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    read_files()  # into the page cache
    for run in range(runs):
        for name, fn in paths.items():
            samples[name].append(timed(fn))
        say(f"  run {run + 1}/{runs}: " + ", ".join(f"{n.split(':')[-1].split(',')[0].strip()} "
                                                   f"{s[-1][1]:.1f} s CPU" for n, s in samples.items()))
    (work / "floor.parquet").unlink(missing_ok=True)
    profile = None
    if profile_it:
        profile = cProfile.Profile()
        profile.enable()
        import_store(store, work / "prof", name="bench")
        profile.disable()
        shutil.rmtree(work / "prof")
    return {"records": records, "record_bytes": record_bytes, "files": len(files), "samples": samples,
            "profile": profile}


def e2e(store: Path, work: Path) -> list[list[str]]:
    """import-store, lineage, warehouse (+ checks) through the CLI, as a user runs them."""
    cli = str(Path(sys.executable).parent / "retry-audit")
    run = work / "e2e-run"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               RETRY_AUDIT_SPARK_MASTER="local[2]")
    steps = [("import-store (local engine)", [cli, "-q", "import-store", str(store), "--out", str(run)]),
             ("lineage (Spark local[2])", [cli, "-q", "lineage", str(run)]),
             ("warehouse (build + checks)", [cli, "-q", "warehouse", str(run), "--db", str(work / "e2e.duckdb")])]
    rows = []
    total = 0.0
    for label, cmd in steps:
        say(f"  e2e: {label}")
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate()
        seconds = time.perf_counter() - start
        total += seconds
        rows.append([label, f"{seconds:.1f}", str(proc.returncode), (out.strip().splitlines() or [""])[-1][:160]])
        if proc.returncode not in (0, 1):  # 1: a blocking check failed, the warehouse is kept
            rows[-1][-1] = err.strip().splitlines()[-1][:160] if err.strip() else "failed"
            break
    rows.append(["total", f"{total:.1f}", "", ""])
    return rows


def rss_only(data_dir: Path, sizes: list[int], messages: int, name: str,
             shape: str = big_store.SHAPE_DEFAULT) -> Path:
    rows = []
    for size in sizes:
        store = big_store.ensure_store(data_dir, size, messages=messages, shape=shape)
        records = big_store.store_facts(store)["records"]
        start = time.perf_counter()
        mib = peak_rss_mib(store, data_dir / f".rss-{os.getpid()}")
        rows.append([f"{records:,}", f"{mib:,.0f}", f"{time.perf_counter() - start:.1f}"])
        say(f"  {records:,} records: peak RSS {mib:,.0f} MiB")
    return write_result(name, "P7 at scale: peak resident memory of one local import-store",
                        ["records", "peak RSS MiB (VmHWM)", "wall s"], rows,
                        "One `import_store` (local engine) per store in a fresh child process; its own VmHWM "
                        f"at the end. {load_note()}.")


def main(argv: list[str] | None = None) -> Path | None:
    if argv and argv[0] == "--spark-child":
        master, store, work, runs, pids = argv[1:6]
        print(json.dumps(spark_child(master, store, work, int(runs), [int(p) for p in pids.split(",") if p])))
        return None
    if argv and argv[0] == "--rss-child":
        print(json.dumps(rss_child(argv[1], argv[2])))
        return None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES_DEFAULT)))
    parser.add_argument("--runs", type=int, default=RUNS_DEFAULT)
    parser.add_argument("--spark", action="store_true", help="also --engine spark: local[2] and 1-2 workers")
    parser.add_argument("--e2e", action="store_true", help="the audit end to end on the largest store")
    parser.add_argument("--data-dir", type=Path, default=DATA_ROOT_DEFAULT)
    parser.add_argument("--messages", type=int, default=big_store.SHARD_MESSAGES, help="messages per shard")
    parser.add_argument("--rss-only", action="store_true",
                        help="only the peak RSS of one import per store (a child of a fresh process)")
    parser.add_argument("--name", default="import_large")
    parser.add_argument("--shape", choices=sorted(big_store.SHAPES), default=big_store.SHAPE_DEFAULT,
                        help="the stores' shape (bench.big_store.SHAPES)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    data_dir = common.bench_data_dir(args.data_dir, False) / "import-scale"
    if args.rss_only:
        return rss_only(data_dir, sizes, args.messages, args.name, args.shape)
    data_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="import-large-", dir=data_dir))
    rows, spark_rows, e2e_rows, notes, per_record = [], [], [], [], {}
    profile = None
    try:
        for n, size in enumerate(sizes):
            store = big_store.ensure_store(data_dir, size, messages=args.messages, shape=args.shape)
            facts = big_store.store_facts(store)
            say(f"store {store.name}: {facts['records']:,} records; local engine and floors, {args.runs} runs")
            local = measure_local(store, work, args.runs, profile_it=n == 0)
            profile = profile or local["profile"]
            rss = peak_rss_mib(store, work / "rss")
            records, mb = local["records"], local["record_bytes"] / 1e6
            cpu = {name: Stats([c for _, c in s]).median for name, s in local["samples"].items()}
            wall = {name: Stats([w for w, _ in s]).median for name, s in local["samples"].items()}
            floor = cpu["floor: write the commitlog table to Parquet"]
            per_record[size] = cpu["import-store, local engine (columnar)"] / records
            for name in local["samples"]:
                rows.append([f"{records:,}", name, f"{wall[name]:.2f}", f"{cpu[name]:.2f}",
                             f"{records / cpu[name]:,.0f}", f"{mb / cpu[name]:,.1f}",
                             f"{cpu[name] / records * 1e6:.2f}", f"{cpu[name] / floor:.2f}x",
                             f"{rss:,.0f}" if name.startswith("import-store") else ""])
            notes.append(f"{records:,} records of the {args.shape} shape, {mb:,.0f} MB of records in "
                         f"{local['files']} files of 64 MiB "
                         f"({len(facts['shards'])} shard(s)); {load_note()} after the local runs.")
            if args.spark:
                for label, workers in [("local[2]", 0), *[(f"standalone, {w} worker(s) x 1 core", w)
                                                          for w in CLUSTER_WORKERS]]:
                    say(f"  spark {label}")
                    cluster = None
                    try:
                        if workers:
                            from bench.lineage_scale import LoopbackCluster

                            cluster = LoopbackCluster(work / f"cluster-{workers}", workers)
                        master = cluster.url if cluster else "local[2]"
                        pids = [p.pid for p in cluster.procs] if cluster else []
                        got = run_spark(master, store, work, SPARK_RUNS, pids)
                    finally:
                        if cluster is not None:
                            cluster.stop()
                            shutil.rmtree(work / f"cluster-{workers}", ignore_errors=True)
                    w = Stats([r[0] for r in got["runs"]])
                    c = Stats([r[1] for r in got["runs"]])
                    spark_rows.append([f"{records:,}", label, f"{got['start_s']:.1f}", f"{got['start_cpu_s']:.1f}",
                                       f"{w.median:.1f}", f"{w.max:.1f}", f"{records / w.median:,.0f}",
                                       f"{c.median:.1f}", f"{wall['import-store, local engine (columnar)'] / w.median:.2f}x"])
                    say(f"    start {got['start_s']:.1f} s, import median {w.median:.1f} s")
        if args.e2e:
            store = big_store.ensure_store(data_dir, sizes[-1], messages=args.messages, shape=args.shape)
            say(f"end to end on {store.name}")
            e2e_rows = e2e(store, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    sizes_seen = sorted(per_record)
    spread = per_record[sizes_seen[-1]] / per_record[sizes_seen[0]] if len(sizes_seen) > 1 else 1.0
    text = ("Inputs: " + " ".join(notes) + f" {args.runs} runs of each local path, in turns, in one process; "
            "'CPU' is this process's CPU time (median), rates per CPU second (per core); the ratio column "
            "is CPU over the write floor's for the same store. Peak RSS: one import in a child process.\n\n"
            f"Local import CPU per record, largest store over smallest: {spread:.2f} (flat if <= "
            f"{FLAT_SPREAD_MAX}); target <= {TARGET_WRITE_FLOOR_RATIO:.0f}x the write floor.")
    if spark_rows:
        text += ("\n\nSpark engine (`import-store --engine spark`), each master in a fresh driver process: "
                 "'start' is the session plus one trivial job on every slot (JVMs, executors, Python "
                 "workers), apart from the imports; then "
                 f"{SPARK_RUNS} imports in that session (median and max wall). CPU: every process of "
                 "the driver's and the cluster's trees. 'vs local' is the local import's median wall "
                 "over Spark's.\n\n| records | master | start s | start CPU s | import median s | "
                 "import max s | rec/s (wall) | CPU s | vs local |\n|---|---|---|---|---|---|---|---|---|\n"
                 + "\n".join("| " + " | ".join(r) + " |" for r in spark_rows))
    if e2e_rows:
        text += ("\n\nEnd to end on the largest store, the CLI one process per step (exit 1 of warehouse: a "
                 "blocking check failed):\n\n| step | wall s | exit | last line |\n|---|---|---|---|\n"
                 + "\n".join("| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in e2e_rows))
    if profile is not None:
        text += ("\n\ncProfile of one local import of the first store (top by own time; the profiler "
                 f"inflates per-call Python costs such as the size walk):\n\n```\n{_profile_text(profile)}\n```")
    (common.RESULTS / args.name).parent.mkdir(parents=True, exist_ok=True)
    return write_result(args.name, "P7 at scale: import-store on 1M and 10M records, local and Spark, beside floors",
                        ["records", "path", "wall s", "CPU s", "CPU rec/s", "CPU MB/s", "CPU us/rec",
                         "CPU / write floor", "peak RSS MiB"], rows, text)


if __name__ == "__main__":
    main(sys.argv[1:])
