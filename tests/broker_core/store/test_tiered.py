"""The tiered store of a real RocketMQ 5.3.3 broker (POSIX backend), read back: tests/data/rocketmq-5.3.3-tiered.

Its README says how it was written; broker_core/store/tiered.py and docs/rocketmq-5x.md ("Tiered
storage") what the files hold. Each damage test breaks a copy of the real tier one way and looks
for the problem that names it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from broker_core.errors import BadInputError
from broker_core.store.problem import ERROR
from broker_core.store.tiered import (
    COMMIT_LOG_DIR,
    TieredStore,
    cluster_dir_name,
    segment_file_name,
    tier_keeps_topic,
)
from tests.testdata import data_path

DATA = data_path("rocketmq-5.3.3-tiered")
MANIFEST = json.loads((DATA / "manifest.json").read_text())
BROKER, CLUSTER, TOPIC, GROUP = MANIFEST["broker"], MANIFEST["cluster"], MANIFEST["topic"], MANIFEST["group"]
TIERED_TOPICS = {TOPIC, f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"}


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    """A writable copy of the fixture: (store, tier)."""
    shutil.copytree(DATA, tmp_path / "data")
    for path in (tmp_path / "data").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tmp_path / "data" / "store", tmp_path / "data" / "tier"


def _queue_log(tier: Path, topic: str, queue_id: int = 0) -> Path:
    [path] = (tier / cluster_dir_name(CLUSTER) / BROKER / topic / str(queue_id) / COMMIT_LOG_DIR).iterdir()
    return path


def test_names_are_the_brokers():
    """The cluster directory and the first segment's name are what the real broker named them."""
    assert cluster_dir_name(CLUSTER) == "212d6b50_DefaultCluster"
    assert segment_file_name(0) == "cfcd208400000000000000000000"
    assert (DATA / "tier" / cluster_dir_name(CLUSTER) / BROKER).is_dir()


def test_the_tier_holds_the_real_retry_and_dlq_topics_only():
    """The tier holds every record of the real topic, %RETRY% and %DLQ% the broker stored, each at
    its position in its queue's log, and no SCHEDULE record; the metadata lists every file."""
    tier = TieredStore(DATA / "tier", BROKER, DATA / "store")
    entries = list(tier.entries())
    assert {e.record.topic for e in entries} == TIERED_TOPICS
    assert all(e.record.phys_offset == e.position for e in entries)
    sends = [e for e in MANIFEST["events"] if e["event"] == "send"]
    assert {e.record.uniq_key for e in entries if e.record.topic == TOPIC} == {s["uniq_key"] for s in sends}
    by_queue: dict[tuple[str, int], list[int]] = {}
    for e in entries:
        by_queue.setdefault((e.record.topic, e.record.queue_id), []).append(e.record.queue_offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values()), by_queue
    assert tier.problems == [] and tier.counts.duplicates == 0
    assert tier.metadata is not None and len(tier.listed_segments()) == tier.counts.segments


def test_the_filter_keeps_what_the_broker_tiered():
    """tier_keeps_topic is MessageStoreTopicFilter: real, retry and DLQ topics, never system ones."""
    assert all(tier_keeps_topic(t, CLUSTER, BROKER) for t in TIERED_TOPICS)
    assert not any(tier_keeps_topic(t, CLUSTER, BROKER) for t in (
        "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_REVIVE_LOG_x",
        "TBW102", CLUSTER, BROKER, "%LMQ%q", "CHECKPOINT_TOPIC", " "))


def test_a_torn_tier_file_is_an_error_at_its_place(tmp_path):
    """A tier log cut inside a record: the records before it are read, the cut one is an error."""
    store, tier = _copy(tmp_path)
    path = _queue_log(tier, f"%DLQ%{GROUP}")
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    read = TieredStore(tier, BROKER, store)
    entries = [e for e in read.entries() if e.record.topic == f"%DLQ%{GROUP}"]
    errors = {p.kind: p for p in read.problems if p.severity == ERROR}
    assert sorted(errors) == ["tier-corrupt-record", "tier-segment-short"]
    torn = errors["tier-corrupt-record"]
    last = entries[-1].position + entries[-1].record.total_size
    assert torn.offset == last and torn.file.startswith("tier:") and path.name in torn.file
    assert len(entries) == MANIFEST["plan"].count("dlq") - 1


def test_a_listed_segment_that_is_gone_is_an_error(tmp_path):
    """A file tieredStoreMetadata.json lists but the tier lacks: tier-segment-missing, by name."""
    store, tier = _copy(tmp_path)
    path = _queue_log(tier, TOPIC, 1)
    path.unlink()
    read = TieredStore(tier, BROKER, store)
    missing = [p for p in read.problems if p.kind == "tier-segment-missing"]
    assert len(missing) == 1 and missing[0].file.endswith(f"{TOPIC}/1/{COMMIT_LOG_DIR}/{path.name}")
    assert missing[0].severity == ERROR


def test_a_record_in_another_queues_log_is_an_error(tmp_path):
    """A queue's log holding another queue's records is damage, not that queue's records."""
    store, tier = _copy(tmp_path)
    shutil.copy(_queue_log(tier, TOPIC, 0), _queue_log(tier, TOPIC, 1))
    read = TieredStore(tier, BROKER, store)
    entries = list(read.entries())
    assert not any(e.record.topic == TOPIC and e.record.queue_id == 0 and "/1/" in e.file_name for e in entries)
    assert [p.kind for p in read.problems if p.severity == ERROR][:1] == ["tier-misplaced"]


def test_without_metadata_the_files_are_read_with_a_warning(tmp_path):
    """A store without tieredStoreMetadata.json: every record is read, and a warning says so."""
    store, tier = _copy(tmp_path)
    (store / "config" / "tieredStoreMetadata.json").unlink()
    read = TieredStore(tier, BROKER, store)
    assert len(list(read.entries())) == len(list(TieredStore(DATA / "tier", BROKER, DATA / "store").entries()))
    assert [(p.kind, p.severity) for p in read.problems] == [("tier-metadata-missing", "warning")]


def test_a_directory_that_is_no_tier_is_refused(tmp_path):
    """Not a tier, or a tier of two brokers with none named: BadInputError saying which."""
    with pytest.raises(BadInputError, match="does not exist"):
        TieredStore(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInputError, match="not a POSIX tiered store"):
        TieredStore(tmp_path / "empty")
    _store, tier = _copy(tmp_path)
    shutil.copytree(tier / cluster_dir_name(CLUSTER) / BROKER, tier / cluster_dir_name(CLUSTER) / "broker-b")
    with pytest.raises(BadInputError, match="2 broker directories"):
        TieredStore(tier)
    assert TieredStore(tier, "broker-b").broker == "broker-b"
