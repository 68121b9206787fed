"""The 5.x store items an import names, on a store laid out as a real 5.3.3 broker with
``storeType=defaultRocksDB`` left it (docs/rocketmq-5x.md "Other layouts and names: confirmed"):
``consumequeue/`` and the config items are RocksDB directories, and no JSON offsets exist."""

from __future__ import annotations

from broker_core.store.layout_5x import store_items_5x

ROCKSDB_FILES = ("000004.log", "000010.sst", "000011.sst", "CURRENT", "IDENTITY", "LOCK", "MANIFEST-000005",
                 "OPTIONS-000007", "OPTIONS-000009")


def _rocksdb(directory):
    directory.mkdir(parents=True)
    for name in ROCKSDB_FILES:
        (directory / name).write_bytes(b"x")


def test_a_rocksdb_store_names_its_consume_queues_and_config_and_says_what_the_offsets_cost(tmp_path):
    """consumequeue/ (9 files) is named as RocksDB consume queues; config/topics,
    subscriptionGroups and consumerOffsets as RocksDB; the offsets' entry says a push group's
    never-retried messages lose their group; a file consume queue is not named."""
    _rocksdb(tmp_path / "consumequeue")
    for name in ("topics", "subscriptionGroups", "consumerOffsets"):
        _rocksdb(tmp_path / "config" / name)
    (tmp_path / "commitlog").mkdir()
    items = store_items_5x(tmp_path)
    assert set(items) == {"consumequeue", "config/topics", "config/subscriptionGroups", "config/consumerOffsets"}
    assert items["consumequeue"].startswith("consumequeue/ (9 files): RocksDB consume queues")
    assert "UNCONSUMED" in items["config/consumerOffsets"] and "push group" in items["config/consumerOffsets"]

    files = tmp_path / "files"
    (files / "consumequeue" / "PopTopic" / "0").mkdir(parents=True)
    (files / "consumequeue" / "PopTopic" / "0" / "00000000000000000000").write_bytes(b"\0" * 20)
    assert store_items_5x(files) == {}


def test_offsets_kept_in_rocksdb_are_a_warning_of_the_import(tmp_path, store_fixtures):
    """A store whose consumer offsets are a RocksDB directory (no consumerOffset.json) that RocksDB
    cannot open warns that they are not read, naming the directory and the reason; with the JSON
    file beside it there is no warning."""
    import shutil

    from broker_core.store.reader import StoreReader

    store = tmp_path / "store"
    shutil.copytree(store_fixtures / "store-clean", store)
    assert not (store / "config" / "consumerOffset.json").exists()  # the fixture broker had no consumer
    _rocksdb(store / "config" / "consumerOffsets")
    reader = StoreReader(store)
    list(reader.entries())
    found = [(p.file, p.kind, p.severity) for p in reader.problems if p.kind == "offsets-not-read"]
    assert found == [("config/consumerOffsets", "offsets-not-read", "warning")]
    reason = next(p.reason for p in reader.problems if p.kind == "offsets-not-read")
    assert "could not be read (" in reason and ("RocksDB cannot open it" in reason or "rocksdict" in reason), reason
    (store / "config" / "consumerOffset.json").write_text('{"offsetTable":{}}')
    reader = StoreReader(store)
    list(reader.entries())
    assert not [p for p in reader.problems if p.kind == "offsets-not-read"]
