"""The recorder: run ids filled in, millisecond times turned into timestamps, counts that match the files."""

from __future__ import annotations

from datetime import UTC, datetime

from broker_core.export.parquet import read_table
from broker_core.sim.recorder import EVENT_TABLES, Recorder

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_rows_get_the_run_id_and_timestamps(tmp_path):
    """emit() fills run_id and accepts <name>_ms integers for the <name>_ts columns."""
    rec = Recorder("r1", tmp_path / "parquet")
    rec.emit("faults", {"ts_ms": EPOCH_MS, "kind": "broker_crash", "target": "broker-a", "detail": ""})
    rec.emit("consume_attempts", {"group": "g", "start_ms": EPOCH_MS + 5, "end_ts": EPOCH_MS + 9,
                                  "status": "CONSUME_SUCCESS", "outcome": "ACKED"})
    counts = rec.close()
    assert counts["faults"] == 1 and counts["consume_attempts"] == 1
    fault = read_table(tmp_path, "faults").to_pylist()[0]
    assert fault["run_id"] == "r1"
    assert fault["ts"] == datetime(2026, 1, 1, tzinfo=UTC)
    attempt = read_table(tmp_path, "consume_attempts").to_pylist()[0]
    assert (attempt["end_ts"] - attempt["start_ts"]).total_seconds() == 0.004


def test_every_event_table_exists_even_when_empty(tmp_path):
    """A table nothing was emitted to still gets a Parquet file with its schema."""
    rec = Recorder("r2", tmp_path / "parquet")
    counts = rec.close()
    assert set(counts) == set(EVENT_TABLES) and sum(counts.values()) == 0
    for table in EVENT_TABLES:
        assert read_table(tmp_path, table).num_rows == 0


def test_counting_recorder_writes_nothing(tmp_path):
    """A recorder without a directory only counts, and tells listeners about each row."""
    seen = []
    rec = Recorder("r3", None)
    rec.listeners.append(lambda table, row: seen.append((table, row["run_id"])))
    rec.emit("produced", {"uniq_key": "K", "status": "SEND_OK"})
    assert rec.total == 1 and seen == [("produced", "r3")]
    assert rec.close()["produced"] == 1
    assert list(tmp_path.iterdir()) == []
