"""A store read while its broker writes it (``live``): the record being written, a preallocated or
just created file and a file retention just deleted are not damage, and the next import reads
what was in flight; damage with data written after it is still damage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from growing_store import FILE_SIZE, GrowingStore, rows_of

from broker_core.export.columnar import ColumnarStoreReader
from broker_core.export.store_import import import_store
from broker_core.store.reader import StoreReader

WRITER = Path(__file__).with_name("live_writer.py")
PROJECT = Path(__file__).resolve().parents[3]


def _last_file(root: Path) -> Path:
    return sorted((root / "commitlog").iterdir())[-1]


def _cut_last_record(grower: GrowingStore, keep: int) -> tuple[Path, int, bytes]:
    """Append one record and zero all but its first ``keep`` bytes, as a reader sees a record the
    broker is still copying in; returns (file, position, the record's bytes) to finish it later."""
    before = grower.store.commit_log.max_offset
    grower.grow(1)
    after = grower.store.commit_log.max_offset
    path = next(p for p in sorted((grower.root / "commitlog").iterdir())
                if int(p.name) <= before < int(p.name) + FILE_SIZE)
    pos = before - int(path.name)
    with open(path, "r+b") as fh:
        fh.seek(pos)
        whole = fh.read(after - before)
        fh.seek(pos + keep)
        fh.write(b"\0" * (len(whole) - keep))
    return path, pos, whole


@pytest.mark.parametrize("keep", [4, 40, 100, -3], ids=["size-only", "header", "body", "all-but-3"])
def test_a_record_being_written_is_in_flight_and_read_by_the_next_import(tmp_path, keep):
    """The record being appended at the end of the log is an in-flight warning in a live import (an
    error in an import of a store at rest), and once written the next import reads it: every table
    then equals a fresh import."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(30)
    run = tmp_path / "run"
    import_store(grower.root, run, broker="broker-a", live=True)
    path, pos, whole = _cut_last_record(grower, keep if keep > 0 else 0)
    if keep < 0:
        with open(path, "r+b") as fh:
            fh.seek(pos)
            fh.write(whole[:keep])
    at_rest = import_store(grower.root, tmp_path / "at-rest", broker="broker-a")
    assert [p.kind for p in at_rest.errors] and at_rest.records == 30
    live = import_store(grower.root, run, broker="broker-a", live=True, strict=True)
    assert live.records == 30 and live.errors == []
    # (The model flushed the checkpoint with the cut record's store time, so checkpoint-ahead, a
    # warning, is also listed here; a broker sets it only after the bytes are in the file.)
    assert [(p.kind, p.offset) for p in live.problems if p.kind == "in-flight"] == [("in-flight", int(path.name) + pos)]
    assert {p.kind for p in live.problems} <= {"abort-file", "in-flight", "checkpoint-ahead"}
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(whole)
    grower.grow(5)
    done = import_store(grower.root, run, broker="broker-a", live=True)
    assert done.resumed_from == int(path.name) + pos and done.records_added == 6
    grower.shutdown()
    import_store(grower.root, run, broker="broker-a", live=True)
    import_store(grower.root, tmp_path / "fresh" / "run", broker="broker-a")
    assert rows_of(run) == rows_of(tmp_path / "fresh" / "run")


def test_preallocated_and_just_created_files_are_not_damage(tmp_path):
    """A preallocated next file (all zeros) and a newer file not yet grown to its size are how a
    live log ends: no problem in a live import; the short file is damage in a store at rest."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(20)
    last = _last_file(grower.root)
    nxt = int(last.name) + FILE_SIZE
    with open(grower.root / "commitlog" / f"{nxt:020d}", "wb") as fh:
        fh.truncate(FILE_SIZE)
    (grower.root / "commitlog" / f"{nxt + FILE_SIZE:020d}").touch()
    live = import_store(grower.root, tmp_path / "live", live=True)
    assert live.records == 20 and [p.kind for p in live.problems] == ["abort-file"]
    at_rest = import_store(grower.root, tmp_path / "at-rest")
    assert [p.kind for p in at_rest.errors] == ["wrong-size-file"]


@pytest.mark.parametrize("reader_class", [ColumnarStoreReader, StoreReader])
def test_a_file_retention_deletes_during_the_scan_moves_the_first_offset(tmp_path, reader_class):
    """The oldest file deleted after the files were listed: a live scan starts at the next one (its
    first_offset), with no problem; a scan of a store at rest reports the file unreadable."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(200)
    grower.shutdown()
    copy = tmp_path / "copy"
    shutil.copytree(grower.root, copy)
    live, at_rest = reader_class(grower.root, live=True), reader_class(copy)
    first = live.files[0]
    second = live.files[1].start
    first.path.unlink()
    (copy / "commitlog" / first.name).unlink()
    records = sum(1 for _ in live.entries())
    assert live.first_offset == second and live.problems == [] and records > 0
    list(at_rest.entries())
    assert [p.kind for p in at_rest.errors][:1] == ["unreadable-file"]


def test_damage_with_data_after_it_is_damage_in_a_live_import(tmp_path):
    """A record whose body no longer matches its CRC, with records after it, is damage in a live
    import as in any other: an error, and the scan stops there."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(10)
    middle = grower.store.commit_log.max_offset
    grower.grow(10)
    path = next(p for p in sorted((grower.root / "commitlog").iterdir())
                if int(p.name) <= middle < int(p.name) + FILE_SIZE)
    with open(path, "r+b") as fh:
        fh.seek(middle - int(path.name) + 100)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    live = import_store(grower.root, tmp_path / "run", live=True)
    assert [(p.kind, p.offset) for p in live.errors] == [("crc-mismatch", middle)] and live.records == 10


def test_imports_while_a_writer_process_appends_equal_a_fresh_import(tmp_path):
    """A separate process appends records (rolling over files) while live imports run one after
    another: none finds damage, each goes on from where the one before ended, and after the writer
    shuts the store down the run equals a fresh import in every table."""
    root = tmp_path / "store"
    root.mkdir()
    count = 2400
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    writer = subprocess.Popen([sys.executable, str(WRITER), str(root), str(count)], env=env,
                              stderr=subprocess.PIPE, text=True)
    run = tmp_path / "runs" / "live"
    marker = tmp_path / "imported"
    imports = []
    try:
        while writer.poll() is None and len(imports) < 2000:
            if not (root / "commitlog").is_dir():
                continue
            summary = import_store(root, run, broker="broker-a", live=True)
            assert summary.errors == [], summary.errors
            if imports:
                assert summary.resumed_from == imports[-1].next_offset, summary.full_import_reason
            imports.append(summary)
            with open(marker, "a") as fh:
                fh.write(f"{summary.records}\n")
    finally:
        if writer.poll() is None:
            writer.kill()
        _, err = writer.communicate()
    assert writer.returncode == 0, err
    final = import_store(root, run, broker="broker-a", live=True)
    assert final.records == count and final.resumed_from == imports[-1].next_offset
    import_store(root, tmp_path / "fresh" / "live", broker="broker-a", live=True)
    assert rows_of(run) == rows_of(tmp_path / "fresh" / "live")
    in_flight = sum(1 for s in imports if any(p.kind == "in-flight" for p in s.problems))
    print(f"{len(imports)} imports while writing, {in_flight} saw a record in flight; "
          f"bytes read per import: max {max(s.bytes_read for s in imports)}, total "
          f"{sum(s.bytes_read for s in imports) + final.bytes_read}, log {final.valid_end}")


def test_a_consume_queue_unit_being_written_is_read_again_by_the_next_import(tmp_path):
    """A live import that reads the unit a broker is writing at the end of a consume queue (here a
    schedule queue's newest unit with its last bytes, the due time, not written yet) keeps its mark
    at that unit: the next import reads it again and its row is the written unit's, as in a fresh
    import."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(30)
    run = tmp_path / "run"
    import_store(grower.root, run, broker="broker-a", live=True)
    grower.grow(6)  # record 30 is delayed: one more unit in the schedule queue
    queue = sorted((grower.root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2").iterdir())[-1]
    units = queue.read_bytes()
    end = len(units.rstrip(b"\0"))
    end += -end % 20
    last = units[end - 20:end]
    with open(queue, "r+b") as fh:  # the due time not written yet
        fh.seek(end - 8)
        fh.write(bytes(8))
    torn = import_store(grower.root, run, broker="broker-a", live=True)
    assert torn.resumed_from is not None
    due = [r["due_ts"] for r in pq.read_table(run / "parquet" / "schedule_units").to_pylist()]
    assert min(due).timestamp() == 0  # the half-written unit's row, provisional
    with open(queue, "r+b") as fh:
        fh.seek(end - 20)
        fh.write(last)
    import_store(grower.root, run, broker="broker-a", live=True)
    grower.shutdown()
    import_store(grower.root, run, broker="broker-a")
    import_store(grower.root, tmp_path / "fresh" / "run", broker="broker-a")
    assert rows_of(run) == rows_of(tmp_path / "fresh" / "run")
