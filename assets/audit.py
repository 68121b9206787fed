"""The audit tables: the SQL in ``assets/sql/<table>.sql``, run in ``AUDIT_TABLES`` order (no
Dagster here: the CLI builds them too; the ``audit/<table>`` assets are ``assets.audit_assets``).

``build_audit_tables(con)`` runs on a connection that already holds a run's (or many runs')
contract tables; ``assets.warehouse.build_warehouse`` loads them and writes the warehouse file.
"""

from __future__ import annotations

from importlib import resources

import duckdb

# Audit tables, in build order (a later table may read an earlier one); one SQL file each.
AUDIT_TABLES = ("dlq_messages", "delay_accuracy", "retry_funnel", "delivery_accounting",
                "group_health", "anomalies")
# A delayed message delivered later than this after its due time is listed as LATE_DELIVERY. The
# schedule service polls each level every 100 ms, so seconds of lateness mean it was stalled
# (a crash, put failures, a busy store).
LATE_DELIVERY_MS_THRESHOLD = 5_000

# Values the SQL files read with getvariable('<name>').
SQL_VARIABLES: dict[str, int] = {
    "late_delivery_ms_threshold": LATE_DELIVERY_MS_THRESHOLD,
}


def sql_text(table: str) -> str:
    """The SQL that builds one audit table (packaged beside this module)."""
    return resources.files("assets").joinpath("sql", f"{table}.sql").read_text(encoding="utf-8")


def set_sql_variables(con: duckdb.DuckDBPyConnection) -> None:
    for name, value in SQL_VARIABLES.items():
        con.execute(f"SET VARIABLE {name} = {int(value)}")


# Temporary tables the audit SQL shares (built first, dropped after; not in the warehouse).
STAGING_TABLES = ("consume_acks",)


def build_audit_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Run every audit table's SQL on a connection that already holds the contract tables."""
    set_sql_variables(con)
    for table in STAGING_TABLES + AUDIT_TABLES:
        con.execute(sql_text(table))
    for table in STAGING_TABLES:
        con.execute(f"DROP TABLE temp.{table}")  # our own names: plain identifiers
