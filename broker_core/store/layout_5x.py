"""What a RocketMQ 5.x store holds beyond the 4.9.4 layout, named so an import can say it saw it.

None of these is needed for the lineage: every message record, timer records and their rolls
included, is in the commit log (docs/rocketmq-5x.md). The importer names what it found in its
summary, so a reader knows what was left aside, and a RocksDB consume queue
(``storeType=defaultRocksDB``: ``consumequeue/`` holds RocksDB files instead of ``<topic>/<queueId>/``)
is reported rather than mistaken for an empty one. It reads only the RocksDB metadata, where the
JSON files are absent: the v1 directories ``config/topics/``, ``config/subscriptionGroups/`` and
``config/consumerOffsets/`` (``rocksdb_config``), or v2's ``config/rdb/`` (``rocksdb_config_v2``).
"""

from __future__ import annotations

from pathlib import Path

# (path under the store root, what it is), in the order a summary lists them.
ITEMS_5X = (
    ("timerwheel", "timer wheel (TimerWheel: one slot per timerPrecisionMs)"),
    ("timerlog", "timer log (TimerLog: 52-byte units pointing at rmq_sys_wheel_timer records)"),
    ("config/timercheck", "timer checkpoint"),
    ("config/timermetrics", "timer metrics (JSON)"),
    ("compaction", "compaction topics' logs (the records stay in the commit log too)"),
    ("batchconsumequeue", "batch consume queues (queue.type=BatchCQ)"),
    ("kvStore", "POP KV service's in-flight pops (RocksDB, column family popState; "
     "popConsumerKVServiceEnable=true): read into pop_evidence as unacked checkpoints (stage kv)"),
    ("config/rdb", "configuration v2 (RocksDB; configManagerVersion=v2, any storeType): topics, "
     "subscription groups and consumer offsets, read with rocksdict (a table that cannot be read is a "
     "config-not-read or offsets-not-read warning)"),
    ("config/topics", "topics (RocksDB; storeType=defaultRocksDB, no topics.json): read with rocksdict "
     "(config-not-read when it cannot be)"),
    ("config/subscriptionGroups", "subscription groups (RocksDB; storeType=defaultRocksDB, no "
     "subscriptionGroup.json): read with rocksdict (config-not-read when it cannot be)"),
    ("config/tieredStoreMetadata.json", "tiered store metadata (messageStorePlugIn=TieredMessageStore): the "
     "segments of the broker's tier; its records are read only with import-store --tiered <tieredStoreFilePath>"),
    ("config/consumerOffsets", "consumer offsets (RocksDB; storeType=defaultRocksDB, no consumerOffset.json): "
     "read with rocksdict into consumer_offsets; if they cannot be read (offsets-not-read), a message "
     "a push group consumed without a retry has no group and is UNCONSUMED in the lineage (a POP "
     "group is named by its checkpoints)"),
)
# A RocksDB directory always holds these (its current manifest pointer).
ROCKSDB_MARKER = "CURRENT"
CONSUME_QUEUE_DIR_NAME = "consumequeue"


def _describe(path: Path) -> str:
    if path.is_dir():
        files = sum(1 for p in path.rglob("*") if p.is_file())
        return f"{path.name}/ ({files} file{'s' if files != 1 else ''})"
    return f"{path.name} ({path.stat().st_size} bytes)"


def store_items_5x(root: Path | str) -> dict[str, str]:
    """The 5.x items present under a store root: path -> "<name> (<size>): <what it is>"."""
    root = Path(root)
    found = {}
    for relative, what in ITEMS_5X:
        path = root / relative
        if path.exists():
            found[relative] = f"{_describe(path)}: {what}"
    cq = root / CONSUME_QUEUE_DIR_NAME
    if (cq / ROCKSDB_MARKER).is_file():
        found[CONSUME_QUEUE_DIR_NAME] = (f"{_describe(cq)}: RocksDB consume queues (storeType=defaultRocksDB); "
                                         "not read, queue offsets come from the commit log")
    return found
