"""A DLedger node's index files (dledger-<id>/index/) checked against its entries, on the index and
data files of one real 4.9.4 group's run (tests/data/rocketmq-dledger-index-4.9.4)."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
from testdata import DLEDGER_FIXTURES, DLEDGER_INDEX_FIXTURES, DLEDGER_REPLICAS

from broker_core.export.columnar import ColumnarStoreReader
from broker_core.store.dledger_index import KIND_INDEX_MISMATCH, MAX_REPORTED
from broker_core.store.reader import StoreReader

UNIT = 32
INDEX_FILE = "00000000000000000000"


def _copy(tmp_path, node):
    store = tmp_path / node
    shutil.copytree(DLEDGER_INDEX_FIXTURES / node, store)
    return store, store / f"dledger-{node[-2:]}" / "index" / INDEX_FILE


def _mismatches(store, reader_class=StoreReader):
    reader = reader_class(store)
    return [p for p in reader.check() if p.kind == KIND_INDEX_MISMATCH], reader


def _patch(path, offset, fmt, value):
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("node", DLEDGER_REPLICAS)
@pytest.mark.parametrize("reader_class", [StoreReader, ColumnarStoreReader])
def test_a_clean_real_group_s_index_agrees_with_its_entries(node, reader_class):
    """Every replica's units name its entries: nothing is reported (n2's index also holds its
    uncommitted tail, 102-103, as it appended it)."""
    reader = reader_class(DLEDGER_INDEX_FIXTURES / node)
    assert reader.check() == []
    manifest = json.loads((DLEDGER_INDEX_FIXTURES / "manifest.json").read_text())
    end_index = int(manifest["replicas"][node]["checkpoint"].split("endIndex=")[1])
    assert reader.raft.last_index == end_index
    index_file = DLEDGER_INDEX_FIXTURES / node / f"dledger-{node[-2:]}" / "index" / INDEX_FILE
    assert index_file.stat().st_size >= (end_index + 1) * UNIT  # the units checked are in the file


@pytest.mark.parametrize(("field", "at", "fmt", "value", "why"), [
    ("term", 24, ">q", 7, "term 7, the entry's is 1"),
    ("pos", 4, ">q", 48, "pos 48 holds no entry of index 5"),
    ("magic", 0, ">i", 2, "magic 2, not 1"),
    ("size", 12, ">i", 49, "size 49, the entry's is"),
    ("index", 16, ">q", 6, "the unit names index 6"),
])
@pytest.mark.parametrize("reader_class", [StoreReader, ColumnarStoreReader])
def test_a_changed_unit_is_reported_naming_the_node_file_and_index(tmp_path, field, at, fmt, value, why,
                                                                    reader_class):
    store, index_file = _copy(tmp_path, "broker-a-n0")
    _patch(index_file, 5 * UNIT + at, fmt, value)
    found, reader = _mismatches(store, reader_class)
    assert [(p.file, p.offset, p.severity) for p in found] == [
        (f"dledger-n0/index/{INDEX_FILE}", 5 * UNIT, "warning")]
    assert "node n0" in found[0].reason and "entry 5 " in found[0].reason and why in found[0].reason, field
    assert reader.raft.last_index == 111  # the entries are read as before


def test_a_zeroed_unit_and_a_unit_the_cut_file_lacks_are_reported(tmp_path):
    store, index_file = _copy(tmp_path, "broker-a-n1")
    data = bytearray(index_file.read_bytes())
    data[3 * UNIT:4 * UNIT] = bytes(UNIT)
    index_file.write_bytes(bytes(data[:111 * UNIT]))  # entry 111's unit dropped from the file's end
    found, _ = _mismatches(store)
    assert [(p.offset, p.reason.split(": ", 2)[-1]) for p in found] == [
        (3 * UNIT, "the unit is zeros"), (111 * UNIT, "no unit: the index files end before it")]


def test_stale_units_past_the_last_entry_are_not_a_problem(tmp_path):
    """A truncation moves the index's write position without zeroing: units past the last entry
    may name entries the data no longer holds."""
    store, index_file = _copy(tmp_path, "broker-a-n2")
    data = bytearray(index_file.read_bytes())
    data[104 * UNIT:105 * UNIT] = data[103 * UNIT:104 * UNIT]
    struct.pack_into(">q", data, 104 * UNIT + 16, 104)
    index_file.write_bytes(bytes(data))
    assert _mismatches(store)[0] == []


def test_every_unit_wrong_is_reported_up_to_a_bound_then_counted(tmp_path):
    store, index_file = _copy(tmp_path, "broker-a-n0")
    index_file.write_bytes(bytes(index_file.stat().st_size))
    found, _ = _mismatches(store)
    assert len(found) == MAX_REPORTED + 1
    assert f"node n0: {112 - MAX_REPORTED} more index units disagree" in found[-1].reason


def test_a_missing_index_file_and_a_store_without_index_say_what_they_should(tmp_path):
    store, index_file = _copy(tmp_path, "broker-a-n0")
    index_file.unlink()
    found, _ = _mismatches(store)
    assert len(found) == MAX_REPORTED + 1 and found[0].file == "dledger-n0/index"
    shutil.rmtree(index_file.parent)
    assert _mismatches(store)[0] == []
    assert StoreReader(DLEDGER_FIXTURES / "broker-a-n0").check() == []  # the fixture kept no index/


def test_a_file_in_index_that_is_not_an_index_file_is_named_and_skipped(tmp_path):
    store, index_file = _copy(tmp_path, "broker-a-n0")
    (index_file.parent / "00000000000000000000.tmp").write_bytes(b"x")
    problems = StoreReader(store).check()
    assert [(p.kind, p.file, p.severity) for p in problems] == [
        ("bad-file-name", "dledger-n0/index/00000000000000000000.tmp", "warning")]
