"""A store's topics, groups and consumer offsets kept in RocksDB feed the import as its JSON files
do: read from config/rdb/ (v2) or the v1 directories when the JSON file is absent, the store left
alone, and what cannot be read is a store problem with the reason. The RocksDB directories are a
real 5.3.3 broker's (tests/data/rocketmq-5.3.3-rocksdb-config)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from testdata import data_path

pytest.importorskip("rocksdict")

REAL = data_path("rocketmq-5.3.3-rocksdb-config")
PERSIST_S = 1_700_000_000  # the rdb files' modification time set below (s)


def _store(tmp_path, store_fixtures, *dirs: tuple[str, str]) -> Path:
    """store-clean (no topics, groups or offsets files) with real RocksDB directories copied into
    its config/: (path under tests/data/rocketmq-5.3.3-rocksdb-config, name under config/)."""
    store = tmp_path / "store"
    shutil.copytree(store_fixtures / "store-clean", store)
    for source, name in dirs:
        shutil.copytree(REAL / source, store / "config" / name)
        for p in (store / "config" / name).iterdir():
            os.utime(p, (PERSIST_S, PERSIST_S))
    return store


def test_a_v2_store_feeds_offsets_topics_and_groups_to_the_import(tmp_path, store_fixtures):
    """config/rdb/'s consumer offsets become RESTORE rows (ts the directory's newest file), its
    groups and topics resolve a POP retry topic no checkpoint names (resolution config), the
    import reports no problem, and config/rdb/ is byte for byte as before."""
    from broker_core.export.pop_import import RESOLVED_BY_CONFIG, known_names, retry_topic_owners
    from broker_core.export.store_import import import_store
    from broker_core.store.reader import StoreReader, tree_digest

    store = _store(tmp_path, store_fixtures, ("v2/rdb", "rdb"))
    before = tree_digest(store / "config" / "rdb")
    summary = import_store(store, tmp_path / "run", broker="broker-a")
    assert summary.problems == [], summary.problems
    assert tree_digest(store / "config" / "rdb") == before
    rows = pq.read_table(tmp_path / "run" / "parquet" / "consumer_offsets").to_pylist()
    got = {(r["group"], r["topic"], r["queue_id"], r["offset"]) for r in rows if r["group"] == "pop-group"}
    assert got == {("pop-group", "PopTopic", 0, 3), ("pop-group", "PopTopic", 1, 2),
                   ("pop-group", "%RETRY%pop-group_PopTopic", 0, 5), ("pop-group", "%RETRY%pop-group", 0, 0)}
    assert {r["event"] for r in rows} == {"RESTORE"} and len(rows) == 8
    assert {round(r["ts"].timestamp() * 1000) for r in rows} == {PERSIST_S * 1000}

    reader = StoreReader(store)
    assert sorted(reader.topics()) == ["%RETRY%pop-group_PopTopic", "PopTopic"]
    assert sorted(reader.subscription_groups()) == ["pop-group"]
    groups, topics = known_names(reader)
    owners = retry_topic_owners(groups, topics, ["%RETRY%pop-group_PopTopic"], [])
    assert ("%RETRY%pop-group_PopTopic", "pop-group", "PopTopic", RESOLVED_BY_CONFIG) in owners, owners


def test_a_v1_rocksdb_store_gives_its_topics_and_groups_and_a_json_file_beside_them_wins(tmp_path, store_fixtures):
    """config/topics/ and config/subscriptionGroups/ are the store's topics and groups when
    topics.json and subscriptionGroup.json are absent; a JSON file present is read instead."""
    from broker_core.store.config_files import TopicConfig, save_topics
    from broker_core.store.reader import StoreReader

    store = _store(tmp_path, store_fixtures, ("v1/topics", "topics"), ("v1/subscriptionGroups", "subscriptionGroups"))
    reader = StoreReader(store)
    list(reader.entries())
    assert reader.problems == [] and "TimerTopic" in reader.topics() and "%RETRY%timer-group" in reader.topics()
    assert "timer-group" in reader.subscription_groups() and len(reader.subscription_groups()) == 9
    save_topics(store / "config", {"JsonTopic": TopicConfig("JsonTopic")})
    reader = StoreReader(store)
    assert list(reader.topics()) == ["JsonTopic"] and "timer-group" in reader.subscription_groups()


def test_v2_is_read_before_the_v1_directories(tmp_path, store_fixtures):
    """A store with config/rdb/ and v1 directories (a broker switched to v2) is read from
    config/rdb/, which a v2 broker uses alone."""
    from broker_core.store.reader import StoreReader

    store = _store(tmp_path, store_fixtures, ("v2/rdb", "rdb"), ("v1/topics", "topics"))
    assert sorted(StoreReader(store).topics()) == ["%RETRY%pop-group_PopTopic", "PopTopic"]


def test_a_config_rdb_that_cannot_be_read_is_a_warning_per_table_with_the_reason(tmp_path, store_fixtures):
    """config/rdb/ that RocksDB cannot open: offsets-not-read and config-not-read (topics, groups)
    warnings on config/rdb with the reason; the store's offsets, topics and groups are empty."""
    from broker_core.store.reader import StoreReader

    store = _store(tmp_path, store_fixtures)
    (store / "config" / "rdb").mkdir()
    (store / "config" / "rdb" / "CURRENT").write_text("MANIFEST-000404\n")
    reader = StoreReader(store)
    list(reader.entries())
    found = sorted((p.file, p.kind, p.severity) for p in reader.problems)
    assert found == [("config/rdb", "config-not-read", "warning"), ("config/rdb", "config-not-read", "warning"),
                     ("config/rdb", "offsets-not-read", "warning")], reader.problems
    assert all("could not be read (RocksDB cannot open it" in p.reason for p in reader.problems), reader.problems
    assert reader.consumer_offsets() == {} and reader.topics() == {} and reader.subscription_groups() == {}


def test_an_ambiguous_retry_topic_of_rocksdb_topics_is_warned_on_their_directory(tmp_path, store_fixtures):
    """retry-topic-ambiguous is checked on topics and groups read from RocksDB as on the JSON
    files, and names the directory they came from."""
    import rocksdict

    from broker_core.store.reader import StoreReader

    store = _store(tmp_path, store_fixtures)
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    for name, beans in (("topics", {"%RETRY%a_b": "topicName", "b": "topicName"}),
                        ("subscriptionGroups", {"a": "groupName", "a_b": "groupName"})):
        db = rocksdict.Rdict(str(store / "config" / name), options=opts)
        for key, prop in beans.items():
            db[key.encode()] = f'{{"{prop}":"{key}"}}'.encode()
        db.close()
    reader = StoreReader(store)
    list(reader.entries())
    assert [(p.file, p.kind) for p in reader.problems] == [("config/topics", "retry-topic-ambiguous")], \
        reader.problems
