"""The check SQL files: every placeholder is filled, and the limits they read have one owner."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from assets import checks as c
from broker_core.constants import ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED, RETRY_MAX_TIMES_DEFAULT

SQL_DIR = Path(c.__file__).parent / "sql" / "checks"


def test_every_check_has_its_sql_file_and_no_placeholder_is_left():
    """Each check's SQL is its own file, with every {{name}} filled."""
    files = {p.stem for p in SQL_DIR.glob("*.sql")}
    assert files == set(c.CHECKS_BY_NAME)
    for check in c.ALL_CHECKS:
        assert "{{" not in check.sql and "}}" not in check.sql, check.name


def test_the_limits_are_read_from_python_not_written_in_the_sql():
    """No check SQL file holds a limit or a fault kind whose owner is Python, outside its prose."""
    owned = [str(RETRY_MAX_TIMES_DEFAULT), str(ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED),
             str(c.DUPLICATE_RATE_MAX), str(c.LATENESS_P99_MS_MAX), *c.CRASH_FAULT_KINDS, *c.LOSS_FAULT_KINDS]
    for path in sorted(SQL_DIR.rglob("*.sql")):
        # Prose may name them (comments, the detail texts); the query itself may not.
        text = re.sub(r"--[^\n]*|'[^']*'", "", path.read_text(encoding="utf-8"))
        for value in owned:
            assert not re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", text), (path.name, value)


def test_a_value_changed_in_python_changes_the_sql(monkeypatch):
    """The DLQ check's default maximum is the value SQL_VALUES holds when the SQL is read."""
    assert f"ELSE {RETRY_MAX_TIMES_DEFAULT} END" in c.check_sql(c.DLQ_AFTER_MAX_RETRIES)
    monkeypatch.setitem(c.SQL_VALUES, "retry_max_times_default", "7")
    assert "ELSE 7 END" in c.check_sql(c.DLQ_AFTER_MAX_RETRIES)


def test_a_shared_fragment_is_filled_and_left_without_its_comment():
    """A fragment's leading comment lines are its documentation, not part of the query."""
    joins = c.sql_fragment("origin_cut_joins")
    assert joins.startswith("LEFT JOIN cut_brokers own_cut")
    assert f"- {c.SQL_VALUES['msg_id_offset_hex_chars']}, 0)" in joins and "{{" not in joins


def test_an_unknown_placeholder_is_an_error_that_names_it(monkeypatch):
    """A {{name}} that is neither a value nor a fragment stops the load with the name and file."""
    monkeypatch.setattr(c, "_sql_file", lambda relative: "SELECT {{no_such_value}}" if relative == "checks/x.sql"
                        else (_ for _ in ()).throw(FileNotFoundError(relative)))
    with pytest.raises(ValueError, match=r"assets/sql/checks/x\.sql: \{\{no_such_value\}\} is neither"):
        c.check_sql("x")


def test_a_fragment_that_includes_itself_is_an_error(monkeypatch):
    """A cycle of fragments ends in an error, not a hang."""
    monkeypatch.setattr(c, "_sql_file", lambda relative: "SELECT {{loop}}")
    with pytest.raises(ValueError, match="nests fragments deeper"):
        c.check_sql("x")


def _commitlog(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose commit log holds ``rows`` (run_id, broker, phys_offset, properties)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT, "
                "properties MAP(VARCHAR, VARCHAR))")
    con.executemany("INSERT INTO commitlog VALUES (?, ?, ?, ?)", rows)
    return con


def test_record_properties_holds_the_records_with_a_property_the_checks_read():
    """One row per record carrying one of the four properties, each read as the checks read it
    (an integer that does not parse is NULL, 1ST_POP_TIME is whether it is there); a record with
    none of them has no row."""
    con = _commitlog([("r", "b", 1, {"UNIQ_KEY": "u1", "KEYS": "k"}),
                      ("r", "b", 2, {"RECONSUME_TIME": "3"}),
                      ("r", "b", 3, {"1ST_POP_TIME": "1700000000000"}),
                      ("r", "b", 4, {"TIMER_OUT_MS": "1700000000123", "RECONSUME_TIME": "x"}),
                      ("r", "b", 5, {"TRANSACTION_CHECK_TIMES": "15"}),
                      ("r", "b", 6, None)])
    with c.staged_inputs(con):
        rows = con.execute("SELECT * FROM record_properties ORDER BY phys_offset").fetchall()
    assert rows == [("r", "b", 2, 3, False, None, None),
                    ("r", "b", 3, None, True, None, None),
                    ("r", "b", 4, None, False, 1700000000123, None),
                    ("r", "b", 5, None, False, None, 15)]


def test_staged_inputs_are_dropped_when_the_block_ends_even_on_an_error():
    """Nothing staged outlives its block: a later block stages the tables as they are then."""
    con = _commitlog([("r", "b", 1, {"RECONSUME_TIME": "1"})])

    def temp_tables() -> list[str]:
        return [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()]

    with pytest.raises(RuntimeError):
        with c.staged_inputs(con):
            assert temp_tables() == list(c.STAGED_INPUTS)
            raise RuntimeError("a check failed to run")
    assert temp_tables() == []
    con.execute("INSERT INTO commitlog VALUES ('r', 'b', 2, MAP {'RECONSUME_TIME': '2'})")
    with c.staged_inputs(con):
        assert con.execute("SELECT count(*) FROM record_properties").fetchone()[0] == 2
    assert temp_tables() == []


def test_no_check_decodes_the_properties_map_itself():
    """Check SQL reads a property through record_properties, so the map is decoded once per run of
    the checks; the staging SELECT and the DLQ records' maps (a scan filtered on their topic, for
    dlq_messages) are the only reads of it."""
    readers = {p.relative_to(SQL_DIR).as_posix() for p in SQL_DIR.rglob("*.sql")
               if "properties[" in re.sub(r"--[^\n]*", "", p.read_text(encoding="utf-8"))}
    assert readers == {"shared/record_properties.sql"}
