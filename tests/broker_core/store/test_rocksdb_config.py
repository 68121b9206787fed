"""Metadata a 5.x ``storeType=defaultRocksDB`` broker keeps in RocksDB: topics and groups read from
a real 5.3.3 broker's directories (tests/data/rocketmq-5.3.3-rocksdb-config), and consumer offsets
in ``config/consumerOffsets/`` built with rocksdict in the layout a real 5.3.3 broker wrote (docs/rocketmq-5x.md "Other layouts
and names: confirmed"): column families default, kvDataVersion and forbidden; in default the key
``topic@group`` and the value ``{"offsetTable":{"<queueId>":<offset>}}``."""

from __future__ import annotations

import os
import shutil

import pyarrow.parquet as pq
import pytest
from testdata import data_path

rocksdict = pytest.importorskip("rocksdict")

OFFSETS = {
    "TimerTopic@timer-group": {1: 1, 2: 1, 3: 1},
    "%RETRY%timer-group@timer-group": {0: 2},
    "OrderTopic@audit-broadcast@broadcast": {0: 15, 1: 15},
}
PERSIST_S = 1_700_000_000  # the newest file's mtime set below (s)


def _broker_offsets_db(directory, offsets):
    """A RocksDB directory as RocksDBConsumerOffsetManager writes it (fastjson BrowserCompatible:
    quoted queue ids), without rocksdict's own config file."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(str(directory), options=opts)
    db.create_column_family("kvDataVersion", opts)
    db.create_column_family("forbidden", opts)
    for key, queues in offsets.items():
        body = '{"offsetTable":{' + ",".join(f'"{q}":{o}' for q, o in queues.items()) + "}}"
        db[key.encode()] = body.encode()
    db.get_column_family("kvDataVersion")[b"kvDataVersionKey"] = b'{"counter":3,"stateVersion":0,"timestamp":1}'
    db.close()
    (directory / "rocksdict-config.json").unlink()
    for p in directory.iterdir():
        os.utime(p, (PERSIST_S - 60, PERSIST_S - 60))
    newest = sorted(directory.glob("*.log"))[-1]
    os.utime(newest, (PERSIST_S, PERSIST_S))


def test_rocksdb_offsets_are_read_like_the_json_ones_and_the_directory_is_left_alone(tmp_path):
    from broker_core.store.reader import tree_digest
    from broker_core.store.rocksdb_config import newest_mtime_ms, read_rocksdb_offsets

    directory = tmp_path / "consumerOffsets"
    _broker_offsets_db(directory, OFFSETS)
    before = tree_digest(directory)
    assert read_rocksdb_offsets(directory) == OFFSETS
    assert newest_mtime_ms(directory) == PERSIST_S * 1000
    assert tree_digest(directory) == before  # nothing written (rocksdict opens a copy)


def test_an_import_turns_rocksdb_offsets_into_restore_rows(tmp_path, store_fixtures):
    """A store with config/consumerOffsets/ and no consumerOffset.json: every (group, topic, queue)
    is a consumer_offsets row as from the JSON file (event RESTORE, ts the directory's newest file
    mtime; the broadcast suffix is not part of the group), and there is no offsets-not-read."""
    from broker_core.export.store_import import import_store

    store = tmp_path / "store"
    shutil.copytree(store_fixtures / "store-clean", store)
    assert not (store / "config" / "consumerOffset.json").exists()
    _broker_offsets_db(store / "config" / "consumerOffsets", OFFSETS)
    summary = import_store(store, tmp_path / "run", broker="broker-a")
    assert not [p for p in summary.problems if p.kind == "offsets-not-read"], summary.problems
    rows = pq.read_table(tmp_path / "run" / "parquet" / "consumer_offsets").to_pylist()
    got = sorted((r["group"], r["topic"], r["queue_id"], r["offset"], r["event"], r["broker"]) for r in rows)
    assert got == sorted([
        ("timer-group", "TimerTopic", 1, 1, "RESTORE", "broker-a"),
        ("timer-group", "TimerTopic", 2, 1, "RESTORE", "broker-a"),
        ("timer-group", "TimerTopic", 3, 1, "RESTORE", "broker-a"),
        ("timer-group", "%RETRY%timer-group", 0, 2, "RESTORE", "broker-a"),
        ("audit-broadcast", "OrderTopic", 0, 15, "RESTORE", "broker-a"),
        ("audit-broadcast", "OrderTopic", 1, 15, "RESTORE", "broker-a"),
    ])
    assert {round(r["ts"].timestamp() * 1000) for r in rows} == {PERSIST_S * 1000}


def test_a_value_not_in_the_broker_format_is_an_offsets_not_read_warning_with_the_reason(tmp_path, store_fixtures):
    from broker_core.store.reader import StoreReader

    store = tmp_path / "store"
    shutil.copytree(store_fixtures / "store-clean", store)
    directory = store / "config" / "consumerOffsets"
    _broker_offsets_db(directory, {})
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(str(directory), options=opts)
    db[b"TimerTopic@timer-group"] = b"[1,2]"
    db.close()
    reader = StoreReader(store)
    list(reader.entries())
    assert reader.consumer_offsets() == {}
    found = [p.reason for p in reader.problems if p.kind == "offsets-not-read"]
    assert len(found) == 1 and "TimerTopic@timer-group" in found[0] and "offsetTable" in found[0], found


REAL_V1 = data_path("rocketmq-5.3.3-rocksdb-config", "v1")
# What the real broker's config/topics/ held (tests/data/rocketmq-5.3.3-rocksdb-config/README.md).
REAL_V1_TOPICS = {"%RETRY%timer-group", "BenchmarkTest", "DefaultCluster", "DefaultCluster_REPLY_TOPIC",
                  "OFFSET_MOVED_EVENT", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                  "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "TBW102", "TimerTopic", "broker-a",
                  "rmq_sys_REVIVE_LOG_DefaultCluster", "rmq_sys_SYNC_BROKER_MEMBER_broker-a"}
REAL_V1_GROUPS = {"CID_ONS-HTTP-PROXY", "CID_ONSAPI_OWNER", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_PULL",
                  "CID_RMQ_SYS_TRANS", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "TOOLS_CONSUMER", "timer-group"}


def test_a_real_brokers_rocksdb_topics_and_groups_are_read_as_their_json_files_are(tmp_path):
    """config/topics/ and config/subscriptionGroups/ of a real 5.3.3 broker become the TopicConfig
    and SubscriptionGroupConfig beans topics.json and subscriptionGroup.json give (5.x fields kept
    as extra), and neither directory changes."""
    from broker_core.store.reader import tree_digest
    from broker_core.store.rocksdb_config import read_rocksdb_groups, read_rocksdb_topics

    before = tree_digest(REAL_V1)
    topics = read_rocksdb_topics(REAL_V1 / "topics")
    groups = read_rocksdb_groups(REAL_V1 / "subscriptionGroups")
    assert tree_digest(REAL_V1) == before and not list(REAL_V1.rglob("rocksdict-config.json"))
    assert set(topics) == REAL_V1_TOPICS and set(groups) == REAL_V1_GROUPS
    timer = topics["TimerTopic"]
    assert (timer.topic_name, timer.read_queue_nums, timer.write_queue_nums, timer.perm, timer.order,
            timer.attributes) == ("TimerTopic", 4, 4, 6, False, {})
    assert (topics["%RETRY%timer-group"].read_queue_nums, topics["SCHEDULE_TOPIC_XXXX"].read_queue_nums) == (1, 18)
    group = groups["timer-group"]
    assert (group.group_name, group.retry_max_times, group.retry_queue_nums, group.consume_broadcast_enable) == \
        ("timer-group", 16, 1, True)
    assert group.extra["groupRetryPolicy"] == {"type": "CUSTOMIZED"} and group.extra["consumeTimeoutMinute"] == 15


def test_a_topic_value_not_in_the_broker_format_names_the_topic(tmp_path):
    """A value that is not a TopicConfig bean, or whose topicName is not its key, is an error
    naming the key (the whole table is then not read)."""
    from broker_core.store.rocksdb_config import RocksDBConfigError, read_rocksdb_topics

    for i, value in enumerate((b"[1]", b'{"topicName":"Other"}', b"\xff")):
        directory = tmp_path / str(i)
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        db = rocksdict.Rdict(str(directory), options=opts)
        db[b"TimerTopic"] = value
        db.close()
        with pytest.raises(RocksDBConfigError, match="TimerTopic"):
            read_rocksdb_topics(directory)
