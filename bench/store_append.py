"""Records/s appended through MessageStore.put_message (commit log + consume-queue dispatch).

Compared with a raw sequential ``write()`` of the same record bytes, for 256 B and 1 KiB bodies.
Five runs each; median, p90 and max of wall-clock rates, plus the median CPU-time rate (the machine
is shared, so wall time includes other processes' load). Run: ``python -m bench.store_append``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import load_note, machine, write_result
from broker_core.message import JavaHashMap
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

RUNS = 5
RECORDS_PER_RUN = 100_000
BODY_SIZES_BYTES = (256, 1024)
COMMITLOG_FILE_SIZE_BYTES = 64 * 1024 * 1024  # the default scenario's file size
TARGET_RECORDS_PER_S = 100_000  # the simulation appends every hop through this path
QUEUES = 4
PROPERTIES = ("KEYS\x01order-1\x02UNIQ_KEY\x01C00002027C225FFD2B276D1F61390000\x02"
              "CLUSTER\x01DefaultCluster\x02TAGS\x01TagA")


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def make_messages(n: int, body_size: int) -> list[MessageInner]:
    props = JavaHashMap.from_properties_string(PROPERTIES)
    body = (b"0123456789abcdef" * (body_size // 16 + 1))[:body_size]
    return [MessageInner("OrderTopic", i % QUEUES, body, props, PROPERTIES, born_ts=1_700_000_000_000,
                         born_host="10.0.0.2:50000") for i in range(n)]


def run_store(root: Path, messages: list[MessageInner]) -> tuple[float, float, int]:
    """(wall s, cpu s, bytes) to put every message and flush once at the end (async flush)."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(root, StoreConfig(commitlog_file_size_bytes=COMMITLOG_FILE_SIZE_BYTES),
                         Clock())
    assert store.load()
    store.start()
    put = store.put_message
    wall, cpu = time.perf_counter(), time.process_time()
    for msg in messages:
        put(msg)
    store.flush()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    size = store.max_phys_offset
    assert store.max_offset("OrderTopic", 0) == len(messages) // QUEUES
    store.shutdown()
    return wall, cpu, size


def record_bytes(root: Path) -> list[bytes]:
    """The stored records of the last run, to write raw."""
    store = MessageStore(root, StoreConfig(commitlog_file_size_bytes=COMMITLOG_FILE_SIZE_BYTES),
                         Clock())
    assert store.load()
    out = []
    for step in store.commit_log.scan(0):
        if step.record is None:
            break
        if hasattr(step.record, "total_size"):
            out.append(store.commit_log.files.read(step.phys_offset, step.record.total_size))
    store.crash()
    return out


def run_raw(path: Path, chunks: list[bytes]) -> tuple[float, float]:
    """(wall s, cpu s) to write each record with a buffered sequential write(), then flush."""
    wall, cpu = time.perf_counter(), time.process_time()
    with open(path, "wb") as f:
        write = f.write
        for chunk in chunks:
            write(chunk)
    return time.perf_counter() - wall, time.process_time() - cpu


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS_PER_RUN)
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="store-append-") as tmp:
        base = Path(tmp)
        for body_size in BODY_SIZES_BYTES:
            messages = make_messages(args.records, body_size)
            results = [run_store(base / "store", messages) for _ in range(args.runs)]
            chunks = record_bytes(base / "store")
            raw = [run_raw(base / "raw.bin", chunks) for _ in range(args.runs)]
            for name, walls, cpus in (
                    ("MessageStore.put_message", [r[0] for r in results], [r[1] for r in results]),
                    ("raw write()", [r[0] for r in raw], [r[1] for r in raw])):
                rates = [args.records / w for w in walls]
                rows.append([f"{body_size} B", name, f"{statistics.median(rates):,.0f}",
                             f"{pct(rates, 0.1):,.0f}", f"{max(rates):,.0f}",
                             f"{args.records / statistics.median(cpus):,.0f}",
                             f"{results[0][2] / args.records:,.0f}"])
    notes = (f"{args.records:,} records per run, {args.runs} runs, {QUEUES} queues, async flush "
             f"(one flush at the end, included), {COMMITLOG_FILE_SIZE_BYTES // 2**20} MiB commit-log "
             f"files. Rates are records/s; 'p90' is the rate 90% of runs reached (the 10th percentile "
             f"of rates, i.e. the p90 of times); 'CPU' divides by process CPU time, which other "
             f"processes on the shared machine do not inflate. Target: "
             f"{TARGET_RECORDS_PER_S:,} records/s at 256 B. At the end of the runs: {load_note()}.")
    print(machine())
    write_result("store_append", "Store append: records/s through put_message vs raw write()",
                 ["body", "path", "median rec/s", "p90 rec/s", "max rec/s", "CPU rec/s",
                  "bytes/record"], rows, notes)


if __name__ == "__main__":
    main()
