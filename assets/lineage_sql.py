"""The lineage's steps as SQL files, the one text of its rules that Spark and DuckDB both run.

``assets/sql/lineage/<step>.sql`` holds each step; ``docs/lineage.md`` says which rule is in which
file. A step reads the views its header names and is one query; the engines chain them:

* ``records``: the commit log as the consumers see it (5.x inner batches unwrapped);
* ``classified``: the records that are hops, with message_key, hop_kind and group;
* ``chained``: numbered along their chains, with next_store_ts and dwell_ms;
* ``message_hops``: the written hops, sorted;
* ``PER_RUN_STEPS``: per run, the groups consuming each topic, the records each group
  acknowledged, the committed offsets, the POP checkpoints and the transactions' decisions;
* ``lineage_rows``: one row per (message, group) and the LOST messages;
* ``message_lineage``: the written lineage, sorted.

The text is filled by the checks' loader (:func:`assets.checks.sql_file`): constants come from
``broker_core`` (``SQL_VALUES``) and the few functions the two engines name differently from
``DIALECT_WORDS``. Spark runs the steps in ``assets.lineage`` (with a range shuffle, a broadcast
of each small table and a persist between them), DuckDB in ``assets.lineage_duckdb``. This module
imports neither engine.
"""

from __future__ import annotations

from assets.checks import DIALECTS, DUCKDB, SPARK, sql_file

__all__ = ["DUCKDB", "PER_RUN_STEPS", "SPARK", "STEPS", "lineage_sql"]

# The steps lineage_rows reads that are per run, not per message.
PER_RUN_STEPS = ("subscriptions", "acked_records", "committed_offsets", "pop_checkpoints", "transaction_decisions")
STEPS = ("records", "classified", "chained", "message_hops", "hops_with_facts", *PER_RUN_STEPS, "lineage_rows",
         "message_lineage")
# Tables the lineage reads; a run without one of the optional ones (an import has no
# consume_attempts rows, an old run may lack `produced`) gets an empty table of the contract type.
# `runs` gives each imported broker's first_offset (where retention left its commit log starting)
# and snapshot time, and each broker's delay levels. `retry_topics` (an import's) names the owner
# of a %RETRY% topic the name alone cannot (%RETRY%<group>_<topic>, 5.x POP v1); `pop_evidence`
# (an import's) holds the POP checkpoints and acks that say whether a POP group acknowledged a
# record. `inner_messages` (an import's) holds the messages of 5.x inner-batch records, which
# stand in for those records. `transaction_ops` holds the half copies each transaction op record
# decided (a rolled-back message has no other trace).
INPUT_TABLES = ("commitlog", "consume_attempts", "consumer_offsets", "produced", "runs", "retry_topics",
                "pop_evidence", "inner_messages", "transaction_ops")
LINEAGE_DIR = "lineage"
# The commit-log columns the lineage reads (records.sql); the others (body facts, tags, hosts)
# are never decoded.
RECORD_COLUMNS = ("run_id", "broker", "phys_offset", "topic", "queue_id", "queue_offset", "msg_id", "uniq_key",
                  "origin_msg_id", "real_topic", "retry_topic", "delay_level", "reconsume_times",
                  "store_ts", "born_ts", "born_host", "body_crc", "properties", "sys_flag", "prepared_tx_offset")
# Row order of the written tables (message_hops.sql, message_lineage.sql say it in SQL).
HOPS_ORDER = ("run_id", "message_key", "hop_index", "group")
LINEAGE_ORDER = ("run_id", "message_key", "group")
# The partitioning every window and aggregation of the lineage works within.
MESSAGE_PARTITION = ("run_id", "message_key")


def lineage_sql(step: str, dialect: str) -> str:
    """The SQL of lineage step ``step`` (``STEPS``) filled for ``dialect`` (spark or duckdb)."""
    assert step in STEPS, f"no lineage step {step!r}; the steps are {STEPS}"
    assert dialect in DIALECTS, dialect
    return sql_file(f"lineage/{step}.sql", dialect)
