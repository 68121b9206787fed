"""The ``inner_messages`` table of an import: the messages inside 5.x inner-batch records.

A batch sent to a topic whose queue type is BatchCQ is stored as **one** record (sysFlag
NEED_UNWRAP 0x40 | INNER_BATCH 0x80, properties INNER_NUM and INNER_BASE, the batch's own
UNIQ_KEY) whose body is the client's batch wire format (``MessageDecoder.encodeMessages``: per
message totalSize, magic, bodyCRC, flag, body length, body, int16 properties length,
properties). The consumer never sees that record: its client (``PullAPIWrapper`` ->
``MessageDecoder.decodeMessage``) unwraps it into one message per entry, each with its own
properties (its own UNIQ_KEY, which is the id the application sees), the record's topic, queue,
hosts, times and commit-log offset, and queue offset = the record's + the entry's index. Here the
same unwrap is done once, at import, so the audit knows the ids the consumer saw.

The commitlog table keeps no bodies, so as for the POP tables (:mod:`pop_import`) the inner-batch
records are found in the broker's commitlog Parquet (their sysFlag) and only their bytes are read
again from the store. Both decoders write the same commitlog, so both get the same table.

A body that does not decode (truncated, a length past its end) is not unwrapped: the client's
decode throws and it delivers the record as it is, one message with the batch's UNIQ_KEY; so the
batch record stays the message in the lineage, and an ``inner-batch-undecodable`` warning names
the broker and offset. Nothing is dropped: the record stays in ``commitlog`` either way.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds

from broker_core.codec import decode_batch_body
from broker_core.constants import PROP_INNER_NUM, SYSFLAG_INNER_BATCH, SYSFLAG_NEED_UNWRAP
from broker_core.errors import BadInputError
from broker_core.export.parquet import TableWriter
from broker_core.export.pop_import import records_at
from broker_core.message import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, body_crc, string_to_properties
from broker_core.store.problem import WARNING, Problem
from broker_core.store.reader import StoreReader

# The client unwraps a record only when both flags are set (PullAPIWrapper.processPullResult).
INNER_BATCH_FLAGS = SYSFLAG_NEED_UNWRAP | SYSFLAG_INNER_BATCH
PROBLEM_INNER_UNDECODABLE = "inner-batch-undecodable"
PROBLEM_INNER_COUNT = "inner-batch-count-mismatch"
_BATCH_COLUMNS = ["phys_offset", "total_size", "topic", "queue_id", "queue_offset", "uniq_key", "born_ts",
                  "store_ts", "properties"]


def inner_batch_rows(commitlog_dir: Path, broker: str) -> list[dict]:
    """The broker's inner-batch records (the columns the unwrap needs), in physical order."""
    if not _has_parquet(commitlog_dir):
        return []
    data = ds.dataset(str(commitlog_dir), format="parquet")
    flagged = pc.bit_wise_and(ds.field("sys_flag"), INNER_BATCH_FLAGS) == INNER_BATCH_FLAGS
    table = data.to_table(columns=_BATCH_COLUMNS, filter=(ds.field("broker") == broker) & flagged)
    rows = table.to_pylist()
    rows.sort(key=lambda r: r["phys_offset"])
    return rows


def unwrap(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """The (flag, body, properties) of each message of an inner batch's body, in order, as the
    consumer's client decodes them. Raises :class:`BadInputError` for a body it could not decode
    (and for an empty one, from which it would deliver nothing at all)."""
    entries = decode_batch_body(body)
    if not entries:
        raise BadInputError("the body holds no message")
    return [(flag, inner, string_to_properties(props.decode("utf-8"))) for flag, inner, props in entries]


def _where(broker: str, row: dict) -> str:
    return (f"broker {broker}: inner-batch record at commit-log offset {row['phys_offset']} "
            f"({row['topic']}, queue {row['queue_id']}, UNIQ_KEY {row['uniq_key']})")


def write_inner_messages(reader: StoreReader, parquet: Path, part: str, run_id: str,
                         broker: str, commitlog: Path | None = None) -> tuple[int, list[Problem]]:
    """Write ``inner_messages`` of ``broker`` from the commitlog already written under ``parquet``;
    return its row count and the warnings (bodies not unwrapped, counts that differ from
    INNER_NUM)."""
    problems: list[Problem] = []
    writer = TableWriter(parquet, "inner_messages", part=part)
    for row, record in records_at(reader, inner_batch_rows(commitlog if commitlog is not None else parquet / "commitlog", broker)):
        phys = row["phys_offset"]
        if record is None:
            problems.append(Problem("commitlog", phys, PROBLEM_INNER_UNDECODABLE,
                                    f"{_where(broker, row)}: not read again from the store (its file is "
                                    "gone); not unwrapped, the record stays one message", WARNING))
            continue
        try:
            messages = unwrap(record.body)
        except (BadInputError, UnicodeDecodeError) as exc:
            reason = exc.message if isinstance(exc, BadInputError) else str(exc)
            where = f" ({exc.where})" if isinstance(exc, BadInputError) and exc.where else ""
            problems.append(Problem("commitlog", phys, PROBLEM_INNER_UNDECODABLE,
                                    f"{_where(broker, row)}: its {len(record.body)}-byte body does not decode: "
                                    f"{reason}{where}; not unwrapped, the record stays one message (the "
                                    "consumer's client delivers a batch it cannot unwrap as it is)", WARNING))
            continue
        stated = dict(row["properties"] or ()).get(PROP_INNER_NUM)
        if stated != str(len(messages)):
            problems.append(Problem("commitlog", phys, PROBLEM_INNER_COUNT,
                                    f"{_where(broker, row)}: INNER_NUM is {stated}, the body holds "
                                    f"{len(messages)} messages; unwrapped as the body says (so does the client)",
                                    WARNING))
        for index, (flag, body, props) in enumerate(messages):
            writer.write({"run_id": run_id, "broker": broker, "phys_offset": phys, "inner_index": index,
                          "topic": row["topic"], "queue_id": row["queue_id"],
                          "queue_offset": row["queue_offset"] + index, "uniq_key": props.get(PROP_UNIQ_KEY),
                          "tags": props.get(PROP_TAGS), "keys": props.get(PROP_KEYS), "flag": flag,
                          "body_size": len(body), "body_crc": body_crc(body), "born_ts": row["born_ts"],
                          "store_ts": row["store_ts"], "properties": list(props.items())})
    return writer.close(), problems


def _has_parquet(commitlog: Path) -> bool:
    """Whether ``commitlog`` (a table directory, or one file of it) holds Parquet to read."""
    return commitlog.is_file() or (commitlog.is_dir() and any(commitlog.glob("*.parquet")))
