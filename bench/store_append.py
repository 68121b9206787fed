"""Records/s appended through MessageStore.put_message (commit log + consume-queue dispatch).

Compared with a raw sequential ``write()`` of the same record bytes and with the least Python work
an append needs (a floor measured in the same run), for 256 B and 1 KiB bodies; and the same
records sent in batches through MessageStore.put_messages (a producer's batch send).
Five runs each; median, p90 and max of wall-clock rates, plus the median CPU-time rate (the machine
is shared, so wall time includes other processes' load). Where valgrind is installed, the
instructions each append executes are counted too (callgrind, 256 B bodies): a measure other
processes cannot disturb, so a change of a few percent shows. Run: ``python -m bench.store_append``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from bench import common
from bench.common import load_note, machine, write_result
from broker_core import codec
from broker_core.codec import PROPERTIES_LENGTH, RECORD_HEADERS_HOSTS_PACKED, host_field
from broker_core.constants import MESSAGE_MAGIC_CODE_V1
from broker_core.message import JavaHashMap
from broker_core.store.consume_queue import CQ_UNIT
from broker_core.store.message_store import MessageBatchInner, MessageInner, MessageStore, StoreConfig

RUNS = 9
RECORDS_PER_RUN = 100_000
BODY_SIZES_BYTES = (256, 1024)
COMMITLOG_FILE_SIZE_BYTES = 64 * 1024 * 1024  # the default scenario's file size
TARGET_RECORDS_PER_S = 300_000  # issue 6, P1 (256 B bodies)
QUEUES = 4
# Instruction counts: appends counted in a probe (the difference of two probes, this many apart),
# and the body size they use.
INSTRUCTION_PROBE_RECORDS = 20_000  # a multiple of BATCH_MESSAGES
INSTRUCTION_PROBE_BASE_RECORDS = 1_000  # both probes make these (first-time work: files, caches)
INSTRUCTION_PROBE_BODY_BYTES = 256
PROPERTIES = ("KEYS\x01order-1\x02UNIQ_KEY\x01C00002027C225FFD2B276D1F61390000\x02"
              "CLUSTER\x01DefaultCluster\x02TAGS\x01TagA")
# A batch send: each message carries its own properties, the broker appends the batch's (CLUSTER),
# so the stored records are as long as the single puts' and the byte rates compare.
BATCH_MESSAGES = 32
BATCH_OWN_PROPERTIES = "KEYS\x01order-1\x02UNIQ_KEY\x01C00002027C225FFD2B276D1F61390000\x02TAGS\x01TagA"
BATCH_PROPERTIES = "CLUSTER\x01DefaultCluster"


class Clock:
    """Store time that moves a millisecond per read; the store is handed the bound method ``now``,
    as a broker hands it its simulator's (``Simulator.now``)."""

    def __init__(self):
        self.now_ms = 1_700_000_000_000

    def now(self) -> int:
        self.now_ms += 1
        return self.now_ms


def make_messages(n: int, body_size: int) -> list[MessageInner]:
    props = JavaHashMap.from_properties_string(PROPERTIES)
    body = (b"0123456789abcdef" * (body_size // 16 + 1))[:body_size]
    return [MessageInner("OrderTopic", i % QUEUES, body, props, PROPERTIES, born_ts=1_700_000_000_000,
                         born_host="10.0.0.2:50000") for i in range(n)]


def stored_record_bytes(store: MessageStore) -> int:
    """The bytes of the records the benchmark's queues point at (file-end blanks left out)."""
    return sum(size for queue_id in range(QUEUES)
               for _phys, size, _tags in store.get_units("OrderTopic", queue_id, 0, 2**31 - 1))


def run_store(root: Path, items: list[MessageInner] | list[MessageBatchInner], records: int,
              count_bytes: bool = True) -> tuple[float, float, int]:
    """(wall s, cpu s, record bytes or 0) to put every item -- messages by put_message, batch sends
    by put_messages, ``records`` messages in all -- and flush once at the end (async flush)."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(root, StoreConfig(commitlog_file_size_bytes=COMMITLOG_FILE_SIZE_BYTES),
                         Clock().now)
    assert store.load()
    store.start()
    put = store.put_messages if isinstance(items[0], MessageBatchInner) else store.put_message
    wall, cpu = time.perf_counter(), time.process_time()
    for item in items:
        put(item)
    store.flush()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    size = stored_record_bytes(store) if count_bytes else 0
    assert sum(store.max_offset("OrderTopic", q) for q in range(QUEUES)) == records
    store.shutdown()
    return wall, cpu, size


def make_batches(messages: list[MessageInner]) -> list[MessageBatchInner]:
    """The same messages as batch sends of BATCH_MESSAGES each, one queue per batch in turn."""
    batches = []
    for start in range(0, len(messages), BATCH_MESSAGES):
        chunk = messages[start:start + BATCH_MESSAGES]
        first = chunk[0]
        wire = codec.encode_batch_body((m.flag, m.body, BATCH_OWN_PROPERTIES) for m in chunk)
        batches.append(MessageBatchInner(first.topic, (start // BATCH_MESSAGES) % QUEUES, wire, {},
                                         BATCH_PROPERTIES, born_ts=first.born_ts,
                                         born_host=first.born_host))
    return batches


def record_bytes(root: Path) -> list[bytes]:
    """The stored records of the last run, to write raw."""
    store = MessageStore(root, StoreConfig(commitlog_file_size_bytes=COMMITLOG_FILE_SIZE_BYTES),
                         Clock().now)
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


def run_floor(root: Path, messages: list[MessageInner]) -> tuple[float, float]:
    """(wall s, cpu s) of the least Python work an append needs, written out like the store.

    Per message: encode the property string, take the queue offset from a dict, pack the header
    (body CRC included), join the record's parts onto the commit-log buffer, pack the 20-byte
    consume-queue unit onto that queue's buffer; then one write per buffer. Left out: every check,
    the delay rewrite, the file-end rule, the tags hash, the result object and the store's files.
    """
    header = RECORD_HEADERS_HOSTS_PACKED[0]  # IPv4 born and store hosts, as this benchmark sends
    born_field = host_field(messages[0].born_host)
    store_field = host_field(StoreConfig().store_host)
    props_len = PROPERTIES_LENGTH
    clock = Clock().now
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    wall, cpu = time.perf_counter(), time.process_time()
    log = bytearray()
    units: dict[tuple[str, int], bytearray] = {}
    offsets: dict[tuple[str, int], int] = {}
    topic_fields: dict[str, bytes] = {}
    phys = 0
    for msg in messages:
        topic = msg.topic
        topic_field = topic_fields.get(topic)
        if topic_field is None:
            raw = topic.encode()
            topic_field = topic_fields[topic] = bytes((len(raw),)) + raw
        body = msg.body
        props = msg.properties_string.encode()
        key = (topic, msg.queue_id)
        queue_offset = offsets.get(key, 0)
        offsets[key] = queue_offset + 1
        size = header.size + len(body) + len(topic_field) + 2 + len(props)
        log += b"".join((header.pack(size, MESSAGE_MAGIC_CODE_V1, zlib.crc32(body) & 0x7FFFFFFF,
                                     msg.queue_id, msg.flag, queue_offset, phys, msg.sys_flag,
                                     msg.born_ts, born_field, clock(), store_field,
                                     msg.reconsume_times, msg.prepared_tx_offset, len(body)),
                         body, topic_field, props_len.pack(len(props)), props))
        unit_buf = units.get(key)
        if unit_buf is None:
            unit_buf = units[key] = bytearray()
        unit_buf += CQ_UNIT.pack(phys, size, 0)
        phys += size
    (root / "commitlog").write_bytes(log)
    for (topic, queue_id), unit_buf in units.items():
        (root / f"cq-{topic}-{queue_id}").write_bytes(unit_buf)
    return time.perf_counter() - wall, time.process_time() - cpu


def probe(path: str, body_size: int, records: int) -> None:
    """Make the messages, then append ``records`` of them by ``path`` ("store", "batch" or "floor")."""
    # Every probe makes as many messages as the largest appends, so making them cancels out.
    messages = make_messages(INSTRUCTION_PROBE_BASE_RECORDS + INSTRUCTION_PROBE_RECORDS, body_size)
    with tempfile.TemporaryDirectory(prefix="store-append-probe-") as tmp:
        if path == "store":
            run_store(Path(tmp) / "store", messages[:records], records, count_bytes=False)
        elif path == "batch":
            # Whole batches, made for every message too (a client's work); the two probes differ
            # by INSTRUCTION_PROBE_RECORDS / BATCH_MESSAGES batches.
            batches = make_batches(messages)[:records // BATCH_MESSAGES]
            run_store(Path(tmp) / "batch", batches, len(batches) * BATCH_MESSAGES, count_bytes=False)
        else:
            run_floor(Path(tmp) / "floor", messages[:records])


def instructions_per_append(path: str) -> float | None:
    """Instructions one append executes by ``path``, counted by callgrind; None without valgrind.

    Two probes run the same setup and differ only in the number of appends they make, so the
    difference of their totals is the extra appends' own work. Python's string hashing is fixed
    (PYTHONHASHSEED=0) so that dict probes, and the count, repeat from run to run.
    """
    if shutil.which("valgrind") is None:
        return None
    totals = []
    for records in (INSTRUCTION_PROBE_BASE_RECORDS,
                    INSTRUCTION_PROBE_BASE_RECORDS + INSTRUCTION_PROBE_RECORDS):
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
             "-m", "bench.store_append", "--probe", path, str(INSTRUCTION_PROBE_BODY_BYTES),
             str(records)],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=False)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"callgrind probe of {path} failed (exit {done.returncode}): "
                               f"{done.stderr[-2000:]}")
        totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / INSTRUCTION_PROBE_RECORDS


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS_PER_RUN)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--no-instructions", action="store_true",
                        help="skip the callgrind instruction counts (about a minute)")
    parser.add_argument("--probe", nargs=3, metavar=("PATH", "BODY_BYTES", "RECORDS"),
                        help=argparse.SUPPRESS)  # one callgrind probe (instructions_per_append)
    args = parser.parse_args(argv)
    if args.probe:
        path, body_size, records = args.probe
        probe(path, int(body_size), int(records))
        return
    rows = []
    cpu_medians: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="store-append-") as tmp:
        base = Path(tmp)
        for body_size in BODY_SIZES_BYTES:
            messages = make_messages(args.records, body_size)
            batches = make_batches(messages)
            chunks = None
            results, batched, raw, floor = [], [], [], []
            # The paths take turns, run by run, so that every one sees the machine as it is then
            # (its speed drifts over a minute by more than the differences measured here).
            for _ in range(args.runs):
                results.append(run_store(base / "store", messages, len(messages)))
                if chunks is None:
                    chunks = record_bytes(base / "store")
                batched.append(run_store(base / "batch", batches, len(messages)))
                raw.append(run_raw(base / "raw.bin", chunks))
                floor.append(run_floor(base / "floor", messages))
            assert batched[0][2] == results[0][2], "batch records differ in size from single puts"
            cpu_medians[body_size] = {
                "store": statistics.median(r[1] for r in results),
                "batch": statistics.median(r[1] for r in batched),
                "raw": statistics.median(r[1] for r in raw),
                "floor": statistics.median(r[1] for r in floor)}
            for name, walls, cpus in (
                    ("MessageStore.put_message", [r[0] for r in results], [r[1] for r in results]),
                    (f"MessageStore.put_messages, {BATCH_MESSAGES} per batch", [r[0] for r in batched],
                     [r[1] for r in batched]),
                    ("floor: least Python work per append", [r[0] for r in floor],
                     [r[1] for r in floor]),
                    ("raw write()", [r[0] for r in raw], [r[1] for r in raw])):
                rates = [args.records / w for w in walls]
                rows.append([f"{body_size} B", name, f"{statistics.median(rates):,.0f}",
                             f"{pct(rates, 0.1):,.0f}", f"{max(rates):,.0f}",
                             f"{args.records / statistics.median(cpus):,.0f}",
                             f"{results[0][2] / args.records:,.0f}"])
    ratios = []
    for body_size, med in cpu_medians.items():
        store_rate = args.records / med["store"]
        batch_rate = args.records / med["batch"]
        ratios.append(
            f"{body_size} B: put_message {store_rate:,.0f}/s CPU "
            f"({'meets' if store_rate >= TARGET_RECORDS_PER_S else 'misses'} the target), "
            f"{med['store'] / med['raw']:.1f}x the CPU of raw write() and "
            f"{med['store'] / med['floor']:.2f}x the CPU of the least-work floor "
            f"({args.records / med['floor']:,.0f}/s); put_messages {batch_rate:,.0f}/s CPU "
            f"({'meets' if batch_rate >= TARGET_RECORDS_PER_S else 'misses'} the target; "
            f"{med['store'] / med['batch']:.2f}x put_message's rate)")
    notes = (f"{args.records:,} records per run, {args.runs} runs of each path (the paths take turns), "
             f"{QUEUES} queues, async flush (one flush at the end, included), {COMMITLOG_FILE_SIZE_BYTES // 2**20} MiB commit-log "
             f"files. Rates are records/s; 'p90' is the rate 90% of runs reached (the 10th percentile "
             f"of rates, i.e. the p90 of times); 'CPU' divides by process CPU time, which other "
             f"processes on the shared machine do not inflate. Target: "
             f"{TARGET_RECORDS_PER_S:,} records/s at 256 B. At the end of the runs: {load_note()}.\n\n"
             "The floor row is the least Python work an append needs, measured in the same run: "
             "per message, encode the property string, take the queue offset from a dict, pack the "
             "header with the body CRC, join the record onto a commit-log buffer and pack its "
             "consume-queue unit onto the queue's buffer; one write per buffer at the end. It leaves "
             "out every check, the delay rewrite, the file-end rule, the tags hash and the result "
             "object. The put_messages row sends the same records as batches of "
             f"{BATCH_MESSAGES} (the batch's CLUSTER property appended to each message's own, so "
             "the records are as long): a batch is checked, placed and written once, each message "
             "still encoded, hashed and dispatched. CPU medians: " + "; ".join(ratios) + ".")
    if args.no_instructions:
        notes += "\n\nInstruction counts: not taken (--no-instructions)."
    else:
        counts = {path: instructions_per_append(path) for path in ("store", "batch", "floor")}
        if counts["store"] is None:
            notes += "\n\nInstruction counts: not taken (valgrind is not installed)."
        else:
            notes += (
                f"\n\nInstructions per append at {INSTRUCTION_PROBE_BODY_BYTES} B, counted by "
                f"callgrind (the difference of two probes {INSTRUCTION_PROBE_RECORDS:,} appends "
                f"apart; deterministic, so unlike the rates it does not move with the machine's "
                f"load): put_message {counts['store']:,.0f}, put_messages "
                f"{counts['batch']:,.0f} per message in batches of {BATCH_MESSAGES}, least-work "
                f"floor {counts['floor']:,.0f} (put_message {counts['store'] / counts['floor']:.2f}x, "
                f"put_messages {counts['batch'] / counts['floor']:.2f}x).")
    print(machine())
    name = common.result_name("store_append", args.records != RECORDS_PER_RUN or args.runs != RUNS)
    write_result(name, "Store append: records/s through put_message and put_messages vs raw write()",
                 ["body", "path", "median rec/s", "p90 rec/s", "max rec/s", "CPU rec/s",
                  "bytes/record"], rows, notes)


if __name__ == "__main__":
    main()
