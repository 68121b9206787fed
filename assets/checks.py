"""Invariants and drifts of a run, each one plain SQL over the warehouse tables.

Every check is a query that returns the offending rows (``run_id, message_key, group, detail``);
no rows means it passes. The same SQL runs on a built warehouse file or on an in-memory DuckDB
holding one run's Parquet (``assets.warehouse.run_views``), which is how the Dagster checks guard
the lineage before anything downstream is built.

Each check's SQL is ``assets/sql/checks/<check name>.sql``. A ``{{name}}`` in it is replaced, as
text, by ``SQL_VALUES[name]`` (a limit, list or name whose owner is Python), else by the word
``DIALECT_WORDS[name]`` gives the SQL engine the text is for, else by the shared fragment
``assets/sql/checks/shared/<name>.sql`` or ``assets/sql/lineage/shared/<name>.sql`` (filled in the
same way, its leading comment lines left out): see :func:`check_sql`. The lineage
(``assets/sql/lineage/``) is filled by the same loader for Spark SQL or DuckDB
(:func:`fill_sql`); the checks are DuckDB's.

Broken invariants are ERROR (blocking: downstream assets do not run); drifts are WARN.
The broker model restates the same rules from the other side (``broker_core/sim``): the same
truth checked twice, by code that shares nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources

import duckdb

from broker_core.client.behavior import DLQ_REQUESTED
from broker_core.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    MULTI_DISPATCH_SEPARATOR,
    ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED,
    POP_RETRY_V1_SEPARATOR,
    POP_RETRY_V2_SEPARATOR,
    PROP_FIRST_POP_TIME,
    PROP_INNER_MULTI_DISPATCH,
    PROP_INNER_MULTI_QUEUE_OFFSET,
    PROP_INNER_NUM,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DEQUEUE_MS,
    PROP_TIMER_OUT_MS,
    RETRY_GROUP_TOPIC_PREFIX,
    RETRY_MAX_TIMES_DEFAULT,
    SCHEDULE_TOPIC,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSTEM_GROUP_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
)
from broker_core.export.lmq_dispatches import BROKEN_STATES as LMQ_BROKEN_STATES
from broker_core.export.schema import RUN_SOURCE_IMPORT, RUN_SOURCE_SIMULATION
from broker_core.message import (
    MSG_ID_OFFSET_HEX_CHARS,
    OFFSET_MSG_ID_REGEX,
    PROP_DELAY,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_PGROUP,
    PROP_REAL_TOPIC,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
    PROP_TRANSACTION_CHECK_TIMES,
)
from broker_core.names import TRACE_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

# Offending rows kept as evidence in a check's metadata (the count is always complete).
EVIDENCE_ROWS_MAX = 10
# Drift thresholds (WARN). At-least-once delivery duplicates a little around crashes and
# rebalances; more than 1 % of messages consumed twice points at a consumer that cannot commit.
DUPLICATE_RATE_MAX = 0.01
# The lateness thresholds (lateness = delivered - due), both here and both inserted into the SQL as
# {{name}}. The schedule service polls each level every 100 ms, so seconds of lateness mean it was
# stalled (a crash, put failures, a busy store): a level whose p99 lateness passes 1 s fails the
# delay_lateness_p99_below_max drift, and a delayed message delivered more than 5 s late is listed
# as LATE_DELIVERY in anomalies (and counted in delay_accuracy.late_count).
LATENESS_P99_MS_MAX = 1_000
LATE_DELIVERY_MS_THRESHOLD = 5_000

ERROR = "ERROR"
WARN = "WARN"

# Check names (stable: tests, the UI and the demo refer to them; each is also its SQL file's name).
HOP_GRAMMAR = "hop_grammar_valid"
NO_UNEXPLAINED_LOSS = "nothing_lost_unexplained"
DLQ_AFTER_MAX_RETRIES = "dlq_only_after_max_retries"
RETRIES_WITHIN_MAX = "retries_within_group_maximum"
NO_EARLY_DELIVERY = "no_delivery_before_due_time"
ORIGIN_STABLE = "origin_and_retry_topic_stable"
LINEAGE_MATCHES_COMMITLOG = "lineage_matches_commitlog"
DUPLICATE_RATE = "duplicate_rate_below_max"
LATENESS_P99 = "delay_lateness_p99_below_max"
TX_CHECK_MAX = "transaction_decided_by_check_max"
TX_COMMIT_HALF = "transaction_commit_names_its_half"
TX_OP_HALF = "transaction_op_names_a_half"
TX_COMMITTED_ONCE = "transaction_committed_once"
# The checks that judge transactional messages only (not applicable to a run without them).
TRANSACTION_CHECKS = (TX_CHECK_MAX, TX_COMMIT_HALF, TX_OP_HALF, TX_COMMITTED_ONCE)
TRACE_SEND_OK_STORED = "trace_send_ok_stored"
TRACE_FAILED_CONSUME_RETRIED = "trace_failed_consume_retried"
TRACE_DECISION_STORED = "trace_transaction_decision_stored"
# The checks that judge the clients' message trace (client_trace; docs/client-trace.md): not
# applicable to a run without it (every simulation: the model's clients write no trace).
TRACE_CHECKS = (TRACE_SEND_OK_STORED, TRACE_FAILED_CONSUME_RETRIED, TRACE_DECISION_STORED)
# Multi-dispatch (LMQ): judged on an imported store's lmq_dispatches (docs/warehouse.md).
LMQ_IN_CONSUME_QUEUE = "lmq_dispatches_in_consume_queue"
LMQ_CHECKS = (LMQ_IN_CONSUME_QUEUE,)

# A group's branch, as one letter per hop (S SCHEDULE, R RETRY, Q DLQ, O a 5.x POP retry the
# revive service wrote), must match this (hop_grammar_valid.sql says why each part is there; it
# judges shared hops by counts).
BRANCH_GRAMMAR_REGEX = r"^(SR)*(S|S?Q)?$|^O+Q?$"
# Faults after which a branch may be an interleaving of valid sequences (hop_grammar_valid).
CRASH_FAULT_KINDS = ("broker_crash", "torn_write")
# A kill -9 (broker_crash, torn_write) loses the unflushed tail of the commit log under async
# flush (nothing_lost_unexplained).
LOSS_FAULT_KINDS = ("broker_crash", "torn_write")


def _sql_list(values: Sequence[str]) -> str:
    """An SQL list of string literals, written as Python writes a tuple of them: ('a', 'b')."""
    assert all("'" not in v for v in values), values
    return repr(tuple(values))


def _sql_quotable(text: str) -> str:
    """``text`` as it may stand between single quotes in the SQL."""
    assert "'" not in text, text
    return text


# The values a check's SQL reads as {{name}}, inserted as text. Each has one owner in Python.
SQL_VALUES: dict[str, str] = {
    "retry_max_times_default": str(RETRY_MAX_TIMES_DEFAULT),
    "orderly_max_reconsume_times": str(ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED),
    "duplicate_rate_max": str(DUPLICATE_RATE_MAX),
    "duplicate_rate_max_percent": f"{DUPLICATE_RATE_MAX * 100:g}",
    "lateness_p99_ms_max": str(LATENESS_P99_MS_MAX),
    "late_delivery_ms_threshold": str(LATE_DELIVERY_MS_THRESHOLD),
    "crash_fault_kinds": _sql_list(CRASH_FAULT_KINDS),
    "loss_fault_kinds": _sql_list(LOSS_FAULT_KINDS),
    "msg_id_offset_hex_chars": str(MSG_ID_OFFSET_HEX_CHARS),
    "offset_msg_id_regex": _sql_quotable(OFFSET_MSG_ID_REGEX),
    "branch_grammar_regex": _sql_quotable(BRANCH_GRAMMAR_REGEX),
    "run_source_import": f"'{_sql_quotable(RUN_SOURCE_IMPORT)}'",
    "run_source_simulation": f"'{_sql_quotable(RUN_SOURCE_SIMULATION)}'",
    "dlq_requested_status": _sql_quotable(DLQ_REQUESTED),
    "timer_topic": _sql_quotable(TIMER_TOPIC),
    "schedule_topic": _sql_quotable(SCHEDULE_TOPIC),
    "prop_timer_out_ms": _sql_quotable(PROP_TIMER_OUT_MS),
    "prop_first_pop_time": _sql_quotable(PROP_FIRST_POP_TIME),
    "system_topic_prefix": _sql_quotable(SYSTEM_TOPIC_PREFIX),
    "system_group_prefix": _sql_quotable(SYSTEM_GROUP_PREFIX),
    "retry_topic_prefix": _sql_quotable(RETRY_GROUP_TOPIC_PREFIX),
    "dlq_topic_prefix": _sql_quotable(DLQ_GROUP_TOPIC_PREFIX),
    "pop_retry_v1_separator": _sql_quotable(POP_RETRY_V1_SEPARATOR),
    "pop_retry_v2_separator": _sql_quotable(POP_RETRY_V2_SEPARATOR),
    "prop_delay": _sql_quotable(PROP_DELAY),
    "prop_origin_message_id": _sql_quotable(PROP_ORIGIN_MESSAGE_ID),
    "prop_real_topic": _sql_quotable(PROP_REAL_TOPIC),
    "prop_retry_topic": _sql_quotable(PROP_RETRY_TOPIC),
    "prop_reconsume_time": _sql_quotable(PROP_RECONSUME_TIME),
    "prop_timer_dequeue_ms": _sql_quotable(PROP_TIMER_DEQUEUE_MS),
    "prop_timer_del_uniqkey": _sql_quotable(PROP_TIMER_DEL_UNIQKEY),
    "prop_inner_num": _sql_quotable(PROP_INNER_NUM),
    "prop_inner_multi_dispatch": _sql_quotable(PROP_INNER_MULTI_DISPATCH),
    "prop_inner_multi_queue_offset": _sql_quotable(PROP_INNER_MULTI_QUEUE_OFFSET),
    "multi_dispatch_separator": _sql_quotable(MULTI_DISPATCH_SEPARATOR),
    "trans_half_topic": _sql_quotable(TRANS_HALF_TOPIC),
    "trans_op_half_topic": _sql_quotable(TRANS_OP_HALF_TOPIC),
    "trace_topic": _sql_quotable(TRACE_TOPIC),
    "trans_check_max_time_topic": _sql_quotable(TRANS_CHECK_MAX_TIME_TOPIC),
    "prop_transaction_check_times": _sql_quotable(PROP_TRANSACTION_CHECK_TIMES),
    "sysflag_transaction_mask": str(SYSFLAG_TRANSACTION_MASK),
    "sysflag_transaction_commit": str(SYSFLAG_TRANSACTION_COMMIT),
    "prop_pgroup": _sql_quotable(PROP_PGROUP),
    "lmq_broken_states": _sql_list(LMQ_BROKEN_STATES),
}

# The SQL engines a text is filled for. The lineage's SQL is written once for both: standard
# SQL both parse (backquoted `group`, explicit NULLS FIRST on every ORDER BY, CASE rather than
# FILTER in windows), and where the two name a function differently it says {{word}} and this
# table gives each engine's name. Kept to the few functions one side lacks under any name;
# tests/assets/test_lineage_sql.py runs every word on both engines.
SPARK = "spark"
DUCKDB = "duckdb"
DIALECTS = (SPARK, DUCKDB)
DIALECT_WORDS: dict[str, dict[str, str]] = {
    # prefix test: startswith(text, prefix)
    "starts_with": {SPARK: "startswith", DUCKDB: "starts_with"},
    # a timestamp as epoch milliseconds
    "unix_millis": {SPARK: "unix_millis", DUCKDB: "epoch_ms"},
    # one row per element of an array, in the select list (no row for a null or empty one)
    "explode": {SPARK: "explode", DUCKDB: "unnest"},
    # an array of its arguments
    "array": {SPARK: "array", DUCKDB: "list_value"},
    # an array of the integers from its first argument to its second, both included
    "sequence": {SPARK: "sequence", DUCKDB: "generate_series"},
    # an array's element by 1-based position (within its bounds)
    "element_at": {SPARK: "element_at", DUCKDB: "list_extract"},
    # whether a regular expression matches anywhere in a text
    "regexp_like": {SPARK: "regexp_like", DUCKDB: "regexp_matches"},
    # a string aggregate's ORDER BY, which DuckDB takes inside the call and Spark after it:
    # string_agg(x, sep {{aggregate_order_by}} k) reads string_agg(x, sep ORDER BY k) on DuckDB
    # and string_agg(x, sep ) WITHIN GROUP (ORDER BY k) on Spark
    "aggregate_order_by": {SPARK: ") WITHIN GROUP (ORDER BY", DUCKDB: "ORDER BY"},
    # a CTE read more than once that is cheaper to read again than to keep: DuckDB materializes
    # such a CTE unless told not to; Spark always inlines one (name AS {{not_materialized}} (...))
    "not_materialized": {SPARK: "", DUCKDB: "NOT MATERIALIZED"},
}

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z][a-z0-9_]*)\s*\}\}")
_FRAGMENT_DEPTH_MAX = 4  # a fragment may use fragments; a cycle is an error, not a hang


# Where a {{name}} that is no value or word is looked for: the checks' fragments, then the
# lineage's (the rules the lineage and the checks share: bookkeeping records, cut heads).
FRAGMENT_DIRS = ("checks/shared", "lineage/shared")


def _sql_file(relative: str) -> str:
    """A file under ``assets/sql/`` (packaged beside this module, as the audit tables' SQL is)."""
    path = resources.files(__package__).joinpath("sql", *relative.split("/"))
    return path.read_text(encoding="utf-8")


def _fill(text: str, where: str, dialect: str = DUCKDB, depth: int = 0) -> str:
    """``text`` (read from ``where``) with every {{name}} replaced by its value, its word in
    ``dialect`` or its shared fragment."""
    assert dialect in DIALECTS, dialect

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name in SQL_VALUES:
            return SQL_VALUES[name]
        if name in DIALECT_WORDS:
            return DIALECT_WORDS[name][dialect]
        return _fragment(name, where, dialect, depth + 1)
    return _PLACEHOLDER.sub(value, text)


def _fragment(name: str, where: str, dialect: str, depth: int) -> str:
    if depth > _FRAGMENT_DEPTH_MAX:
        raise ValueError(f"{where}: {{{{{name}}}}} nests fragments deeper than {_FRAGMENT_DEPTH_MAX} "
                         f"(a fragment that includes itself?)")
    for folder in FRAGMENT_DIRS:
        relative = f"{folder}/{name}.sql"
        try:
            text = _sql_file(relative)
        except FileNotFoundError:
            continue
        lines = text.splitlines(keepends=True)
        while lines and lines[0].lstrip().startswith("--"):
            lines.pop(0)
        return _fill("".join(lines).rstrip("\n"), f"assets/sql/{relative}", dialect, depth)
    raise ValueError(f"{where}: {{{{{name}}}}} is neither in assets.checks.SQL_VALUES or DIALECT_WORDS nor a "
                     f"file {name}.sql in " + " or ".join(f"assets/sql/{d}" for d in FRAGMENT_DIRS))


def sql_fragment(name: str, dialect: str = DUCKDB) -> str:
    """The shared SQL fragment ``<name>.sql`` (``FRAGMENT_DIRS``), filled for ``dialect``, without
    its leading comment lines (what it is for) and its final newline."""
    return _fragment(name, "assets.checks.sql_fragment", dialect, 0)


def fill_sql(text: str, where: str, dialect: str = DUCKDB) -> str:
    """``text`` (read from ``where``) with its {{placeholders}} filled for ``dialect``: the values
    (``SQL_VALUES``), the engine's words (``DIALECT_WORDS``), then shared fragments."""
    return _fill(text, where, dialect)


def sql_file(relative: str, dialect: str = DUCKDB) -> str:
    """The file ``assets/sql/<relative>`` with its {{placeholders}} filled for ``dialect``."""
    return _fill(_sql_file(relative), f"assets/sql/{relative}", dialect)


def check_sql(name: str) -> str:
    """The SQL of the check ``name``: ``assets/sql/checks/<name>.sql`` with its {{placeholders}}
    filled (``SQL_VALUES``, then shared fragments)."""
    return sql_file(f"checks/{name}.sql")


def evidence_sql(name: str) -> str:
    """What the check ``name`` judges, per run: ``assets/sql/checks/evidence/<name>.sql``, a query
    returning ``run_id, judged`` (how many things it looked at), filled as the checks are."""
    return sql_file(f"checks/evidence/{name}.sql")


@dataclass(frozen=True)
class Check:
    """One check: a name, the asset it judges, what it means, how bad a failure is, its SQL, and
    what it judges (``evidence``: run_id, judged) with the words for a run that has none of it."""

    name: str
    asset: str
    description: str
    severity: str
    sql: str
    no_evidence: str = "nothing to judge"

    @property
    def evidence(self) -> str:
        return evidence_sql(self.name)


NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class CheckOutcome:
    """A check's verdict with its evidence: how many rows offend and the first few of them, and
    how many things it judged. A check that judged nothing is not applicable: it did not pass."""

    check: Check
    violations: int
    examples: tuple[dict, ...]
    judged: int = 0

    @property
    def passed(self) -> bool:
        """Nothing offends (also true of a check that is not applicable: it blocks nothing)."""
        return self.violations == 0

    @property
    def applicable(self) -> bool:
        return self.judged > 0 or self.violations > 0

    @property
    def verdict(self) -> str:
        """``passed``, ``failed``, or ``not applicable: <what the run lacks>``."""
        if not self.passed:
            return "failed"
        return "passed" if self.applicable else f"{NOT_APPLICABLE}: {self.check.no_evidence}"

    @property
    def blocking(self) -> bool:
        return self.check.severity == ERROR

    def metadata(self) -> dict:
        keys = [e["message_key"] for e in self.examples if e.get("message_key")]
        return {
            "verdict": self.verdict,
            "judged": self.judged,
            "violations": self.violations,
            "first_offending_keys": ", ".join(keys) if keys else "(none)",
            "evidence": [f"{e.get('group') or '-'} {e.get('message_key') or '-'}: {e['detail']}"
                         for e in self.examples],
        }


INVARIANTS: tuple[Check, ...] = (
    Check(HOP_GRAMMAR, "lineage/message_hops",
          "Every (message, group) chain reads real -> (SCHEDULE -> RETRY)* -> DLQ?, a delayed publish "
          "starting SCHEDULE -> DELIVER, with hop_index 0..n-1; where retention deleted a chain's "
          "first hops (runs.first_offset > 0) it may start later, and truncated says so.",
          ERROR, check_sql(HOP_GRAMMAR), no_evidence="no message chain"),
    Check(NO_UNEXPLAINED_LOSS, "lineage/message_lineage",
          "Every SEND_OK message has a commit-log record, unless a broker_crash under async flush "
          "after its send explains the loss.", ERROR, check_sql(NO_UNEXPLAINED_LOSS),
          no_evidence="no producer record of what was sent (an imported store holds only what was stored)"),
    Check(DLQ_AFTER_MAX_RETRIES, "lineage/message_lineage",
          "Every record in %DLQ%<group> is explained: the maximum reconsume times reached (the send-back, "
          "the revive, a client's own send at its maximum), or a send-back before it that a consumer "
          "asked for (delay level < 0, a lower maximum of its own client); dlq_messages.dlq_reason says which.",
          ERROR, check_sql(DLQ_AFTER_MAX_RETRIES), no_evidence="no DLQ record"),
    Check(RETRIES_WITHIN_MAX, "lineage/message_lineage",
          "No (message, group) chain is deeper than the group's maximum reconsume times: neither the "
          "lineage's retries (a forked chain's copies are no retries) nor the count a RETRY record carries.",
          ERROR, check_sql(RETRIES_WITHIN_MAX), no_evidence="no retried chain"),
    Check(NO_EARLY_DELIVERY, "lineage/message_hops",
          "No delayed message leaves SCHEDULE_TOPIC_XXXX before its due time (lateness_ms >= 0), no "
          "timer message is put to its real topic before its TIMER_OUT_MS, and no POP retry is written "
          "before the revive time of its group's checkpoints of the record before it.",
          ERROR, check_sql(NO_EARLY_DELIVERY),
          no_evidence="no schedule, timer or POP revive evidence (no delayed record with a due time)"),
    Check(ORIGIN_STABLE, "lineage/message_hops",
          "ORIGIN_MESSAGE_ID and RETRY_TOPIC never change along a chain.", ERROR, check_sql(ORIGIN_STABLE),
          no_evidence="no retry or DLQ record"),
    Check(LINEAGE_MATCHES_COMMITLOG, "lineage/message_hops",
          "Every commit-log record is in exactly one hop row, every hop row is a commit-log record, "
          "and each lineage row's hop count matches its hops.", ERROR, check_sql(LINEAGE_MATCHES_COMMITLOG),
          no_evidence="no commit-log record"),
    Check(TX_CHECK_MAX, "lineage/message_lineage",
          "No transactional message is checked past the broker's transactionCheckMax without a decision: "
          "no half copy of a message neither committed nor rolled back carries a TRANSACTION_CHECK_TIMES "
          "above the maximum (the count the broker's discarded copies carry, else the run manifest's); a "
          "broker with neither is not judged (it may be configured above RocketMQ's default).",
          ERROR, check_sql(TX_CHECK_MAX),
          no_evidence="no transactional message on a broker whose transactionCheckMax the run shows "
                      "(no discarded copy, no stated maximum)"),
    Check(TX_COMMIT_HALF, "lineage/message_hops",
          "Every transaction commit record's back-pointer (prepared_tx_offset) names a half copy of the "
          "same message on its broker, unless retention deleted it.",
          ERROR, check_sql(TX_COMMIT_HALF), no_evidence="no transaction commit record"),
    Check(TX_OP_HALF, "lineage/message_hops",
          "Every half queue offset a transaction op record decided is a half record of the store, unless "
          "retention deleted it.", ERROR, check_sql(TX_OP_HALF), no_evidence="no transaction op record"),
    Check(TRACE_SEND_OK_STORED, "lineage/message_hops",
          "Every send a client's message trace says was stored (SEND_OK, with its offset msgId) is a record "
          "of the store at that offset, of the same message: the trace proves the broker acknowledged it.",
          ERROR, check_sql(TRACE_SEND_OK_STORED),
          no_evidence="no traced SEND_OK naming a broker of the run (no client trace, or not of these brokers)"),
    Check(LMQ_IN_CONSUME_QUEUE, "lineage/message_lineage",
          "Every consume-queue position a multi-dispatched record names (INNER_MULTI_QUEUE_OFFSET) holds a "
          "unit naming that record, and every unit of an %LMQ% queue names a record dispatched there.",
          ERROR, check_sql(LMQ_IN_CONSUME_QUEUE), no_evidence="no multi-dispatched record (LMQ) in a consume queue"),
)

DRIFTS: tuple[Check, ...] = (
    Check(DUPLICATE_RATE, "audit/delivery_accounting",
          f"At most {DUPLICATE_RATE_MAX:.0%} of a group's messages are consumed more than once.",
          WARN, check_sql(DUPLICATE_RATE),
          no_evidence="no consume evidence (an imported store cannot tell a duplicate consume)"),
    Check(LATENESS_P99, "audit/delay_accuracy",
          f"Every delay level's p99 lateness is at most {LATENESS_P99_MS_MAX} ms.", WARN, check_sql(LATENESS_P99),
          no_evidence="no delayed delivery with a known due time"),
    Check(TX_COMMITTED_ONCE, "audit/transactions",
          "No transactional message is committed twice (a 5.x broker's late op batch and a producer that "
          "answers the repeated check again do it: the consumers get the message twice).",
          WARN, check_sql(TX_COMMITTED_ONCE), no_evidence="no committed transactional message"),
    Check(TRACE_FAILED_CONSUME_RETRIED, "audit/traced_attempts",
          "Every consume a client's message trace says failed is retried: a RETRY or DLQ hop of the message "
          "for that group past the failed attempt, or the client consuming it again. A lost trace record "
          "can make a retried message look dropped, hence a drift.",
          WARN, check_sql(TRACE_FAILED_CONSUME_RETRIED), no_evidence="no failed consume in a client trace"),
    Check(TRACE_DECISION_STORED, "audit/transactions",
          "The commit or rollback a transactional producer's message trace says it sent is what the store "
          "holds (a commit record, or an op record and no commit).",
          WARN, check_sql(TRACE_DECISION_STORED),
          no_evidence="no traced commit or rollback of a transaction the run holds"),
)

ALL_CHECKS: tuple[Check, ...] = INVARIANTS + DRIFTS
CHECKS_BY_NAME = {c.name: c for c in ALL_CHECKS}


# Temporary tables the check SQL reads besides the contract tables, each built by the SELECT in
# assets/sql/checks/shared/<name>.sql: what several checks would otherwise each compute again.
STAGED_INPUTS = ("record_properties",)


@contextmanager
def staged_inputs(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """The connection with ``STAGED_INPUTS`` built from its contract tables as they are now, for the
    length of the block, and dropped after it: check SQL (and the audit SQL that shares its
    fragments) runs inside one. A block sees the tables as they were when it began; changing a
    contract table inside it leaves them stale, so each run of the checks stages its own."""
    for table in STAGED_INPUTS:  # our own names: plain identifiers
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {sql_file(f'checks/shared/{table}.sql')}")
    try:
        yield con
    finally:
        for table in STAGED_INPUTS:
            con.execute(f"DROP TABLE IF EXISTS temp.{table}")


def run_check(con: duckdb.DuckDBPyConnection, check: Check, run_id: str | None = None) -> CheckOutcome:
    """Run one check on a connection holding the warehouse tables, for one run or all of them."""
    with staged_inputs(con):
        return _run_check(con, check, run_id)


def _run_check(con: duckdb.DuckDBPyConnection, check: Check, run_id: str | None) -> CheckOutcome:
    """``run_check`` inside ``staged_inputs``."""
    # One pass: the window count carries the total on each of the first rows.
    query = (f"SELECT run_id, message_key, \"group\", detail, count(*) OVER () AS violations "
             f"FROM ({check.sql}) AS v WHERE ?::VARCHAR IS NULL OR run_id = ?::VARCHAR "
             f"ORDER BY run_id, {_EVIDENCE_ORDER} LIMIT {EVIDENCE_ROWS_MAX}")
    judged = con.execute(f"SELECT coalesce(sum(judged), 0) FROM ({check.evidence}) AS e "
                         f"WHERE ?::VARCHAR IS NULL OR run_id = ?::VARCHAR", [run_id, run_id]).fetchone()[0]
    return _outcome(check, con.execute(query, [run_id, run_id]).fetchall(), int(judged))


# The order evidence rows are listed in, within a run.
_EVIDENCE_ORDER = 'message_key NULLS LAST, "group" NULLS FIRST, detail'


def _outcome(check: Check, rows: list[tuple], judged: int) -> CheckOutcome:
    """A verdict from its first rows (run_id, message_key, group, detail, violations)."""
    examples = tuple({"run_id": r[0], "message_key": r[1], "group": r[2], "detail": r[3]} for r in rows)
    return CheckOutcome(check, rows[0][4] if rows else 0, examples, judged)


def run_checks(con: duckdb.DuckDBPyConnection, checks: Iterable[Check] = ALL_CHECKS,
               run_id: str | None = None) -> list[CheckOutcome]:
    with staged_inputs(con):
        return [_run_check(con, c, run_id) for c in checks]


def run_checks_per_run(con: duckdb.DuckDBPyConnection, run_ids: Sequence[str],
                       checks: Iterable[Check] = ALL_CHECKS) -> dict[str, list[CheckOutcome]]:
    """Every check once over all runs, its verdict split by run: {run_id: outcomes in check order}.

    The same verdicts as ``run_checks(con, checks, run_id)`` for each run, at the cost of one
    evaluation per check: a filter on a check's result does not reach into its CTEs, so checking
    run by run would evaluate every check over every run once per run.
    """
    with staged_inputs(con):
        return _run_checks_per_run(con, run_ids, checks)


def _run_checks_per_run(con: duckdb.DuckDBPyConnection, run_ids: Sequence[str],
                        checks: Iterable[Check]) -> dict[str, list[CheckOutcome]]:
    """``run_checks_per_run`` inside ``staged_inputs``."""
    verdicts: dict[str, list[CheckOutcome]] = {r: [] for r in run_ids}
    for check in checks:
        query = (f"SELECT run_id, message_key, \"group\", detail, "
                 f"count(*) OVER (PARTITION BY run_id) AS violations "
                 f"FROM ({check.sql}) AS v "
                 f"QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY {_EVIDENCE_ORDER}) "
                 f"<= {EVIDENCE_ROWS_MAX} "
                 f"ORDER BY run_id, {_EVIDENCE_ORDER}")
        by_run: dict[str, list] = {}
        for row in con.execute(query).fetchall():
            by_run.setdefault(row[0], []).append(row)
        judged = dict(con.execute(f"SELECT run_id, sum(judged) FROM ({check.evidence}) AS e GROUP BY run_id")
                      .fetchall())
        for run_id in run_ids:
            verdicts[run_id].append(_outcome(check, by_run.get(run_id, []), int(judged.get(run_id) or 0)))
    return verdicts


def checks_for(asset: str, checks: Sequence[Check] = ALL_CHECKS) -> list[Check]:
    return [c for c in checks if c.asset == asset]
