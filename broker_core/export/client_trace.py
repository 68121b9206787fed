"""The ``client_trace`` table: the message-trace records the clients wrote into a broker's store.

A client with message trace on sends its trace records, many to a message, to the trace topic
(``RMQ_SYS_TRACE_TOPIC``, or a cloud region's ``rmq_sys_TRACE_DATA_*``) on whichever broker hosts
it (docs/client-trace.md). The ``commitlog`` row keeps no body, so the trace messages are found in
the broker's commitlog Parquet by their topic and only their bytes are read again from the store,
by physical offset, as ``transaction_ops`` are; each body becomes one row per record. A simulation
writes the table the same way (the model's clients write no trace: it is empty).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds

from broker_core.export.parquet import TableWriter
from broker_core.export.pop_import import records_at
from broker_core.names import TRACE_DATA_TOPIC_PREFIX, TRACE_TOPIC
from broker_core.store.problem import WARNING, Problem
from broker_core.store.reader import StoreReader
from broker_core.store.trace import decode_trace_body

PROBLEM_TRACE_UNREADABLE = "trace-record-unreadable"
# Bad records listed one by one per trace message; the rest are counted in the last problem.
BAD_RECORDS_LISTED_MAX = 5
_TRACE_COLUMNS = ["phys_offset", "total_size", "topic"]
# client_trace's columns a record's named values fill (the rest are the record's place).
_VALUE_COLUMNS = ("region_id", "group", "request_id", "topic", "msg_id", "tags", "keys", "store_host",
                  "body_length", "cost_ms", "msg_type", "offset_msg_id", "success", "retry_times",
                  "context_code", "consume_return", "transaction_id", "transaction_state",
                  "from_transaction_check", "client_host")


def trace_rows(commitlog_dir: Path, broker: str) -> list[dict]:
    """The broker's trace messages (the columns the table needs), in physical order, of a commitlog
    directory (or one file of it)."""
    if not (commitlog_dir.is_file() or (commitlog_dir.is_dir() and any(commitlog_dir.glob("*.parquet")))):
        return []
    data = ds.dataset(str(commitlog_dir), format="parquet")
    is_trace = (pc.field("topic") == TRACE_TOPIC) | pc.starts_with(pc.field("topic"), TRACE_DATA_TOPIC_PREFIX)
    table = data.to_table(columns=_TRACE_COLUMNS, filter=(ds.field("broker") == broker) & is_trace)
    rows = table.to_pylist()
    rows.sort(key=lambda r: r["phys_offset"])
    return rows


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _row(run_id: str, broker: str, phys: int, record) -> dict:
    values = record.values
    row = {"run_id": run_id, "broker": broker, "phys_offset": phys, "record_index": record.index,
           "trace_type": record.trace_type, "ts": _ts(values.get("ts_ms")), "fields": list(record.fields)}
    row.update({c: values.get(c) for c in _VALUE_COLUMNS})
    return row


def write_client_trace(reader: StoreReader, parquet: Path, part: str, run_id: str,
                       broker: str, commitlog: Path | None = None) -> tuple[int, list[Problem]]:
    """Write ``client_trace`` of ``broker`` from the commitlog already written under ``parquet``
    (or only from ``commitlog``, an increment's file of it); return its row count and the warnings
    (a trace message read again from a file that is gone, records whose fields do not parse). A
    bad record is left out; the others of its body are kept."""
    problems: list[Problem] = []
    writer = TableWriter(parquet, "client_trace", part=part)
    source = commitlog if commitlog is not None else parquet / "commitlog"
    for row, record in records_at(reader, trace_rows(source, broker)):
        phys = row["phys_offset"]
        where = f"broker {broker}: trace message in {row['topic']} at commit-log offset {phys}"
        if record is None:
            problems.append(Problem("commitlog", phys, PROBLEM_TRACE_UNREADABLE,
                                    f"{where}: not read again from the store (its file is gone); "
                                    "its trace records are not in client_trace", WARNING))
            continue
        body = decode_trace_body(record.body)
        for index, reason in body.bad[:BAD_RECORDS_LISTED_MAX]:
            problems.append(Problem("commitlog", phys, PROBLEM_TRACE_UNREADABLE,
                                    f"{where}: record {index}: {reason}", WARNING))
        if len(body.bad) > BAD_RECORDS_LISTED_MAX:
            problems.append(Problem("commitlog", phys, PROBLEM_TRACE_UNREADABLE,
                                    f"{where}: {len(body.bad) - BAD_RECORDS_LISTED_MAX} more bad records", WARNING))
        for trace in body.records:
            writer.write(_row(run_id, broker, phys, trace))
    return writer.close(), problems
