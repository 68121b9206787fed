"""Reading a DLedger commit log: the stores of a real three-node 4.9.4 DLedger group
(tests/data/rocketmq-dledger-4.9.4/README.md) and copies of them with bytes changed."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from testdata import DLEDGER_FIXTURES, DLEDGER_MANIFEST, DLEDGER_REPLICAS

from broker_core.errors import BadInputError
from broker_core.export.columnar import ColumnarStoreReader, RecordColumns
from broker_core.store.dledger import ENTRY_HEADER_BYTES, parse_checkpoint, read_header
from broker_core.store.reader import StoreReader

MANIFEST = json.loads(DLEDGER_MANIFEST.read_text())


def _store(node: str) -> Path:
    return DLEDGER_FIXTURES / node


def _records(reader: StoreReader) -> list:
    return [e for e in reader.entries() if e.record is not None]


def _data_file(root: Path, name: str) -> Path:
    return next(root.glob("dledger-*")) / "data" / name


@pytest.mark.parametrize("node", DLEDGER_REPLICAS)
def test_every_consume_queue_unit_names_a_message_at_its_entry_plus_48(node):
    """Each consume-queue unit's offset is a record's phys_offset (its entry's pos + 48, the
    PHYSICALOFFSET the append hook wrote) and its size the record's TOTALSIZE."""
    reader = StoreReader(_store(node))
    records = {e.phys_offset: e for e in _records(reader)}
    assert not [p for p in reader.problems if p.kind == "phys-offset-mismatch"]
    units = 0
    for _topic, _queue, files in reader.consume_queues():
        for _path, _pos, unit in reader.cq_units(files):
            entry = records[unit.phys_offset]
            assert entry.size == unit.size == entry.record.total_size
            assert entry.record.phys_offset == unit.phys_offset
            assert entry.raft.committed
            units += 1
    assert units > 100
    for entry in records.values():
        with open(_data_file(_store(node), entry.file_name), "rb") as fh:
            fh.seek(entry.phys_offset - int(entry.file_name) - ENTRY_HEADER_BYTES)
            header = read_header(fh.read(ENTRY_HEADER_BYTES), 0)
        assert (header.index, header.term, header.message_offset) == (entry.raft.index, entry.raft.term,
                                                                      entry.phys_offset)
        assert header.body_len == entry.size and header.size == entry.raft.entry_size == entry.size + 48
        assert (header.channel, header.chain_crc, header.body_crc) == (0, 0, 0)


@pytest.mark.parametrize("node", DLEDGER_REPLICAS)
def test_the_first_data_file_ends_in_a_dledger_blank(node):
    """The first 32 KiB data file ends with DLedger's blank (magic -1, then the bytes left) and the
    scan goes on in the next file, whose first entry follows the last one's index."""
    reader = StoreReader(_store(node))
    entries = list(reader.entries())
    blanks = [e for e in entries if e.record is None]
    assert len(blanks) == 1 == reader.blank_count
    data = _data_file(_store(node), blanks[0].file_name).read_bytes()
    at = blanks[0].phys_offset - int(blanks[0].file_name)
    assert struct.unpack_from(">ii", data, at) == (-1, len(data) - at) == (-1, blanks[0].size)
    after = [e for e in entries if e.record is not None and e.file_name != blanks[0].file_name]
    before = [e for e in entries if e.record is not None and e.file_name == blanks[0].file_name]
    assert after and after[0].raft.index == before[-1].raft.index + 1
    assert not [p for p in reader.problems if p.severity == "error"]


@pytest.mark.parametrize("node", DLEDGER_REPLICAS)
def test_checkpoint_files_read_as_the_manifest_recorded_them(node):
    """dledger-<id>/checkpoint is Java properties: committedIndex and endIndex."""
    text = MANIFEST["replicas"][node]["checkpoint"]
    reader = StoreReader(_store(node))
    assert reader.dledger.self_id == node.rsplit("-", 1)[1]
    assert reader.dledger_checkpoint == parse_checkpoint(text)
    assert f"committedIndex={reader.dledger_checkpoint.committed_index}" in text


def test_the_tail_past_the_committed_index_is_uncommitted_not_damage():
    """n2's entries 102 and 103 (sends that failed: no follower acknowledged them) are past its
    checkpoint's committedIndex 101: yielded as uncommitted, not counted as records, no problem."""
    reader = StoreReader(_store("broker-a-n2"))
    records = _records(reader)
    tail = [e for e in records if not e.raft.committed]
    assert [(e.raft.index, e.raft.term) for e in tail] == [(102, 1), (103, 1)]
    assert [e.record.keys for e in tail] == ["b-0", "b-1"]
    assert reader.record_count == len(records) - 2 == 102
    assert reader.raft.uncommitted == 2 and reader.raft.first_uncommitted_index == 102
    assert reader.raft.first_uncommitted_offset == tail[0].phys_offset - ENTRY_HEADER_BYTES
    assert reader.raft.committed_through == 101 and reader.raft.committed_by == "checkpoint"
    assert reader.problems == []
    assert {e.record.keys for e in reader.records()}.isdisjoint({"b-0", "b-1"})
    # The clients saw every one of them fail.
    failed = {e["keys"] for e in MANIFEST["events"] if e["ev"] == "send" and e["status"] != "SEND_OK"}
    assert {"b-0", "b-1"} <= failed


def test_a_stale_checkpoint_is_overruled_by_what_the_consume_queues_name(tmp_path):
    """A broker killed between two checkpoints leaves committedIndex behind entries it already
    dispatched; an entry a consume queue names was committed, so it stays a record."""
    store = tmp_path / "n0"
    shutil.copytree(_store("broker-a-n0"), store)
    (store / "dledger-n0" / "checkpoint").write_text("committedIndex=50\nendIndex=121\n")
    reader = StoreReader(store)
    records = _records(reader)
    named = max(u.phys_offset for _t, _q, files in reader.consume_queues() for _p, _o, u in reader.cq_units(files))
    assert reader.raft.consume_queue_offset == named
    committed = [e for e in records if e.raft.committed]
    assert committed[-1].phys_offset == named and reader.raft.committed_by == "consume queue"
    assert all(not e.raft.committed for e in records if e.phys_offset > named)
    assert reader.record_count == len(committed)


@pytest.mark.parametrize("reader_class", [StoreReader, ColumnarStoreReader])
@pytest.mark.parametrize(("field", "value", "why"), [
    (0, b"\x00\x00\x00\x02", "magic 2, not 1"),  # magic
    (24, b"\x00" * 7 + b"\x07", "stores pos 7"),  # pos
    (8, b"\x00" * 7 + b"\x09", "index 9 does not follow"),  # index
])
def test_a_broken_entry_header_is_damage_naming_the_file_and_offset(tmp_path, reader_class, field, value, why):
    """One changed header field of an entry in the checked files ends the log there: an error
    naming the data file and the entry's offset, nothing after it read (both decoders)."""
    store = tmp_path / "n0"
    shutil.copytree(_store("broker-a-n0"), store)
    victim = [e for e in _records(StoreReader(store)) if e.raft.index == 30][0]
    entry_at = victim.phys_offset - ENTRY_HEADER_BYTES
    path = _data_file(store, victim.file_name)
    data = bytearray(path.read_bytes())
    at = entry_at - int(victim.file_name)
    data[at + field:at + field + len(value)] = value
    path.write_bytes(bytes(data))
    reader = reader_class(store)
    seen = list(reader.entries())
    rows = sum(b.num_rows if isinstance(b, RecordColumns) else b.record is not None for b in seen)
    assert rows == reader.record_count == 30
    errors = [p for p in reader.problems if p.severity == "error"]
    assert [(p.file, p.offset, p.kind) for p in errors][:1] == [
        (f"dledger-n0/data/{victim.file_name}", entry_at, "dledger-bad-entry")]
    assert why in errors[0].reason
    assert reader.valid_end == entry_at


def test_a_changed_message_byte_inside_an_entry_is_the_record_s_damage(tmp_path):
    """A flipped body byte of an entry's message fails its body CRC: a crc-mismatch at the
    message's offset (the entry's + 48), as in a commitlog/ file; the log ends before the entry."""
    store = tmp_path / "n0"
    shutil.copytree(_store("broker-a-n0"), store)
    victim = [e for e in _records(StoreReader(store)) if e.raft.index == 40][0]
    path = _data_file(store, victim.file_name)
    data = bytearray(path.read_bytes())
    body_at = victim.phys_offset - int(victim.file_name) + 100  # in the body (the header is 90-odd bytes)
    data[body_at] ^= 0xFF
    path.write_bytes(bytes(data))
    for reader_class in (StoreReader, ColumnarStoreReader):
        reader = reader_class(store)
        list(reader.entries())
        errors = [p for p in reader.problems if p.severity == "error"]
        assert errors and errors[0].file == f"dledger-n0/data/{victim.file_name}"
        assert errors[0].offset == victim.phys_offset
        assert reader.record_count == 40
        assert reader.valid_end == victim.phys_offset - ENTRY_HEADER_BYTES


def test_a_store_root_with_two_node_directories_is_refused(tmp_path):
    """A broker runs one DLedger node: two dledger-<id>/ directories under one root cannot be told apart."""
    store = tmp_path / "n0"
    shutil.copytree(_store("broker-a-n0"), store)
    shutil.copytree(store / "dledger-n0", store / "dledger-n1")
    with pytest.raises(BadInputError, match="2 DLedger node directories"):
        StoreReader(store)


def test_entries_kept_elsewhere_are_read_from_the_directory_given(tmp_path):
    """storePathDLedgerCommitLog moves data/ out of dledger-<id>/: without it the reader says
    where to point it; with it (--dledger-data) the log reads as before."""
    store = tmp_path / "n0"
    shutil.copytree(_store("broker-a-n0"), store)
    elsewhere = tmp_path / "dledger-commitlog"
    shutil.move(store / "dledger-n0" / "data", elsewhere)
    with pytest.raises(BadInputError, match="no data/ directory") as refused:
        StoreReader(store)
    assert "storePathDLedgerCommitLog" in refused.value.hint
    reader = StoreReader(store, dledger_data=elsewhere)
    assert len(_records(reader)) == 122 and reader.problems == []


@pytest.mark.parametrize("reader_class", [StoreReader, ColumnarStoreReader])
def test_bytes_after_the_checkpoints_last_entry_are_what_a_truncation_left(tmp_path, reader_class):
    """DLedger truncates by moving its write position, leaving the old bytes: a header that fails
    after the log reached the checkpoint's endIndex ends the log with a warning, not an error."""
    store = tmp_path / "n2"
    shutil.copytree(_store("broker-a-n2"), store)
    last = _records(StoreReader(store))[-1]
    path = _data_file(store, last.file_name)
    data = bytearray(path.read_bytes())
    end = last.phys_offset - int(last.file_name) + last.size
    data[end:end + 48] = bytes(range(1, 49))  # what an older, longer tail could have left there
    path.write_bytes(bytes(data))
    reader = reader_class(store)
    list(reader.entries())
    assert reader.raft.last_index == reader.dledger_checkpoint.end_index == 103
    assert [(p.kind, p.severity, p.offset) for p in reader.problems] == [
        ("dledger-left-behind", "warning", int(last.file_name) + end)]
    assert reader.valid_end == int(last.file_name) + end
