"""A store switched from normal mode to DLedger: its old commitlog/ files, then DLedger entries.

DLedgerCommitLog.recover (4.9.4), on a broker's first start in DLedger mode, pads the last old
commit-log file with a RocketMQ BLANK and creates the first DLedger data file at the end of it
(``dividedCommitlogOffset``); getData reads offsets below it from commitlog/ and the rest from
the DLedger files. No real broker was switched here: the store is built from real bytes, the
4.9.4 store fixture's commitlog/ and the DLedger fixture's entries moved to follow it (each entry's
pos and its message's PHYSICALOFFSET rewritten, as the broker would have written them there).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from testdata import CLEAN_STORE, DLEDGER_FIXTURES

from broker_core.constants import BLANK_MAGIC_CODE
from broker_core.export.columnar import ColumnarStoreReader, RecordColumns
from broker_core.export.parquet import read_table
from broker_core.export.store_import import import_store
from broker_core.store.dledger import ENTRY_HEADER, ENTRY_HEADER_BYTES
from broker_core.store.reader import StoreReader

FILE_BYTES = 16 * 1024  # the commitlog fixture's mappedFileSizeCommitLog, so the DLedger files' too
OLD_END = 55490  # where the fixture's old log ends (its fourth file)
_PHYS_IN_MESSAGE = 28  # PHYSICALOFFSET's place in a message


def _entries(node: Path, count: int) -> list[bytes]:
    """The first ``count`` entries of a DLedger fixture replica, as stored."""
    out, pos = [], 0
    data = b"".join(p.read_bytes() for p in sorted((node / "dledger-n0" / "data").iterdir()))
    while len(out) < count:
        magic, size = struct.unpack_from(">ii", data, pos)
        if magic == -1:
            pos += FILE_BYTES * 2 - pos % (FILE_BYTES * 2)  # the fixture's files are 32 KiB
            continue
        out.append(data[pos:pos + size])
        pos += size
    return out


def _switched_store(root: Path, entries: int = 60) -> tuple[Path, int]:
    """The old store with a BLANK after its data, and ``entries`` DLedger entries from the next file on."""
    shutil.copytree(CLEAN_STORE, root)
    last = root / "commitlog" / f"{OLD_END // FILE_BYTES * FILE_BYTES:020d}"
    data = bytearray(last.read_bytes())
    at = OLD_END % FILE_BYTES
    struct.pack_into(">iI", data, at, FILE_BYTES - at, BLANK_MAGIC_CODE)
    last.write_bytes(bytes(data))
    divided = (OLD_END // FILE_BYTES + 1) * FILE_BYTES
    data_dir = root / "dledger-n0" / "data"
    data_dir.mkdir(parents=True)
    files: dict[int, bytearray] = {}
    pos = divided
    for raw in _entries(DLEDGER_FIXTURES / "broker-a-n0", entries):
        start = pos - pos % FILE_BYTES
        if pos + len(raw) + 8 > start + FILE_BYTES:  # MmapFileList.preAppend: a blank, then the next file
            struct.pack_into(">ii", files[start], pos - start, -1, start + FILE_BYTES - pos)
            pos = start + FILE_BYTES
            start = pos
        buf = files.setdefault(start, bytearray(FILE_BYTES))
        entry = bytearray(raw)
        struct.pack_into(">q", entry, 24, pos)
        struct.pack_into(">q", entry, ENTRY_HEADER_BYTES + _PHYS_IN_MESSAGE, pos + ENTRY_HEADER_BYTES)
        buf[pos - start:pos - start + len(entry)] = entry
        pos += len(entry)
    for start, buf in files.items():
        (data_dir / f"{start:020d}").write_bytes(bytes(buf))
    (root / "dledger-n0" / "checkpoint").write_text(f"committedIndex={entries - 1}\nendIndex={entries - 1}\n")
    return root, divided


@pytest.mark.parametrize("reader_class", [StoreReader, ColumnarStoreReader])
def test_old_records_then_dledger_entries(tmp_path, reader_class):
    """The old files' 112 records (no Raft entry), then the entries from dividedCommitlogOffset on,
    each record at its entry + 48; the old files are kept as they are (DLedger recovery checks
    only its own last three files)."""
    root, divided = _switched_store(tmp_path / "store")
    reader = reader_class(root)
    assert [cf.dledger for cf in reader.files] == [False] * 4 + [True] * (len(reader.files) - 4)
    assert reader.files[4].start == divided
    assert reader.recovery_start_index() == 4 + max(0, len(reader.files) - 4 - 3)
    rows = []
    for item in reader.entries():
        if isinstance(item, RecordColumns):
            offsets = item.columns["phys_offset"].to_pylist()
            rows += [(o, item.raft is not None) for o in offsets]
        elif item.record is not None:
            rows.append((item.phys_offset, item.raft is not None))
    old = [o for o, raft in rows if not raft]
    new = [o for o, raft in rows if raft]
    assert len(old) == 112 and max(old) < divided
    assert len(new) == 60 and new[0] == divided + ENTRY_HEADER_BYTES
    assert reader.record_count == 172 and reader.raft.committed_through == 59
    assert reader.problems == [], [str(p) for p in reader.problems]


def test_both_decoders_import_a_switched_store_alike(tmp_path):
    """import-store reads a switched store with either decoder into the same rows."""
    root, divided = _switched_store(tmp_path / "store")
    runs = {}
    for decoder in ("columnar", "reference"):
        out = tmp_path / decoder
        summary = import_store(root, out, name="switched", decoder=decoder)
        assert summary.records == 172 and summary.errors == []
        runs[decoder] = sorted(map(repr, read_table(out, "commitlog").to_pylist()))
        entries = read_table(out, "dledger_entries").to_pylist()
        assert [e["raft_index"] for e in entries] == list(range(60))
        assert entries[0]["phys_offset"] == divided + ENTRY_HEADER_BYTES
    assert runs["columnar"] == runs["reference"]


def test_an_old_file_past_the_dledger_start_is_not_read(tmp_path):
    """An old commit-log file at or past the first DLedger file is named and left out."""
    root, divided = _switched_store(tmp_path / "store")
    shutil.copy(root / "commitlog" / f"{0:020d}", root / "commitlog" / f"{divided:020d}")
    reader = StoreReader(root)
    assert [p.kind for p in reader.problems] == ["commitlog-past-dledger"]
    assert sum(1 for cf in reader.files if not cf.dledger) == 4


def test_an_entry_header_is_what_the_writer_wrote():
    """The header struct is the 48 bytes DLedgerEntryCoder.encode writes."""
    assert ENTRY_HEADER.size == ENTRY_HEADER_BYTES == 48
