"""Importing a store again into the same run and broker: only the new part is read, and every table
equals a fresh import of the grown store."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from growing_store import FILE_SIZE, GrowingStore, fresh, rows_of

from broker_core.export.broker_parts import part_name
from broker_core.export.increments import INCREMENT_PARTS_MAX
from broker_core.export.store_import import import_store
from broker_core.store.message_store import MessageStore, StoreConfig


@pytest.mark.parametrize("decoder", ["columnar", "reference"])
def test_imports_at_growth_points_equal_one_fresh_import(tmp_path, decoder):
    """Importing a growing store at several points (file roll-overs, delayed records, offsets that
    move) reads only the new bytes each time and ends with every table equal to a fresh import."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "runs" / "live"
    read = []
    for step in (40, 1, 0, 90, 25, 160):
        grower.grow(step)
        summary = import_store(grower.root, run, broker="broker-a", decoder=decoder)
        read.append((summary.resumed_from, summary.bytes_read, summary.valid_end))
        assert summary.problems == [] or all(p.severity == "warning" for p in summary.problems)
    grower.shutdown()
    last = import_store(grower.root, run, broker="broker-a", decoder=decoder)
    assert read[0][0] is None and all(r[0] is not None for r in read[1:])
    # Each import read from where the one before ended, and nothing before it.
    for (_, _, end), (start, nbytes, new_end) in zip(read, read[1:], strict=False):
        assert start == end and nbytes == new_end - start
    assert last.resumed_from == read[-1][2] and last.records_added == 0 and last.bytes_read == 0
    whole = import_store(grower.root, tmp_path / "fresh" / "live", name="live", broker="broker-a", decoder=decoder)
    assert whole.bytes_read == whole.valid_end and whole.records == last.records == grower.count
    assert rows_of(run) == rows_of(tmp_path / "fresh" / "live")
    parts = sorted(p.name for p in (run / "parquet" / "commitlog").iterdir())
    # The first import, then one file per import that found new records (not the one that found none).
    assert parts[-1] == part_name("broker-a") and len(parts) == 5
    assert last.to_json()["bytes_read"] == 0 and last.to_json()["next_offset"] == last.valid_end


def test_a_run_without_broker_continues_too_and_other_brokers_are_kept(tmp_path):
    """The store as a whole run (no --broker) continues as well; with two brokers in a run, one
    broker's increment leaves the other's files and state alone."""
    a, b = GrowingStore(tmp_path / "a"), GrowingStore(tmp_path / "b")
    a.grow(30)
    b.grow(20)
    import_store(a.root, tmp_path / "solo")
    import_store(a.root, tmp_path / "two", broker="broker-a")
    import_store(b.root, tmp_path / "two", broker="broker-b")
    a.grow(50)
    solo = import_store(a.root, tmp_path / "solo")
    two = import_store(a.root, tmp_path / "two", broker="broker-a")
    assert solo.resumed_from is not None and two.resumed_from is not None and two.brokers == ["broker-a", "broker-b"]
    b.grow(5)
    assert import_store(b.root, tmp_path / "two", broker="broker-b").records_added == 5
    assert rows_of(tmp_path / "solo") == rows_of(fresh(a.root, tmp_path, "solo"))
    want = tmp_path / "fresh" / "two"
    import_store(a.root, want, broker="broker-a")
    import_store(b.root, want, broker="broker-b")
    assert rows_of(tmp_path / "two") == rows_of(want)


def test_a_tail_rewritten_by_a_restart_makes_a_full_import(tmp_path):
    """When the bytes under the remembered offset changed (a restart truncated the tail and new
    records were written over it), the import says so and reads the store whole: no stale rows."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(60)
    snapshot = tmp_path / "snapshot"
    grower.store.flush()
    shutil.copytree(grower.root, snapshot)
    grower.grow(30)
    grower.shutdown()
    run = tmp_path / "run"
    import_store(grower.root, run, broker="broker-a")
    # The broker lost the last 30 records (their page cache) and wrote 10 others in their place.
    shutil.rmtree(grower.root)
    shutil.copytree(snapshot, grower.root)
    (grower.root / "lock").unlink(missing_ok=True)
    again = GrowingStore.__new__(GrowingStore)
    again.root, again.now, again.count = grower.root, grower.now + 1000, 60
    again.store = MessageStore(grower.root, StoreConfig(commitlog_file_size_bytes=FILE_SIZE), again.clock)
    assert again.store.load()
    again.store.start()
    again.grow(10, prefix="NEW")
    again.shutdown()
    summary = import_store(grower.root, run, broker="broker-a")
    assert summary.resumed_from is None and "changed under the last import" in summary.full_import_reason
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))
    keys = pq.read_table(run / "parquet" / "commitlog").column("uniq_key").to_pylist()
    assert "K-70" not in keys and "NEW-65" in keys


@pytest.mark.parametrize("decoder", ["columnar", "reference"])
def test_retention_since_the_last_import_drops_the_deleted_files_rows_and_goes_on(tmp_path, decoder):
    """Oldest commit-log files deleted by retention since the last import (not the one it ended in):
    the next import drops their rows from the run (a file holding some of them is rewritten
    without them), reads only the new records, and equals a fresh import of the store as it is."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(150)
    import_store(grower.root, run, broker="broker-a", decoder=decoder)
    grower.grow(150)
    import_store(grower.root, run, broker="broker-a", decoder=decoder)
    grower.grow(200)
    second_import_ended = import_store(grower.root, run, broker="broker-a", decoder=decoder).resumed_from
    grower.grow(40)
    files = sorted((grower.root / "commitlog").iterdir())
    doomed = [f for f in files if int(f.name) + FILE_SIZE <= second_import_ended][:3]
    assert len(doomed) >= 2, "the store is too small for the test"
    for f in doomed:
        f.unlink()
    summary = import_store(grower.root, run, broker="broker-a", decoder=decoder)
    assert summary.resumed_from is not None and summary.full_import_reason is None
    assert summary.first_offset == int(doomed[-1].name) + FILE_SIZE and summary.records_added == 40
    want = fresh(grower.root, tmp_path, "run", broker="broker-a", decoder=decoder)
    assert rows_of(run) == rows_of(want)
    assert summary.records_by_topic == import_store(grower.root, tmp_path / "again", broker="broker-a").records_by_topic
    grower.grow(5)
    grower.shutdown()
    assert import_store(grower.root, run, broker="broker-a", decoder=decoder).records_added == 5
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a", decoder=decoder))


def test_retention_past_where_the_last_import_ended_makes_a_full_import(tmp_path):
    """Files deleted up to and past the one the last import ended in (records were deleted before
    any import read them, a gap): the import says so, reads the store whole, and equals a fresh
    import of the store as it is now."""
    grower = GrowingStore(tmp_path / "store")
    grower.grow(100)
    run = tmp_path / "run"
    first = import_store(grower.root, run, broker="broker-a")
    grower.grow(200)
    files = sorted((grower.root / "commitlog").iterdir())
    doomed = [f for f in files if int(f.name) <= first.valid_end + FILE_SIZE]
    for f in doomed:
        f.unlink()
    summary = import_store(grower.root, run, broker="broker-a")
    assert summary.resumed_from is None and "retention deleted the commit-log file" in summary.full_import_reason
    assert "were deleted before any import read them" in summary.full_import_reason
    assert summary.first_offset == int(doomed[-1].name) + FILE_SIZE
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))


def test_another_store_under_the_same_broker_replaces_it(tmp_path):
    """A different store directory imported as the same broker is read whole and replaces it."""
    a, b = GrowingStore(tmp_path / "a"), GrowingStore(tmp_path / "b")
    a.grow(30)
    b.grow(12)
    run = tmp_path / "run"
    import_store(a.root, run, broker="broker-a")
    summary = import_store(b.root, run, broker="broker-a")
    assert summary.resumed_from is None and "another store" in summary.full_import_reason
    assert summary.records == 12 and rows_of(run) == rows_of(fresh(b.root, tmp_path, "run", broker="broker-a"))


def test_many_increments_are_merged_into_one_file(tmp_path):
    """After INCREMENT_PARTS_MAX increments the next import merges the broker's commitlog files
    into one, and the rows stay those of a fresh import."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(3)
    import_store(grower.root, run, broker="broker-a")
    for _ in range(INCREMENT_PARTS_MAX):
        grower.grow(1)
        import_store(grower.root, run, broker="broker-a")
    assert len(list((run / "parquet" / "commitlog").iterdir())) == INCREMENT_PARTS_MAX + 1
    grower.grow(2)
    summary = import_store(grower.root, run, broker="broker-a")
    assert summary.records_added == 2
    assert sorted(p.name for p in (run / "parquet" / "commitlog").iterdir())[0].startswith("part-broker-a+")
    assert len(list((run / "parquet" / "commitlog").iterdir())) == 2
    grower.shutdown()
    assert import_store(grower.root, run, broker="broker-a").records_added == 0
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))


# What an increment reads of the commit log beyond the bytes the store gained: the last record's
# fixed header, the BLANK after it when the last import left its file through one (the fingerprint
# the import checks before it goes on), and the 8 bytes where the data ends.
TAIL_CHECK_BYTES_MAX = 64 + 8 + 8
# An increment whose data ends in a file no import read before checks that the rest of the data the
# file system holds for it (to the end of its last block) is zeros, as a fresh import does.
ZERO_CHECK_BYTES_MAX = 4096


def _config_bytes(root) -> int:
    """The config files' and checkpoint's bytes: the part of the bound an import reads whole."""
    return sum(p.stat().st_size for p in (root / "config").glob("*.json")) + (root / "checkpoint").stat().st_size


def _cq_units(root) -> int:
    """The valid units of every consume queue of the store."""
    units = 0
    for queue in (root / "consumequeue").glob("*/*"):
        data = b"".join(p.read_bytes() for p in sorted(queue.iterdir()))
        for at in range(0, len(data), 20):
            if int.from_bytes(data[at + 8:at + 12], "big", signed=True) <= 0:
                break
            units += 1
    return units


@pytest.mark.parametrize("decoder", ["columnar", "reference"])
def test_an_increment_reads_no_more_than_the_bound(tmp_path, decoder):
    """An increment of a store grown by N records reads at most the bound: the new commit-log bytes,
    the new consume-queue units (exactly those, nothing past them), the config files and checkpoint;
    of the commit log only the tail's fingerprint and the end of the data beside the new bytes."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(1500)
    first = import_store(grower.root, run, broker="broker-a", decoder=decoder)
    assert first.store_bytes_read["consumequeue"] >= 20 * 1500
    assert first.store_bytes_read["commitlog"] >= first.valid_end
    units = _cq_units(grower.root)
    for step in (1, 0, 7, 60, 200, 0):
        grower.grow(step)
        summary = import_store(grower.root, run, broker="broker-a", decoder=decoder)
        read = summary.store_bytes_read
        new_units, units = _cq_units(grower.root) - units, _cq_units(grower.root)
        assert summary.resumed_from is not None and summary.records_added == step == new_units
        bound = summary.bytes_read + 20 * new_units + _config_bytes(grower.root)
        assert sum(read.values()) <= bound, (step, read, bound)
        assert read.get("consumequeue", 0) == 20 * new_units, read
        new_file = summary.next_offset // FILE_SIZE != summary.resumed_from // FILE_SIZE
        most = summary.bytes_read + TAIL_CHECK_BYTES_MAX + (ZERO_CHECK_BYTES_MAX if new_file else 0)
        assert summary.bytes_read <= read["commitlog"] <= most, read
        assert read["checkpoint"] == 40 and read["config"] == _config_bytes(grower.root) - 4096, read
    grower.shutdown()
    assert import_store(grower.root, run, broker="broker-a", decoder=decoder).records_added == 0
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a", decoder=decoder))


def test_units_a_queue_gets_after_its_records_are_read_by_the_next_import(tmp_path):
    """A unit the broker writes after the import read its record (dispatch behind the commit log)
    is read by the next import, although no new record names its queue: the marks keep how far
    the records named each queue."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(30)
    import_store(grower.root, run, broker="broker-a")
    grower.grow(4)
    queue = sorted((grower.root / "consumequeue" / "Orders" / "1").iterdir())[-1]
    units = queue.read_bytes()
    end = len(units.rstrip(b"\0"))
    end += -end % 20
    with open(queue, "r+b") as fh:  # the queue's last unit not written yet
        fh.seek(end - 20)
        fh.write(bytes(20))
    import_store(grower.root, run, broker="broker-a")
    with open(queue, "r+b") as fh:
        fh.seek(end - 20)
        fh.write(units[end - 20:end])
    again = import_store(grower.root, run, broker="broker-a")
    assert again.records_added == 0 and again.store_bytes_read["consumequeue"] == 20
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))


def test_units_past_the_log_make_the_next_import_read_the_queues_whole(tmp_path):
    """A consume-queue unit pointing past the valid log at rest is a problem, and the queues are
    read whole by the next import (which may find the log grown to it): the rows stay a fresh
    import's; without such units the marks are kept."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(30)
    import_store(grower.root, run, broker="broker-a")
    grower.grow(10)
    queue = sorted((grower.root / "consumequeue" / "Orders" / "0").iterdir())[-1]
    units = queue.read_bytes()
    end = len(units.rstrip(b"\0"))
    end += -end % 20
    end -= 20  # the queue's last unit, which a new record names: the increment reads it
    with open(queue, "r+b") as fh:  # now naming a record past the log's end
        fh.seek(end)
        fh.write((10**9).to_bytes(8, "big") + (100).to_bytes(4, "big") + (0).to_bytes(8, "big"))
    damaged = import_store(grower.root, run, broker="broker-a")
    assert damaged.resumed_from is not None and any(p.kind == "cq-past-commitlog" for p in damaged.problems)
    assert json.loads((run / "import_state" / "broker-a.json").read_text())["queues"] is None
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))
    with open(queue, "r+b") as fh:
        fh.seek(end)
        fh.write(units[end:end + 20])
    again = import_store(grower.root, run, broker="broker-a")
    assert not any(p.kind == "cq-past-commitlog" for p in again.problems)
    assert again.store_bytes_read["consumequeue"] >= 20 * 40
    assert json.loads((run / "import_state" / "broker-a.json").read_text())["queues"] is not None
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))


def test_a_next_file_created_ahead_is_not_read_until_it_holds_data(tmp_path):
    """A commit-log file a broker created ahead of its writes (sparse, never written) is zeros without
    being read; one whose first bytes hold data is unreachable data, as in a fresh import."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(30)
    grower.shutdown()
    import_store(grower.root, run, broker="broker-a")
    last = sorted((grower.root / "commitlog").iterdir())[-1]
    ahead = last.with_name(f"{int(last.name) + FILE_SIZE:020d}")
    with open(ahead, "wb") as fh:
        fh.truncate(FILE_SIZE)
    quiet = import_store(grower.root, run, broker="broker-a")
    assert quiet.records_added == 0 and quiet.store_bytes_read["commitlog"] == 64 + 8, quiet.store_bytes_read
    with open(ahead, "r+b") as fh:
        fh.write(b"\x01")
    found = import_store(grower.root, run, broker="broker-a")
    assert any(p.kind == "unreachable-data" and p.offset == int(ahead.name) for p in found.problems)
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))


def test_after_a_live_import_only_the_units_its_marks_stand_at_are_read_again(tmp_path):
    """The import after a live one reads again the unit each queue's mark stands at (a live broker
    may have been writing it) and nothing else beyond the bound: not the SCHEDULE record a delay
    level's delay is read from, whose store time the live import kept."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(40)
    grower.shutdown()
    import_store(grower.root, run, broker="broker-a", live=True)
    queues = sum(1 for q in (grower.root / "consumequeue").glob("*/*") if q.is_dir())
    quiet = import_store(grower.root, run, broker="broker-a")
    assert quiet.records_added == 0 and quiet.full_import_reason is None
    assert quiet.store_bytes_read["commitlog"] == 64 + 8, quiet.store_bytes_read
    assert quiet.store_bytes_read["consumequeue"] == 20 * queues, quiet.store_bytes_read
    again = import_store(grower.root, run, broker="broker-a")
    assert again.store_bytes_read["commitlog"] == 64 + 8 and "consumequeue" not in again.store_bytes_read
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))


def test_a_last_record_rewritten_in_place_with_another_store_time_makes_a_full_import(tmp_path):
    """The tail's fingerprint is the last record's fixed header: the same record written again at
    the same place at another time (its store timestamp differs, its body and size do not) is a
    store that changed, read whole."""
    grower = GrowingStore(tmp_path / "store")
    run = tmp_path / "run"
    grower.grow(30)
    grower.shutdown()
    import_store(grower.root, run, broker="broker-a")
    offset, size = json.loads((run / "import_state" / "broker-a.json").read_text())["tail"]["last_record"]
    assert size == 64
    path = grower.root / "commitlog" / f"{offset // FILE_SIZE * FILE_SIZE:020d}"
    with open(path, "r+b") as fh:
        fh.seek(offset % FILE_SIZE + 56)  # STORETIMESTAMP of a record with an IPv4 born host
        stored = int.from_bytes(fh.read(8), "big")
        fh.seek(offset % FILE_SIZE + 56)
        fh.write((stored + 1).to_bytes(8, "big"))
    summary = import_store(grower.root, run, broker="broker-a")
    assert summary.resumed_from is None and "changed under the last import" in summary.full_import_reason
    assert rows_of(run) == rows_of(fresh(grower.root, tmp_path, "run", broker="broker-a"))
