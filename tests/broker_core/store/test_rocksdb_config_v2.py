"""Metadata a 5.x broker with ``configManagerVersion=v2`` keeps in ``config/rdb/``, read from a real
5.3.3 broker's directory (tests/data/rocketmq-5.3.3-rocksdb-config/v2/rdb) and from entries in
the exact binary layout it wrote (docs/rocketmq-5x.md "configManagerVersion=v2")."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from testdata import data_path

rocksdict = pytest.importorskip("rocksdict")

REAL_RDB = data_path("rocketmq-5.3.3-rocksdb-config", "v2", "rdb")
# The real store's consumer offsets (topic@group -> queue -> offset) and its pull offset's key.
REAL_OFFSETS = {
    "PopTopic@pop-group": {0: 3, 1: 2},
    "%RETRY%pop-group@pop-group": {0: 0},
    "%RETRY%pop-group_PopTopic@pop-group": {0: 5},
    "rmq_sys_REVIVE_LOG_DefaultCluster@CID_RMQ_SYS_REVIVE_GROUP": {0: 4, 2: 2, 4: 0, 6: 1},
}
TOPIC_JSON = (b'{"attributes":{},"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
              b'"topicName":"PopTopic","topicSysFlag":0,"writeQueueNums":2}')


def _offset_key(table: int, group: str, topic: str, queue_id: int) -> bytes:
    g, t = group.encode(), topic.encode()
    return struct.pack(">BHBH", 1, table, 2, len(g)) + g + b"\x01" + struct.pack(">H", len(t)) + t + \
        b"\x01" + struct.pack(">i", queue_id)


def _named_key(table: int, name: str) -> bytes:
    return struct.pack(">BHBH", 1, table, 2, len(name.encode())) + name.encode()


def test_a_real_v2_store_gives_its_topics_groups_and_consumer_offsets_and_is_left_alone():
    """config/rdb/ of a real 5.3.3 broker: the topics and group its admin and revive service made,
    every consumer offset (big-endian longs keyed by group, topic and queue), no pull offset, and
    the directory byte for byte as before."""
    from broker_core.store.reader import tree_digest
    from broker_core.store.rocksdb_config_v2 import read_config_v2

    before = tree_digest(REAL_RDB)
    config = read_config_v2(REAL_RDB)
    assert tree_digest(REAL_RDB) == before and not (REAL_RDB / "rocksdict-config.json").exists()
    assert config.errors == {}
    assert sorted(config.topics) == ["%RETRY%pop-group_PopTopic", "PopTopic"]
    assert (config.topics["PopTopic"].read_queue_nums, config.topics["PopTopic"].perm) == (2, 6)
    assert sorted(config.groups) == ["pop-group"]
    group = config.groups["pop-group"]
    assert (group.consume_broadcast_enable, group.consume_from_min_enable, group.retry_max_times) == (False, False, 16)
    assert config.offsets == REAL_OFFSETS


def test_the_entries_as_the_broker_writes_them_decode_and_pull_offsets_and_data_versions_are_not_offsets():
    """Keys 01 <table> 02 ...: a topic (3), a group (4), consumer offsets (1) of one group on two
    topics; the pull offsets (2) and the data-version records (01 <table> 01 data_version) are not
    consumer offsets."""
    from broker_core.store.rocksdb_config_v2 import decode_config_v2

    version = struct.pack(">qqq", 0, 1795677164572, 14)
    entries = sorted([
        (struct.pack(">BHB", 1, 1, 1) + b"data_version", version),
        (_offset_key(1, "timer-group", "TimerTopic", 0), struct.pack(">q", 1)),
        (_offset_key(1, "timer-group", "TimerTopic", 2), struct.pack(">q", 2**40)),
        (_offset_key(1, "timer-group", "%RETRY%timer-group", 0), struct.pack(">q", 0)),
        (_offset_key(2, "timer-group", "TimerTopic", 3), struct.pack(">q", 7)),
        (struct.pack(">BHB", 1, 3, 1) + b"data_version", version),
        (_named_key(3, "PopTopic"), b"\x01" + TOPIC_JSON),
        (_named_key(4, "gr\u00fcppe"), b'\x01{"groupName":"gr\xc3\xbcppe","retryMaxTimes":3}'),
    ])
    config = decode_config_v2(entries, Path("config/rdb"))
    assert config.errors == {}
    assert config.offsets == {"TimerTopic@timer-group": {0: 1, 2: 2**40}, "%RETRY%timer-group@timer-group": {0: 0}}
    assert list(config.topics) == ["PopTopic"] and config.topics["PopTopic"].write_queue_nums == 2
    assert config.groups["gr\u00fcppe"].retry_max_times == 3


@pytest.mark.parametrize(("entry", "table", "says"), [
    ((_named_key(3, "PopTopic"), b"\x02" + TOPIC_JSON), "topics", "serialized as PROTOBUF"),
    ((_named_key(3, "PopTopic"), b"\x01" + TOPIC_JSON.replace(b"PopTopic", b"Other")), "topics", "topicName"),
    ((_named_key(3, "PopTopic") + b"x", b"\x01" + TOPIC_JSON), "topics", "after its name"),
    ((_named_key(4, "pop-group"), b"\x01[]"), "subscription groups", "pop-group"),
    ((_offset_key(1, "g", "T", 0), b"\x00\x01"), "consumer offsets", "2 bytes, not 8"),
    ((_offset_key(1, "g", "T", 0)[:-2], struct.pack(">q", 1)), "consumer offsets", "queue id"),
])
def test_an_entry_not_in_the_broker_format_leaves_its_table_unread_with_the_reason(entry, table, says):
    """An entry of a read table that is not in the form 5.3.3 writes makes that table unreadable,
    with a reason naming what is wrong; the other tables are read."""
    from broker_core.store.rocksdb_config_v2 import decode_config_v2

    good = [(_named_key(3, "TimerTopic"), b'\x01{"topicName":"TimerTopic"}'),
            (_named_key(4, "timer-group"), b'\x01{"groupName":"timer-group"}'),
            (_offset_key(1, "timer-group", "TimerTopic", 0), struct.pack(">q", 1))]
    config = decode_config_v2(sorted([*[e for e in good if e[0][:4] != entry[0][:4]], entry]), Path("config/rdb"))
    assert list(config.errors) == [table] and says in config.errors[table], config.errors
    read = {"topics": config.topics, "subscription groups": config.groups, "consumer offsets": config.offsets}
    assert read.pop(table) is None and all(v for v in read.values()), read


def test_a_key_of_no_known_table_is_named_and_the_known_tables_are_still_read():
    """A key of a table 5.3.3 does not write (a newer broker's) is reported, not dropped in
    silence, and does not stop the known tables from being read."""
    from broker_core.store.rocksdb_config_v2 import UNKNOWN_KEYS, decode_config_v2

    config = decode_config_v2([(_offset_key(1, "g", "T", 0), struct.pack(">q", 4)),
                               (struct.pack(">BHB", 1, 9, 2) + b"new", b"?")], Path("config/rdb"))
    assert config.offsets == {"T@g": {0: 4}} and list(config.errors) == [UNKNOWN_KEYS]
    assert "1 key(s)" in config.errors[UNKNOWN_KEYS]
