"""Metadata a 5.x broker keeps with ``configManagerVersion=v2``: one RocksDB database, ``config/rdb/``.

With v2 (5.3.3, ``broker/config/v2``: ``ConfigStorage``, ``TopicConfigManagerV2``,
``SubscriptionGroupManagerV2``, ``ConsumerOffsetManagerV2``) the broker keeps its topics,
subscription groups and consumer offsets in the ``default`` column family of ``config/rdb/``,
whatever its storeType, and writes none of topics.json, subscriptionGroup.json,
consumerOffset.json or the v1 RocksDB directories. Every key starts with a table prefix
(``TablePrefix.TABLE`` = 1), a big-endian 2-byte table id (``TableId``) and a record prefix
(``RecordPrefix``): 1 for the table's data version, 2 for a data record. Read in the source and
confirmed on a real 5.3.3 store (docs/rocketmq-5x.md "configManagerVersion=v2"):

* data version: ``01 <table> 01 "data_version"`` -> state machine version, timestamp, counter
  (three big-endian 8-byte longs);
* topic (table 3) and subscription group (table 4): ``01 <table> 02 <2-byte length> <name>`` ->
  a serialization type byte (``SerializationType.JSON`` = 1) and the fastjson of the bean;
* consumer offset (table 1) and pull offset (table 2):
  ``01 <table> 02 <2-byte length> <group> 01 <2-byte length> <topic> 01 <4-byte queue id>`` ->
  the offset, a big-endian 8-byte long. Pull offsets are where a pull reached, not what a group
  committed, and are not read.

Every length and id is big-endian (Netty's ``ByteBuf``). An entry of a read table that is not in
this form makes the table unreadable (with the reason), never skipped in silence.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.store.config_files import (
    TOPIC_GROUP_SEPARATOR,
    SubscriptionGroupConfig,
    TopicConfig,
    group_config_from_json,
    topic_config_from_json,
)
from broker_core.store.rocksdb_config import RocksDBConfigError, decode_bean, read_entries

RDB_DIR = "rdb"  # under <root>/config (ConfigStorage)
TABLE_PREFIX = 1  # TablePrefix.TABLE
RECORD_DATA_VERSION = 1  # RecordPrefix.DATA_VERSION
RECORD_DATA = 2  # RecordPrefix.DATA
TABLE_CONSUMER_OFFSET = 1  # TableId
TABLE_PULL_OFFSET = 2
TABLE_TOPIC = 3
TABLE_SUBSCRIPTION_GROUP = 4
TABLE_NAMES = {TABLE_CONSUMER_OFFSET: "consumer offsets", TABLE_PULL_OFFSET: "pull offsets",
               TABLE_TOPIC: "topics", TABLE_SUBSCRIPTION_GROUP: "subscription groups"}
SERIALIZATION_JSON = 1  # SerializationType.JSON
SERIALIZATION_NAMES = {0: "UNSPECIFIED", 1: "JSON", 2: "PROTOBUF", 3: "FLAT_BUFFERS"}
UNKNOWN_KEYS = "other keys"  # ConfigV2.errors' entry for keys of no known table
CTRL_1 = 1  # AbstractRocksDBStorage.CTRL_1: ends the group and the topic of an offset key

_HEAD = struct.Struct(">BHB")  # table prefix, table id, record prefix
_LEN = struct.Struct(">H")
_QUEUE_ID = struct.Struct(">i")
_OFFSET = struct.Struct(">q")


@dataclass
class ConfigV2:
    """What ``config/rdb/`` holds, by table; a table that could not be decoded is None, the
    reason in ``errors`` (table name -> reason; ``UNKNOWN_KEYS`` for keys of no known table)."""

    topics: dict[str, TopicConfig] | None = field(default_factory=dict)
    groups: dict[str, SubscriptionGroupConfig] | None = field(default_factory=dict)
    offsets: dict[str, dict[int, int]] | None = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def _name(key: bytes, pos: int, what: str) -> tuple[str, int]:
    """A 2-byte length and that many UTF-8 bytes at ``pos``; (the name, the position after it)."""
    if pos + _LEN.size > len(key):
        raise RocksDBConfigError(f"key {key!r} ends before the length of its {what}")
    (length,) = _LEN.unpack_from(key, pos)
    pos += _LEN.size
    if pos + length > len(key):
        raise RocksDBConfigError(f"key {key!r}: its {what} of {length} bytes runs past the key")
    try:
        return key[pos:pos + length].decode("utf-8"), pos + length
    except UnicodeDecodeError as exc:
        raise RocksDBConfigError(f"key {key!r}: its {what} is not UTF-8") from exc


def decode_named_key(key: bytes) -> str:
    """A topic or group key, ``01 <table> 02 <length> <name>``: the name."""
    name, end = _name(key, _HEAD.size, "name")
    if end != len(key):
        raise RocksDBConfigError(f"key {key!r} has {len(key) - end} bytes after its name")
    return name


def decode_offset_key(key: bytes) -> tuple[str, str, int]:
    """An offset key: (topic, group, queue id)."""
    group, pos = _name(key, _HEAD.size, "group")
    if key[pos:pos + 1] != bytes([CTRL_1]):
        raise RocksDBConfigError(f"key {key!r}: no CTRL_1 after the group")
    topic, pos = _name(key, pos + 1, "topic")
    if key[pos:pos + 1] != bytes([CTRL_1]) or len(key) != pos + 1 + _QUEUE_ID.size:
        raise RocksDBConfigError(f"key {key!r}: not CTRL_1 and a 4-byte queue id after the topic")
    (queue_id,) = _QUEUE_ID.unpack_from(key, pos + 1)
    return topic, group, queue_id


def decode_json_value(name: str, value: bytes, where: Path, decode, name_property: str):
    """A bean value: the serialization type byte, then the bean (JSON is the only one 5.3.3 writes)."""
    if not value or value[0] != SERIALIZATION_JSON:
        kind = SERIALIZATION_NAMES.get(value[0], str(value[0])) if value else "nothing"
        raise RocksDBConfigError(f"the value of {name!r} is serialized as {kind}, not JSON")
    return decode_bean(name, value[1:], where, decode, name_property)


def _named_table(entries: list[tuple[bytes, bytes]], where: Path, decode, name_property: str) -> dict:
    table = {}
    for key, value in entries:
        name = decode_named_key(key)
        table[name] = decode_json_value(name, value, where, decode, name_property)
    return table


def decode_config_v2(entries: list[tuple[bytes, bytes]], where: Path) -> ConfigV2:
    """``config/rdb/``'s entries (in key order) as topics, groups and consumer offsets."""
    by_table: dict[int, list[tuple[bytes, bytes]]] = {}
    unknown: list[bytes] = []
    for key, value in entries:
        if len(key) < _HEAD.size:
            unknown.append(key)
            continue
        prefix, table, record = _HEAD.unpack_from(key)
        if prefix != TABLE_PREFIX or table not in TABLE_NAMES or record not in (RECORD_DATA, RECORD_DATA_VERSION):
            unknown.append(key)
        elif record == RECORD_DATA:
            by_table.setdefault(table, []).append((key, value))
    config = ConfigV2()
    if unknown:
        # A key no table of 5.3.3 writes (a newer broker's table?): the known tables are still
        # read, and the rest is named, not dropped in silence.
        config.errors[UNKNOWN_KEYS] = (f"{len(unknown)} key(s) of no table this reader knows were not read, "
                                       f"the first {unknown[0][:64]!r}")
    try:
        config.topics = _named_table(by_table.get(TABLE_TOPIC, []), where, topic_config_from_json, "topicName")
    except RocksDBConfigError as exc:
        config.topics, config.errors[TABLE_NAMES[TABLE_TOPIC]] = None, str(exc)
    try:
        config.groups = _named_table(by_table.get(TABLE_SUBSCRIPTION_GROUP, []), where, group_config_from_json,
                                     "groupName")
    except RocksDBConfigError as exc:
        config.groups, config.errors[TABLE_NAMES[TABLE_SUBSCRIPTION_GROUP]] = None, str(exc)
    try:
        offsets: dict[str, dict[int, int]] = {}
        for key, value in by_table.get(TABLE_CONSUMER_OFFSET, []):
            topic, group, queue_id = decode_offset_key(key)
            if len(value) != _OFFSET.size:
                raise RocksDBConfigError(f"the offset of {topic}@{group} queue {queue_id} is "
                                         f"{len(value)} bytes, not {_OFFSET.size}: {value[:32]!r}")
            offsets.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = _OFFSET.unpack(value)[0]
        config.offsets = offsets
    except RocksDBConfigError as exc:
        config.offsets, config.errors[TABLE_NAMES[TABLE_CONSUMER_OFFSET]] = None, str(exc)
    return config


def read_config_v2(directory: Path) -> ConfigV2:
    """``config/rdb/``: its topics, groups and consumer offsets. Raises RocksDBConfigError when
    the directory cannot be read at all (rocksdict missing, not a RocksDB database); a table
    that cannot be decoded is None in the result, with the reason."""
    return decode_config_v2(read_entries(directory), directory)
