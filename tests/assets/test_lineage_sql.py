"""The lineage's SQL files: one text both engines run, and the few words each engine spells its own way.

Every word of ``assets.checks.DIALECT_WORDS`` is run here on Spark SQL and on DuckDB with the same
inputs and must give the same answer; the files themselves are checked for what only one engine
reads the same way (an ORDER BY without its NULLS, a DuckDB-only select form).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import duckdb
import pytest

from assets import checks
from assets.lineage_sql import DUCKDB, SPARK, STEPS, lineage_sql

# Each word, used in a query over literals: (SQL with {{word}}s, the expected single row).
WORD_CASES = {
    "starts_with": ("SELECT {{starts_with}}('%RETRY%g', '%RETRY%'), {{starts_with}}('g', '%RETRY%')", (True, False)),
    "unix_millis": ("SELECT {{unix_millis}}(CAST('2026-01-01 00:00:00.015+00:00' AS TIMESTAMP))",
                    (int(datetime(2026, 1, 1, 0, 0, 0, 15000, tzinfo=UTC).timestamp() * 1000),)),
    "explode": ("SELECT sum(v) FROM (SELECT {{explode}}({{array}}(1, 2, 3)) AS v) t", (6,)),
    "array": ("SELECT cardinality({{array}}('a', 'b'))", (2,)),
    "sequence": ("SELECT cardinality({{sequence}}(1, 3)), {{element_at}}({{sequence}}(1, 3), 3)", (3, 3)),
    "element_at": ("SELECT {{element_at}}({{array}}(5, 6), 1), {{element_at}}({{array}}(5, 6), 2)", (5, 6)),
    "regexp_like": ("SELECT {{regexp_like}}('0A0B', '^[0-9A-F]{4}$'), {{regexp_like}}('0A0', '^[0-9A-F]{4}$')",
                    (True, False)),
    "aggregate_order_by": ("SELECT string_agg(x, ' > ' {{aggregate_order_by}} k) "
                           "FROM (SELECT 'b' AS x, 2 AS k UNION ALL SELECT 'a', 1 UNION ALL SELECT 'c', 3) t",
                           ("a > b > c",)),
    "not_materialized": ("WITH t AS {{not_materialized}} (SELECT 1 AS v UNION ALL SELECT 2) "
                         "SELECT (SELECT sum(v) FROM t) + (SELECT max(v) FROM t)", (5,)),
}


def _duckdb_rows(sql: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_every_dialect_word_has_a_case_here():
    """A word added to the loader without a case here would go untested on one engine."""
    assert set(WORD_CASES) == set(checks.DIALECT_WORDS)
    for words in checks.DIALECT_WORDS.values():
        assert set(words) == set(checks.DIALECTS)


@pytest.mark.parametrize("word", sorted(WORD_CASES))
def test_a_dialect_word_means_the_same_on_both_engines(spark, word):
    """Each engine's word for a function gives the same answer on the same input."""
    text, expected = WORD_CASES[word]
    on_spark = tuple(spark.sql(checks.fill_sql(text, f"case {word}", SPARK)).collect()[0])
    on_duckdb = _duckdb_rows(checks.fill_sql(text, f"case {word}", DUCKDB))[0]
    assert on_spark == on_duckdb == expected, (on_spark, on_duckdb)


@pytest.mark.parametrize("step", STEPS)
def test_a_step_is_filled_for_both_engines_and_nothing_is_left(step):
    """Every step fills on both engines with no {{placeholder}} left."""
    assert "{{" not in lineage_sql(step, SPARK) and "{{" not in lineage_sql(step, DUCKDB)


SHARED_FILES = [f"lineage/{step}.sql" for step in STEPS] + [
    f"lineage/shared/{name}.sql" for name in ("bookkeeping_record", "group_of", "origin_cuts_ctes",
                                               "origin_cut_joins", "names_a_removed_record", "schedule_pair_key",
                                               "schedule_pair_order")]


@pytest.mark.parametrize("relative", SHARED_FILES)
def test_the_shared_text_says_what_both_engines_read_alike(relative):
    """No form only one engine reads (EXCLUDE, BY NAME, double-quoted names, :: casts), and every
    ORDER BY key says its NULLS, since Spark's ascending default is NULLS FIRST and DuckDB's LAST."""
    text = "\n".join(line.split("--")[0] for line in checks._sql_file(relative).splitlines())
    for form in (r"\bEXCLUDE\b", r"\bBY\s+NAME\b", r'"', r"::", r"\bFILTER\s*\(", r"\bQUALIFY\b"):
        assert not re.search(form, text, re.IGNORECASE), f"{relative}: {form}"
    for clause in re.findall(r"ORDER BY(.*?)(?:\)|$|ROWS|\n\s*\n)", text, re.IGNORECASE | re.DOTALL):
        for key in clause.split(","):
            if key.strip() and not key.strip().startswith("{{"):
                assert re.search(r"NULLS (FIRST|LAST)", key, re.IGNORECASE), f"{relative}: ORDER BY key {key!r}"


def test_the_constants_come_from_broker_core_not_the_text():
    """Topic prefixes, system names and property names are {{values}} in the SQL, never literals."""
    from broker_core import constants, message

    names = [constants.RETRY_GROUP_TOPIC_PREFIX, constants.DLQ_GROUP_TOPIC_PREFIX, constants.SCHEDULE_TOPIC,
             constants.TIMER_TOPIC, constants.SYSTEM_TOPIC_PREFIX, constants.SYSTEM_GROUP_PREFIX,
             message.PROP_ORIGIN_MESSAGE_ID, message.PROP_REAL_TOPIC, message.PROP_RETRY_TOPIC,
             message.PROP_RECONSUME_TIME, constants.PROP_TIMER_DEQUEUE_MS, constants.PROP_TIMER_DEL_UNIQKEY,
             constants.PROP_INNER_NUM]
    for relative in SHARED_FILES:
        text = "\n".join(line.split("--")[0] for line in checks._sql_file(relative).splitlines())
        for name in names:
            assert f"'{name}" not in text, f"{relative} types {name!r} instead of its {{{{value}}}}"
