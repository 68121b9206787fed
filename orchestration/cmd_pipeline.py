"""The pipeline commands: ``lineage``, ``warehouse``, ``trace``, ``resend-plan`` and ``sql``.

They call the same functions the Dagster assets call (``assets.lineage.run_lineage``,
``assets.warehouse.build_warehouse``) and read the warehouse through read-only connections with
parameterized queries only: a key or group name is never pasted into SQL.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path

import duckdb

from assets.warehouse import open_read_only
from broker_core import message
from broker_core.constants import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK
from broker_core.errors import BadInputError, RetryAuditError
from broker_core.message import PROP_TRANSACTION_CHECK_TIMES
from orchestration import term

# Rows fetched from DuckDB at a time when printing a query's result: bounded memory for any size.
FETCH_ROWS_BATCH = 10_000
# Properties the broker and clients set for routing, retries and bookkeeping. A resend from the
# DLQ drops them (the producer and broker set fresh ones); every other property, TAGS and KEYS
# included, is the user's and is kept.
RESEND_DROPPED_PROPERTIES = frozenset({
    message.PROP_DELAY, message.PROP_RETRY_TOPIC, message.PROP_REAL_TOPIC, message.PROP_REAL_QID,
    message.PROP_ORIGIN_MESSAGE_ID, message.PROP_RECONSUME_TIME, message.PROP_MAX_RECONSUME_TIMES,
    message.PROP_CONSUME_START_TIME, message.PROP_MIN_OFFSET, message.PROP_MAX_OFFSET,
    message.PROP_UNIQ_KEY, message.PROP_WAIT, message.PROP_PGROUP, message.PROP_TRAN_MSG,
    message.PROP_TRAN_PREPARED_QUEUE_OFFSET, message.PROP_TRANSACTION_CHECK_TIMES,
    message.PROP_CLUSTER, message.PROP_START_DELIVER_TIME, message.PROP_MSG_REGION,
    message.PROP_TRACE_SWITCH,
})


# A DuckDB memory limit as the CLI takes it: a number and a unit (DuckDB's own units).
_MEMORY_LIMIT = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


def _memory_limit(text: str | None, engine: str) -> str | None:
    """``--memory-limit`` checked before anything is read or replaced: a size such as 3GB, and
    only with an engine that can be DuckDB."""
    if text is None:
        return None
    if not _MEMORY_LIMIT.fullmatch(text.strip()):
        raise BadInputError(f"not a memory size: {text!r}", where="--memory-limit",
                            hint="a number and a unit, e.g. 512MB, 3GB or 3GiB")
    if engine == "spark":
        raise BadInputError("--memory-limit is DuckDB's; --engine spark does not use it", where="--memory-limit",
                            hint="use --engine duckdb or auto, or size Spark's memory in its session settings")
    return text.strip()


def _say(args, text: str) -> None:
    if not getattr(args, "quiet", False):
        term.say(text)


# --- lineage --------------------------------------------------------------------------------------

def lineage(args) -> int:
    """``retry-audit lineage RUN_DIR [--engine spark|duckdb|auto]``: build message_hops and
    message_lineage with Spark (the default), DuckDB, or the engine that suits the run's size."""
    from assets.lineage_engine import (
        DUCKDB_ENGINE,
        ENGINE_DEFAULT,
        commitlog_parquet_bytes,
        is_uri,
        pick_engine,
    )
    from assets.warehouse import table_rows

    # A cluster's run directory may be a URI (hdfs://, s3a://): Spark checks it, not this process.
    remote = is_uri(args.run_dir)
    run_dir = args.run_dir if remote else Path(args.run_dir)
    if not remote and not (run_dir / "parquet" / "commitlog").is_dir():
        raise BadInputError("not a run directory (no parquet/commitlog inside)", where=str(run_dir),
                            hint="create one with `retry-audit simulate` or `retry-audit import-store`")
    records = 0 if remote else table_rows(run_dir, ["commitlog"])["commitlog"]
    requested = getattr(args, "engine", None) or ENGINE_DEFAULT
    memory_limit = _memory_limit(getattr(args, "memory_limit", None), requested)
    engine = pick_engine(run_dir, requested)
    if engine == DUCKDB_ENGINE:
        if remote:
            raise BadInputError("--engine duckdb reads a local run directory, not a URI", where=str(run_dir),
                                hint="use --engine spark for a run directory on a cluster's file system")
        from assets.lineage_duckdb import run_lineage_duckdb

        limit = f", memory limit {memory_limit}" if memory_limit else ""
        _say(args, f"lineage: engine duckdb (--engine {requested}{limit})")
        started = time.perf_counter()
        counts = run_lineage_duckdb(run_dir, progress=lambda m: _say(args, m), memory_limit=memory_limit)
        seconds = time.perf_counter() - started
    else:
        from assets.lineage import run_lineage
        from assets.spark import spark_session

        _say(args, f"lineage: engine spark (--engine {requested})"
                   + (" (--memory-limit is DuckDB's; Spark's memory is its session's)" if memory_limit else ""))
        # Quiet keeps the JVM's start-up chatter off stderr too; --debug lets it through.
        quiet = getattr(args, "quiet", False) and not getattr(args, "debug", False)
        # A process that already runs Spark (a test run, a notebook calling main()) keeps its session.
        with spark_session(args.spark_master, quiet=quiet,
                           input_bytes=None if remote else commitlog_parquet_bytes(run_dir)) as spark:
            started = time.perf_counter()
            counts = run_lineage(run_dir, spark, progress=lambda m: _say(args, m))
            seconds = time.perf_counter() - started
    if remote:
        records = counts["message_hops"]  # one hop per commit-log record of a journey
    rate = records / seconds if seconds > 0 else 0.0
    print(f"lineage {run_dir}: message_hops {counts['message_hops']:,} rows, message_lineage "
          f"{counts['message_lineage']:,} rows; {records:,} commit-log records in {seconds:.1f} s "
          f"({rate:,.0f} records/s)")
    return 0


# --- warehouse ------------------------------------------------------------------------------------

def warehouse(args) -> int:
    """``retry-audit warehouse RUN_DIR... --db FILE``: build the audit warehouse and swap it in.

    Exit 1 when a blocking (ERROR) check fails on any run: the data broke an invariant. The
    warehouse stays in place so the failure can be looked into with ``trace`` and ``sql``.
    """
    from assets.checks import run_checks_per_run
    from assets.warehouse import build_warehouse

    summary = build_warehouse(args.run_dirs, args.db, progress=lambda m: _say(args, m))
    print(f"warehouse {summary.db_path}: {len(summary.run_ids)} run(s) "
          f"({', '.join(summary.run_ids)}) in {summary.seconds:.1f} s")
    width = max(len(t) for t in summary.rows)
    for table, rows in summary.rows.items():
        print(f"  {table:<{width}}  {rows:>12,}")
    # The same checks the Dagster assets run, so a warehouse built by hand is judged too.
    con = open_read_only(summary.db_path)
    try:
        verdicts = run_checks_per_run(con, summary.run_ids)
        outcomes = [(run_id, o) for run_id in summary.run_ids for o in verdicts[run_id]]
    finally:
        con.close()
    print("checks:")
    for run_id, o in outcomes:
        # Padded before it is painted: colour codes must not count towards the column's width.
        word = ("passed" if o.applicable else "n/a") if o.passed else f"FAILED ({o.check.severity})"
        verdict = term.verdict(o.passed, term.pad(word, 16))
        first = (f"  {o.violations:,} violation(s); first: {o.metadata()['evidence'][0]}" if not o.passed
                 else "" if o.applicable else f"  ({o.verdict})")
        print(f"  {term.pad(run_id, 16)} {verdict} {o.check.name}{first}")
    failed = sorted({f"{run_id}: {o.check.name}" for run_id, o in outcomes if o.blocking and not o.passed})
    if failed:
        # An error (exit 1, one line on stderr even under -q) after the verdicts are printed.
        raise RetryAuditError(f"blocking check(s) failed: {'; '.join(failed)}", where=str(summary.db_path),
                              hint="the warehouse is kept: look with `retry-audit trace KEY` or "
                                   "`retry-audit sql` (docs/warehouse.md lists each check's rule)")
    return 0


# --- trace ----------------------------------------------------------------------------------------

_FIND_MESSAGES = """
SELECT DISTINCT run_id, message_key FROM message_hops WHERE message_key = $key OR msg_id = $key
UNION
SELECT DISTINCT h.run_id, h.message_key
FROM commitlog c
JOIN message_hops h ON h.run_id = c.run_id AND h.broker = c.broker AND h.phys_offset = c.phys_offset
WHERE c.uniq_key = $key OR c.origin_msg_id = $key OR c.msg_id = $key
UNION
SELECT DISTINCT run_id, message_key FROM message_lineage WHERE message_key = $key OR origin_msg_id = $key
ORDER BY 1, 2
"""
_HOPS = """
SELECT "group", hop_index, hop_kind, topic, queue_id, delay_level, reconsume_times, store_ts, dwell_ms,
       msg_id, broker, phys_offset
FROM message_hops WHERE run_id = $run AND message_key = $key
ORDER BY "group" NULLS FIRST, hop_index
"""
_CHAINS = """
SELECT "group", final_state, retries, hops, path, origin_topic, origin_msg_id, total_delay_ms, truncated,
       invisible_until, forks, fork_hop_index, fork_broker, fork_cause
FROM message_lineage WHERE run_id = $run AND message_key = $key
ORDER BY "group" NULLS FIRST
"""
_CONSUMES = """
SELECT a.start_ts, a.consumer_id, a.queue_topic, a.queue_id, a.queue_offset, a.reconsume_times,
       a.status, a.outcome
FROM consume_attempts a
WHERE a.run_id = $run AND a."group" IS NOT DISTINCT FROM $group
  AND (a.uniq_key = $key OR a.msg_id IN (SELECT msg_id FROM message_hops
                                         WHERE run_id = $run AND message_key = $key))
ORDER BY a.start_ts, a.consumer_id
"""

# A multi-dispatched (LMQ) message: each consume-queue position its records were given beside
# their own queue's, and who consumed each (docs/lineage.md "Fan-out is not a hop").
_LMQ = """
SELECT broker, dispatch_queue, dispatch_queue_id, dispatch_offset, hop_kind, delivery, state, consumed_by
FROM lmq_deliveries WHERE run_id = $run AND message_key = $key
ORDER BY broker, dispatch_queue, dispatch_offset
"""

# A transactional message (docs/transactions.md): its outcome (the transactions table), its
# records in store order (the half, each check copy, the discard, each commit with the copy its
# back-pointer names), the op records that decided a copy of it, and its producer's listener calls.
_TRANSACTION = """
SELECT transaction_state, transaction_checks, producer_group, half_ts, decided_ts, decision_ms, commits
FROM transactions WHERE run_id = $run AND message_key = $key
"""
_TX_RECORDS = """
SELECT CASE WHEN (coalesce(c.sys_flag, 0) & $mask) = $commit THEN 'commit' ELSE lower(h.hop_kind) END AS kind,
       h.broker, h.phys_offset, h.store_ts, c.queue_offset,
       TRY_CAST(c.properties[$check_times] AS INTEGER) AS check_times,
       CASE WHEN (coalesce(c.sys_flag, 0) & $mask) = $commit THEN c.prepared_tx_offset END AS commits_copy
FROM message_hops h
JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
WHERE h.run_id = $run AND h.message_key = $key AND h."group" IS NULL
  AND (h.hop_kind IN ('HALF', 'DISCARD') OR (coalesce(c.sys_flag, 0) & $mask) = $commit)
ORDER BY h.store_ts, h.broker, h.phys_offset
"""
_TX_OPS = """
SELECT o.broker, o.phys_offset, o.store_ts, o.half_queue_offsets
FROM transaction_ops o
WHERE o.run_id = $run
  AND EXISTS (SELECT 1 FROM message_hops h
              JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
              WHERE h.run_id = $run AND h.message_key = $key AND h.hop_kind = 'HALF'
                AND c.broker = o.broker AND c.queue_id = o.queue_id AND list_contains(o.half_queue_offsets, c.queue_offset))
ORDER BY o.store_ts, o.broker, o.phys_offset
"""
_TX_CALLS = """
SELECT ts, stage, check_times, answer FROM transaction_calls
WHERE run_id = $run AND uniq_key = $key ORDER BY ts, check_times
"""


# The clients' own record of the message when they traced it (client_trace, docs/client-trace.md):
# its sends, each listener call of a group (traced_attempts), each transaction decision.
_TRACED_SENDS = """
SELECT DISTINCT ts, "group" AS producer_group, store_host, cost_ms, success, offset_msg_id, msg_type
FROM client_trace WHERE run_id = $run AND msg_id = $key AND trace_type = 'Pub' ORDER BY ts, store_host
"""
_TRACED_ATTEMPTS = """
SELECT begin_ts, reconsume_times, cost_ms, success, consume_return FROM traced_attempts
WHERE run_id = $run AND message_key = $key AND "group" = $group ORDER BY begin_ts, request_id
"""
_TRACED_DECISIONS = """
SELECT DISTINCT ts, transaction_state, from_transaction_check FROM client_trace
WHERE run_id = $run AND msg_id = $key AND trace_type = 'EndTransaction' ORDER BY ts, transaction_state
"""


def _transaction(con, params: dict) -> dict | None:
    """The transaction part of a journey, or None for a plain message."""
    found = _rows(con, _TRANSACTION, params)
    if not found:
        return None
    marks = {"mask": SYSFLAG_TRANSACTION_MASK, "commit": SYSFLAG_TRANSACTION_COMMIT,
             "check_times": PROP_TRANSACTION_CHECK_TIMES}
    return {**found[0], "records": _rows(con, _TX_RECORDS, {**params, **marks}),
            "ops": _rows(con, _TX_OPS, params), "calls": _rows(con, _TX_CALLS, params),
            "traced_decisions": _rows(con, _TRACED_DECISIONS, params)}


def _rows(con, query: str, params: dict) -> list[dict]:
    cur = con.execute(query, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def trace_messages(con: duckdb.DuckDBPyConnection, key: str) -> list[dict]:
    """Every message a key names (UNIQ_KEY, offset msgId or ORIGIN_MESSAGE_ID), with hops and chains."""
    found = con.execute(_FIND_MESSAGES, {"key": key}).fetchall()
    messages = []
    for run_id, message_key in found:
        params = {"run": run_id, "key": message_key}
        hops = _rows(con, _HOPS, params)
        chains = _rows(con, _CHAINS, params)
        for chain in chains:
            chain["consumes"] = _rows(con, _CONSUMES, {**params, "group": chain["group"]})
            chain["traced"] = _rows(con, _TRACED_ATTEMPTS, {**params, "group": chain["group"]})
        messages.append({"run_id": run_id, "message_key": message_key, "hops": hops, "groups": chains,
                         "transaction": _transaction(con, params), "traced_sends": _rows(con, _TRACED_SENDS, params),
                         "lmq": _rows(con, _LMQ, params)})
    return messages


def _ts(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


def _duration(ms) -> str:
    if ms is None:
        return "-"
    ms = int(ms)
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{sec:02d}s" if hours else f"{minutes}m{sec:02d}s"


# How trace tells a forked chain's hops from the hop its first copy is on (docs/lineage.md "forks").
FORK_CAUSE_TEXT = {"BROKER_RESTART": "a broker restart: its schedule put records again",
                   "DUPLICATE_DELIVERY": "a message handed out twice and sent back twice"}


def _hop_line(hop: dict, branch: str = " ") -> str:
    topic = f"{hop['topic']}[{hop['queue_id']}]"
    if hop["hop_kind"] == "SCHEDULE":
        topic += f" level {hop['delay_level']}"
    return (f" {branch}{hop['hop_index']:>3}  {hop['hop_kind']:<8}  {topic:<36}  {hop['broker'] or '-':<12}  "
            f"{_ts(hop['store_ts'])}  {_duration(hop['dwell_ms']):>10}  {hop['reconsume_times']:>9}  "
            f"{hop['msg_id']}")


def _fork_lines(chain: dict, hop: dict) -> list[str]:
    """A group hop's line; from the hop a chain's first copy is on, the branch it starts."""
    start = chain.get("fork_hop_index")
    if start is None or hop["hop_index"] < start:
        return [_hop_line(hop)]
    if hop["hop_index"] == start:
        return ["  +- fork: from here on the chain holds copies of attempts it already made", _hop_line(hop, "|")]
    return [_hop_line(hop, "|")]


def _lmq_lines(positions: list[dict]) -> list[str]:
    """One message delivered through LMQ queues: each position, the record there, who consumed it."""
    queues = sorted({p["dispatch_queue"] for p in positions})
    lines = [f"fan-out: {len(positions)} LMQ position{'s' if len(positions) != 1 else ''} in "
             f"{', '.join(queues)} (one message; a retry record is dispatched again)"]
    for p in positions:
        consumed = ", ".join(p["consumed_by"] or []) or "nobody yet"
        lines.append(f"  {p['dispatch_queue']}[{p['dispatch_queue_id']}]@{p['dispatch_offset']:<6}  "
                     f"{p['broker'] or '-':<12}  {p['hop_kind'] or '-':<8}  delivery {p['delivery']}  "
                     f"{p['state']}  consumed by {consumed}")
    return lines


def _transaction_lines(tx: dict) -> list[str]:
    """What the producer and the broker decided: the outcome, each record, op record and call."""
    checks = tx["transaction_checks"] or 0
    lines = [f"transaction: {tx['transaction_state']} after {checks} check{'s' if checks != 1 else ''} "
             f"(producer group {tx['producer_group'] or '-'}), "
             f"{_duration(tx['decision_ms'])} from its half to the decision"]
    for r in tx["records"]:
        what = {"half": "check copy" if r["check_times"] else "half", "discard": "discarded"}.get(r["kind"], r["kind"])
        note = f"check {r['check_times']}" if r["check_times"] else ""
        if r["kind"] == "commit":
            note = f"commits the copy at {r['broker']}@{r['commits_copy']}"
        elif r["kind"] == "half":
            note = f"half queue offset {r['queue_offset']}" + (f", {note}" if note else "")
        lines.append(f"  {what:<10}  {r['broker'] or '-'}@{r['phys_offset']:<10}  {_ts(r['store_ts'])}  {note}")
    for o in tx["ops"]:
        offsets = ",".join(str(x) for x in o["half_queue_offsets"] or [])
        lines.append(f"  {'op record':<10}  {o['broker'] or '-'}@{o['phys_offset']:<10}  {_ts(o['store_ts'])}  "
                     f"decided half queue offsets {offsets}")
    for call in tx["calls"]:
        stage = "execute" if call["stage"] == "execute" else f"check {call['check_times']}"
        lines.append(f"  {'listener':<10}  {stage:<22}  {_ts(call['ts'])}  {call['answer']}")
    for d in tx.get("traced_decisions") or []:
        stage = "a check" if d["from_transaction_check"] else "at once"
        lines.append(f"  {'traced':<10}  {'answer ' + stage:<22}  {_ts(d['ts'])}  {d['transaction_state']}")
    if tx["commits"] and tx["commits"] > 1:
        lines.append(f"  committed {tx['commits']} times: the consumers get it {tx['commits']} times")
    return lines


def _traced_lines(sends: list[dict], attempts: list[dict]) -> list[str]:
    """What the clients' message trace says: the sends (Pub) or a group's listener calls."""
    lines = []
    for p in sends:
        lines.append(f"  traced send  {_ts(p['ts'])}  {p['producer_group'] or '-'} -> {p['store_host'] or '-'}  "
                     f"{'SEND_OK' if p['success'] else 'not SEND_OK'} in {_duration(p['cost_ms'])}  "
                     f"{p['msg_type'] or ''} {p['offset_msg_id'] or ''}".rstrip())
    if attempts:
        lines.append(f"  traced consumes ({len(attempts)}, the client's own record):")
    for a in attempts:
        result = "outcome not traced" if a["success"] is None else (
            f"{'success' if a['success'] else 'failed'} ({a['consume_return'] or '?'}) in {_duration(a['cost_ms'])}")
        lines.append(f"    {_ts(a['begin_ts'])}  reconsume {a['reconsume_times']}  {result}")
    return lines


def format_trace(messages: Sequence[dict]) -> str:
    """The readable timeline: hops, then per group the final state and the consume outcomes."""
    lines: list[str] = []
    header = (f"  {'#':>3}  {'hop':<8}  {'topic[queue]':<36}  {'broker':<12}  {'stored (UTC)':<23}  "
              f"{'dwell':>10}  {'reconsume':>9}  msgId")
    for m in messages:
        lines.append(f"message {m['message_key']}  (run {m['run_id']})")
        shared = [h for h in m["hops"] if h["group"] is None]
        lines.append(header)
        lines.extend(_hop_line(h) for h in shared)
        lines.extend(_traced_lines(m.get("traced_sends") or [], []))
        if m.get("transaction"):
            lines.append("")
            lines.extend(_transaction_lines(m["transaction"]))
        if m.get("lmq"):
            lines.append("")
            lines.extend(_lmq_lines(m["lmq"]))
        for chain in m["groups"]:
            group = chain["group"]
            own = [h for h in m["hops"] if h["group"] == group and group is not None]
            lines.append("")
            lines.append(f"group {group if group is not None else '(no subscriber)'}: {chain['final_state']}"
                         f" after {chain['retries']} retries, {chain['hops']} hops, "
                         f"{_duration(chain['total_delay_ms'])} end to end")
            if chain["truncated"]:
                lines.append("  truncated: its first hops were in commit-log files retention deleted "
                             "before the import (the hops below are the ones left)")
            if chain["invisible_until"] is not None:
                # A 5.x POP record popped and not acked: IN_FLIGHT before its revive time, RETRYING
                # (the revive service's retry is pending) once the snapshot is past it.
                when = "still invisible" if chain["final_state"] == "IN_FLIGHT" else "revive pending since"
                lines.append(f"  popped, not acked: {when} until {_ts(chain['invisible_until'])} "
                             "(its last checkpoint's revive time)")
            lines.append(f"  path: {chain['path']}")
            lines.append(f"  origin: {chain['origin_topic']} {chain['origin_msg_id'] or ''}".rstrip())
            if chain.get("forks"):
                lines.append(f"  forked: {chain['forks']} extra copies, the first at hop "
                             f"#{chain['fork_hop_index']} on {chain['fork_broker']} "
                             f"({FORK_CAUSE_TEXT.get(chain['fork_cause'], chain['fork_cause'])}); "
                             f"{chain['retries']} retries deep")
            for h in own:
                lines.extend(_fork_lines(chain, h))
            if chain["consumes"]:
                lines.append(f"  consumes ({len(chain['consumes'])}):")
                for a in chain["consumes"]:
                    lines.append(f"    {_ts(a['start_ts'])}  {a['consumer_id']:<24}  "
                                 f"{a['queue_topic']}[{a['queue_id']}]@{a['queue_offset']}  "
                                 f"reconsume {a['reconsume_times']}  {a['status']} -> {a['outcome']}")
            lines.extend(_traced_lines([], chain.get("traced") or []))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def trace(args) -> int:
    """``retry-audit trace KEY --db FILE``: one message's journey as a timeline (or --json).

    A key no message has is exit 1, not 2: the key is well-formed input, the lookup found nothing
    (as grep exits 1 on no match); exit 2 stays for input that cannot be used (no warehouse file).
    """
    con = open_read_only(args.db)
    try:
        messages = trace_messages(con, args.key)
    finally:
        con.close()
    if not messages:
        raise RetryAuditError(f"no message has UNIQ_KEY, msgId or ORIGIN_MESSAGE_ID {args.key!r}",
                              where=str(args.db),
                              hint="list some with: retry-audit sql \"select message_key from "
                                   "message_lineage limit 5\"")
    if args.json:
        print(json.dumps({"key": args.key, "messages": messages}, default=_json_value, indent=2))
    else:
        sys.stdout.write(format_trace(messages))
    return 0


# --- resend-plan ----------------------------------------------------------------------------------

_RESEND = """
SELECT run_id, "group", message_key, dlq_msg_id, origin_topic AS resend_topic, origin_msg_id, retries,
       dlq_copies, tags, keys, properties, dlq_store_ts, last_failure
FROM dlq_messages
WHERE "group" = $group AND ($topic IS NULL OR origin_topic = $topic)
ORDER BY run_id, dlq_store_ts, dlq_broker, dlq_phys_offset
"""
RESEND_COLUMNS = ("run_id", "group", "message_key", "dlq_msg_id", "resend_topic", "origin_msg_id",
                  "retries", "dlq_copies", "tags", "keys", "user_properties", "dlq_store_ts", "last_failure")


def resend_plan_rows(con: duckdb.DuckDBPyConnection, group: str, origin_topic: str | None) -> list[dict]:
    """DLQ messages of ``group`` to resend to their RETRY_TOPIC, with every user property kept.

    One row per message: a forked chain's DLQ copies are one resend, of the first copy by store
    order (``dlq_messages``), with ``dlq_copies`` saying how many the DLQ holds."""
    rows = _rows(con, _RESEND, {"group": group, "topic": origin_topic})
    for row in rows:
        props = row.pop("properties") or {}
        row["user_properties"] = {k: v for k, v in sorted(props.items()) if k not in RESEND_DROPPED_PROPERTIES}
    if not rows:
        known = [g for (g,) in con.execute(
            'SELECT DISTINCT "group" FROM message_lineage WHERE "group" IS NOT NULL ORDER BY 1').fetchall()]
        if group not in known:
            raise BadInputError(f"no group {group!r} in the warehouse",
                                hint="groups: " + (", ".join(known) if known else "(none)"))
    return [{c: row[c] for c in RESEND_COLUMNS} for row in rows]


def resend_plan(args) -> int:
    """``retry-audit resend-plan --db FILE --group G``: CSV (or --json) of DLQ messages to resend."""
    con = open_read_only(args.db)
    try:
        rows = resend_plan_rows(con, args.group, args.origin_topic)
    finally:
        con.close()
    if args.json:
        print(json.dumps(rows, default=_json_value, indent=2))
    else:
        _write_csv(RESEND_COLUMNS, ([r[c] for c in RESEND_COLUMNS] for r in rows))
    _say(args, f"resend-plan: {len(rows)} DLQ message(s) of group {args.group}")
    return 0


# --- sql ------------------------------------------------------------------------------------------

def sql(args) -> int:
    """``retry-audit sql "QUERY" --db FILE``: a query on a read-only connection, as CSV or --json."""
    con = open_read_only(args.db)
    try:
        try:
            cur = con.execute(args.query)
        except duckdb.Error as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BadInputError(f"query failed: {first_line}", where="sql",
                                hint="the warehouse is opened read-only; tables: select table_name "
                                     "from information_schema.tables") from exc
        if cur.description is None:
            return 0
        names = [d[0] for d in cur.description]
        batches = _batches(cur)
        if args.json:
            _write_json_rows(names, batches)
        else:
            _write_csv(names, (row for batch in batches for row in batch))
    finally:
        con.close()
    return 0


def _batches(cur) -> Iterable[list[tuple]]:
    while True:
        batch = cur.fetchmany(FETCH_ROWS_BATCH)
        if not batch:
            return
        yield batch


def _json_value(value):
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=_json_value, sort_keys=isinstance(value, dict))
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)


def _write_csv(names: Sequence[str], rows: Iterable[Sequence]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow([_cell(v) for v in row])


def _write_json_rows(names: Sequence[str], batches: Iterable[list[tuple]]) -> None:
    out = sys.stdout
    out.write("[")
    first = True
    for batch in batches:
        for row in batch:
            out.write("\n  " if first else ",\n  ")
            out.write(json.dumps(dict(zip(names, row, strict=True)), default=_json_value))
            first = False
    out.write("\n]\n" if not first else "]\n")
