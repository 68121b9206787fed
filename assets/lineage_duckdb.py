"""The lineage on DuckDB: the same SQL files Spark runs (``assets/sql/lineage/``), the same tables.

``retry-audit lineage RUN --engine duckdb`` (and ``auto`` for a small run) writes
RUN/lineage/message_hops/part-*.parquet and RUN/lineage/message_lineage/part-*.parquet with the
rows, types and order ``assets.lineage.run_lineage`` writes with Spark; the directory is replaced
whole, as Spark's is. ``tests/bench/test_duckdb_lineage.py`` holds the two engines' rows equal.

The steps run one run_id at a time, in run_id order, one part file per run and table: every key of
the lineage holds run_id, so the runs never meet, and the files read in name order are the whole
tables' rows in order. That keeps DuckDB's memory to one run's (over the whole of a 50M-record
input, the per-chain aggregation held 18.8 GiB; bench/results/lineage_scale.md).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from assets.lineage_sql import DUCKDB, INPUT_TABLES, LINEAGE_DIR, lineage_sql
from broker_core.errors import BadInputError
from broker_core.export.parquet import COMPRESSION, atomic_dir
from broker_core.export.schema import LINEAGE_TABLES, RAW_TABLES

Progress = Callable[[str], None]

# Rows per Arrow batch moved from DuckDB into the Parquet writer: bounded memory at any size.
WRITE_BATCH_ROWS = 1 << 17


def duckdb_connection(threads: int | None = None, memory_limit: str | None = None,
                      temp_directory: Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB for the lineage (DuckDB's own thread count and memory limit unless
    given; ``temp_directory`` where it spills)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute("SET memory_limit = ?", [memory_limit])
    if temp_directory is not None:
        con.execute("SET temp_directory = ?", [str(temp_directory)])
    return con


def _input_view(con: duckdb.DuckDBPyConnection, run_dir: Path, name: str) -> None:
    """View ``_all_<name>`` over RUN_DIR/parquet/<name>/, or an empty table of its contract
    schema; the steps read ``name``, a view over it (all of it, or one run's rows)."""
    folder = run_dir / "parquet" / name
    if any(folder.glob("*.parquet")):
        source = f"read_parquet('{_quoted(str(folder))}/*.parquet', union_by_name = true)"
        present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        # A column the contract added after the run was written (commitlog.prepared_tx_offset) is
        # read as null, as Spark's conform() reads it.
        added = "".join(f", CAST(NULL AS {_DUCKDB_TYPES[f.type]}) AS {f.name}" for f in RAW_TABLES[name]
                        if f.name not in present and f.type in _DUCKDB_TYPES)
        con.execute(f"CREATE OR REPLACE VIEW _all_{name} AS SELECT *{added} FROM {source}")
    else:
        con.register(f"_{name}_empty", pa.table({f.name: pa.array([], f.type) for f in RAW_TABLES[name]}))
        con.execute(f"CREATE OR REPLACE VIEW _all_{name} AS SELECT * FROM _{name}_empty")
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _all_{name}")


# The DuckDB type of a contract column a run's Parquet may lack (added to the contract later).
_DUCKDB_TYPES = {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN"}


def _quoted(text: str) -> str:
    """``text`` as it may stand between single quotes in DuckDB SQL."""
    return text.replace("'", "''")


def _write_part(con: duckdb.DuckDBPyConnection, sql: str, path: Path, schema: pa.Schema) -> int:
    """Write the rows of ``sql`` as one Parquet file of contract ``schema``; return their count.

    DuckDB hands out times in microseconds and plain ints where the contract has milliseconds and
    int32: each batch is cast to the contract's types, which are what Spark writes."""
    rows = 0
    reader = con.sql(sql).to_arrow_reader(WRITE_BATCH_ROWS)
    with pq.ParquetWriter(path, schema, compression=COMPRESSION) as writer:
        for batch in reader:
            columns = [pc.cast(batch.column(f.name), f.type) for f in schema]
            writer.write_table(pa.table(columns, schema=schema))
            rows += batch.num_rows
    return rows


def _write_run(con: duckdb.DuckDBPyConnection, out: Path, part: str) -> dict[str, int]:
    """Run every step over the current input views; write OUT/<table>/<part>."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW records AS {lineage_sql('records', DUCKDB)}")
    con.execute(f"CREATE OR REPLACE TEMP VIEW classified AS {lineage_sql('classified', DUCKDB)}")
    # Kept for both tables, as Spark keeps its chained hops between its two writes.
    con.execute("DROP TABLE IF EXISTS chained")
    con.execute(f"CREATE TEMP TABLE chained AS {lineage_sql('chained', DUCKDB)}")
    try:
        counts = {"message_hops": _write_part(con, lineage_sql("message_hops", DUCKDB),
                                              out / "message_hops" / part, LINEAGE_TABLES["message_hops"])}
        con.execute(f"CREATE OR REPLACE TEMP VIEW lineage_rows AS {lineage_sql('lineage_rows', DUCKDB)}")
        counts["message_lineage"] = _write_part(con, lineage_sql("message_lineage", DUCKDB),
                                                out / "message_lineage" / part, LINEAGE_TABLES["message_lineage"])
    finally:
        con.execute("DROP TABLE chained")
    return counts


def write_lineage(con: duckdb.DuckDBPyConnection, run_dir: Path, out: Path, by_run: bool = True,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Write OUT/message_hops/part-NNNNN.parquet and OUT/message_lineage/part-NNNNN.parquet for
    RUN_DIR; return the tables' row counts.

    ``by_run``: one part per run_id, in run_id order (``progress(done, runs)`` after each);
    else one part of the whole input in one statement per table."""
    run_dir, out = Path(run_dir), Path(out)
    for name in INPUT_TABLES:
        _input_view(con, run_dir, name)
    for table in LINEAGE_TABLES:
        (out / table).mkdir(parents=True, exist_ok=True)
    totals = dict.fromkeys(LINEAGE_TABLES, 0)
    if not by_run:
        return _write_run(con, out, "part-00000.parquet")
    run_ids = [row[0] for row in con.execute(
        " UNION ".join(f"SELECT DISTINCT run_id FROM _all_{name}" for name in INPUT_TABLES)
        + " ORDER BY run_id").fetchall()]
    for k, run_id in enumerate(run_ids):
        for name in INPUT_TABLES:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _all_{name} "
                        f"WHERE run_id = '{_quoted(run_id)}'")
        for table, rows in _write_run(con, out, f"part-{k:05d}.parquet").items():
            totals[table] += rows
        if progress is not None:
            progress(k + 1, len(run_ids))
    if not run_ids:
        # No rows at all: one empty part per table, so a reader finds the tables and their types.
        for table, schema in LINEAGE_TABLES.items():
            pq.write_table(schema.empty_table(), out / table / "part-00000.parquet", compression=COMPRESSION)
    return totals


def run_lineage_duckdb(run_dir: str | Path, progress: Progress | None = None, threads: int | None = None,
                       memory_limit: str | None = None) -> dict[str, int]:
    """Build RUN_DIR/lineage/{message_hops,message_lineage}/ from RUN_DIR/parquet/ with DuckDB;
    return row counts. The lineage directory is replaced whole, as ``run_lineage`` replaces it."""
    say = progress or (lambda _message: None)
    run_dir = Path(run_dir)
    if not (run_dir / "parquet" / "commitlog").is_dir():
        raise BadInputError("no parquet/commitlog table: not a run directory",
                            where=str(run_dir), hint="run `retry-audit simulate` or `import-store` first")
    say(f"lineage: reading {run_dir}/parquet")
    with atomic_dir(run_dir / LINEAGE_DIR) as tmp:
        spill = Path(tmp) / ".duckdb-tmp"
        con = duckdb_connection(threads=threads, memory_limit=memory_limit, temp_directory=spill)
        try:
            counts = write_lineage(con, run_dir, Path(tmp))
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)
        say(f"lineage: message_hops {counts['message_hops']} rows")
        say(f"lineage: message_lineage {counts['message_lineage']} rows")
    return counts
