"""StoreReader: a read-only walk of a real 4.9.4 store, stopping where RocketMQ's recovery stops."""

from __future__ import annotations

import json
import struct

import pytest
from testdata import STORE_MANIFEST

from broker_core.errors import BadInputError
from broker_core.store.reader import StoreReader, tree_digest

BODY_POS = 88  # TOTALSIZE..BODY length of an IPv4/IPv4 v1 record: the body's first byte


MANIFEST = STORE_MANIFEST


@pytest.fixture(scope="module")
def manifest_data():
    return json.loads(MANIFEST.read_text())


def _messages(manifest_data):
    return [e for e in manifest_data["commitLog"] if e["kind"] == "MESSAGE"]


def _file_pos(entry) -> tuple[str, int]:
    return entry["file"], entry["filePos"]


def _damage(store, rel: str, pos: int, data: bytes) -> None:
    with open(store / rel, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def test_clean_store_entries_match_manifest(store_fixtures, manifest_data):
    """Every record and BLANK of store-clean comes back in manifest order with the manifest's fields."""
    reader = StoreReader(store_fixtures / "store-clean")
    entries = list(reader.entries())
    expected = [e for e in manifest_data["commitLog"] if e["kind"] in ("MESSAGE", "BLANK")]
    assert len(entries) == len(expected) == 115
    assert (reader.record_count, reader.blank_count) == (112, 3)
    for got, want in zip(entries, expected, strict=True):
        assert f"commitlog/{got.file_name}" == want["file"]
        assert got.phys_offset == want["physicalOffset"]
        assert got.size == want["size"]
        if want["kind"] == "BLANK":
            assert got.is_blank
            continue
        rec = got.record
        assert (rec.topic, rec.queue_id, rec.queue_offset) == (want["topic"], want["queueId"], want["queueOffset"])
        assert (rec.store_ts, rec.born_ts) == (want["storeTimestamp"], want["bornTimestamp"])
        assert (rec.born_host, rec.store_host) == (want["bornHost"], want["storeHost"])
        assert (rec.reconsume_times, rec.sys_flag, rec.flag) == (want["reconsumeTimes"], want["sysFlag"], want["flag"])
        assert (rec.body_crc, len(rec.body)) == (want["bodyCRC"], want["bodyLength"])
        assert rec.body.startswith(want["bodyPrefix"].encode())
        assert rec.msg_id == want["offsetMsgId"]
        assert rec.prepared_tx_offset == want["preparedTransactionOffset"]
        assert f"{rec.magic:#010x}" == want["magic"]
        assert list(rec.properties.items()) == list(want["properties"].items())
    assert reader.valid_end == manifest_data["commitLogMaxPhysicalOffset"]
    assert reader.problems == []


def test_crashed_store_stops_at_torn_record(store_fixtures, manifest_data):
    """store-crashed ends at 54903 with exactly one commit-log problem naming the file and offset."""
    reader = StoreReader(store_fixtures / "store-crashed")
    records = list(reader.records())
    torn = manifest_data["storeCrashed"]["tornRecord"]
    assert len(records) == 111
    assert reader.valid_end == torn["recordPhysicalOffset"] == 54903
    log_problems = [p for p in reader.problems if p.file.startswith("commitlog/")]
    assert len(log_problems) == 1
    assert (log_problems[0].file, log_problems[0].offset) == (torn["file"], 54903)
    assert log_problems[0].kind == "torn-record"
    kinds = {p.kind: p for p in reader.problems}
    assert kinds["abort-file"].severity == "warning"
    # The CQ still holds the DLQ unit that points to the torn record (queue offset 7 = byte 140).
    cq = kinds["cq-past-commitlog"]
    assert (cq.file, cq.offset) == ("consumequeue/%DLQ%GroupA/0/00000000000000000000", 7 * 20)


def test_reading_changes_nothing(store_fixtures):
    """A full check of both stores leaves every file's name, size and CRC as it was."""
    before = tree_digest(store_fixtures)
    for name in ("store-clean", "store-crashed"):
        reader = StoreReader(store_fixtures / name)
        reader.check()
        reader.delay_offsets(), reader.consumer_offsets(), reader.topics(), reader.subscription_groups()
    assert tree_digest(store_fixtures) == before


def test_consume_queues_match_manifest(store_fixtures, manifest_data):
    """Every consume-queue unit reads back as the manifest lists it (physOffset, size, tagsCode)."""
    reader = StoreReader(store_fixtures / "store-clean")
    found = {}
    for topic, queue_id, files in reader.consume_queues():
        found[(topic, queue_id)] = [[u.phys_offset, u.size, u.tags_code] for _, _, u in reader.cq_units(files)]
    expected = {(q["topic"], q["queueId"]): q["entries_physOffset_size_tagsCode"]
                for q in manifest_data["consumeQueues"]}
    assert found == expected


def test_checkpoint_and_config(store_fixtures, manifest_data):
    """The checkpoint's timestamps and delayOffset.json are read as the fixture recorded them."""
    reader = StoreReader(store_fixtures / "store-clean")
    want = manifest_data["otherFiles"]["checkpoint"]
    assert reader.checkpoint.physic_msg_timestamp == want["physicMsgTimestamp"]
    assert reader.checkpoint.logics_msg_timestamp == want["logicsMsgTimestamp"]
    assert reader.checkpoint.index_msg_timestamp == want["indexMsgTimestamp"]
    assert reader.delay_offsets() == {3: 22, 4: 8}
    assert reader.consumer_offsets() == {} and reader.topics() == {}


def test_schedule_delays_are_read_from_the_schedule_queues(store_fixtures, manifest_data):
    """The store names its own delay levels: each schedule queue's tags code minus its record's
    store time is the broker's messageDelayLevel entry for that level (levels 3 and 4 are the
    ones the fixture's scheduler used), in the clean and the crashed store alike."""
    from broker_core.delay_levels import parse_delay_levels

    table = parse_delay_levels(manifest_data["storeConfig"]["messageDelayLevel"])
    used = sorted({int(q["queueId"]) + 1 for q in manifest_data["consumeQueues"]
                   if q["topic"] == "SCHEDULE_TOPIC_XXXX"})
    assert used == [3, 4]
    for store in ("store-clean", "store-crashed"):
        reader = StoreReader(store_fixtures / store)
        for _ in reader.entries():
            pass
        assert reader.schedule_delays() == {level: table[level - 1] for level in used}, store


def test_schedule_delays_skip_units_past_the_valid_log(writable_store_copy):
    """A schedule queue whose last unit names a record past the end of the log (a torn tail)
    is read from the unit before it; a store without schedule queues has no delays."""
    import shutil

    store = writable_store_copy()
    queue = store / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2"
    path = sorted(queue.iterdir())[-1]
    data = bytearray(path.read_bytes())
    end = next(i for i in range(0, len(data), 20) if not any(data[i:i + 20]))
    data[end:end + 20] = struct.pack(">qiq", 10**9, 120, 10**12)
    path.write_bytes(bytes(data))
    reader = StoreReader(store)
    for _ in reader.entries():
        pass
    assert reader.schedule_delays()[3] == 3000
    shutil.rmtree(store / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
    reader = StoreReader(store)
    for _ in reader.entries():
        pass
    assert reader.schedule_delays() == {}


def test_a_live_store_whose_only_file_was_just_created_reads_as_empty(tmp_path):
    """A broker creates a commit-log file before it maps it at full size: a store whose only file
    is still empty has no records and no file size yet, and reading it is no error."""
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / ("0" * 20)).write_bytes(b"")
    (tmp_path / "checkpoint").write_bytes(b"")
    assert [p.kind for p in StoreReader(tmp_path).errors] == ["wrong-size-file"]
    for live in (True, False):
        reader = StoreReader(tmp_path, live=live)
        assert list(reader.entries()) == [] and reader.record_count == 0
        if live:  # the empty checkpoint is being created: a warning; at rest it is damage
            assert [(p.kind, p.severity) for p in reader.problems] == [("checkpoint-missing", "warning")]


def test_not_a_store(tmp_path):
    """A missing directory or one without commitlog/ is bad input with a hint."""
    with pytest.raises(BadInputError, match="does not exist"):
        StoreReader(tmp_path / "nope")
    with pytest.raises(BadInputError, match="commitlog") as info:
        StoreReader(tmp_path)
    assert info.value.hint


# --- hand-damaged copies -------------------------------------------------------------------------

def _bad_magic(store, msgs):
    e = msgs[5]
    _damage(store, e["file"], e["filePos"] + 4, struct.pack(">I", 0x12345678))
    return e["file"], e["physicalOffset"], "bad-magic"


def _flipped_body_byte(store, msgs):
    e = msgs[min(50, len(msgs) - 1)]
    with open(store / e["file"], "r+b") as fh:
        fh.seek(e["filePos"] + BODY_POS)
        byte = fh.read(1)
        fh.seek(e["filePos"] + BODY_POS)
        fh.write(bytes([byte[0] ^ 0xFF]))
    return e["file"], e["physicalOffset"], "crc-mismatch"


def _truncated_last_file(store, msgs):
    e = msgs[-1]  # phys 54903 at file position 5751, 587 bytes
    with open(store / e["file"], "r+b") as fh:
        fh.truncate(e["filePos"] + 100)
    return e["file"], e["physicalOffset"], "truncated-record"


def _wrong_size_file(store, msgs):
    rel = "commitlog/00000000000000016384"
    with open(store / rel, "ab") as fh:
        fh.write(b"\0" * 100)
    return rel, 16384 + 16384, "wrong-size-file"


def _invalid_config(store, msgs):
    (store / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{3:22,4:}\n}')
    return "config/delayOffset.json", 25, "bad-config-file"


def _cq_past_commitlog(store, msgs):
    rel = "consumequeue/OrderTopic/0/00000000000000000000"
    units = sum(1 for e in msgs if e["topic"] == "OrderTopic" and e["queueId"] == 0)
    _damage(store, rel, units * 20, struct.pack(">qiq", 60_000, 300, 0))
    return rel, units * 20, "cq-past-commitlog"


def _gap_between_files(store, msgs):
    (store / "commitlog/00000000000000049152").rename(store / "commitlog/00000000000000065536")
    return "commitlog/00000000000000065536", 49152, "gap-between-files"


DAMAGES = [_bad_magic, _flipped_body_byte, _truncated_last_file, _wrong_size_file, _invalid_config,
           _cq_past_commitlog, _gap_between_files]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__.strip("_"))
def test_damage_is_reported_with_file_and_offset(writable_store_copy, manifest_data, damage):
    """Each kind of hand-made damage gives an error-level problem naming the file and the offset."""
    store = writable_store_copy("store-clean")
    rel, offset, kind = damage(store, _messages(manifest_data))
    reader = StoreReader(store)
    reader.check()
    matching = [p for p in reader.errors if p.kind == kind]
    assert matching, f"no {kind} problem in {[str(p) for p in reader.problems]}"
    assert (matching[0].file, matching[0].offset) == (rel, offset)


def test_scan_stops_at_bad_magic_inside_recovery_window(writable_store_copy, manifest_data):
    """Damage in the files recovery checks ends the valid prefix where the damaged record starts."""
    store = writable_store_copy("store-clean")
    msgs = _messages(manifest_data)
    target = msgs[60]
    assert target["file"] != "commitlog/00000000000000000000"  # normal recovery checks the last 3 files
    _damage(store, target["file"], target["filePos"] + 4, struct.pack(">I", 0x12345678))
    reader = StoreReader(store)
    records = list(reader.records())
    assert len(records) == 60 and reader.valid_end == target["physicalOffset"]
    assert any(p.kind == "unreachable-data" for p in reader.problems)


def test_damage_before_recovery_window_does_not_end_scan(writable_store_copy, manifest_data):
    """A damaged record in a file recovery does not check is reported, and the later files still read."""
    store = writable_store_copy("store-clean")
    msgs = _messages(manifest_data)
    rel, offset, _ = _bad_magic(store, msgs)  # record 5 of the first file
    _flipped_body_byte(store, msgs[:3])  # also a CRC flip of record 2, same file
    reader = StoreReader(store)
    assert reader.recovery_start_index() == 1
    records = list(reader.records())
    lost_in_file_0 = {e["physicalOffset"] for e in msgs[5:] if e["file"] == rel} | {msgs[2]["physicalOffset"]}
    assert [r.phys_offset for r in records] == [e["physicalOffset"] for e in msgs
                                                if e["physicalOffset"] not in lost_in_file_0]
    assert reader.valid_end == manifest_data["commitLogMaxPhysicalOffset"]
    found = {(p.kind, p.offset) for p in reader.errors}
    assert ("bad-magic", offset) in found and ("crc-mismatch", msgs[2]["physicalOffset"]) in found


def test_abnormal_recovery_window_follows_checkpoint(store_fixtures, manifest_data):
    """With an abort file, recovery starts at the newest file whose first record is older than the checkpoint."""
    reader = StoreReader(store_fixtures / "store-crashed")
    cp = manifest_data["otherFiles"]["checkpoint"]
    min_ts = min(cp["physicMsgTimestamp"], cp["logicsMsgTimestamp"]) - 3000
    msgs = _messages(manifest_data)
    firsts = [next(e for e in msgs if e["file"] == f["file"]) for f in manifest_data["commitLogFiles"]]
    expected = max((i for i, e in enumerate(firsts) if e["storeTimestamp"] <= min_ts), default=0)
    assert reader.recovery_start_index() == expected
    assert StoreReader(store_fixtures / "store-clean").recovery_start_index() == 1  # 4 files, last 3


def test_invalid_config_falls_back_to_bak(writable_store_copy, manifest_data):
    """A damaged delayOffset.json is reported, and its .bak supplies the offsets as in ConfigManager."""
    store = writable_store_copy("store-clean")
    _invalid_config(store, _messages(manifest_data))
    reader = StoreReader(store)
    assert reader.delay_offsets() == {3: 22, 4: 8}
    reader.check()
    problem = next(p for p in reader.problems if p.kind == "bad-config-file")
    assert "delayOffset.json.bak was read instead" in problem.reason


def test_known_file_size_flags_a_lone_short_file(writable_store_copy):
    """Given the broker's file size, even a store whose files all share a wrong size is flagged."""
    store = writable_store_copy("store-clean")
    reader = StoreReader(store, commitlog_file_size_bytes=32768)
    wrong = [p for p in reader.errors if p.kind == "wrong-size-file"]
    assert [p.file for p in wrong] == [f"commitlog/{n}" for n in
                                        ("00000000000000000000", "00000000000000016384",
                                         "00000000000000032768", "00000000000000049152")]


def test_a_directory_under_a_commit_log_name_is_named_as_not_a_file(writable_store_copy):
    """A directory or FIFO with a valid 20-digit name is reported as not a regular file, not a bad name."""
    store = writable_store_copy("store-clean")
    (store / "commitlog" / "00000000000000065536").mkdir()
    reader = StoreReader(store)
    list(reader.entries())
    kinds = {(p.file, p.kind) for p in reader.problems}
    assert ("commitlog/00000000000000065536", "not-a-file") in kinds
    assert not any(p.kind == "bad-file-name" for p in reader.problems)


# --- a store whose oldest commit-log files retention deleted ------------------------------------

@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("name", ["store-clean", "store-crashed"])
def test_a_log_cut_by_retention_starts_at_its_first_file(retained_store_copy, manifest_data, name, count):
    """Without its oldest files the log starts at the first file's name, and no problem is added."""
    store = retained_store_copy(name, count)
    full = StoreReader(MANIFEST.parent / name)
    full.check()
    reader = StoreReader(store)
    records = list(reader.records())
    first = count * manifest_data["storeConfig"]["mappedFileSizeCommitLog"]
    assert reader.first_offset == first and full.first_offset == 0
    assert [r.phys_offset for r in records] == [e["physicalOffset"] for e in _messages(manifest_data)
                                                if first <= e["physicalOffset"] < full.valid_end]
    assert reader.valid_end == full.valid_end
    # The same findings as on the whole store: the units of the deleted records are not problems.
    assert [(p.file, p.offset, p.kind) for p in reader.problems] == \
        [(p.file, p.offset, p.kind) for p in full.problems]
    if name == "store-clean":
        assert reader.problems == []


def test_consume_queue_units_into_the_present_log_are_still_judged(retained_store_copy, manifest_data):
    """Units wholly below the first offset pass; one across it, or past the valid end, is an error."""
    store = retained_store_copy("store-clean", 1)
    rel = "consumequeue/OrderTopic/0/00000000000000000000"
    units = sum(1 for e in _messages(manifest_data) if e["topic"] == "OrderTopic" and e["queueId"] == 0)
    # Two more units after the queue's last: one across the first offset, one past the valid end.
    _damage(store, rel, units * 20, struct.pack(">qiq", 16_300, 300, 0) + struct.pack(">qiq", 60_000, 300, 0))
    reader = StoreReader(store)
    reader.check()
    found = {(p.file, p.offset, p.kind) for p in reader.errors}
    assert found == {(rel, units * 20, "cq-across-first-offset"), (rel, units * 20 + 20, "cq-past-commitlog")}


def test_a_retry_topic_two_readings_fit_is_a_warning(writable_store_copy):
    """%RETRY%a_b_c in topics.json, with groups a and a_b and topics b_c and c known, is a push or a
    POP retry topic of two different groups: one retry-topic-ambiguous warning; %RETRY%a_b with
    only group a and topic b known is not."""
    from broker_core.store import config_files
    from broker_core.store.reader import StoreReader

    store = writable_store_copy()
    config = store / "config"
    topics = config_files.load_topics(config)
    for name in ("b_c", "c", "b", "%RETRY%a_b_c", "%RETRY%pg_b"):
        topics[name] = config_files.TopicConfig(name)
    config_files.save_topics(config, topics)
    groups = config_files.load_subscription_groups(config)
    for name in ("a", "a_b", "pg"):
        groups[name] = config_files.SubscriptionGroupConfig(name)
    config_files.save_subscription_groups(config, groups)
    found = [p for p in StoreReader(store).check() if p.kind == "retry-topic-ambiguous"]
    assert [(p.file, p.severity, p.reason.split(" ")[0]) for p in found] == [
        ("config/topics.json", "warning", "%RETRY%a_b_c")]
