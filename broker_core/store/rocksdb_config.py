"""Metadata a 5.x ``storeType=defaultRocksDB`` broker keeps in RocksDB (configManagerVersion v1).

Such a broker writes no ``topics.json``, ``subscriptionGroup.json`` or ``consumerOffset.json``:
its ``RocksDBTopicConfigManager``, ``RocksDBSubscriptionGroupManager`` and
``RocksDBConsumerOffsetManager`` (5.3.3, ``broker/config/v1``) keep them in three RocksDB
directories (``ConfigRocksDBStorage``), ``config/topics/``, ``config/subscriptionGroups/`` and
``config/consumerOffsets/``. Read in the 5.3.3 source and confirmed on a real 5.3.3 store
(docs/rocketmq-5x.md "Other layouts and names: confirmed"):

* column families ``default``, ``kvDataVersion`` and ``forbidden``; the entries are in ``default``;
* topics: key the topic name (UTF-8), value the fastjson of ``TopicConfig`` with
  ``BrowserCompatible`` (``{"attributes":{},"order":false,"perm":6,"readQueueNums":4,...}``);
* groups: key the group name, value the fastjson of ``SubscriptionGroupConfig`` (5.x fields such
  as ``groupRetryPolicy`` and ``consumeTimeoutMinute`` beside 4.9.4's);
* offsets: key ``topic@group`` (``topic@group@broadcast`` for a broadcasting group, as in the
  JSON file), value ``{"offsetTable":{"1":1,"2":1,"3":1}}`` (queue id -> next offset to consume;
  the queue ids are quoted, and a number beyond 2^53 would be too).

A directory is copied before it is opened (read-only): RocksDB takes no lock in read-only mode,
but ``rocksdict`` writes its own ``rocksdict-config.json`` into any directory it opens, and a
broker may be writing the store. The copy is a snapshot; a WAL tail cut mid-write is dropped on
recovery as RocksDB's point-in-time recovery does. This is the one module of broker_core that
imports rocksdict (``rocksdb_config_v2`` decodes what it reads).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from broker_core.store.config_files import (
    TOPIC_GROUP_SEPARATOR,
    ConfigFileError,
    SubscriptionGroupConfig,
    TopicConfig,
    group_config_from_json,
    parse_config_json,
    topic_config_from_json,
)

DATA_COLUMN_FAMILY = "default"
# The directories under <root>/config (RocksDB{Topic,SubscriptionGroup,ConsumerOffset}Manager's
# rocksdbConfigFilePath).
TOPICS_DIR = "topics"
SUBSCRIPTION_GROUPS_DIR = "subscriptionGroups"
CONSUMER_OFFSETS_DIR = "consumerOffsets"
# A directory of more entries than this is refused (with the reason) rather than held in memory:
# a broker's topics, groups and (topic, group) pairs are at most tens of thousands. A v2 broker
# with LMQ (light message queue) traffic keeps an offset per LMQ queue there and can pass it.
ENTRIES_MAX = 1_000_000

T = TypeVar("T")


class RocksDBConfigError(Exception):
    """RocksDB metadata could not be read; the message says why."""


def newest_mtime_ms(directory: Path) -> int | None:
    """The newest modification time of a file in ``directory`` (ms), None if it holds none: the
    broker's last write there wrote a file (a WAL append, an SST on flush)."""
    times = [p.stat().st_mtime for p in Path(directory).iterdir() if p.is_file()]
    return int(max(times) * 1000) if times else None


def read_entries(directory: Path, column_family: str | None = None) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of one column family (``None``: ``default``) of the RocksDB database in
    ``directory``, in key order, read from a copy of it.

    Raises RocksDBConfigError (with the reason) when rocksdict is not installed or the directory
    cannot be copied or opened."""
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError as exc:
        raise RocksDBConfigError(f"the rocksdict package is not installed ({exc})") from exc
    with tempfile.TemporaryDirectory(prefix="rocksdb-config-") as scratch:
        copy = Path(scratch) / "db"
        try:
            shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("LOCK"))
        except OSError as exc:
            raise RocksDBConfigError(f"cannot copy {directory}: {exc}") from exc
        families = {column_family: Options(raw_mode=True)} if column_family else None
        try:
            db = Rdict(str(copy), options=Options(raw_mode=True), column_families=families,
                       access_type=AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain Exception for a RocksDB status
            reason = str(exc).replace(str(copy), str(directory))
            raise RocksDBConfigError(f"RocksDB cannot open it: {reason}") from exc
        try:
            try:
                table = db.get_column_family(column_family) if column_family else db
            except Exception as exc:  # a missing column family is a plain Exception too
                raise RocksDBConfigError(f"RocksDB cannot read {column_family}: {exc}") from exc
            entries = []
            for key, value in table.items():
                if len(entries) == ENTRIES_MAX:
                    raise RocksDBConfigError(f"more than {ENTRIES_MAX} entries")
                entries.append((bytes(key), bytes(value)))
            return entries
        finally:
            db.close()


def _utf8(key: bytes, what: str) -> str:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RocksDBConfigError(f"{what} {key!r} is not UTF-8") from exc


def decode_offset_table(name: str, value: bytes) -> dict[int, int]:
    """``{"offsetTable":{"<queueId>":<offset>}}`` -> {queueId: offset}."""
    try:
        table = json.loads(value)["offsetTable"]
        return {int(q): int(o) for q, o in table.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RocksDBConfigError(f"the value of {name!r} is not an offsetTable: {value[:200]!r}") from exc


def decode_offsets(entries: list[tuple[bytes, bytes]]) -> dict[str, dict[int, int]]:
    """``config/consumerOffsets/``'s entries: "topic@group" -> {queueId: next offset to consume}."""
    result = {}
    for key, value in entries:
        name = _utf8(key, "key")
        if TOPIC_GROUP_SEPARATOR not in name:
            raise RocksDBConfigError(f"key {name!r} is not 'topic@group'")
        result[name] = decode_offset_table(name, value)
    return result


def decode_bean(name: str, value: bytes, where: Path,
                decode: Callable[[str, object, Path], T], name_property: str) -> T:
    """One JSON bean value keyed by ``name``; its ``name_property`` (topicName, groupName) must
    be the key, as the broker keys its table by it."""
    try:
        text = value.decode("utf-8")
        doc = parse_config_json(text, where)
        bean = decode(name, doc, where)
    except UnicodeDecodeError as exc:
        raise RocksDBConfigError(f"the value of {name!r} is not UTF-8") from exc
    except ConfigFileError as exc:
        raise RocksDBConfigError(f"the value of {name!r} is not a {name_property} bean ({exc.message}): "
                                 f"{value[:200]!r}") from exc
    if isinstance(doc, dict) and doc.get(name_property, name) != name:
        raise RocksDBConfigError(f"the value of {name!r} has {name_property} {doc[name_property]!r}")
    return bean


def _decode_beans(entries: list[tuple[bytes, bytes]], where: Path, parse, name_property: str) -> dict:
    """Entries keyed by a bean's name (UTF-8), valued by its JSON: name -> bean."""
    return {name: decode_bean(name, value, where, parse, name_property)
            for name, value in ((_utf8(key, "key"), value) for key, value in entries)}


def decode_topics(entries: list[tuple[bytes, bytes]], where: Path) -> dict[str, TopicConfig]:
    """``config/topics/``'s entries: topic name -> TopicConfig."""
    return _decode_beans(entries, where, topic_config_from_json, "topicName")


def decode_groups(entries: list[tuple[bytes, bytes]], where: Path) -> dict[str, SubscriptionGroupConfig]:
    """``config/subscriptionGroups/``'s entries: group name -> SubscriptionGroupConfig."""
    return _decode_beans(entries, where, group_config_from_json, "groupName")


def read_rocksdb_offsets(directory: Path) -> dict[str, dict[int, int]]:
    """``config/consumerOffsets/``: "topic@group" -> {queueId: next offset to consume}.

    Raises RocksDBConfigError (with the reason) when rocksdict is not installed, the directory
    cannot be opened, or an entry is not in the broker's format."""
    return decode_offsets(read_entries(directory))


def read_rocksdb_topics(directory: Path) -> dict[str, TopicConfig]:
    """``config/topics/``: topic name -> TopicConfig (RocksDBConfigError as above)."""
    return decode_topics(read_entries(directory), directory)


def read_rocksdb_groups(directory: Path) -> dict[str, SubscriptionGroupConfig]:
    """``config/subscriptionGroups/``: group name -> SubscriptionGroupConfig (RocksDBConfigError
    as above)."""
    return decode_groups(read_entries(directory), directory)
