"""Write tests/data/rocketmq-dledger-<release>: the stores of a three-node DLedger group of real
RocketMQ brokers (4.9.4, the default, or 5.3.3), with an uncommitted tail and a divergent one.

    .venv/bin/python tests/conformance/make_dledger_fixture.py [OUT_DIR] [--rocketmq 5.3.3]

Steps (each replica's store is copied at the end, without its index files: dledger-<id>/index/ is
160 MiB of mostly zeros, and the reader needs neither it nor the IndexFile; nor 5.x's timer wheel,
37 MiB of slots no DLedger reading needs. ``--keep-index`` copies dledger-<id>/index/ too, each file
cut after its last non-zero unit, rounded up to 1 KiB: what the index check reads):

1. three nodes start; the master gets FixtureTopic; a consumer fails every attempt of each key
   i % 4 == 0 (DLQ after 2 retries) and the first of each i % 5 == 0; 40 sends, all SEND_OK;
2. both followers are killed (SIGKILL); 3 sends to the master, without client retries: it appends
   each entry but no follower acknowledges it, so each send fails and its entry stays uncommitted;
   the master is stopped (SIGTERM: its checkpoint keeps a committedIndex below its endIndex). On
   5.3.3 the sends never reached it ("No route info of this topic": it had no master route by then),
   so its log has no uncommitted tail, and step 3 no divergent one;
3. the two followers start again and elect a master of a higher term; 10 sends, all SEND_OK: they
   take the indexes the old master's uncommitted entries hold there, a divergent tail;
4. everything stops (SIGTERM).

The manifest holds the clients' lines (every send's status, msgId and queue offset; every listener
call), each replica's checkpoint and currterm files, and the steps' order.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fixture_run import fixture_driver, write_manifest  # noqa: E402
from java_driver import QUICK_REBALANCE_FLAGS  # noqa: E402

from conformance.cluster import BrokerSpec, Cluster  # noqa: E402

# The dledger library each release's pom pins: what wrote the entries.
DLEDGER_OF_RELEASE = {"4.9.4": "0.2.6", "5.3.3": "0.3.1.2"}
TOPIC, GROUP = "FixtureTopic", "fixture-group"
DELAY_LEVELS = " ".join(["1s"] * 18)
DATA_FILE_BYTES = 32 * 1024  # mappedFileSizeCommitLog: DLedger's data files too, so the log rolls
CQ_FILE_BYTES = 6000  # 300 units per consume-queue file
# Not copied: index files (DLedger's and the IndexFile), the lock, 5.x's timer wheel and timer log.
NOT_COPIED = ("index", "lock", "timerwheel", "timerlog")
DRIVER = Path(__file__).with_name("DLedgerFixtureDriver.java")
DRIVER_TIMEOUT_S = 120  # a limit on each of the driver's steps
INDEX_UNIT = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE (0.2.6, 0.3.1.2)
INDEX_KEEP_ROUND = 1024  # --keep-index: each index file is cut after its last non-zero unit, rounded up to this


def used_bytes(path: Path, chunk: int = 1 << 20) -> int:
    """The end of the last non-zero byte of a (preallocated, mostly zero) file."""
    end, offset = 0, 0
    with path.open("rb") as f:
        while block := f.read(chunk):
            stripped = block.rstrip(b"\0")
            if stripped:
                end = offset + len(stripped)
            offset += len(block)
    return end


def copy_index(store: Path, dest: Path) -> dict[str, int]:
    """Copy dledger-<id>/index/ cut to its used units (rounded up); returns each file's kept size."""
    kept = {}
    for src in sorted(store.glob("dledger-*/index/*")):
        used = -(-used_bytes(src) // INDEX_KEEP_ROUND) * INDEX_KEEP_ROUND
        target = dest / src.relative_to(store)
        target.parent.mkdir(parents=True, exist_ok=True)
        with src.open("rb") as f:
            target.write_bytes(f.read(used))
        kept[src.name] = used
    return kept


def main(out: Path, version: str, keep_index: bool = False) -> None:
    spec = BrokerSpec("broker-a", DELAY_LEVELS, DATA_FILE_BYTES,
                      extra={"mappedFileSizeConsumeQueue": str(CQ_FILE_BYTES)}, dledger_nodes=3)
    steps: list[dict] = []
    events: list[dict] = []
    with (fixture_driver(DRIVER, version, timeout_s=DRIVER_TIMEOUT_S, flags=QUICK_REBALANCE_FLAGS) as (work, lib, run),
          Cluster(work / "cluster", lib, [spec], log=print) as cluster):
        master = cluster.leader("broker-a")
        steps.append({"step": "started", "master": master})
        events += run("topic", cluster.namesrv_addr, cluster.broker_addrs["broker-a"], TOPIC, 2)
        events += run("play", cluster.namesrv_addr, TOPIC, GROUP, "a", 40, 8000)
        followers = [n for n in spec.node_names() if n != master]
        for node in followers:
            cluster.kill(node)
        steps.append({"step": "followers killed", "nodes": followers})
        events += run("send", cluster.namesrv_addr, TOPIC, "b", 3)
        cluster.stop(master)
        steps.append({"step": "old master stopped", "node": master})
        for node in followers:
            cluster.start_broker(spec, node=node, wait=False)
        for node in followers:
            cluster._await_boot(node)
        new_master = cluster.wait_leader("broker-a")
        steps.append({"step": "followers restarted", "master": new_master})
        time.sleep(2)
        events += run("send", cluster.namesrv_addr, TOPIC, "c", 10)
        cluster.stop_all()
        steps.append({"step": "stopped"})
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        replicas = {}
        for node in spec.node_names():
            store = cluster.procs[node].store
            dest = out / node
            shutil.copytree(store, dest, ignore=shutil.ignore_patterns(*NOT_COPIED))
            base = next(dest.glob("dledger-*"))
            replicas[node] = {"dledger_dir": base.name,
                              "checkpoint": (base / "checkpoint").read_text(),
                              "currterm": (base / "currterm").read_text(),
                              "abort_file": (dest / "abort").exists(),
                              "data_files": sorted(p.name for p in (base / "data").iterdir())}
            if keep_index:
                replicas[node]["index_files_kept_bytes"] = copy_index(store, dest)
    manifest = {"rocketmq": version, "dledger": DLEDGER_OF_RELEASE[version],
                "storeConfig": {"mappedFileSizeCommitLog": DATA_FILE_BYTES,
                                "mappedFileSizeConsumeQueue": CQ_FILE_BYTES,
                                "messageDelayLevel": DELAY_LEVELS, "brokerName": "broker-a",
                                "dLegerGroup": "broker-a", "storeHost": "127.0.0.1 (the port is the run's)"},
                "topic": TOPIC, "group": GROUP, "steps": steps, "replicas": replicas, "events": events}
    write_manifest(out, manifest)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="default tests/data/rocketmq-dledger-<release>")
    parser.add_argument("--rocketmq", default="4.9.4", choices=sorted(DLEDGER_OF_RELEASE))
    parser.add_argument("--keep-index", action="store_true",
                        help="also copy dledger-<id>/index/, each file cut after its last non-zero unit")
    args = parser.parse_args()
    main(args.out or ROOT / "tests" / "data" / f"rocketmq-dledger-{args.rocketmq}", args.rocketmq,
         args.keep_index)
