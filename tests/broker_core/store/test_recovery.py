"""Recovery at load: normal and abnormal, torn tails, crashes (DefaultMessageStoreTest.testRecover)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from testdata import STORE_FIXTURES

from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig
from broker_core.store.recovery import RECOVERY_ABNORMAL, RECOVERY_NORMAL

STORE_DIR = STORE_FIXTURES
MANIFEST = json.loads((STORE_DIR / "manifest.json").read_text())
FIXTURE_CONFIG = dict(commitlog_file_size_bytes=16384, cq_units_per_file=1000,
                      message_delay_level=MANIFEST["storeConfig"]["messageDelayLevel"],
                      store_host=MANIFEST["storeConfig"]["storeHost"])


class Clock:
    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        self.now += 1
        return self.now


def new_store(root: Path, clock=None, **config) -> MessageStore:
    values = dict(commitlog_file_size_bytes=8192, cq_units_per_file=50)
    values.update(config)
    store = MessageStore(root, StoreConfig(**values), clock or Clock())
    assert store.load(), store.load_error
    return store


def put_many(store: MessageStore, n: int, topic: str = "RecoverTopic", start: int = 0) -> list:
    return [store.put_message(MessageInner(topic, i % 4, f"message-body-{start + i}".encode(),
                                           {"TAGS": "TagA", "KEYS": f"k{start + i}"}))
            for i in range(n)]


def queue_total(store: MessageStore, topic: str = "RecoverTopic") -> int:
    return sum(store.max_offset(topic, q) for q in store.queue_ids(topic))


def test_recover_after_a_clean_restart(tmp_path):
    """testRecover: 100 messages, shutdown, restart: the same max physical offset and queue maxima."""
    clock = Clock()
    store = new_store(tmp_path / "s", clock)
    store.start()
    put_many(store, 100)
    max_phys = store.max_phys_offset
    maxima = {q: store.max_offset("RecoverTopic", q) for q in range(4)}
    store.shutdown()
    again = new_store(tmp_path / "s", clock)
    assert again.recovery_report.mode == RECOVERY_NORMAL
    assert again.max_phys_offset == max_phys
    assert {q: again.max_offset("RecoverTopic", q) for q in range(4)} == maxima
    again.start()
    assert again.put_message(MessageInner("RecoverTopic", 0, b"next", {})).queue_offset == maxima[0]
    assert again.check() == []
    again.shutdown()


def _damage_last_message(store_root: Path, store: MessageStore, last) -> None:
    """Overwrite 16 bytes with zeros at the last message's topic-length position."""
    body_len = len(store.look_message_by_offset(last.phys_offset).body)
    store.shutdown()
    file_start = last.phys_offset - last.phys_offset % 8192
    path = store_root / "commitlog" / str(file_start).zfill(20)
    data = bytearray(path.read_bytes())
    pos = last.phys_offset - file_start + 84 + 4 + body_len
    data[pos:pos + 16] = bytes(16)
    path.write_bytes(bytes(data))


def test_recover_normally_truncates_a_damaged_last_message(tmp_path):
    """testRecover: 101 messages with the last one's topic length zeroed: normal restart ends before it."""
    root = tmp_path / "s"
    store = new_store(root)
    store.start()
    results = put_many(store, 101)
    _damage_last_message(root, store, results[-1])
    again = new_store(root)
    assert again.recovery_report.mode == RECOVERY_NORMAL
    assert again.max_phys_offset == results[-1].phys_offset
    assert queue_total(again) == 100
    assert again.check() == []


def test_recover_abnormally_truncates_a_damaged_last_message(tmp_path):
    """testRecover with the abort file present: abnormal recovery truncates at the same place."""
    root = tmp_path / "s"
    store = new_store(root)
    store.start()
    results = put_many(store, 101)
    _damage_last_message(root, store, results[-1])
    (root / "abort").touch()
    again = new_store(root)
    assert again.recovery_report.mode == RECOVERY_ABNORMAL
    assert again.max_phys_offset == results[-1].phys_offset
    assert queue_total(again) == 100
    assert again.check() == []


def test_crashed_fixture_recovers_like_rocketmq(writable_store_copy):
    """store-crashed: abnormal recovery stops at 54903, %DLQ%GroupA max offset 7, every other queue unchanged."""
    store = MessageStore(writable_store_copy("store-crashed"), StoreConfig(**FIXTURE_CONFIG), Clock())
    assert store.load()
    report = store.recovery_report
    assert report.mode == RECOVERY_ABNORMAL
    assert report.process_offset == store.max_phys_offset == 54903
    assert report.stop_error is not None
    for queue in MANIFEST["consumeQueues"]:
        expected = queue["units"] - (1 if queue["topic"] == "%DLQ%GroupA" else 0)
        assert store.max_offset(queue["topic"], queue["queueId"]) == expected, queue["topic"]
    assert store.max_offset("%DLQ%GroupA", 0) == 7
    assert store.check() == []


@pytest.mark.parametrize("name", ["store-clean", "store-crashed"])
def test_a_log_cut_by_retention_loads_from_its_first_file(retained_store_copy, name):
    """Without its two oldest files the fixture loads from offset 32768 (normally, or abnormally after
    the crash): each queue's min offset is its first unit at or after it (correctMinOffset), max
    offsets are what recovery keeps, and check() finds nothing."""
    store = MessageStore(retained_store_copy(name, 2), StoreConfig(**FIXTURE_CONFIG), Clock())
    assert store.load(), store.load_error
    crashed = name == "store-crashed"
    assert store.recovery_report.mode == (RECOVERY_ABNORMAL if crashed else RECOVERY_NORMAL)
    assert store.min_phys_offset == store.recovery_report.scan_start_offset == 32768
    assert store.max_phys_offset == (54903 if crashed else MANIFEST["commitLogMaxPhysicalOffset"])
    for queue in MANIFEST["consumeQueues"]:
        units = [u for u in queue["entries_physOffset_size_tagsCode"] if not (crashed and u[0] >= 54903)]
        first_kept = next((i for i, (phys, _size, _tags) in enumerate(units) if phys >= 32768), len(units))
        assert (store.min_offset(queue["topic"], queue["queueId"]),
                store.max_offset(queue["topic"], queue["queueId"])) == (first_kept, len(units)), queue["topic"]
    assert store.min_offset("OrderTopic", 0) > 0 and store.min_offset("%DLQ%GroupA", 0) == 0
    assert store.check() == []


def test_a_unit_into_the_kept_log_that_names_no_record_is_still_found(retained_store_copy):
    """After retention, a consume-queue unit above the first offset that names no record is reported."""
    root = retained_store_copy("store-clean", 1)
    first_dlq = MANIFEST["consumeQueues"][0]["entries_physOffset_size_tagsCode"][0]
    with open(root / "consumequeue" / "%DLQ%GroupA" / "0" / "00000000000000000000", "r+b") as fh:
        fh.write(struct.pack(">qiq", first_dlq[0] + 4, first_dlq[1], first_dlq[2]))
    store = MessageStore(root, StoreConfig(**FIXTURE_CONFIG), Clock())
    assert store.load(), store.load_error
    found = [(p.file, p.offset, p.kind) for p in store.check()]
    assert found == [("consumequeue/%DLQ%GroupA/0", 0, "cq_unit_dangling")]


def test_a_tail_torn_at_every_byte_recovers_to_the_valid_prefix(writable_store_copy):
    """Zeroing the last record from any byte on (normal or abnormal restart) leaves exactly the records before it."""
    root = writable_store_copy("store-clean")
    last = [r for r in MANIFEST["commitLog"] if r["kind"] == "MESSAGE"][-1]
    log_path = root / last["file"]
    cq_path = root / "consumequeue" / last["topic"] / str(last["queueId"]) / "00000000000000000000"
    log_bytes, cq_bytes = log_path.read_bytes(), cq_path.read_bytes()
    start = last["filePos"]
    config = StoreConfig(**FIXTURE_CONFIG)
    for cut in range(last["size"]):
        damaged = bytearray(log_bytes)
        damaged[start + cut:start + last["size"]] = bytes(last["size"] - cut)
        log_path.write_bytes(bytes(damaged))
        cq_path.write_bytes(cq_bytes)
        abnormal = cut % 2 == 0
        if abnormal:
            (root / "abort").touch()
        store = MessageStore(root, config, Clock())
        assert store.load()
        assert store.max_phys_offset == last["physicalOffset"], cut
        assert store.max_offset(last["topic"], last["queueId"]) == last["queueOffset"], cut
        assert store.recovery_report.mode == (RECOVERY_ABNORMAL if abnormal else RECOVERY_NORMAL)
        store.crash()  # close without touching the files
        (root / "abort").unlink(missing_ok=True)


def test_crash_loses_only_the_unflushed_tail_with_async_flush(tmp_path):
    """async flush: records flushed before kill -9 survive, later ones are gone, and queues agree."""
    clock = Clock()
    root = tmp_path / "s"
    store = new_store(root, clock, flush="async", commitlog_file_size_bytes=65536)
    store.start()
    put_many(store, 60)
    store.flush()
    kept = store.max_phys_offset
    put_many(store, 40, start=60)
    store.crash()
    assert (root / "abort").exists()
    again = new_store(root, clock, commitlog_file_size_bytes=65536)
    assert again.recovery_report.mode == RECOVERY_ABNORMAL
    assert again.max_phys_offset == kept
    assert queue_total(again) == 60
    assert again.check() == []
    again.start()
    nxt = again.put_message(MessageInner("RecoverTopic", 0, b"after", {}))
    assert nxt.phys_offset == kept and nxt.queue_offset == 15
    again.shutdown()


def test_crash_loses_nothing_with_sync_flush(tmp_path):
    """sync flush: every acknowledged put survives kill -9."""
    root = tmp_path / "s"
    store = new_store(root, flush="sync")
    store.start()
    put_many(store, 50)
    end = store.max_phys_offset
    store.crash()
    again = new_store(root)
    assert again.max_phys_offset == end and queue_total(again) == 50
    assert again.check() == []


def test_lost_consume_queues_are_rebuilt_by_abnormal_recovery(tmp_path):
    """Abnormal recovery re-dispatches from the checkpoint file on, rebuilding units a crash lost."""
    clock = Clock()
    root = tmp_path / "s"
    store = new_store(root, clock, commitlog_file_size_bytes=4096)
    store.start()
    put_many(store, 200)
    store.commit_log.flush()  # the commit log reached disk, the queues did not
    store.checkpoint.physic_msg_timestamp = store.checkpoint.logics_msg_timestamp = 1
    store.checkpoint.flush()
    store.crash()
    again = new_store(root, clock, commitlog_file_size_bytes=4096)
    assert again.recovery_report.mode == RECOVERY_ABNORMAL
    assert again.recovery_report.scan_start_offset == 0
    assert queue_total(again) == 200
    assert again.check() == []


def test_random_crash_points_keep_exactly_the_flushed_records(tmp_path, seed, reproduce):
    """Across files and flushes, kill -9 at random points keeps exactly the flushed records, and puts continue."""
    import random

    rng = random.Random(seed)
    clock = Clock()
    root = tmp_path / "s"
    config = dict(commitlog_file_size_bytes=2048, cq_units_per_file=8, flush="async")
    durable: list[bytes] = []
    for round_no in range(6):
        store = new_store(root, clock, **config)
        assert store.check() == [], f"round {round_no}; {reproduce}"
        got = [r.body for q in store.queue_ids("R") for r in store.get_messages("R", q, 0, 10_000)]
        assert sorted(got) == sorted(durable), f"round {round_no}; {reproduce}"
        store.start()
        pending = []
        for i in range(rng.randrange(5, 60)):
            body = f"r{round_no}-{i}-".encode() * rng.randrange(1, 8)
            assert store.put_message(MessageInner("R", rng.randrange(3), body, {"TAGS": "t"})).ok
            pending.append(body)
            if rng.random() < 0.1:
                store.flush()
                durable.extend(pending)
                pending = []
        store.crash()


def test_a_store_can_be_started_only_once_at_a_time(tmp_path):
    """The lock file refuses a second running store on the same directory."""
    import pytest

    from broker_core.errors import StoreStateError

    first = new_store(tmp_path / "s")
    first.start()
    second = new_store(tmp_path / "s")
    with pytest.raises(StoreStateError, match="Lock failed"):
        second.start()
    first.shutdown()
    second.start()
    second.shutdown()
    assert not (tmp_path / "s" / "abort").exists()


def test_load_fails_on_a_commit_log_file_of_the_wrong_size(tmp_path):
    """A commit-log file whose length is not the configured size makes load() return False with the reason."""
    store = new_store(tmp_path / "s")
    store.start()
    put_many(store, 3)
    store.shutdown()
    store = MessageStore(tmp_path / "s", StoreConfig(commitlog_file_size_bytes=4096), Clock())
    assert store.load() is False
    assert "does not match the configured size" in str(store.load_error)


def test_sync_flush_makes_every_put_durable_at_once(tmp_path):
    """With sync flush the flushed offset equals the write position after every put."""
    store = new_store(tmp_path / "s", flush="sync", commitlog_file_size_bytes=1024)
    store.start()
    for result in put_many(store, 30):
        assert result.ok
        assert store.flushed_offset == store.max_phys_offset
    store.shutdown()
