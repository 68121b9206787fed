"""P2: the schedule drain -- due messages moved from SCHEDULE_TOPIC_XXXX to their real topics.

A broker on a real store (a temp directory, the scenarios' 64 MiB commit-log files) is filled with
N delayed messages spread over the first delay levels, all sent at one simulated instant; that
fill is not timed. The timed part is the virtual clock running until every level has delivered:
each delivery reads the unit from the level's consume queue, looks the record up in the commit
log, rebuilds it (``messageTimeup``) and puts it back through the broker's single put door into
its real topic (commit log append + consume-queue dispatch), then records the delivery row.

Floors are measured in the same runs, on the drained store's own files: the barest delivery
CPython can do (with and without its delivery row, ``bare_delivery_floor``), and one pread + one
write per record with no decoding at all.

Target: >= 300k deliveries/s. Run: ``python -m bench.schedule_drain [--quick] [--messages N]``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import mmap
import os
import pstats
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from bench.common import Stats, load_note, write_result
from broker_core.broker.broker import Broker, BrokerConfig
from broker_core.broker.send import SendRequest
from broker_core.clock import Simulator
from broker_core.codec import BORN_HOST_POS, RECORD_HEADERS
from broker_core.constants import MESSAGE_MAGIC_CODE_V1, SCHEDULE_TOPIC
from broker_core.rng import Streams
from broker_core.store.commit_log import COMMIT_LOG_DIR_NAME
from broker_core.store.consume_queue import CQ_UNIT, consume_queue_dir

TARGET_DELIVERIES_PER_S = 300_000
SIM_START_MS = 1_795_305_600_000  # 2026-11-22 00:00:00 UTC, a whole second
BENCH_COMMITLOG_FILE_BYTES = 64 * 1024 * 1024  # the scenarios' size; 1 GiB files only cost disk
BENCH_TOPIC = "BenchTopic"
BENCH_QUEUES = 4
BENCH_LEVELS = (1, 2, 3, 4)  # 1s 5s 10s 30s: every message is due within 31 s of simulated time
DRAIN_MARGIN_MS = 2_000  # the first poll is 1 s after start, then every 100 ms
BODY_SIZE_BYTES = 256
MESSAGES_FULL = 100_000
MESSAGES_QUICK = 20_000
RUNS_FULL = 3
RUNS_QUICK = 2
# A 256 B body with this benchmark's topic and properties makes a record of about this size.
FLOOR_RECORD_BYTES = 420


class CountingRecorder:
    """Counts emitted rows per table; the drain's output without the Parquet writer's cost."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def emit(self, table: str, row: dict) -> None:
        self.counts[table] = self.counts.get(table, 0) + 1


class FilledBroker:
    """A started broker whose schedule topic holds ``messages`` delayed messages, none due yet."""

    def __init__(self, root: Path, messages: int):
        self.sim = Simulator(SIM_START_MS)
        self.recorder = CountingRecorder()
        cfg = BrokerConfig(commitlog_file_size_bytes=BENCH_COMMITLOG_FILE_BYTES)
        self.broker = Broker(root, cfg, self.sim, Streams(7), self.recorder)
        self.broker.start()
        self.broker.create_topic(BENCH_TOPIC, BENCH_QUEUES)
        body = b"x" * BODY_SIZE_BYTES
        now = self.sim.now()
        for i in range(messages):
            level = BENCH_LEVELS[i % len(BENCH_LEVELS)]
            props = {"TAGS": "bench", "KEYS": f"k{i}", "WAIT": "true", "DELAY": str(level),
                     "UNIQ_KEY": f"AC11000100002A9F0000{i:012X}"}
            resp = self.broker.send_message(SendRequest(
                BENCH_TOPIC, i % BENCH_QUEUES, body, props, born_ts=now, born_host="10.0.0.2:50000"))
            assert resp.ok, f"fill send {i} failed: {resp}"
        self.messages = messages
        self.due_by_ms = now + max(self.broker.levels_ms[lv - 1] for lv in BENCH_LEVELS) + DRAIN_MARGIN_MS

    def drain(self) -> int:
        """Run the clock until every message is due and delivered; the number of deliveries."""
        self.sim.run(until_ms=self.due_by_ms)
        delivered = self.recorder.counts.get("schedule_deliveries", 0)
        assert delivered == self.messages, f"delivered {delivered} of {self.messages}"
        return delivered

    def close(self) -> None:
        self.broker.shutdown()


def copy_floor(root: Path, messages: int, record_bytes: int) -> None:
    """The least a delivery can cost in CPython: read one record's bytes, append them elsewhere.

    No decoding, no property map, no consume-queue unit: one pread and one write per message.
    """
    src = root / "floor-src"
    src.write_bytes(b"r" * (record_bytes * messages))
    fd_in = os.open(src, os.O_RDONLY)
    fd_out = os.open(root / "floor-dst", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for i in range(messages):
            os.write(fd_out, os.pread(fd_in, record_bytes, i * record_bytes))
    finally:
        os.close(fd_in)
        os.close(fd_out)


def bare_delivery_floor(store_root: Path, levels: tuple[int, ...], file_size: int,
                        with_row: bool) -> int:
    """The barest delivery CPython can do, on the drained store's own files; returns the count.

    Less than any broker can do: the commit-log files are memory-mapped (no read call per
    record), the queue files read whole, and for every unit the record is sliced out, REAL_TOPIC
    and REAL_QID found by a byte search (no property map, no Java-int check), its header copied
    with the new total size, queue id, queue offset, physical offset and store time packed in
    place, and the record and its consume-queue unit appended to in-memory buffers. No due check,
    clock, put door, flush policy, file roll or validation, and CPython's cyclic garbage
    collector is off for the loop (it makes no cycles; the many rows would otherwise wake the
    collector every 700 allocations). ``with_row`` adds the least a
    ``schedule_deliveries`` row can be: one tuple of what it is made from (level, queue offset,
    both physical offsets, real topic, due and store time), the message id strings left to be
    derived from the physical offsets later.
    """
    commit_dir = store_root / COMMIT_LOG_DIR_NAME
    maps = {}
    for path in commit_dir.iterdir():
        with open(path, "rb") as f:
            maps[int(path.name) // file_size] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    int32 = struct.Struct(">i")
    head_front = struct.Struct(">iIiiiqq")  # total size .. physical offset (the record's first 36 B)
    int64 = struct.Struct(">q")
    body_at = RECORD_HEADERS[0].size  # IPv4 hosts, as this benchmark sends: the body starts at 88
    store_ts_at = BORN_HOST_POS + 8  # the store timestamp follows the 8-byte IPv4 born host
    out = bytearray()
    queue_units: dict[tuple[bytes, int], bytearray] = {}
    queue_offsets: dict[tuple[bytes, int], int] = {}
    topic_fields: dict[bytes, bytes] = {}
    rows = []
    phys_out = 0
    store_ts = SIM_START_MS
    count = 0
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for level in levels:
            cq_dir = consume_queue_dir(store_root, SCHEDULE_TOPIC, level - 1)
            for cq_file in sorted(cq_dir.iterdir()):
                queue_offset_in = 0
                for phys, size, due_ts in CQ_UNIT.iter_unpack(cq_file.read_bytes()):
                    if size <= 0:
                        break
                    pos = phys % file_size
                    data = maps[phys // file_size][pos:pos + size]
                    body_end = body_at + int32.unpack_from(data, body_at - 4)[0]
                    props_at = body_end + 3 + data[body_end]  # topic length byte, topic, props length
                    start = data.find(b"REAL_TOPIC\x01", props_at) + 11
                    stop = data.find(b"\x02", start)
                    topic = data[start:stop] if stop >= 0 else data[start:]
                    start = data.find(b"REAL_QID\x01", props_at) + 9
                    stop = data.find(b"\x02", start)
                    queue_id = int(data[start:stop] if stop >= 0 else data[start:])
                    key = (topic, queue_id)
                    queue_offset = queue_offsets.get(key, 0)
                    queue_offsets[key] = queue_offset + 1
                    topic_field = topic_fields.get(topic)
                    if topic_field is None:
                        topic_field = topic_fields[topic] = bytes((len(topic),)) + topic
                    total = body_end + len(topic_field) + 2 + size - props_at
                    store_ts += 1
                    head = bytearray(data[:body_at])
                    head_front.pack_into(head, 0, total, MESSAGE_MAGIC_CODE_V1, int32.unpack_from(data, 8)[0],
                                         queue_id, int32.unpack_from(data, 16)[0], queue_offset, phys_out)
                    int64.pack_into(head, store_ts_at, store_ts)
                    out += head
                    out += data[body_at:body_end]
                    out += topic_field
                    out += data[props_at - 2:]
                    unit_buf = queue_units.get(key)
                    if unit_buf is None:
                        unit_buf = queue_units[key] = bytearray()
                    unit_buf += CQ_UNIT.pack(phys_out, total, 0)
                    if with_row:
                        rows.append((level, queue_offset_in, phys, phys_out, topic, due_ts, store_ts))
                    queue_offset_in += 1
                    phys_out += total
                    count += 1
    finally:
        if gc_was_enabled:
            gc.enable()
        for mapped in maps.values():
            mapped.close()
    floor_dir = store_root.parent / f"floor-bare-{'row' if with_row else 'norow'}"
    floor_dir.mkdir()
    (floor_dir / "commitlog").write_bytes(out)
    for (topic, queue_id), unit_buf in queue_units.items():
        (floor_dir / f"cq-{topic.decode()}-{queue_id}").write_bytes(unit_buf)
    return count


def profile_drain(messages: int, top: int) -> str:
    """cProfile of one extra drain (not counted in the timings): the top functions by own time."""
    root = Path(tempfile.mkdtemp(prefix="bench-schedule-"))
    try:
        filled = FilledBroker(root / "broker", messages)
        prof = cProfile.Profile()
        prof.runcall(filled.drain)
        filled.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def measure(messages: int, runs: int, profile_top: int = 0) -> dict[str, tuple[Stats, Stats] | str]:
    """Wall and CPU seconds of the drain, the fill and the copy floor over ``runs`` fresh brokers."""
    samples: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("drain", "fill", "bare_row", "bare", "floor")}

    def timed(key: str, fn) -> object:
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        samples[key][1].append(time.process_time() - c0)
        samples[key][0].append(time.perf_counter() - w0)
        return out

    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="bench-schedule-"))
        try:
            filled = timed("fill", lambda r=root: FilledBroker(r / "broker", messages))
            timed("drain", filled.drain)
            filled.close()
            for key, with_row in (("bare_row", True), ("bare", False)):
                floored = timed(key, lambda r=root, w=with_row: bare_delivery_floor(
                    r / "broker", BENCH_LEVELS, BENCH_COMMITLOG_FILE_BYTES, w))
                assert floored == messages, f"the floor delivered {floored} of {messages}"
            timed("floor", lambda r=root: copy_floor(r, messages, FLOOR_RECORD_BYTES))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    profile_text = profile_drain(messages, profile_top) if profile_top else ""
    result: dict[str, tuple[Stats, Stats] | str] = {
        k: (Stats(w), Stats(c)) for k, (w, c) in samples.items()}
    result["profile"] = profile_text
    return result


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages and runs")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the top N functions (tottime) of the last drain")
    args = parser.parse_args(argv)
    messages = args.messages or (MESSAGES_QUICK if args.quick else MESSAGES_FULL)
    runs = args.runs or (RUNS_QUICK if args.quick else RUNS_FULL)
    m = measure(messages, runs, args.profile)
    profile_text = m.pop("profile")
    rows = []
    labels = {"drain": "drain (timed)", "fill": "fill: delayed sends (context)",
              "bare_row": "floor: barest CPython delivery + its delivery row (same run)",
              "bare": "floor: barest CPython delivery, no row (same run)",
              "floor": "floor: pread + write per record, no decoding (same run)"}
    for key, label in labels.items():
        wall, cpu = m[key]
        rows.append([label, f"{cpu.median:.3f}", f"{cpu.p90:.3f}", f"{cpu.max:.3f}",
                     f"{wall.median:.3f}", f"{messages / cpu.median:,.0f}",
                     f"{messages / wall.median:,.0f}",
                     f"{messages / cpu.median / TARGET_DELIVERIES_PER_S:.3f}"])
    us = {key: m[key][1].median / messages * 1e6 for key in labels}
    rate = {key: messages / m[key][1].median for key in labels}
    budget_us = 1e6 / TARGET_DELIVERIES_PER_S
    if rate["drain"] >= TARGET_DELIVERIES_PER_S:
        verdict = "met"
    elif rate["bare_row"] < TARGET_DELIVERIES_PER_S:
        verdict = (f"MISSED, out of reach in CPython: the barest delivery that also records itself "
                   f"costs {us['bare_row']:.2f} us, over the {budget_us:.2f} us a delivery may cost")
    else:
        verdict = (f"MISSED, and within CPython's reach: the barest delivery with its row costs "
                   f"{us['bare_row']:.2f} us, under the {budget_us:.2f} us budget; the gap is the model's")
    notes = (f"{messages:,} delayed messages ({BODY_SIZE_BYTES} B bodies, levels {list(BENCH_LEVELS)}, "
             f"{BENCH_QUEUES} queues), {runs} runs, each on a fresh broker and store in a temp dir; "
             f"{load_note()} when the table was written. Rates use CPU seconds of the benchmark "
             "process (single-threaded Python: its CPU time is what the code costs; wall time also "
             "counts other processes on this shared machine).\n\n"
             f"Target >= {TARGET_DELIVERIES_PER_S:,} deliveries/s, {budget_us:.2f} us of CPU a delivery: "
             f"{verdict}. The drain does {rate['drain']:,.0f}/s, {us['drain']:.1f} us a delivery.\n\n"
             "The floors run in the same runs on the drained store's own files and bound what one "
             "CPython process can do. The barest delivery memory-maps the commit log, reads each "
             "schedule queue file whole, and per unit slices the record out, finds REAL_TOPIC and "
             "REAL_QID by a byte search (no property map, no Java-int check), copies the header with "
             "the new size, queue id, queue offset, physical offset and store time packed in place, "
             "and appends the record and its queue unit to memory buffers: no due check, clock, put "
             "door, flush, file roll, validation or cyclic garbage collector; with its row it also "
             "builds the least a schedule_deliveries row can be (one tuple of its source fields: level, queue offset, "
             "both physical offsets, topic, due and store time; no message id strings). It costs "
             f"{us['bare_row']:.2f} us with the row ({rate['bare_row']:,.0f}/s) and {us['bare']:.2f} us "
             f"without ({rate['bare']:,.0f}/s). One pread + one write of a {FLOOR_RECORD_BYTES} B record, "
             f"no decoding, costs {us['floor']:.2f} us ({rate['floor']:,.0f}/s). The drain is "
             f"{us['drain'] / us['bare_row']:.1f}x the barest delivery with its row. No baseline is "
             "defined for P2; the fill (sending the same messages into SCHEDULE_TOPIC_XXXX) is shown "
             "for scale.")
    if profile_text:
        print(profile_text)
    name = common.result_name("schedule_drain", bool(args.quick or args.messages or args.runs or args.profile))
    return write_result(name, "P2 schedule drain (SCHEDULE_TOPIC_XXXX -> real topics)",
                        ["phase", "CPU median s", "CPU p90 s", "CPU max s", "wall median s",
                         "msgs/s (CPU median)", "msgs/s (wall median)", "CPU rate / target"],
                        rows, notes)


if __name__ == "__main__":
    main(sys.argv[1:])
