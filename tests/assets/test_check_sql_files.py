"""The check SQL files: every placeholder is filled, and the limits they read have one owner."""

from __future__ import annotations

import re
from pathlib import Path

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
