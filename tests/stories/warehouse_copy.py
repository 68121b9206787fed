"""A writable in-memory copy of a built warehouse's loaded tables, for tests that break its rows."""

from __future__ import annotations

from pathlib import Path

import duckdb

from assets.warehouse import LOADED, quote_ident


def warehouse_copy(db: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding a copy of every table ``db`` loaded (the contract tables)."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{db}' AS wh (READ_ONLY)")
    for table in LOADED:
        con.execute(f"CREATE TABLE {quote_ident(table)} AS SELECT * FROM wh.{quote_ident(table)}")
    con.execute("DETACH wh")
    return con
