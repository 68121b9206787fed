"""A model-written store that grows step by step, and the rows of a run's tables, for the tests of
imports that continue earlier ones."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pyarrow.parquet as pq

from broker_core.export.schema import RAW_TABLES
from broker_core.export.store_import import import_store
from broker_core.store.config_files import save_consumer_offsets
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

FILE_SIZE = 16 * 1024  # small commit-log files, so a few hundred records roll over several
_SIZE_MAGIC = struct.Struct(">iI")
_RECORD_MAGICS = (0xDAA320A7, 0xDAA320A8)


class GrowingStore:
    """A model-written store that grows in steps, flushed to disk after each."""

    def __init__(self, root: Path):
        self.root = root
        self.now = 1_700_000_000_000
        self.count = 0
        self.store = MessageStore(root, StoreConfig(commitlog_file_size_bytes=FILE_SIZE), self.clock)
        assert self.store.load()
        self.store.start()

    def clock(self) -> int:
        return self.now

    def grow(self, n: int, prefix: str = "K") -> None:
        for _ in range(n):
            i = self.count
            self.count += 1
            self.now += 7
            props = {"UNIQ_KEY": f"{prefix}-{i}", "TAGS": "t"}
            if i % 5 == 0:
                props["DELAY"] = "3"
            topic = "Orders" if i % 3 else "%RETRY%g1"
            assert self.store.put_message(MessageInner(topic, i % 2, f"body {prefix} {i}".encode() * 3, props)).ok
        self.store.flush()
        save_consumer_offsets(self.root / "config", {"Orders@g1": {0: self.count // 4, 1: self.count // 5}})

    def shutdown(self) -> None:
        self.store.shutdown()


def rows_of(run: Path) -> dict[str, list[str]]:
    """Every raw table's rows, sorted (row groups and part files may differ; the rows may not)."""
    out = {}
    for table in RAW_TABLES:
        rows = pq.read_table(run / "parquet" / table).to_pylist()
        for row in rows:
            row.pop("wall_seconds", None)
        out[table] = sorted(map(repr, rows))
    return out


def fresh(store: Path, tmp_path: Path, name: str, **kw) -> Path:
    out = tmp_path / "fresh" / name
    shutil.rmtree(out, ignore_errors=True)
    import_store(store, out, name=name, **kw)
    return out


def cut_in_half(store: Path) -> tuple[Path, bytes, int]:
    """Make ``store`` what it was when half the records of its newest commit-log file were written
    (zeros from the record boundary in the middle on); return the file, its bytes before the cut
    (to write back: the store grown again) and the records after the cut."""
    last = sorted((store / "commitlog").iterdir())[-1]
    data = last.read_bytes()
    pos, bounds = 0, [0]
    while pos + 8 <= len(data):
        total, magic = _SIZE_MAGIC.unpack_from(data, pos)
        if total <= 0 or magic not in _RECORD_MAGICS:
            break
        pos += total
        bounds.append(pos)
    cut = bounds[len(bounds) // 2]
    with open(last, "r+b") as fh:
        fh.seek(cut)
        fh.write(bytes(len(data) - cut))
    return last, data, len(bounds) - 1 - len(bounds) // 2
