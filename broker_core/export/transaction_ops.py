"""The ``transaction_ops`` table: every transaction op record of a broker, its body read.

An op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, docs/transactions.md) is the broker's note that
a transactional message was committed or rolled back; its body names the decided half records by
their queue offsets in ``RMQ_SYS_TRANS_HALF_TOPIC``. The ``commitlog`` row keeps no body, so the
records are found in the broker's commitlog Parquet (their topic) and only their bytes are read
again from the store, by physical offset, as ``inner_messages`` and ``pop_evidence`` are. A
simulation and an import write the table the same way.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds

from broker_core.export.parquet import TableWriter
from broker_core.export.pop_import import records_at
from broker_core.names import TRANS_OP_HALF_TOPIC
from broker_core.store.problem import WARNING, Problem
from broker_core.store.reader import StoreReader
from broker_core.store.transaction_op import decode_op_body

PROBLEM_OP_UNREADABLE = "transaction-op-unreadable"
_OP_COLUMNS = ["phys_offset", "total_size", "store_ts", "queue_id", "queue_offset", "tags"]


def op_rows(commitlog_dir: Path, broker: str) -> list[dict]:
    """The broker's op records (the columns the table needs), in physical order."""
    if not _has_parquet(commitlog_dir):
        return []
    data = ds.dataset(str(commitlog_dir), format="parquet")
    table = data.to_table(columns=_OP_COLUMNS,
                          filter=(ds.field("broker") == broker) & (ds.field("topic") == TRANS_OP_HALF_TOPIC))
    rows = table.to_pylist()
    rows.sort(key=lambda r: r["phys_offset"])
    return rows


def write_transaction_ops(reader: StoreReader, parquet: Path, part: str, run_id: str,
                          broker: str, commitlog: Path | None = None) -> tuple[int, list[Problem]]:
    """Write ``transaction_ops`` of ``broker`` from the commitlog already written under ``parquet``;
    return its row count and the warnings (bodies read again from a file that is gone, pieces of
    a body that name no offset)."""
    problems: list[Problem] = []
    writer = TableWriter(parquet, "transaction_ops", part=part)
    for row, record in records_at(reader, op_rows(commitlog if commitlog is not None else parquet / "commitlog", broker)):
        phys = row["phys_offset"]
        where = f"broker {broker}: transaction op record at commit-log offset {phys}"
        offsets: list[int] | None = None
        if record is None:
            problems.append(Problem("commitlog", phys, PROBLEM_OP_UNREADABLE,
                                    f"{where}: not read again from the store (its file is gone); "
                                    "its half offsets are unknown", WARNING))
        else:
            body = decode_op_body(record.body)
            offsets = list(body.offsets)
            if body.bad_pieces:
                problems.append(Problem("commitlog", phys, PROBLEM_OP_UNREADABLE,
                                        f"{where}: body pieces that are no queue offset: "
                                        f"{', '.join(map(repr, body.bad_pieces))} (the broker reads them "
                                        "as -1, which names no half record)", WARNING))
        writer.write({"run_id": run_id, "broker": broker, "phys_offset": phys, "store_ts": row["store_ts"],
                      "queue_id": row["queue_id"], "queue_offset": row["queue_offset"], "tag": row["tags"],
                      "half_queue_offsets": offsets})
    return writer.close(), problems


def _has_parquet(commitlog: Path) -> bool:
    """Whether ``commitlog`` (a table directory, or one file of it) holds Parquet to read."""
    return commitlog.is_file() or (commitlog.is_dir() and any(commitlog.glob("*.parquet")))
