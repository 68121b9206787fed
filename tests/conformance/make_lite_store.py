"""Write the store of a real RocketMQ 5.5.1 broker (5.5.0 clients) that took Lite-topic messages
(5.5, RIP-83) and priority messages (5.4, RIP-80) from the remoting client.

    .venv/bin/python tests/conformance/make_lite_store.py OUT_DIR [VERSION]   # default 5.5.1

The broker runs with ``enableLmq=true`` and ``enableMultiDispatch=true`` (a Lite topic's messages
are dispatched to ``%LMQ%$<parent>$<lite>``). Steps: the parent topic LiteTopic
(``message.type=LITE``) and the group lite-group bound to it (``lite.bind.topic``, ``retryMaxTimes`` 2); 4 sends with
``__LITE_TOPIC=chat-1`` and 2 with ``chat-2``; the topic PrioTopic (``message.type=PRIORITY``) and 6
sends with priorities (2i + 1) % 3 (``Message.setPriority``); lite-group subscribes to both lite
topics and pops the parent topic 16 times (the 5.5.0 remoting client's Lite calls: it has no Lite
consumer class), acking chat-1's messages and never chat-2's; the broker stops (SIGTERM). The store
is copied without what ``LEFT_OUT`` names; ``manifest.json`` holds the clients' lines.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fixture_run import fixture_driver, write_manifest  # noqa: E402

from conformance import jars  # noqa: E402
from conformance.cluster import BrokerSpec, Cluster  # noqa: E402

VERSION = "5.5.1"
BROKER = "broker-a"
LITE_TOPIC, LITE_GROUP, PRIO_TOPIC = "LiteTopic", "lite-group", "PrioTopic"
LITES = (("chat-1", 4), ("chat-2", 2))
PRIO_SENDS = 6
NO_ACK = "chat-2"  # its messages are popped and never acked
POP_ROUNDS = 16  # each waits up to 2 s for messages; an unacked one is invisible for 5 s
DELAY_LEVELS = " ".join(["1s"] * 18)
COMMITLOG_FILE_BYTES = 64 * 1024
STORE_CONFIG = {"enableLmq": "true", "enableMultiDispatch": "true", "mappedFileSizeConsumeQueue": "6000"}
DRIVER = Path(__file__).with_name("LiteDriver.java")
# Not copied: the IndexFile directory and lock, the 37 MiB timer wheel and the (empty) RocksDB and
# compaction directories; the audit reads none of them.
LEFT_OUT = ("index", "lock", "timerwheel", "rocksdbstore", "compaction")
DRIVER_TIMEOUT_S = 120  # a limit on each of the driver's steps


def main(out: Path, version: str = VERSION) -> None:
    spec = BrokerSpec(BROKER, DELAY_LEVELS, COMMITLOG_FILE_BYTES, extra=dict(STORE_CONFIG))
    events: list[dict] = []
    with (fixture_driver(DRIVER, version, timeout_s=DRIVER_TIMEOUT_S) as (work, lib, run),
          Cluster(work / "cluster", lib, [spec], log=print) as cluster):
        addr = cluster.broker_addrs[BROKER]
        events += run("topic", cluster.namesrv_addr, addr, LITE_TOPIC, 2, "LITE", LITE_GROUP)
        for lite, count in LITES:
            events += run("lite", cluster.namesrv_addr, LITE_TOPIC, lite, count)
        events += run("topic", cluster.namesrv_addr, addr, PRIO_TOPIC, 3, "PRIORITY")
        events += run("prio", cluster.namesrv_addr, PRIO_TOPIC, PRIO_SENDS)
        events += run("pop", cluster.namesrv_addr, BROKER, addr, LITE_TOPIC, LITE_GROUP,
                      ",".join(lite for lite, _ in LITES), NO_ACK, POP_ROUNDS)
        cluster.stop_all()
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(cluster.procs[BROKER].store, out / BROKER, ignore=shutil.ignore_patterns(*LEFT_OUT))
    manifest = {"rocketmq": version, "clients": jars.PARTIAL_RELEASES.get(version, version),
                "storeConfig": {"mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES, **STORE_CONFIG,
                                "brokerName": BROKER},
                "events": events}
    write_manifest(out, manifest)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
