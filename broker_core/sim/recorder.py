"""The recorder: every event table of a simulated run, streamed to Parquet as it happens.

The broker, the clients and the fault injector call :meth:`Recorder.emit` with plain dicts; the
recorder fills ``run_id``, turns millisecond integers into the contract's timestamp columns and
hands the row to one :class:`~broker_core.export.parquet.TableWriter` per table, which writes a
row group every ``ROW_GROUP_ROWS`` rows. Memory stays bounded however long the run is.

A recorder without a directory (``parquet_dir=None``) only counts rows: handy for components
tested on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker_core.export.parquet import TableWriter
from broker_core.export.schema import RAW_TABLES

# Tables the simulation itself writes while running. run.py writes the rest at the end: commitlog,
# delay_offsets and store_problems from the store files (as import-store does), runs from the summary.
EVENT_TABLES = ("consume_attempts", "schedule_deliveries", "consumer_offsets", "faults", "produced",
                "transaction_calls")


class Recorder:
    """Streams rows per table into ``parquet_dir/<table>/part-00000.parquet``."""

    def __init__(self, run_id: str, parquet_dir: str | Path | None, *,
                 tables: tuple[str, ...] = EVENT_TABLES, broker: str | None = None):
        assert run_id, "a recorder needs a run id"
        self.run_id = run_id
        # A simulated run has one broker: its name fills the broker column of the tables that
        # have one (consumer offsets are per broker), right after run_id.
        self.broker = broker
        self.parquet_dir = Path(parquet_dir) if parquet_dir is not None else None
        self.tables = tables
        self.counts: dict[str, int] = {t: 0 for t in tables}
        self._writers: dict[str, TableWriter] = {}
        self._names_after_run_id: dict[str, tuple[str, ...]] = {}
        self._run_prefix: dict[str, tuple] = {}
        # Per table: which columns are timestamps, and which "<x>_ms" key feeds each "<x>_ts".
        self._ts_aliases: dict[str, tuple[tuple[str, str], ...]] = {}
        self._ms_keys: dict[str, frozenset[str]] = {}
        for table in tables:
            assert table in RAW_TABLES, f"unknown table {table!r}"
            schema = RAW_TABLES[table]
            aliases = []
            for f in schema:
                if str(f.type).startswith("timestamp") and f.name.endswith("_ts"):
                    aliases.append((f.name[:-3] + "_ms", f.name))
                elif str(f.type).startswith("timestamp") and f.name == "ts":
                    aliases.append(("ts_ms", "ts"))
            self._ts_aliases[table] = tuple(aliases)
            self._ms_keys[table] = frozenset(ms_key for ms_key, _ in aliases)
        self.closed = False
        self.listeners: list[Any] = []  # callables (table, row) -> None, for in-memory observers

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def emit(self, table: str, row: Mapping[str, Any]) -> None:
        """Record one row of ``table``. Timestamps may be given as ``<name>_ms`` integers."""
        assert not self.closed, "emit after close"
        assert table in self.counts, f"table {table!r} is not recorded by this recorder"
        self.counts[table] += 1
        if self.listeners or not self._ms_keys[table].isdisjoint(row):
            row = self._complete(table, row)
            for listener in self.listeners:
                listener(table, row)
        if self.parquet_dir is None:
            return
        writer = self._writers.get(table)
        if writer is None:
            writer = self._writers[table] = TableWriter(self.parquet_dir, table)
            assert writer.names[0] == "run_id", f"{table}: run_id must be the first column"
            prefix = (self.run_id, self.broker) if writer.names[1:2] == ("broker",) else (self.run_id,)
            self._run_prefix[table] = prefix
            self._names_after_run_id[table] = writer.names[len(prefix):]
        # Every row of a run carries the same run_id (and broker): the other values come from the
        # row as given.
        writer.write_values((*self._run_prefix[table], *map(row.get, self._names_after_run_id[table])))

    def _complete(self, table: str, row: Mapping[str, Any]) -> dict[str, Any]:
        """The row as a new dict with run_id filled and ``<x>_ms`` keys renamed to ``<x>_ts``."""
        out = dict(row)
        out["run_id"] = self.run_id
        if self.broker is not None and "broker" in RAW_TABLES[table].names:
            out.setdefault("broker", self.broker)
        for ms_key, ts_key in self._ts_aliases[table]:
            if ms_key in out:
                value = out.pop(ms_key)
                if ts_key not in out:
                    out[ts_key] = value
        return out

    def close(self) -> dict[str, int]:
        """Flush every table (empty tables get a file with their schema) and return row counts."""
        if self.closed:
            return dict(self.counts)
        self.closed = True
        if self.parquet_dir is not None:
            for table in self.tables:
                writer = self._writers.get(table)
                if writer is None:
                    writer = TableWriter(self.parquet_dir, table)
                written = writer.close()
                assert written == self.counts[table], (
                    f"{table}: wrote {written} rows but recorded {self.counts[table]}")
        return dict(self.counts)
