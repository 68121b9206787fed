"""Writing a run directory's Parquet tables, atomically.

A run directory is complete or absent: everything is written into a sibling temporary directory
and renamed into place at the end, so an interrupted run never looks complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.export.schema import RAW_TABLES
from broker_core.store.config_files import fsync_dir

ROW_GROUP_ROWS = 64 * 1024  # rows buffered before a row group is written: bounded memory
# Snappy, as Spark writes the lineage: every check and audit query reads these tables again, and
# under callgrind at 1M records the checks ran 13 % fewer instructions on snappy files than on zstd
# ones (the build 6 %), for files about 1.6x as large (bench/results/warehouse_build.md).
COMPRESSION = "snappy"


class EncodingWriter:
    """A Parquet file written one table (a row group, or more) at a time, each encoded on a thread of
    its own while the caller makes the next: Arrow's Parquet writer releases the GIL, so decoding
    and encoding share two cores. At most one table is in flight (memory stays bounded); the file
    is the one ``pq.ParquetWriter`` writes from the same calls. An error of the thread is raised by
    the next call; after one, :meth:`close` leaves the file without its footer, unreadable."""

    def __init__(self, path: Path | str, schema: pa.Schema, *, compression: str = COMPRESSION):
        self._writer = pq.ParquetWriter(path, schema, compression=compression)
        self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-encode")
        self._in_flight: Future | None = None

    def write_table(self, table: pa.Table) -> None:
        self._settle()
        self._in_flight = self._encoder.submit(self._writer.write_table, table)

    def _settle(self) -> None:
        """Wait for the table in flight; raise its error."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()

    def close(self) -> None:
        try:
            self._settle()
        finally:
            self._encoder.shutdown(wait=True)
        self._writer.close()


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary directory beside ``final``; on success it replaces ``final`` whole.

    On any exception the temporary directory is removed and ``final`` is left as it was. The
    previous ``final`` is renamed aside (``.<name>.old-<pid>``) and then removed; a process killed
    between those steps leaves it there, and the next replace of ``final`` removes it.
    """
    final = Path(final).absolute()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    # Leftovers of an earlier killed attempt are never mistaken for output: they are hidden and
    # carry the ".tmp-" (its unfinished output) or ".old-" (the output it was replacing) marker;
    # remove them now.
    for marker in ("tmp", "old"):
        for stale in final.parent.glob(f".{final.name}.{marker}-*"):
            shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        os.rename(final, old)
    os.rename(tmp, final)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(final.parent)


# The one file a writer fills when nothing else is asked for (a simulation's tables). An import
# names its files after its broker (``part-<broker>.parquet``), so one broker of a run is replaced
# by replacing its files.
DEFAULT_PART = "part-00000.parquet"


class TableWriter:
    """Streams rows (dicts) into ``<parquet_dir>/<table>/<part>`` in bounded batches."""

    def __init__(self, parquet_dir: Path, table: str, schema: pa.Schema | None = None,
                 part: str = DEFAULT_PART):
        self.table = table
        self.schema = schema if schema is not None else RAW_TABLES[table]
        self.dir = Path(parquet_dir) / table
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / part
        self._writer: pq.ParquetWriter | None = None
        self._names = tuple(self.schema.names)
        # Each row is kept as a tuple of its values in schema order, taken while the row is fresh
        # in memory, and the buffer is transposed into columns once per row group (zip runs in C).
        # Going back over 64Ki dicts once per column cost more than everything else in the writer,
        # and a tuple is a third of a dict's size.
        self._rows: list[tuple] = []
        self.rows_written = 0

    @property
    def names(self) -> tuple[str, ...]:
        """The column names, in the order :meth:`write_values` takes values."""
        return self._names

    def write(self, row: Mapping[str, object]) -> None:
        """Buffer one row; a column missing from ``row`` is null."""
        self.write_values(tuple(map(row.get, self._names)))

    def write_values(self, values: tuple) -> None:
        """Buffer one row given as its values in column order (see :attr:`names`)."""
        assert len(values) == len(self._names), \
            f"{self.table}: {len(values)} values for {len(self._names)} columns"
        self._rows.append(values)
        if len(self._rows) >= ROW_GROUP_ROWS:
            self._flush()

    def write_many(self, rows: Iterable[Mapping[str, object]]) -> None:
        for row in rows:
            self.write(row)

    def _flush(self) -> None:
        rows = self._rows
        if not rows:
            return
        columns = zip(*rows, strict=True)
        arrays = [pa.array(column, type=f.type)
                  for column, f in zip(columns, self.schema, strict=True)]
        batch = pa.Table.from_arrays(arrays, schema=self.schema)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self.schema, compression=COMPRESSION)
        self._writer.write_table(batch)
        self.rows_written += len(rows)
        self._rows = []

    def close(self) -> int:
        """Write what is buffered; an empty table still gets a file with its schema."""
        self._flush()
        if self._writer is None:
            pq.write_table(self.schema.empty_table(), self.path, compression=COMPRESSION)
        else:
            self._writer.close()
        return self.rows_written


def write_rows(parquet_dir: Path, table: str, rows: Sequence[Mapping[str, object]] | Iterable,
               schema: pa.Schema | None = None, part: str = DEFAULT_PART) -> int:
    """Write all rows of one table and return how many were written."""
    writer = TableWriter(parquet_dir, table, schema, part)
    writer.write_many(rows)
    return writer.close()


def read_table(run_dir: Path, table: str) -> pa.Table:
    """Read one table of a run directory (all its part files)."""
    return pq.read_table(Path(run_dir) / "parquet" / table)
