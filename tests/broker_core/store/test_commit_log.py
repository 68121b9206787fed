"""CommitLog: appends, the END_OF_FILE blank, queue offsets, reads and scans (AppendCallbackTest)."""

from __future__ import annotations

import struct

import pytest
from testdata import STORE_FIXTURES

from broker_core import codec
from broker_core.constants import BLANK_MAGIC_CODE
from broker_core.delay_levels import parse_delay_levels
from broker_core.store.commit_log import CommitLog, java_parse_int, record_tags_code
from broker_core.store.recovery import CORRUPT_RECORD, DATA_ENDS_EARLY

LEVELS = parse_delay_levels("1s 2s 3s")
STORE_DIR = STORE_FIXTURES


def record(body: bytes, topic: str = "test-topic", queue_id: int = 0) -> bytearray:
    rec = codec.Record(topic, queue_id, 0, 0, 0, 0, 1_700_000_000_000, "127.0.0.1:50000", 0,
                       "127.0.0.1:10911", 0, 0, body, {"TAGS": "abc"})
    return codec.encode_for_append(rec)


def test_append_end_of_file_writes_an_8_byte_blank_and_moves_the_message(tmp_path):
    """testAppendMessageBatchEndOfFile (single message): with maxBlank 1000 only int32 1000 + BLANK magic is written."""
    log = CommitLog(tmp_path, 2000, LEVELS)
    first = record(b"a" * (1000 - len(record(b""))))
    assert len(first) == 1000
    assert log.append(first, "test-topic-0", True, 5) == (0, 0)
    second = record(b"b" * (993 - len(record(b""))))
    assert len(second) + 8 > 1000
    phys, queue_offset = log.append(second, "test-topic-0", True, 6)
    assert (phys, queue_offset) == (2000, 1)
    log.flush()
    data = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    assert struct.unpack_from(">iI", data, 1000) == (1000, BLANK_MAGIC_CODE)
    assert data[1008:] == bytes(992)  # the rest of the blank area is never written
    moved = log.read_record(2000)
    assert (moved.body, moved.phys_offset, moved.queue_offset, moved.store_ts) == (
        b"b" * len(moved.body), 2000, 1, 6)
    assert (tmp_path / "commitlog" / "00000000000000002000").stat().st_size == 2000


def test_a_message_never_ends_closer_than_8_bytes_to_the_file_end(tmp_path):
    """A record that would leave 1-7 bytes goes to the next file; one leaving exactly 8 stays."""
    log = CommitLog(tmp_path, 1000, LEVELS)
    empty = len(record(b""))
    log.append(record(b"x" * (992 - empty)), "k", True, 1)  # ends exactly 8 before the end
    assert log.max_offset == 992
    phys, _ = log.append(record(b""), "k", True, 2)
    assert phys == 1000
    log.flush()
    data = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    assert struct.unpack_from(">iI", data, 992) == (8, BLANK_MAGIC_CODE)


def test_queue_offsets_count_per_topic_and_queue(tmp_path):
    """Queue offsets advance per "topic-queueId"; PREPARED/ROLLBACK appends get 0 and do not advance."""
    log = CommitLog(tmp_path, 4096, LEVELS)
    got = [log.append(record(b"m", "A", 0), "A-0", True, 1)[1],
           log.append(record(b"m", "A", 1), "A-1", True, 1)[1],
           log.append(record(b"m", "A", 0), "A-0", False, 1)[1],
           log.append(record(b"m", "A", 0), "A-0", True, 1)[1]]
    assert got == [0, 0, 0, 1]
    assert log.topic_queue_table == {"A-0": 2, "A-1": 1}


def test_scan_walks_records_and_blanks_of_the_fixture():
    """Scanning the 4.9.4 commit log yields its 112 records and 3 blanks and ends at 55490."""
    log = CommitLog(STORE_DIR / "store-clean", 16384, parse_delay_levels("1s 2s 3s 4s"))
    log.load()
    steps = list(log.scan(0))
    log.close()
    kinds = [type(s.record).__name__ for s in steps]
    assert kinds.count("Record") == 112 and kinds.count("Blank") == 3
    assert steps[-1].record is None and steps[-1].error is None
    assert steps[-1].phys_offset == 55490
    assert [s.phys_offset for s in steps if isinstance(s.record, codec.Blank)] == [16017, 32468, 48611]


def test_schedule_records_carry_their_deliver_time_as_tags_code():
    """SCHEDULE_TOPIC_XXXX with DELAY: store time plus the clamped level's delay; unknown levels add 1 s."""
    assert record_tags_code("SCHEDULE_TOPIC_XXXX", {"DELAY": "2", "TAGS": "a"}, 100, LEVELS) == 2100
    assert record_tags_code("SCHEDULE_TOPIC_XXXX", {"DELAY": "9"}, 100, LEVELS) == 3100
    assert record_tags_code("SCHEDULE_TOPIC_XXXX", {"DELAY": "0", "TAGS": "TagA"}, 100, LEVELS) == 2598919
    assert record_tags_code("OrderTopic", {"DELAY": "2", "TAGS": "TagA"}, 100, LEVELS) == 2598919
    assert java_parse_int("-3") == -3 and java_parse_int("3.0") is None
    assert java_parse_int("2147483648") is None


def _flip_first_body_byte(data: bytearray, at: int) -> None:
    data[at + 84 + 4] ^= 0xFF  # the body starts after the 84-byte header and the 4-byte body length


def _claim_more_than_is_left(data: bytearray, at: int) -> None:
    struct.pack_into(">i", data, at, 5000)  # TOTALSIZE past the end of the written bytes


def _zero_second_half(data: bytearray, at: int) -> None:
    size = struct.unpack_from(">i", data, at)[0]
    data[at + size // 2:at + size] = bytes(size - size // 2)  # a torn write: the tail never reached disk


@pytest.mark.parametrize("damaged, break_record, reason", [
    ("middle", _flip_first_body_byte, "body CRC mismatch"),
    ("middle", _claim_more_than_is_left, "truncated record: TOTALSIZE 5000"),
    ("last", _zero_second_half, "read total count not equals msg total size"),
])
def test_check_reports_a_damaged_record_without_raising(tmp_path, damaged, break_record, reason):
    """check() names the file, offset and reason of a damaged record (bad body CRC, a size past the
    data, a torn tail) and the unreadable bytes from it to the write position; the records before it
    still read."""
    log = CommitLog(tmp_path, 4096, LEVELS)
    log.append(record(b"good"), "t-0", True, 1)
    middle, _ = log.append(record(b"soon bad"), "t-0", True, 1)
    last, _ = log.append(record(b"after"), "t-0", True, 1)
    log.flush()
    at = {"middle": middle, "last": last}[damaged]
    path = tmp_path / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    break_record(data, at)
    path.write_bytes(bytes(data))

    problems = log.check()
    file = "commitlog/00000000000000000000"
    assert [(p.file, p.offset, p.kind) for p in problems] == [(file, at, CORRUPT_RECORD), (file, at, DATA_ENDS_EARLY)]
    assert reason in problems[0].reason, problems[0].reason
    assert problems[1].reason == (f"valid records end at {at} but the write position is {log.max_offset} "
                                  f"({log.max_offset - at} bytes unreadable)")
    assert log.read_record(0).body == b"good"
    if damaged == "last":
        assert log.read_record(middle).body == b"soon bad"


def test_check_of_an_undamaged_log_is_empty(tmp_path):
    """check() of a log as it was written finds nothing."""
    log = CommitLog(tmp_path, 4096, LEVELS)
    for body in (b"good", b"soon bad", b"after"):
        log.append(record(body), "t-0", True, 1)
    log.flush()
    assert log.check() == []


def test_a_wrong_size_hint_is_ignored(tmp_path):
    """read_record decodes by the record's own TOTALSIZE whatever size hint it is given."""
    log = CommitLog(tmp_path, 4096, LEVELS)
    first = record(b"first")
    log.append(first, "k", True, 1)
    log.append(record(b"second, longer"), "k", True, 2)
    size = len(first)
    for hint in (None, 0, 3, size - 1, size, size + 1, 10_000):
        found = log.read_record(0, size_hint=hint)
        assert (found.body, found.total_size) == (b"first", size), hint
    assert log.read_record(log.max_offset, size_hint=size) is None
