"""Write the store of a real RocketMQ 5.5.1 broker (5.5.0 clients) that took Lite-topic messages
(5.5, RIP-83) and priority messages (5.4, RIP-80) from the remoting client.

    .venv/bin/python tests/conformance/make_lite_store.py OUT_DIR

The broker runs with ``enableLmq=true`` and ``enableMultiDispatch=true`` (a Lite topic's messages
are dispatched to ``%LMQ%$<parent>$<lite>``). Steps: the parent topic LiteTopic
(``message.type=LITE``) and the group lite-group bound to it (``lite.bind.topic``); 4 sends with
``__LITE_TOPIC=chat-1`` and 2 with ``chat-2``; the topic PrioTopic (``message.type=PRIORITY``) and 6
sends with priorities 0, 1, 2 (``Message.setPriority``); the broker stops (SIGTERM). Nothing
consumes: the 5.5.0 remoting client has no Lite consumer (docs/rocketmq-5x.md, "Lite topics and
priority messages"). The store is copied without ``index/`` and ``lock``; ``manifest.json`` holds
the clients' lines.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from conformance import jars  # noqa: E402
from conformance.cluster import BrokerSpec, Cluster  # noqa: E402

VERSION = "5.5.1"
BROKER = "broker-a"
LITE_TOPIC, LITE_GROUP, PRIO_TOPIC = "LiteTopic", "lite-group", "PrioTopic"
LITES = (("chat-1", 4), ("chat-2", 2))
PRIO_SENDS = 6
DELAY_LEVELS = " ".join(["1s"] * 18)
COMMITLOG_FILE_BYTES = 64 * 1024
STORE_CONFIG = {"enableLmq": "true", "enableMultiDispatch": "true", "mappedFileSizeConsumeQueue": "6000"}
DRIVER = Path(__file__).with_name("LiteDriver.java")


def run(classpath: str, *args, timeout_s: float = 120) -> list[dict]:
    proc = subprocess.run(["java", "-Xmx128m", "-cp", classpath, "LiteDriver", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout_s)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        lines.append({"ev": "driver-failed", "args": list(map(str, args)), "stderr": proc.stderr[-3000:]})
    return lines


def main(out: Path) -> None:
    lib = jars.resolve(VERSION, log=print)
    work = Path(tempfile.mkdtemp(prefix="lite-store-"))
    classes = work / "classes"
    classes.mkdir()
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", str(lib / "*"), str(DRIVER)], check=True)
    classpath = f"{classes}:{lib / '*'}"
    spec = BrokerSpec(BROKER, DELAY_LEVELS, COMMITLOG_FILE_BYTES, extra=dict(STORE_CONFIG))
    events: list[dict] = []
    with Cluster(work / "cluster", lib, [spec], log=print) as cluster:
        addr = cluster.broker_addrs[BROKER]
        events += run(classpath, "topic", cluster.namesrv_addr, addr, LITE_TOPIC, 2, "LITE", LITE_GROUP)
        for lite, count in LITES:
            events += run(classpath, "lite", cluster.namesrv_addr, LITE_TOPIC, lite, count)
        events += run(classpath, "topic", cluster.namesrv_addr, addr, PRIO_TOPIC, 3, "PRIORITY")
        events += run(classpath, "prio", cluster.namesrv_addr, PRIO_TOPIC, PRIO_SENDS)
        cluster.stop_all()
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(cluster.procs[BROKER].store, out / BROKER, ignore=shutil.ignore_patterns("index", "lock"))
    manifest = {"rocketmq": VERSION, "clients": jars.PARTIAL_RELEASES.get(VERSION, VERSION),
                "storeConfig": {"mappedFileSizeCommitLog": COMMITLOG_FILE_BYTES, **STORE_CONFIG,
                                "brokerName": BROKER},
                "events": events}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
