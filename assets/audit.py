"""The audit tables: the SQL in ``assets/sql/<table>.sql``, run in ``AUDIT_TABLES`` order (no
Dagster here: the CLI builds them too; the ``audit/<table>`` assets are ``assets.audit_assets``).

``build_audit_tables(con)`` runs on a connection that already holds a run's (or many runs')
contract tables; ``assets.warehouse.build_warehouse`` loads them and writes the warehouse file.
"""

from __future__ import annotations

from importlib import resources

import duckdb

from assets.checks import fill_sql, staged_inputs

# Audit tables, in build order (a later table may read an earlier one); one SQL file each.
AUDIT_TABLES = ("dlq_messages", "delay_periods", "delay_accuracy", "retry_funnel", "delivery_accounting",
                "group_health", "transactions", "traced_attempts", "lmq_deliveries", "anomalies")
def sql_text(table: str) -> str:
    """The SQL that builds one audit table (packaged beside this module), with the values and
    fragments it shares with the checks filled in (``assets.checks.fill_sql``: the lateness
    thresholds among them)."""
    text = resources.files("assets").joinpath("sql", f"{table}.sql").read_text(encoding="utf-8")
    return fill_sql(text, f"assets/sql/{table}.sql")


# Temporary tables the audit SQL shares (built first, dropped after; not in the warehouse).
STAGING_TABLES = ("consume_acks", "schedule_dwells", "dlq_reasons")


def build_audit_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Run every audit table's SQL on a connection that already holds the contract tables."""
    with staged_inputs(con):  # the checks' staged tables: the audit SQL shares their fragments
        for table in STAGING_TABLES + AUDIT_TABLES:
            con.execute(sql_text(table))
    for table in STAGING_TABLES:
        con.execute(f"DROP TABLE temp.{table}")  # our own names: plain identifiers
