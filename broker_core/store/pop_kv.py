"""The in-flight pops a 5.x broker's POP KV service keeps in RocksDB (``kvStore/``).

With ``popConsumerKVServiceInit=true`` and ``popConsumerKVServiceEnable=true`` the broker's
``PopConsumerService`` (5.3.3, ``broker/pop``) writes **no** checkpoint or ack record to the
commit log: each popped record is a row of the column family ``popState`` of the RocksDB
directory ``<store>/kvStore`` (``PopConsumerRocksdbStore``), deleted when the client acks it and
when the service revives it into the group's POP retry topic. The rows left when the broker stops
are the records popped and neither acked nor revived yet: what a checkpoint without an ack says
on a store without the KV service (confirmed on a real 5.3.3 store: docs/rocketmq-5x.md).

* key: visibility timeout (pop time + invisible time, 8 bytes big-endian), then
  ``group@topic@``, the queue id (4 bytes), ``@`` and the queue offset (8 bytes);
* value: fastjson of ``PopConsumerRecord``: ``popTime``, ``groupId``, ``topicId`` (the topic
  popped: a message topic or the group's POP retry topic), ``queueId``, ``retryFlag`` (0 a
  message topic, 1 a v1 and 2 a v2 retry topic), ``invisibleTime``, ``offset``,
  ``attemptTimes``, ``attemptId``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from broker_core.store.rocksdb_config import RocksDBConfigError, read_entries

POP_KV_DIR_NAME = "kvStore"  # PopConsumerService.ROCKSDB_DIRECTORY, under the store root
POP_STATE_COLUMN_FAMILY = "popState"  # PopConsumerRocksdbStore.COLUMN_FAMILY_NAME


class PopKVError(Exception):
    """The KV service's RocksDB could not be read; the message says why."""


@dataclass(frozen=True)
class PopKVRecord:
    """One popped record the KV service still held: not acked, not revived."""

    group: str
    topic: str
    queue_id: int
    offset: int
    pop_ts_ms: int
    invisible_ms: int


def _field(doc: dict, key: str, where: str) -> int | str:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PopKVError(f"{where}: field {key!r} is {value!r}")
    return value


def _decode(key: bytes, value: bytes) -> PopKVRecord:
    where = f"key {key[:80]!r}"
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PopKVError(f"{where}: the value is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise PopKVError(f"{where}: the value is {type(doc).__name__}, not a PopConsumerRecord")
    fields = {k: _field(doc, k, where) for k in ("groupId", "topicId", "queueId", "offset", "popTime",
                                                  "invisibleTime")}
    if not all(isinstance(fields[k], str) for k in ("groupId", "topicId")) or \
            not all(isinstance(fields[k], int) for k in ("queueId", "offset", "popTime", "invisibleTime")):
        raise PopKVError(f"{where}: the value is not a PopConsumerRecord: {value[:200]!r}")
    return PopKVRecord(fields["groupId"], fields["topicId"], fields["queueId"], fields["offset"],
                       fields["popTime"], fields["invisibleTime"])


def has_pop_kv_store(root: Path) -> bool:
    """Whether the store under ``root`` has the KV service's RocksDB directory."""
    return (Path(root) / POP_KV_DIR_NAME).is_dir()


def kv_store_bytes(root: Path) -> int:
    """The bytes :func:`read_pop_kv_records` reads: every file of ``kvStore/`` but RocksDB's lock."""
    return sum(p.stat().st_size for p in (Path(root) / POP_KV_DIR_NAME).rglob("*")
               if p.is_file() and p.name != "LOCK")


def read_pop_kv_records(root: Path) -> list[PopKVRecord]:
    """The in-flight pops of the store under ``root`` (``kvStore/``, column family ``popState``),
    sorted by (group, topic, queue, offset, pop time).

    Raises PopKVError (with the reason) when the directory cannot be read or a row is not in the
    broker's format."""
    try:
        rows = read_entries(Path(root) / POP_KV_DIR_NAME, POP_STATE_COLUMN_FAMILY)
    except RocksDBConfigError as exc:
        raise PopKVError(str(exc)) from exc
    records = [_decode(k, v) for k, v in rows]
    return sorted(records, key=lambda r: (r.group, r.topic, r.queue_id, r.offset, r.pop_ts_ms))
