"""The P2 floor does a delivery's real work: its records are the drain's, field for field.

A floor that skipped part of the work would look cheaper than any delivery can be and make the
benchmark's "out of reach" verdict a lie; this test fails when the floor's output drifts from what
the broker model writes for the same schedule queue units.
"""

from __future__ import annotations

from pathlib import Path

from bench.schedule_drain import (
    BENCH_COMMITLOG_FILE_BYTES,
    BENCH_LEVELS,
    BENCH_TOPIC,
    FilledBroker,
    bare_delivery_floor,
)
from broker_core.codec import Record, iter_records
from broker_core.store.commit_log import COMMIT_LOG_DIR_NAME

MESSAGES = 600
# Everything a delivered record carries except where and when it was stored.
SAME_FIELDS = ("topic", "queue_id", "queue_offset", "flag", "sys_flag", "born_ts", "born_host",
               "store_host", "reconsume_times", "prepared_tx_offset", "body", "body_crc", "properties",
               "total_size", "magic")


def records(buf: bytes) -> list[Record]:
    return [item for _, item in iter_records(buf) if isinstance(item, Record)]


def test_bare_floor_writes_the_records_the_drain_writes(tmp_path: Path):
    filled = FilledBroker(tmp_path / "broker", MESSAGES)
    filled.drain()
    filled.close()
    (first_file,) = sorted((tmp_path / "broker" / COMMIT_LOG_DIR_NAME).iterdir())
    delivered = [r for r in records(first_file.read_bytes()) if r.topic == BENCH_TOPIC]
    assert len(delivered) == MESSAGES

    for with_row, name in ((True, "floor-bare-row"), (False, "floor-bare-norow")):
        count = bare_delivery_floor(tmp_path / "broker", BENCH_LEVELS, BENCH_COMMITLOG_FILE_BYTES, with_row)
        assert count == MESSAGES
        floored = records((tmp_path / name / "commitlog").read_bytes())  # CRCs checked as they decode
        assert len(floored) == MESSAGES
        for ours, theirs in zip(floored, delivered, strict=True):
            for field in SAME_FIELDS:
                assert getattr(ours, field) == getattr(theirs, field), (
                    f"{name}: record at queue offset {theirs.queue_offset} of queue {theirs.queue_id} "
                    f"differs in {field}: {getattr(ours, field)!r} vs {getattr(theirs, field)!r}")
