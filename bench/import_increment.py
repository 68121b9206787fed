"""P8: what an import that continues the last one reads, on a real growing 4.9.4 store and a
10M-record store.

Each import is measured three ways: ``store_bytes_read`` (the import's own count of the bytes it
read from the store's files, by directory: ``import-store --json``), the process's ``rchar``
(every ``read()`` call, the run directory's Parquet included; a memory-mapped commit log is not
in it) and ``read_bytes`` (what the kernel fetched from the disk, after the store's pages were
dropped from the page cache with ``posix_fadvise(DONTNEED)``; a live broker's mapped files stay
cached, so this is near 0 there). Beside them: the commit-log bytes the store gained (``bytes_read``),
the consume-queue bytes it gained (the valid units the bench counts after the import), and the
config files' and checkpoint's bytes: the bound is their sum.

* ``--real``: a real RocketMQ 4.9.4 broker (256 KiB commit-log files) and producer
  (``tests/conformance/LiveProducer.java``, every tenth message delayed), the store imported with
  ``--live`` every ``--every`` messages, then once more after the broker stopped.
* ``--big STORE``: a store of ``bench.big_store`` (10M records, mixed-traffic) given consume
  queues (the shard's queues laid end to end as its commit log is, each queue's units numbered on,
  and the records of the newest file given those queue offsets), shown to the import up to a cut
  in its newest file; the cut then moves forward record by record (as a broker appends) and each
  step is imported.

The same script measures the code of another checkout (``PYTHONPATH=/path/to/checkout``): an
import without ``store_bytes_read`` is reported with its other columns. Run:
``python -m bench.import_increment --real --big var/bench/full/import-scale/store-mixed-traffic-10000000``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from broker_core import codec
from broker_core.constants import CQ_UNIT_SIZE_BYTES, CQ_UNITS_PER_FILE_DEFAULT
from broker_core.export.store_import import import_store

CQ_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_SIZE_MAGIC = struct.Struct(">iI")
_QUEUE_OFFSET = struct.Struct(">q")
REAL_VERSION = "4.9.4"
REAL_MESSAGES_DEFAULT = 3000
REAL_EVERY_DEFAULT = 300
PRODUCER_TIMEOUT_S = 600
# The big store's steps: bytes of records appended before each import (0: nothing new).
BIG_STEPS = (48 * 1024, 0, 1024 * 1024, 600, 8 * 1024 * 1024)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _io() -> dict[str, int]:
    with open("/proc/self/io") as fh:
        return {k: int(v) for k, v in (line.split(": ") for line in fh)}


def _drop_cache(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def cq_bytes(store: Path) -> int:
    """The valid units' bytes of every consume queue of the store (up to each queue's first zero unit)."""
    total = 0
    for queue in (store / "consumequeue").glob("*/*"):
        for path in sorted(queue.iterdir()):
            units = np.fromfile(path, dtype=CQ_DTYPE, count=path.stat().st_size // CQ_UNIT_SIZE_BYTES)
            bad = np.flatnonzero(units["size"] <= 0)
            total += (int(bad[0]) if len(bad) else len(units)) * CQ_UNIT_SIZE_BYTES
            if len(bad):
                break
    return total


def config_bytes(store: Path) -> int:
    """The config files, the checkpoint and a 5.x POP KV store (``kvStore/``, the POP service's state,
    read whole as the config files are)."""
    files = list((store / "config").glob("*.json")) + [store / "checkpoint"] + list((store / "kvStore").rglob("*"))
    return sum(p.stat().st_size for p in files if p.is_file() and p.name != "LOCK")


def measured_import(store: Path, run: Path, cq_before: int, drop: bool, **kw) -> tuple[dict, int]:
    """One import with its numbers; returns (row, the consume-queue bytes after it)."""
    if drop:
        _drop_cache(store)
    io0, cpu0, wall0 = _io(), time.process_time(), time.perf_counter()
    summary = import_store(store, run, broker="broker-a", **kw)
    wall, cpu, io1 = time.perf_counter() - wall0, time.process_time() - cpu0, _io()
    cq_after = cq_bytes(store)
    read = getattr(summary, "store_bytes_read", None)
    row = {"resumed": summary.resumed_from is not None, "records_added": summary.records_added,
           "records": summary.records, "new_commitlog": summary.bytes_read, "new_cq": max(0, cq_after - cq_before),
           "config": config_bytes(store), "store_bytes_read": read, "rchar": io1["rchar"] - io0["rchar"],
           "read_bytes": io1["read_bytes"] - io0["read_bytes"], "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
           "why_whole": summary.full_import_reason}
    return row, cq_after


def run_real(work: Path, messages: int, every: int) -> list[dict]:
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve

    lib = resolve(REAL_VERSION)
    classes = work / "classes"
    producer_src = Path(__file__).resolve().parent.parent / "tests" / "conformance" / "LiveProducer.java"
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", str(lib / "*"), str(producer_src)], check=True)
    run = work / "runs" / "live"
    rows = []
    spec = BrokerSpec("broker-a", "1s 5s 10s", commitlog_file_size_bytes=1 << 18)
    with Cluster(work / "cluster", lib, [spec]) as cluster:
        store = cluster.procs["broker-a"].store
        producer = subprocess.Popen(
            ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{classes}:{lib / '*'}", "LiveProducer",
             cluster.namesrv_addr, "LiveTopic", str(messages)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
        deadline = threading.Timer(PRODUCER_TIMEOUT_S, producer.kill)
        deadline.start()
        cq = 0
        try:
            for line in producer.stdout:
                if line.startswith("sent ") and int(line.split()[1]) % every == 0:
                    row, cq = measured_import(store, run, cq, drop=False, live=True)
                    rows.append({"sent": int(line.split()[1]), **row})
                    say(f"real: {rows[-1]}")
            producer.wait()
        finally:
            deadline.cancel()
            if producer.poll() is None:
                producer.kill()
        assert producer.returncode == 0, f"the producer exited {producer.returncode}"
        cluster.stop("broker-a")
    row, cq = measured_import(store, run, cq, drop=True)
    rows.append({"sent": messages, "stopped": True, **row})
    fresh, _ = measured_import(store, work / "fresh" / "live", 0, drop=True)
    rows.append({"sent": messages, "fresh": True, **fresh})
    return rows


def _queues_of(big: Path) -> dict[str, np.ndarray]:
    """Each queue's units for the big store: the shard's queues laid end to end as its copies are."""
    facts = json.loads((big / "store.json").read_text())
    shards = {Path(s).name: Path(s) for s in facts["shards"]}
    queues: dict[str, list[np.ndarray]] = {}
    base = 0
    for shard_name, _copy in facts["layout"]:
        store = shards[shard_name] / "store"
        for queue in sorted((store / "consumequeue").glob("*/*")):
            data = b"".join(p.read_bytes() for p in sorted(queue.iterdir()))
            units = np.frombuffer(data, dtype=CQ_DTYPE, count=len(data) // CQ_UNIT_SIZE_BYTES).copy()
            bad = np.flatnonzero(units["size"] <= 0)
            units = units[:int(bad[0])] if len(bad) else units
            units["phys"] += base
            queues.setdefault(f"{queue.parent.name}/{queue.name}", []).append(units)
        files = sorted((store / "commitlog").iterdir())
        base += int(files[-1].name) + files[-1].stat().st_size
    # (concatenate gives the native byte order: back to the files' big-endian one)
    return {key: np.concatenate(parts).astype(CQ_DTYPE) for key, parts in queues.items()}


def _boundaries(buf: bytes) -> list[int]:
    pos, found = 0, [0]
    while pos + 8 <= len(buf):
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        if total <= 0 or magic not in (0xDAA320A7, 0xDAA320A8):
            break
        pos += total
        found.append(pos)
    return found


def _write_units(view: Path, key: str, units: np.ndarray, first_index: int) -> None:
    """Write ``units`` at unit ``first_index`` on of a queue (files preallocated, sparse)."""
    queue = view / "consumequeue" / key
    queue.mkdir(parents=True, exist_ok=True)
    per_file = CQ_UNITS_PER_FILE_DEFAULT
    at = 0
    while at < len(units):
        index = first_index + at
        name = queue / f"{(index // per_file) * per_file * CQ_UNIT_SIZE_BYTES:020d}"
        n = min(len(units) - at, per_file - index % per_file)
        with open(name, "r+b" if name.exists() else "w+b") as fh:
            fh.truncate(per_file * CQ_UNIT_SIZE_BYTES)
            fh.seek((index % per_file) * CQ_UNIT_SIZE_BYTES)
            fh.write(units[at:at + n].tobytes())
        at += n


def build_view(big: Path, work: Path) -> tuple:
    """The big store up to a cut in its newest file, with consume queues: (view, the newest file,
    record boundaries in it, the queues, its start, its bytes with queue offsets set, the cut)."""
    queues = _queues_of(big)
    view = work / "view"
    shutil.rmtree(view, ignore_errors=True)
    (view / "commitlog").mkdir(parents=True)
    files = sorted((big / "commitlog").iterdir())
    for f in files[:-1]:
        os.link(f, view / "commitlog" / f.name)
    shutil.copytree(big / "config", view / "config")
    shutil.copyfile(big / "checkpoint", view / "checkpoint")
    last, start = files[-1], int(files[-1].name)
    size = last.stat().st_size
    source = bytearray(last.read_bytes())
    for units in queues.values():  # each record of the newest file gets its unit's index as queue offset
        inside = np.flatnonzero((units["phys"] >= start) & (units["phys"] < start + size))
        for index in inside.tolist():
            _QUEUE_OFFSET.pack_into(source, int(units["phys"][index]) - start + codec.QUEUE_OFFSET_POS, index)
    bounds = _boundaries(bytes(source))
    cut = bounds[-1] - sum(BIG_STEPS)
    cut = max(b for b in bounds if b <= cut)
    with open(view / "commitlog" / last.name, "wb") as fh:
        fh.write(source[:cut])
        fh.truncate(size)
    for key, units in queues.items():
        shown = int(np.searchsorted(units["phys"], start + cut))
        _write_units(view, key, units[:shown], 0)
    return view, last, bounds, queues, start, bytes(source), cut


def grow_view(view: Path, name: str, source: bytes, start: int, queues: dict, cut: int, new_cut: int) -> None:
    with open(view / "commitlog" / name, "r+b") as fh:
        fh.seek(cut)
        fh.write(source[cut:new_cut])
    for key, units in queues.items():
        lo, hi = (int(np.searchsorted(units["phys"], start + c)) for c in (cut, new_cut))
        if hi > lo:
            _write_units(view, key, units[lo:hi], lo)


def run_big(big: Path, work: Path) -> list[dict]:
    say(f"big: building the view of {big}")
    view, last, bounds, queues, start, source, cut = build_view(big, work)
    run = work / "runs" / "big"
    shutil.rmtree(run, ignore_errors=True)
    rows = []
    say("big: the first (whole) import")
    row, cq = measured_import(view, run, 0, drop=True)
    rows.append({"step_bytes": None, **row})
    say(f"big: {rows[-1]}")
    for step in BIG_STEPS:
        new_cut = max(b for b in bounds if b <= cut + step)
        grow_view(view, last.name, source, start, queues, cut, new_cut)
        cut = new_cut
        row, cq = measured_import(view, run, cq, drop=True)
        rows.append({"step_bytes": step, **row})
        say(f"big: {rows[-1]}")
    return rows


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


def report_rows(code: str, kind: str, rows: list[dict]) -> list[list[str]]:
    """The table's rows of one run of the bench: one per import."""
    out = []
    for row in rows:
        read = row["store_bytes_read"]
        bound = row["new_commitlog"] + row["new_cq"] + row["config"]
        step = (f"+{row['step_bytes']:,} B" if row.get("step_bytes") is not None else "first, whole") \
            if kind == "10M" else ("fresh import" if row.get("fresh") else
                                   "after the stop" if row.get("stopped") else f"sent {row['sent']}")
        out.append([kind, step, code, "continued" if row["resumed"] else "whole", f"{row['records_added']:,}",
                    _kib(row["new_commitlog"]), _kib(row["new_cq"]), _kib(row["config"]), _kib(bound),
                    _kib(sum(read.values())) if read else "-",
                    _kib(read.get("consumequeue", 0)) if read else "-",
                    f"{read.get('commitlog', 0) - row['new_commitlog']:,}" if read else "-",
                    f"{read.get('consumequeue', 0) - row['new_cq']:,}" if read else "-",
                    f"{sum(read.values()) - bound:,}" if read else "-",
                    _kib(row["rchar"]), _kib(row["read_bytes"]), f"{row['wall_s']:.2f}", f"{row['cpu_s']:.2f}"])
    return out


def report(runs: list[tuple[str, Path]]) -> Path:
    """bench/results/import_increment.md from the JSON of runs of this bench (label, file)."""
    from bench.common import load_note, write_result

    rows = []
    for kind, key in (("real 4.9.4", "real"), ("10M", "big")):
        for label, path in runs:
            rows += report_rows(label, kind, json.loads(path.read_text()).get(key, []))
    header = ["store", "import", "code", "read", "records added", "new commit log KiB", "new consume queues KiB",
              "config + checkpoint KiB", "bound KiB", "store bytes read KiB", "of which consume queues KiB",
              "commit log read - new B", "consume queues read - new B", "store bytes read - bound B",
              "rchar KiB", "read_bytes KiB", "wall s", "CPU s"]
    notes = (f"{load_note()} after the runs. 'bound' is the new commit-log bytes + the new consume-queue bytes "
             "+ the config files and checkpoint (and a POP KV store); 'store bytes read' is the import's own count "
             "(store_bytes_read); 'commit log read - new' and 'consume queues read - new' are what it read of "
             "each beyond the bytes the store gained there, 'store bytes read - bound' what it read beyond the "
             "bound (negative: less); rchar counts every read() of the process (the "
             "run directory's Parquet too; a mapped commit log is not in it); read_bytes what the disk gave "
             "after the store's pages were dropped from the page cache (a live broker keeps its mapped files "
             "cached: 0). The real runs' imports fall where the producer's output says (their counts differ "
             "between runs); the 10M runs import the same steps.")
    return write_result("import_increment", "P8: what an import that continues the last one reads", header, rows,
                        notes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="a real 4.9.4 broker's growing store")
    parser.add_argument("--messages", type=int, default=REAL_MESSAGES_DEFAULT)
    parser.add_argument("--every", type=int, default=REAL_EVERY_DEFAULT)
    parser.add_argument("--big", type=Path, help="a bench.big_store store (10M records)")
    parser.add_argument("--work", type=Path, default=Path("var/bench/import-increment"))
    parser.add_argument("--out", type=Path, help="the rows as JSON")
    parser.add_argument("--report", nargs="+", metavar="LABEL=JSON",
                        help="write bench/results/import_increment.md from runs' JSON files and stop")
    args = parser.parse_args(argv)
    if args.report:
        report([(item.split("=", 1)[0], Path(item.split("=", 1)[1])) for item in args.report])
        return
    out = {}
    if args.real:
        work = args.work.resolve() / "real"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        out["real"] = run_real(work, args.messages, args.every)
    if args.big:
        out["big"] = run_big(args.big.resolve(), args.work / "big")
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
