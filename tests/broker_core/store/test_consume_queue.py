"""ConsumeQueue: 20-byte units, the dispatch guards, pre-blank filling, truncation (ConsumeQueueTest)."""

from __future__ import annotations

import json

import pytest
from testdata import STORE_FIXTURES

from broker_core.errors import InvalidNameError
from broker_core.store.consume_queue import (
    CQ_UNIT,
    PRE_BLANK_UNIT_SIZE,
    ConsumeQueue,
    consume_queue_dir,
    list_consume_queues,
)

STORE_DIR = STORE_FIXTURES


def test_build_cq_repeatedly_is_skipped(tmp_path):
    """testPutMessagePositionInfo_buildCQRepeatedly: after 10 puts, putting unit 0 again returns True and changes nothing."""
    cq = ConsumeQueue(tmp_path, "T", 0, 100)
    for i in range(10):
        assert cq.put(100 * i, 100, 0, i)
    assert cq.put(0, 100, 0, 0) is True
    assert cq.max_offset == 10
    assert cq.units(0, 100) == [(100 * i, 100, 0) for i in range(10)]


def test_a_slot_already_written_is_not_written_again(tmp_path):
    """A unit for a queue offset below the write position is skipped even past max_physic_offset."""
    cq = ConsumeQueue(tmp_path, "T", 0, 100)
    cq.put(0, 10, 0, 0)
    cq.put(10, 10, 0, 1)
    assert cq.put(500, 10, 7, 1) is True
    assert cq.max_offset == 2 and cq.unit(1) == (10, 10, 0)


def test_fill_pre_blank_when_a_queue_starts_above_zero(tmp_path):
    """A queue whose first unit has offset 5 gets blank units (0, Integer.MAX_VALUE, 0) below it and min offset 5."""
    cq = ConsumeQueue(tmp_path, "T", 0, 4)
    cq.put(1000, 50, 9, 5)
    assert cq.min_offset == 5 and cq.max_offset == 6
    assert cq.units(0, 10) == [(1000, 50, 9)]
    cq.flush()
    data = (cq.directory / "00000000000000000080").read_bytes()
    assert CQ_UNIT.unpack_from(data, 0) == (0, PRE_BLANK_UNIT_SIZE, 0)
    assert CQ_UNIT.unpack_from(data, 20) == (1000, 50, 9)
    cq.close()
    again = ConsumeQueue(tmp_path, "T", 0, 4)
    again.load()
    again.recover()
    assert (again.min_offset, again.max_offset, again.max_physic_offset) == (5, 6, 1050)


def test_units_roll_over_to_files_named_by_logical_offset(tmp_path):
    """With 3 units per file, unit 3 starts file 00000000000000000060 and files are 60 bytes."""
    cq = ConsumeQueue(tmp_path, "T", 2, 3)
    for i in range(7):
        cq.put(10 * i, 10, i, i)
    cq.flush()
    names = sorted(p.name for p in cq.directory.iterdir())
    assert names == ["00000000000000000000", "00000000000000000060", "00000000000000000120"]
    assert all((cq.directory / n).stat().st_size == 60 for n in names)
    assert cq.units(2, 4) == [(20, 10, 2), (30, 10, 3), (40, 10, 4), (50, 10, 5)]


def test_truncate_dirty_logic_files_drops_units_at_or_past_the_offset(tmp_path):
    """truncateDirtyLogicFiles(150): units from phys 150 on go, files that start there are deleted."""
    cq = ConsumeQueue(tmp_path, "T", 0, 2)
    for i in range(6):
        cq.put(50 * i, 50, 0, i)
    cq.truncate_dirty(150)
    assert cq.max_offset == 3 and cq.max_physic_offset == 150
    assert sorted(p.name for p in cq.directory.iterdir()) == [
        "00000000000000000000", "00000000000000000040"]
    cq.put(150, 60, 0, 3)
    assert cq.unit(3) == (150, 60, 0)


def test_recover_stops_at_the_first_invalid_unit(tmp_path):
    """ConsumeQueue.recover keeps units while offset >= 0 and size > 0."""
    cq = ConsumeQueue(tmp_path, "T", 0, 10)
    for i in range(4):
        cq.put(30 * i, 30, 0, i)
    cq.flush()
    cq.close()
    path = cq.directory / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[2 * 20:3 * 20] = CQ_UNIT.pack(90, 0, 0)  # unit 2 has size 0
    path.write_bytes(bytes(data))
    again = ConsumeQueue(tmp_path, "T", 0, 10)
    again.load()
    again.recover()
    assert again.max_offset == 2 and again.max_physic_offset == 60


def test_fixture_queues_recover_with_the_manifest_units():
    """Every 4.9.4 consume queue file recovers to the manifest's unit count and units."""
    manifest = json.loads((STORE_DIR / "manifest.json").read_text())
    root = STORE_DIR / "store-clean"
    assert list_consume_queues(root) == sorted((q["topic"], q["queueId"]) for q in manifest["consumeQueues"])
    for entry in manifest["consumeQueues"]:
        data = (root / entry["file"]).read_bytes()
        units = [CQ_UNIT.unpack_from(data, 20 * i) for i in range(entry["units"])]
        assert units == [tuple(u) for u in entry["entries_physOffset_size_tagsCode"]]
        assert data[20 * entry["units"]:] == bytes(len(data) - 20 * entry["units"])


@pytest.mark.parametrize("topic", ["../x", "/abs", "a\x00b", "x" * 300, "a/../../b", "."])
def test_hostile_topics_never_become_paths(tmp_path, topic):
    """A topic that is not a valid RocketMQ name raises InvalidNameError before a directory is made."""
    with pytest.raises(InvalidNameError):
        ConsumeQueue(tmp_path / "root", topic, 0, 10)
    with pytest.raises(InvalidNameError):
        consume_queue_dir(tmp_path / "root", topic, 0)
    assert not (tmp_path / "root").exists()


def test_rebuild_from_the_commit_log_gives_back_the_fixture_queues(writable_store_copy):
    """Deleting every consume queue and rebuilding from the commit log reproduces the 4.9.4 CQ files."""
    from broker_core.store.message_store import MessageStore, StoreConfig

    manifest = json.loads((STORE_DIR / "manifest.json").read_text())
    root = writable_store_copy("store-clean")
    config = StoreConfig(commitlog_file_size_bytes=16384, cq_units_per_file=1000,
                         message_delay_level=manifest["storeConfig"]["messageDelayLevel"])
    store = MessageStore(root, config, lambda: 0)
    assert store.load()
    assert store.rebuild_consume_queues() == 112
    store.shutdown()
    for entry in manifest["consumeQueues"]:
        assert (root / entry["file"]).read_bytes() == (STORE_DIR / "store-clean" / entry["file"]).read_bytes()
    assert store.check() == []


def test_a_directory_that_is_not_a_topic_is_not_loaded(tmp_path):
    """consumequeue/<not a topic name>/ is skipped, not opened as a queue."""
    (tmp_path / "consumequeue" / "lost+found" / "0").mkdir(parents=True)
    (tmp_path / "consumequeue" / "Good" / "0").mkdir(parents=True)
    skipped = []
    assert list_consume_queues(tmp_path, skipped) == [("Good", 0)]
    assert skipped == ["lost+found"]


def test_empty_trailing_files_after_a_crash_end_the_queue_and_keep_the_guard(tmp_path):
    """Files created but never flushed before kill -9 hold no units: the queue ends before them and re-dispatch skips old units."""
    cq = ConsumeQueue(tmp_path, "T", 0, 2)
    for i in range(3):
        cq.put(100 * i, 100, 0, i)
    cq.flush()
    for i in range(3, 9):
        cq.put(100 * i, 100, 0, i)  # units 3-8 fill files 40..160, never flushed
    cq.crash()
    cq.close()
    again = ConsumeQueue(tmp_path, "T", 0, 2)
    again.load()
    assert len(again.files.files) == 5
    again.recover()
    assert (again.max_offset, again.max_physic_offset) == (3, 300)
    assert again.put(0, 100, 0, 0) is True and again.max_offset == 3  # an old record: skipped
    again.truncate_dirty(10_000)
    assert again.max_offset == 3 and again.max_physic_offset == 300
    again.put(300, 100, 0, 3)
    assert again.unit(3) == (300, 100, 0)
