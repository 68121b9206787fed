"""Large RocketMQ stores for the import benchmark: simulated shards laid end to end in one commit log.

One simulated run of a benchmark scenario (``SHAPES``: ``bench/scenarios/retry-heavy.yaml`` by default) at
``SHARD_MESSAGES`` messages writes about 1M commit-log records in 2-4 CPU-minutes; simulating
10M records would take one core for the better part of an hour, more on a shared machine. So a
store of N records is ``round(N / records per shard)`` shards laid end to end as one broker's
commit log, of which at most ``--distinct`` (2 by default) are simulated (seeds ``seed,
seed+1``, in parallel worker processes) and the rest are copies of them:

* copy j starts where copy j-1's log ends (the next file boundary): its files are renamed and
  each record's PHYSICALOFFSET moved by the same amount, as is the offset in each
  ``ORIGIN_MESSAGE_ID`` property (the 16 hex digits at its end: the same length, and the body
  CRC does not cover the properties), so every offset message id still names the record it named;
* copy j of a shard that is laid down again (j >= distinct) has the producer-pid field of every
  UNIQ_KEY changed (``pid ^ (j // distinct)``), so its messages are messages of their own for the
  lineage, each retry chain intact (every hop of a message carries the same UNIQ_KEY);
* a copy's last file ends where its data ends, so a BLANK (END_OF_FILE) record is written after
  its last record, as a broker writes one when it rolls to a new file (but the last copy's: it
  is the store's active file, zeros after its data);
* config files and the checkpoint are the last copy's; consume queues are left out (their queue
  offsets restart with every copy, and the import only checks their physical offsets).

Store times of the copies overlap (every run starts at the same simulated instant) and queue
offsets restart with each copy: nothing in the import depends on either.

Everything is written beside its place and renamed in, and shards are kept until the store is
built, so an interrupted generation resumes. ``--clean`` deletes the shards once the store exists.

Run: ``python -m bench.big_store --records 10000000 [--data-dir var/bench] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from bench.common import DATA_ROOT_DEFAULT, bench_data_dir
from broker_core import codec
from broker_core.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
SHARD_MESSAGES = 500_000  # about 990k commit-log records and 1.2 GiB of simulator memory per shard
# The store shapes: scenario and commit-log records per message (measured on the scenario; plans
# the shard count). retry-heavy: about 520-byte records, half of them in the schedule and retry
# topics; mixed-traffic: about 560-byte records, a quarter of them there, two topics, some
# messages sent delayed.
SHAPES = {"retry-heavy": (SCENARIOS / "retry-heavy.yaml", 1.98),
          "mixed-traffic": (SCENARIOS / "mixed-traffic.yaml", 1.27)}
SHAPE_DEFAULT = "retry-heavy"
SCENARIO = SHAPES[SHAPE_DEFAULT][0]
STORE_FILE = "store.json"
_SIZE_MAGIC = struct.Struct(">iI")
_I64 = struct.Struct(">q")
_ORIGIN = b"ORIGIN_MESSAGE_ID\x01"
_MSG_ID_OFFSET_HEX_CHARS = 16
_MSG_ID_V4_HEX_CHARS = 32
_UNIQ = b"UNIQ_KEY\x01"
_UNIQ_PID_HEX_AT = 8  # an IPv4 UNIQ_KEY: 4 address bytes, then the producer's short pid
_UNIQ_PID_HEX_CHARS = 4
DISTINCT_SHARDS_DEFAULT = 2  # shards simulated; more copies of them make up a larger store
_CONFIG_DIR = "config"
_CHECKPOINT = "checkpoint"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def simulate_shard(out: str, messages: int, k: int, shape: str = SHAPE_DEFAULT) -> dict:
    """Simulate shard ``k`` (seed = the scenario's seed + k) into ``out``, keeping only its store."""
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario

    path = SHAPES[shape][0]
    scenario = load_scenario(path)
    scenario = scenario.with_messages(messages).with_seed(scenario.seed + k).with_name(Path(out).name)
    summary = simulate(path, out, scenario=scenario)
    shutil.rmtree(Path(out) / "parquet", ignore_errors=True)  # only the store is read
    return {"k": k, "records": summary.tables["commitlog"], "wall_seconds": round(summary.wall_seconds, 1),
            "cpu_seconds": round(summary.cpu_seconds, 1)}


def ensure_shards(data_dir: Path, count: int, messages: int, workers: int | None,
                  shape: str = SHAPE_DEFAULT) -> list[Path]:
    shards = [data_dir / "shards" / f"{shape}-m{messages}-s{k}" for k in range(count)]
    missing = [(k, p) for k, p in enumerate(shards) if not (p / "run.json").is_file()]
    if missing:
        workers = max(1, min(workers or os.cpu_count() or 1, len(missing)))
        say(f"simulating {len(missing)} shard(s) of {messages:,} messages, {workers} at a time")
        shards[0].parent.mkdir(parents=True, exist_ok=True)
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 max_tasks_per_child=1) as pool:
            futures = [pool.submit(simulate_shard, str(p), messages, k, shape) for k, p in missing]
            for future in as_completed(futures):
                facts = future.result()
                say(f"  shard {facts['k']}: {facts['records']:,} records in {facts['wall_seconds']} s "
                    f"({facts['cpu_seconds']} CPU-s)")
    return shards


def _rebase_file(src: Path, dst: Path, base: int, file_size: int, last: bool, copy: int) -> int:
    """Copy one commit-log file to ``dst``, its offsets moved by ``base``; return its records.

    In the shard's ``last`` file a BLANK is written after the last record. ``copy`` > 0 (the
    shard laid down again) changes the producer-pid field of every UNIQ_KEY (``pid ^ copy``), so
    each copy's messages are messages of their own, their retry chains intact.
    """
    shutil.copyfile(src, dst)
    records = 0
    magic = 0
    with open(dst, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as buf:
        pos = 0
        while pos + 8 <= file_size:
            total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            if magic not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2) or total <= 0:
                break
            phys, = _I64.unpack_from(buf, pos + codec.PHYS_OFFSET_POS)
            _I64.pack_into(buf, pos + codec.PHYS_OFFSET_POS, phys + base)
            at = buf.find(_ORIGIN, pos, pos + total)
            if at >= 0:
                value_at = at + len(_ORIGIN)
                value = bytes(buf[value_at:value_at + _MSG_ID_V4_HEX_CHARS])
                if len(value) == _MSG_ID_V4_HEX_CHARS and value.isalnum():
                    offset_at = value_at + _MSG_ID_V4_HEX_CHARS - _MSG_ID_OFFSET_HEX_CHARS
                    moved = int(value[-_MSG_ID_OFFSET_HEX_CHARS:], 16) + base
                    buf[offset_at:offset_at + _MSG_ID_OFFSET_HEX_CHARS] = f"{moved:016X}".encode()
            if copy:
                at = buf.find(_UNIQ, pos, pos + total)
                if at >= 0:
                    pid_at = at + len(_UNIQ) + _UNIQ_PID_HEX_AT
                    pid = int(bytes(buf[pid_at:pid_at + _UNIQ_PID_HEX_CHARS]), 16) ^ copy
                    buf[pid_at:pid_at + _UNIQ_PID_HEX_CHARS] = f"{pid:04X}".encode()
            records += 1
            pos += total
        if last and magic != BLANK_MAGIC_CODE and pos + 8 <= file_size:
            _SIZE_MAGIC.pack_into(buf, pos, file_size - pos, BLANK_MAGIC_CODE)
    return records


def ensure_store(data_dir: Path, records: int, *, messages: int = SHARD_MESSAGES,
                 workers: int | None = None, clean: bool = False,
                 distinct: int = DISTINCT_SHARDS_DEFAULT, shape: str = SHAPE_DEFAULT) -> Path:
    """A store of about ``records`` commit-log records (a whole number of shards) of ``shape``
    (``SHAPES``); built once.

    At most ``distinct`` shards are simulated; copy j of the layout is shard ``j % distinct``
    with its UNIQ_KEYs changed by ``j // distinct`` (see :func:`_rebase_file`).
    """
    data_dir = Path(data_dir)
    scenario, records_per_message = SHAPES[shape]
    count = max(1, round(records / (messages * records_per_message)))
    out = data_dir / (f"store-{records}" if shape == SHAPE_DEFAULT else f"store-{shape}-{records}")
    if not (out / STORE_FILE).is_file():
        shards = ensure_shards(data_dir, min(count, distinct), messages, workers, shape)
        layout = [(shards[j % len(shards)], j // len(shards)) for j in range(count)]
        tmp = out.with_name(out.name + ".building")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "commitlog").mkdir(parents=True)
        base = 0
        total = 0
        started = time.perf_counter()
        for j, (shard, copy) in enumerate(layout):
            files = sorted((shard / "store" / "commitlog").iterdir())
            file_size = files[0].stat().st_size
            for i, src in enumerate(files):
                dst = tmp / "commitlog" / f"{int(src.name) + base:020d}"
                # The newest copy's last file is the store's active file: zeros after its data.
                total += _rebase_file(src, dst, base, file_size,
                                      last=i == len(files) - 1 and j != len(layout) - 1, copy=copy)
            base += int(files[-1].name) + file_size
        last = layout[-1][0] / "store"
        shutil.copytree(last / _CONFIG_DIR, tmp / _CONFIG_DIR)
        shutil.copyfile(last / _CHECKPOINT, tmp / _CHECKPOINT)
        (tmp / STORE_FILE).write_text(json.dumps({
            "records": total, "shards": [str(s) for s in shards],
            "layout": [[str(s.name), c] for s, c in layout], "messages_per_shard": messages,
            "scenario": str(scenario), "shape": shape}, indent=2) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
        say(f"store {out.name}: {count} cop(ies) of {len(shards)} simulated shard(s), {total:,} records, "
            f"laid end to end in {time.perf_counter() - started:.0f} s")
    if clean:
        for shard in sorted((data_dir / "shards").glob(f"{shape}-m{messages}-s*")):
            shutil.rmtree(shard, ignore_errors=True)
    return out


def store_facts(store: Path) -> dict:
    return json.loads((Path(store) / STORE_FILE).read_text())


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, required=True, help="commit-log records wanted")
    parser.add_argument("--messages", type=int, default=SHARD_MESSAGES, help="messages per shard")
    parser.add_argument("--data-dir", type=Path, default=DATA_ROOT_DEFAULT)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--distinct", type=int, default=DISTINCT_SHARDS_DEFAULT, help="shards simulated")
    parser.add_argument("--clean", action="store_true", help="delete the shards once the store is built")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=SHAPE_DEFAULT, help="the store's shape")
    args = parser.parse_args(argv)
    out = ensure_store(bench_data_dir(args.data_dir, args.quick) / "import-scale", args.records,
                       messages=args.messages, workers=args.workers, clean=args.clean,
                       distinct=args.distinct, shape=args.shape)
    print(out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
