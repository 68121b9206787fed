"""A real RocketMQ 5.3.3 broker with the tiered store (POSIX backend) and a local commit log that
retention empties: what the tiered tests and tests/data/rocketmq-5.3.3-tiered share.

Steps (:func:`play_tiered`):

1. a name server and broker-a start with ``messageStorePlugIn=...TieredMessageStore``,
   ``tieredBackendServiceProvider=...PosixFileSegment``, ``tieredStoreFilePath=<work>/tier``, group
   commit off (the tier copies a queue's new records at each 20 s round of its dispatcher), 16 KiB
   commit-log files and ``fileReservedTime=0`` (every file but the newest is expired at once; nothing
   deletes it until asked, ``deleteWhen=99``);
2. ``TieredDriver.java`` sends :data:`PLAN` (keys tier-0, ...) to TieredTopic; tiered-group fails
   the "retry" messages' first delivery and every delivery of the "dlq" ones (to the DLQ after
   :data:`MAX_RECONSUME` retries); every message gets its calls;
3. the test waits until the tier holds every record of the tiered topics the local log holds;
4. ``mqadmin deleteExpiredCommitLog``: the broker deletes every commit-log file but the one it
   writes to (and the empty one it made ahead); the test waits until it has;
5. the broker stops (SIGTERM).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from java_driver import compile_driver, run_driver, run_mqadmin

VERSION = "5.3.3"
DRIVER = Path(__file__).resolve().with_name("TieredDriver.java")
TOPIC, GROUP, BROKER, CLUSTER = "TieredTopic", "tiered-group", "broker-a", "DefaultCluster"
MAX_RECONSUME = 2
# Kinds per message (TieredDriver): a third DLQ'd, a third retried once, a third consumed at once.
PLAN = tuple(("dlq", "retry", "ok")[i % 3] for i in range(36))
DELAY_LEVELS = " ".join(["1s"] * 18)
COMMITLOG_FILE_BYTES = 16 * 1024  # so the log rolls every 50 or so records
CQ_FILE_BYTES = 6000  # 300 units per consume-queue file
TIERED_STORE = "org.apache.rocketmq.tieredstore.TieredMessageStore"
POSIX_SEGMENT = "org.apache.rocketmq.tieredstore.provider.PosixFileSegment"
DRIVER_TIMEOUT_MS = 90_000  # a limit: a broker that never redelivers fails the run
DRIVER_TIMEOUT_S = 150
# The tier's dispatcher runs every 20 s; a queue's first round only sets where its copy starts,
# so a record is copied within about 40 s. A limit, not a wait.
TIER_SYNC_TIMEOUT_S = 120
# The broker's clean service runs every cleanResourceInterval (10 s); a manual delete lasts 20 runs.
RETENTION_TIMEOUT_S = 90
ADMIN_TIMEOUT_S = 60
POLL_S = 2.0


def tiered_broker_settings(tier: Path) -> dict[str, str]:
    """The broker settings of a run with a POSIX tier and a retention that keeps only the newest file."""
    return {"messageStorePlugIn": TIERED_STORE, "tieredBackendServiceProvider": POSIX_SEGMENT,
            "tieredStoreFilePath": str(tier), "tieredStoreGroupCommit": "false",
            "mappedFileSizeConsumeQueue": str(CQ_FILE_BYTES), "fileReservedTime": "0", "deleteWhen": "99",
            # A file a reader still maps is destroyed this long after the first try (default 120 s).
            "destroyMapedFileIntervalForcibly": "1000"}


@dataclass
class TieredRun:
    store: Path
    tier: Path
    events: list[dict]
    steps: list[dict]
    settings: dict[str, str]


def tier_holds_local_records(store: Path, tier: Path) -> tuple[int, int]:
    """(records of tiered topics in the local log, of them the tier holds), by (topic, queue, queue offset)."""
    from broker_core.store.reader import StoreReader
    from broker_core.store.tiered import TieredStore, tier_keeps_topic

    local = {(e.record.topic, e.record.queue_id, e.record.queue_offset)
             for e in StoreReader(store, live=True).records()
             if tier_keeps_topic(e.record.topic, CLUSTER, BROKER)}
    if not tier.is_dir() or not any(tier.iterdir()):
        return len(local), 0
    tiered = {(e.record.topic, e.record.queue_id, e.record.queue_offset)
              for e in TieredStore(tier, BROKER).entries()}
    return len(local), len(local & tiered)


def oldest_file_holds_the_last_record(store: Path) -> bool:
    """Whether retention left only the commit-log file the newest record is in (and empty ones after it)."""
    from broker_core.store.reader import StoreReader

    files = {e.file_name for e in StoreReader(store, live=True).records()}
    oldest = min(p.name for p in (store / "commitlog").iterdir())
    return files == {oldest}


def _wait(what: str, done, timeout_s: float, log) -> float:
    started = time.monotonic()
    while True:
        state = done()
        if state is True:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not done within {timeout_s:.0f} s ({state})")
        time.sleep(POLL_S)


def play_tiered(work: Path, *, log=print) -> TieredRun:
    """Play the steps of the module's docstring under ``work``; the store and tier stay there."""
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve

    lib = resolve(VERSION)
    classpath = compile_driver(DRIVER, str(lib / "*"), work / "classes")
    tier = work / "tier"
    settings = tiered_broker_settings(tier)
    spec = BrokerSpec(BROKER, DELAY_LEVELS, COMMITLOG_FILE_BYTES, extra=settings)
    steps: list[dict] = []
    with Cluster(work / "cluster", lib, [spec], cluster_name=CLUSTER, log=log) as cluster:
        store, addr = cluster.procs[BROKER].store, cluster.broker_addrs[BROKER]
        events = run_driver(classpath, "TieredDriver",
                            [cluster.namesrv_addr, addr, TOPIC, GROUP, ",".join(PLAN), DRIVER_TIMEOUT_MS,
                             MAX_RECONSUME], cwd=work, timeout_s=DRIVER_TIMEOUT_S)
        files = sorted(p.name for p in (store / "commitlog").iterdir())
        steps.append({"step": "played", "commitlog_files": files})

        def synced():
            local, held = tier_holds_local_records(store, tier)
            return True if local and held == local else f"the tier holds {held} of {local} records"

        steps.append({"step": "tier synced", "seconds": round(_wait("tier copy", synced, TIER_SYNC_TIMEOUT_S, log), 1)})
        out = run_mqadmin(lib, ["deleteExpiredCommitLog", "-n", cluster.namesrv_addr, "-b", addr],
                          timeout_s=ADMIN_TIMEOUT_S)
        steps.append({"step": "deleteExpiredCommitLog", "output": out.strip().splitlines()[-1]})

        def deleted():
            # The newest file with records is never deleted (nor the empty one the broker made ahead).
            return True if oldest_file_holds_the_last_record(store) else \
                f"{len(list((store / 'commitlog').iterdir()))} commit-log files left"

        seconds = _wait("retention", deleted, RETENTION_TIMEOUT_S, log)
        steps.append({"step": "retention", "seconds": round(seconds, 1),
                      "commitlog_files": sorted(p.name for p in (store / "commitlog").iterdir())})
        cluster.stop_all()
        steps.append({"step": "stopped"})
    return TieredRun(store, tier, events, steps, settings)
