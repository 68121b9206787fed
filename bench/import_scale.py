"""P7: import-store on a simulated store, the columnar and the reference decoder beside two floors.

The input is a simulated broker's store: ``bench/scenarios/retry-heavy.yaml`` scaled to
``--messages`` (152,000 by default: about 300,000 commit-log records in three 64 MiB files),
simulated once under ``DATA_DIR/{full,quick}/import-scale/`` and kept.

Timed, in turns, ``--runs`` times each, in this one process: the whole ``import_store`` with each
decoder (``decoder="reference"``: a Record object and a row tuple per record; ``"columnar"``:
slices of records decoded into Arrow columns), the columnar decode alone (no Parquet), and two
floors: reading the commit-log files (from the page cache, into one reused buffer) and writing
the import's commitlog table, already in memory, to Parquet as the import writes it (snappy,
64Ki-row groups). Rates are per core: records and commit-log megabytes (10^6 bytes of records)
per CPU second of this process; wall rates move with the shared machine's load.
Target: the columnar import within 4x the CPU of the Parquet-write floor.

A cProfile of one columnar import follows the table: where its time goes.

Run: ``python -m bench.import_scale [--quick] [--messages N] [--runs N] [--data-dir DIR]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench import common
from bench.common import DATA_ROOT_DEFAULT, Stats, load_note, write_result
from broker_core.export.columnar import ColumnarStoreReader
from broker_core.export.parquet import COMPRESSION, ROW_GROUP_ROWS
from broker_core.export.schema import COMMITLOG
from broker_core.export.store_import import import_store

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCENARIO = Path(__file__).resolve().parent / "scenarios" / "retry-heavy.yaml"
MESSAGES_FULL = 152_000  # about 300,000 commit-log records (1.97 per message)
MESSAGES_QUICK = 10_000
RUNS_FULL = 7
RUNS_QUICK = 3
TARGET_WRITE_FLOOR_RATIO = 4.0
READ_BUFFER_BYTES = 16 * 1024 * 1024
PROFILE_LINES = 12


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_store(data_dir: Path, messages: int) -> Path:
    """The simulated run's store directory, simulated on first use (in a child process)."""
    run = data_dir / "import-scale" / f"retry-heavy-m{messages}"
    if not (run / "store" / "commitlog").is_dir():
        say(f"simulating {SCENARIO.name} with {messages:,} messages into {run}")
        code = ("import sys; from broker_core.sim.run import simulate; "
                "simulate(sys.argv[1], sys.argv[2], scenario=__import__('broker_core.sim.scenario', "
                "fromlist=['x']).load_scenario(sys.argv[1]).with_messages(int(sys.argv[3])))")
        subprocess.run([sys.executable, "-c", code, str(SCENARIO), str(run), str(messages)],
                       check=True, cwd=PROJECT_ROOT)
    return run / "store"


def timed(fn) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small store, fewer repeats")
    parser.add_argument("--messages", type=int, default=None, help="messages of the simulated run")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--data-dir", type=Path, default=DATA_ROOT_DEFAULT)
    args = parser.parse_args(argv)
    messages = args.messages or (MESSAGES_QUICK if args.quick else MESSAGES_FULL)
    runs = args.runs or (RUNS_QUICK if args.quick else RUNS_FULL)
    store = ensure_store(common.bench_data_dir(args.data_dir, args.quick), messages)
    files = sorted((store / "commitlog").iterdir())
    work = Path(tempfile.mkdtemp(prefix="import-scale-"))
    try:
        return _measure(args, store, files, work, runs, messages)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def floors(store: Path, files: list[Path], table, work: Path):
    """The measured steps beside an import: (read the commit-log files, write ``table`` to Parquet
    with the project's settings, decode the store with the columnar decoder alone)."""
    buffer = bytearray(READ_BUFFER_BYTES)

    def read_files():
        for path in files:
            with open(path, "rb", buffering=0) as fh:
                while fh.readinto(buffer):
                    pass

    def write_parquet():
        writer = pq.ParquetWriter(work / "floor.parquet", COMMITLOG, compression=COMPRESSION)
        for start in range(0, table.num_rows, ROW_GROUP_ROWS):
            writer.write_table(table.slice(start, ROW_GROUP_ROWS).combine_chunks())
        writer.close()

    def decode_only():
        for batch in ColumnarStoreReader(store).batches():
            batch.table("bench", "bench")

    return read_files, write_parquet, decode_only


def _measure(args, store: Path, files: list[Path], work: Path, runs: int, messages: int) -> Path:
    summary = import_store(store, work / "out", name="bench", decoder="columnar")
    table = pq.read_table(work / "out" / "parquet" / "commitlog")
    records = table.num_rows
    record_bytes = sum(table["total_size"].to_pylist())
    read_files, write_parquet, decode_only = floors(store, files, table, work)

    paths = {
        "import-store, reference decoder": lambda: import_store(store, work / "ref", name="bench",
                                                                decoder="reference"),
        "import-store, columnar decoder": lambda: import_store(store, work / "col", name="bench",
                                                              decoder="columnar"),
        "columnar decode alone (no Parquet)": decode_only,
        "floor: read the commit-log files": read_files,
        "floor: write the commitlog table to Parquet": write_parquet,
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    read_files()  # the page cache holds the files from here on
    for run in range(runs):
        for name, fn in paths.items():
            samples[name].append(timed(fn))
        say(f"run {run + 1}/{runs}: " + ", ".join(f"{n.split(',')[-1].strip()} {s[-1][1]:.2f} s CPU"
                                                 for n, s in samples.items()))

    profile = cProfile.Profile()
    profile.enable()
    import_store(store, work / "prof", name="bench", decoder="columnar")
    profile.disable()

    cpu = {name: Stats([c for _, c in s]).median for name, s in samples.items()}
    write_floor = cpu["floor: write the commitlog table to Parquet"]
    rows = []
    for name, s in samples.items():
        wall = Stats([w for w, _ in s])
        rows.append([name, f"{records / wall.median:,.0f}", f"{records / wall.p90:,.0f}",
                     f"{records / wall.max:,.0f}", f"{records / cpu[name]:,.0f}",
                     f"{record_bytes / 1e6 / cpu[name]:,.1f}", f"{cpu[name]:.3f}",
                     f"{cpu[name] / write_floor:.2f}x"])
    ratio = cpu["import-store, columnar decoder"] / write_floor
    speedup = cpu["import-store, reference decoder"] / cpu["import-store, columnar decoder"]
    notes = (
        f"Input: the store of `retry-heavy.yaml` simulated with {messages:,} messages: {records:,} "
        f"records, {record_bytes / 1e6:,.1f} MB of records in {len(files)} commit-log file(s) of "
        f"{summary.commitlog_file_size_bytes // (1024 * 1024)} MiB. {runs} runs of each path, in turns, "
        f"in one process. Rates are records/s; 'p90' is the rate 90% of runs reached; 'CPU' rates "
        f"and MB/s divide by this process's CPU time (per core; other processes do not inflate it "
        f"much); the last column is CPU time over the Parquet-write floor's. {load_note()} at the "
        f"end of the runs.\n\n"
        f"Columnar import: {ratio:.2f}x the write floor's CPU (target <= "
        f"{TARGET_WRITE_FLOOR_RATIO:.0f}x: {'met' if ratio <= TARGET_WRITE_FLOOR_RATIO else 'missed'}); "
        f"{speedup:.1f}x less CPU than the reference decoder's import. Both write byte-identical "
        f"Parquet files (tests/broker_core/export/test_columnar.py).\n\n"
        f"cProfile of one columnar import (top {PROFILE_LINES} by own time; the profiler inflates "
        f"per-call Python costs such as the size walk):\n\n```\n{_profile_text(profile)}\n```"
    )
    name = common.result_name("import_scale", bool(args.quick or args.messages or args.runs))
    return write_result(name, "P7 import-store: columnar vs reference decoder, beside read and write floors",
                        ["path", "median rec/s", "p90 rec/s", "max rec/s", "CPU rec/s", "CPU MB/s",
                         "CPU median s", "CPU / write floor"], rows, notes)


def _profile_text(profile: cProfile.Profile) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    total = stats.total_tt
    lines = [f"total {total:.3f} s", f"{'own s':>7} {'share':>6} {'cum s':>7}  function"]
    entries = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:PROFILE_LINES]
    for (path, line, func), (_cc, _nc, tt, ct, _callers) in entries:
        where = f"{Path(path).name}:{line}({func})" if line else func
        lines.append(f"{tt:7.3f} {tt / total:6.1%} {ct:7.3f}  {where}")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
