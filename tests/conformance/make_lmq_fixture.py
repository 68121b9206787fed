"""Write tests/data/rocketmq-lmq-4.9.4: the store of a real RocketMQ 4.9.4 broker with
``enableLmq=true`` and ``enableMultiDispatch=true`` whose messages were dispatched into LMQ queues.

    .venv/bin/python tests/conformance/make_lmq_fixture.py [OUT_DIR]

Steps (the store is copied at the end without its IndexFile directory ``index/`` and ``lock``):

1. one broker starts; it gets the parent topic LmqTopic (2 queues); a push consumer group
   subscribes to it and fails the first attempt of each key i % 5 == 0 and every attempt of key 7
   (DLQ after 1 retry);
2. 24 sends, all SEND_OK: key i carries ``INNER_MULTI_DISPATCH=%LMQ%a,%LMQ%b`` when i % 3 == 0,
   ``%LMQ%a`` when i % 3 == 1, none otherwise;
3. once the group is idle, a pull consumer ``lmq-reader`` reads the whole of ``%LMQ%a`` queue 0
   and commits its offset; a pull consumer of the LMQ group ``%LMQ%reader`` reads the first 4
   messages of ``%LMQ%b`` and commits its offset (both land in ``config/lmqConsumerOffset.json``,
   the first in its ``offsetTable``, the second in its ``lmqOffsetTable``);
4. the broker stops (SIGTERM).

The manifest holds the clients' lines (every send with its dispatch, every listener call, every
message pulled from an LMQ queue with its LMQ offset, every committed offset) and the settings.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fixture_run import fixture_driver, write_manifest  # noqa: E402
from java_driver import QUICK_REBALANCE_FLAGS  # noqa: E402

from conformance.cluster import BrokerSpec, Cluster  # noqa: E402

VERSION = "4.9.4"
BROKER = "broker-a"
TOPIC, GROUP = "LmqTopic", "lmq-parent-group"
PULLS = (("lmq-reader", "%LMQ%a", 1000), ("%LMQ%reader", "%LMQ%b", 4))  # (group, LMQ, most messages)
SENDS = 24
IDLE_MS = 8000
DELAY_LEVELS = " ".join(["1s"] * 18)
COMMITLOG_FILE_BYTES = 32 * 1024  # the log rolls once or twice
CQ_FILE_BYTES = 6000  # 300 units per consume-queue file
STORE_CONFIG = {"enableLmq": "true", "enableMultiDispatch": "true", "mappedFileSizeConsumeQueue": str(CQ_FILE_BYTES)}
OUT_DEFAULT = ROOT / "tests" / "data" / "rocketmq-lmq-4.9.4"
DRIVER = Path(__file__).with_name("LmqFixtureDriver.java")
DRIVER_TIMEOUT_S = 180  # a limit on each of the driver's steps


def main(out: Path) -> None:
    spec = BrokerSpec(BROKER, DELAY_LEVELS, COMMITLOG_FILE_BYTES, extra=dict(STORE_CONFIG))
    events: list[dict] = []
    with (fixture_driver(DRIVER, VERSION, timeout_s=DRIVER_TIMEOUT_S, flags=QUICK_REBALANCE_FLAGS) as (work, lib, run),
          Cluster(work / "cluster", lib, [spec], log=print) as cluster):
        events += run("topic", cluster.namesrv_addr, cluster.broker_addrs[BROKER], TOPIC, 2)
        events += run("play", cluster.namesrv_addr, TOPIC, GROUP, SENDS, IDLE_MS)
        for group, lmq, most in PULLS:
            events += run("pull", cluster.namesrv_addr, TOPIC, BROKER, group, lmq, most)
        cluster.stop_all()
        store = cluster.procs[BROKER].store
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(store, out / BROKER, ignore=shutil.ignore_patterns("index", "lock"))
    manifest = {"rocketmq": VERSION,
                "storeConfig": {"mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES, **STORE_CONFIG,
                                "messageDelayLevel": DELAY_LEVELS, "brokerName": BROKER,
                                "storeHost": "127.0.0.1 (the port is the run's)"},
                "topic": TOPIC, "group": GROUP,
                "pulls": [{"group": g, "lmq": q, "max": m} for g, q, m in PULLS],
                "events": events}
    write_manifest(out, manifest)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DEFAULT)
