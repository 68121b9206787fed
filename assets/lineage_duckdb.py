"""The lineage on DuckDB: the same SQL files Spark runs (``assets/sql/lineage/``), the same tables.

``retry-audit lineage RUN --engine duckdb`` (and ``auto`` for a small run) writes
RUN/lineage/message_hops/part-*.parquet and RUN/lineage/message_lineage/part-*.parquet with the
rows, types and order ``assets.lineage.run_lineage`` writes with Spark; the directory is replaced
whole, as Spark's is. ``tests/bench/test_duckdb_lineage.py`` holds the two engines' rows equal.

The steps run one run_id at a time, in run_id order, one part file per run and table: every key of
the lineage holds run_id, so the runs never meet, and the files read in name order are the whole
tables' rows in order. That keeps DuckDB's memory to one run's (over the whole of a 50M-record
input, the per-chain aggregation held 18.8 GiB; bench/results/lineage_scale.md).

A run of more than ``SLICE_HOPS`` records is written in slices of about that many hops, by message_key
range, one part file each: every window and aggregate of the lineage is per message (run_id,
message_key), so a slice is the run's rows for its messages, and slices written in key order are
the run's rows in order. What is per run rather than per message is built once, before the first
slice, and read by every slice: the classified records (a record without UNIQ_KEY takes its
message key from the run's other records), the steps of ``PER_RUN_STEPS`` (subscriptions,
acknowledged records, committed offsets, POP checkpoints, transaction decisions) and the records'
keys. A LOST send belongs to the slice of its UNIQ_KEY.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from assets.lineage_sql import DUCKDB, INPUT_TABLES, LINEAGE_DIR, PER_RUN_STEPS, lineage_sql
from broker_core.errors import BadInputError
from broker_core.export.parquet import COMPRESSION, atomic_dir
from broker_core.export.schema import LINEAGE_TABLES, RAW_TABLES

Progress = Callable[[str], None]

# Rows per Arrow batch moved from DuckDB into the Parquet writer: bounded memory at any size.
WRITE_BATCH_ROWS = 1 << 17
# Hops per slice of a large run (the module's docstring): about 1M records' lineage, which held
# about 2 GiB whole (docs/lineage.md, "Choosing the engine").
SLICE_HOPS = 1_000_000


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


def _write_steps(con: duckdb.DuckDBPyConnection, out: Path, part: str) -> dict[str, int]:
    """Run the chain and lineage steps over the current ``classified`` and input views; write
    OUT/<table>/<part>."""
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


def _write_run(con: duckdb.DuckDBPyConnection, out: Path, part: str) -> dict[str, int]:
    """Run every step over the current input views; write OUT/<table>/<part>."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW records AS {lineage_sql('records', DUCKDB)}")
    con.execute(f"CREATE OR REPLACE TEMP VIEW classified AS {lineage_sql('classified', DUCKDB)}")
    for step in PER_RUN_STEPS:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {step} AS {lineage_sql(step, DUCKDB)}")
    return _write_steps(con, out, part)


def _slice_bounds(con: duckdb.DuckDBPyConnection, hops: int, slice_hops: int) -> list[str]:
    """The message keys that end the slices but the last (each slice the keys above the previous
    bound, up to and including its own), about ``slice_hops`` hops a slice."""
    slices = -(-hops // slice_hops)
    if slices <= 1:
        return []
    fractions = ", ".join(str(k / slices) for k in range(1, slices))
    (bounds,) = con.execute(f"SELECT quantile_disc(message_key, [{fractions}]) FROM classified_run").fetchone()
    return sorted(set(bounds))


def _key_range(column: str, low: str | None, high: str | None) -> str:
    """The SQL condition ``low < column <= high`` (no bound where None)."""
    above = [] if low is None else [f"{column} > '{_quoted(low)}'"]
    return " AND ".join(above + ([] if high is None else [f"{column} <= '{_quoted(high)}'"])) or "true"


def _write_run_sliced(con: duckdb.DuckDBPyConnection, out: Path, part: str, run_id: str,
                      slice_hops: int, say: Progress) -> dict[str, int]:
    """``_write_run`` for one run, in slices of about ``slice_hops`` hops by message_key range:
    OUT/<table>/<part stem>-NNNNN.parquet, one file per slice, in key order."""
    con.execute("DROP TABLE IF EXISTS classified_run")
    (records,) = con.execute("SELECT count(*) FROM commitlog").fetchone()
    if records <= slice_hops:
        return _write_run(con, out, part)
    con.execute(f"CREATE OR REPLACE TEMP VIEW records AS {lineage_sql('records', DUCKDB)}")
    con.execute(f"CREATE TEMP TABLE classified_run AS {lineage_sql('classified', DUCKDB)}")
    built = ["classified_run"]
    try:
        (hops,) = con.execute("SELECT count(*) FROM classified_run").fetchone()
        bounds = _slice_bounds(con, hops, slice_hops)
        for step in PER_RUN_STEPS:
            con.execute(f"DROP VIEW IF EXISTS {step}")
            con.execute(f"CREATE TEMP TABLE {step} AS {lineage_sql(step, DUCKDB)}")
            built.append(step)
        # What lineage_rows reads of the records once the run's classified records and per-run
        # steps are built: UNIQ_KEYs (a slice's LOST sends are those no record carries) and the
        # records below a broker's first offset (origin_cuts_ctes, restored_records).
        con.execute("CREATE TEMP TABLE records_run AS SELECT run_id, broker, phys_offset, msg_id, uniq_key FROM records")
        built.append("records_run")
        totals = dict.fromkeys(LINEAGE_TABLES, 0)
        stem = part.removesuffix(".parquet")
        run = _quoted(run_id)
        for k, (low, high) in enumerate(zip([None, *bounds], [*bounds, None], strict=True)):
            con.execute(f"CREATE OR REPLACE TEMP VIEW classified AS SELECT * FROM classified_run "
                        f"WHERE {_key_range('message_key', low, high)}")
            # A LOST send is the slice's whose keys hold its UNIQ_KEY (its message_key).
            con.execute(f"CREATE OR REPLACE VIEW produced AS SELECT * FROM _all_produced "
                        f"WHERE run_id = '{run}' AND {_key_range('uniq_key', low, high)}")
            con.execute(f"CREATE OR REPLACE TEMP VIEW records AS SELECT * FROM records_run "
                        f"WHERE {_key_range('uniq_key', low, high)} "
                        f"OR phys_offset < (SELECT coalesce(max(first_offset), 0) FROM runs)")
            for table, rows in _write_steps(con, out, f"{stem}-{k:05d}.parquet").items():
                totals[table] += rows
            say(f"lineage: run {run_id}, slice {k + 1}/{len(bounds) + 1} written "
                f"({totals['message_hops']:,} of {hops:,} hops)")
        return totals
    finally:
        for table in built:
            con.execute(f"DROP TABLE IF EXISTS {table}")


def write_lineage(con: duckdb.DuckDBPyConnection, run_dir: Path, out: Path, by_run: bool = True,
                  progress: Callable[[int, int], None] | None = None,
                  slice_hops: int = SLICE_HOPS, say: Progress | None = None) -> dict[str, int]:
    """Write OUT/message_hops/part-NNNNN.parquet and OUT/message_lineage/part-NNNNN.parquet for
    RUN_DIR; return the tables' row counts.

    ``by_run``: one part per run_id, in run_id order (``progress(done, runs)`` after each), a
    run of more than ``slice_hops`` records in slices of about that many hops, a part each; else one part
    of the whole input in one statement per table. ``say`` gets a line after each slice."""
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
        for table, rows in _write_run_sliced(con, out, f"part-{k:05d}.parquet", run_id, slice_hops,
                                               say or (lambda _line: None)).items():
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
            counts = write_lineage(con, run_dir, Path(tmp), say=say)
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)
        say(f"lineage: message_hops {counts['message_hops']} rows")
        say(f"lineage: message_lineage {counts['message_lineage']} rows")
    return counts
