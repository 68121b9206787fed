"""The ``lmq_dispatches`` table: every consume-queue position a multi-dispatched record was given
beside its own queue's, checked against the consume queue that should hold it.

A broker with ``enableMultiDispatch`` (and ``enableLmq`` for ``%LMQ%`` queues) stores a record
whose ``INNER_MULTI_DISPATCH`` lists queues once, and writes one consume-queue unit for it in each
listed queue, at the offset it noted in ``INNER_MULTI_QUEUE_OFFSET`` (RocketMQ 4.9.4
``MultiDispatch.wrapMultiDispatch``, ``ConsumeQueue.multiDispatchLmqQueue``). That is one message
delivered through N queues: N rows here, one ``commitlog`` row, one hop (docs/lineage.md,
"Fan-out is not a hop"). The rows are read from the commitlog Parquet already written (the
records' properties) and each is matched with the unit at its offset in
``consumequeue/<queue>/<queueId>/``; a unit of an ``%LMQ%`` queue that no record claims is a row
too (``STRAY``). ``state`` says what was found (:data:`STATES`); the three that break the broker's
rule are reported once per queue in ``store_problems`` as well. Only a store that shows LMQ
(:func:`shows_lmq`) is read so; any other gets an empty table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds

from broker_core import names
from broker_core.constants import (
    LMQ_QUEUE_ID,
    MULTI_DISPATCH_SEPARATOR,
    PROP_INNER_MULTI_DISPATCH,
    PROP_INNER_MULTI_QUEUE_OFFSET,
)
from broker_core.export.parquet import TableWriter
from broker_core.store.config_files import LMQ_CONSUMER_OFFSET_FILE
from broker_core.store.problem import ERROR, WARNING, Problem
from broker_core.store.reader import CONFIG_DIR_NAME, CONSUME_QUEUE_DIR_NAME, StoreReader

# lmq_dispatches.state: the unit at the offset names this record (IN_QUEUE); the record lists the
# queue but carries no offsets, so the broker did not dispatch it (multi-dispatch off: NOT_DISPATCHED);
# the queue has no directory (an LMQ deleted with cleanUnusedLmqTopic: NO_QUEUE); the offset is below
# the queue's first unit (its head files deleted: QUEUE_CUT) or past its last one while the broker
# runs or after a crash (reput not done yet: PENDING). Broken: no unit there in a store at rest
# (NOT_IN_QUEUE), a unit naming another record (OTHER_RECORD), a unit no record claims (STRAY).
STATES = ("IN_QUEUE", "NOT_DISPATCHED", "NO_QUEUE", "QUEUE_CUT", "PENDING", "NOT_IN_QUEUE", "OTHER_RECORD",
          "STRAY")
BROKEN_STATES = ("NOT_IN_QUEUE", "OTHER_RECORD", "STRAY")
PROBLEM_UNREADABLE = "lmq-dispatch-unreadable"
PROBLEM_BROKEN = "lmq-dispatch-mismatch"
_COLUMNS = ["phys_offset", "total_size", "topic", "queue_id", "queue_offset", "uniq_key", "properties"]
_SCAN_BATCH_ROWS = 65_536


@dataclass
class _Queue:
    """The units of one consume queue, by queue offset: (phys offset, size)."""

    units: dict[int, tuple[int, int]] = field(default_factory=dict)
    claimed: set[int] = field(default_factory=set)

    def first(self) -> int | None:
        return min(self.units) if self.units else None

    def last(self) -> int | None:
        return max(self.units) if self.units else None


def parse_dispatch(queues: str, offsets: str | None, record_queue_id: int) -> tuple[list, str | None]:
    """The (queue, queue id, offset) positions a record's two properties name, and why they
    cannot be read (None when they can). Without offsets the broker did not dispatch: every
    queue with offset None. An ``%LMQ%`` queue is queue 0; any other the record's own queue id."""
    queue_names = queues.split(MULTI_DISPATCH_SEPARATOR)
    ids = [LMQ_QUEUE_ID if names.is_lmq(q) else record_queue_id for q in queue_names]
    if offsets is None or not offsets.strip():
        return [(q, i, None) for q, i in zip(queue_names, ids, strict=True)], None
    pieces = offsets.split(MULTI_DISPATCH_SEPARATOR)
    if len(pieces) != len(queue_names):
        return [], f"{len(queue_names)} queue(s) in {PROP_INNER_MULTI_DISPATCH}={queues!r} but " \
                   f"{len(pieces)} offset(s) in {PROP_INNER_MULTI_QUEUE_OFFSET}={offsets!r}"
    if not all(p.strip().isdigit() for p in pieces):
        return [], f"{PROP_INNER_MULTI_QUEUE_OFFSET}={offsets!r} holds something that is no queue offset"
    return [(q, i, int(p)) for q, i, p in zip(queue_names, ids, pieces, strict=True)], None


def dispatched_records(commitlog_dir: Path, broker: str):
    """The broker's records that carry INNER_MULTI_DISPATCH (the columns the table needs), in physical order."""
    if not commitlog_dir.is_dir() or not any(commitlog_dir.glob("*.parquet")):
        return []
    data = ds.dataset(str(commitlog_dir), format="parquet")
    rows = []
    for batch in data.to_batches(columns=_COLUMNS, filter=ds.field("broker") == broker,
                                 batch_size=_SCAN_BATCH_ROWS):
        queues = pc.map_lookup(batch.column("properties"), PROP_INNER_MULTI_DISPATCH, "first")
        if queues.null_count == len(queues):
            continue
        offsets = pc.map_lookup(batch.column("properties"), PROP_INNER_MULTI_QUEUE_OFFSET, "first")
        keep = pc.is_valid(queues)
        picked = batch.drop_columns(["properties"]).filter(keep).to_pylist()
        for row, q, o in zip(picked, queues.filter(keep).to_pylist(), offsets.filter(keep).to_pylist(), strict=True):
            rows.append({**row, "dispatch": q, "offsets": o})
    rows.sort(key=lambda r: r["phys_offset"])
    return rows


def shows_lmq(reader: StoreReader) -> bool:
    """Whether the store is an LMQ broker's: an ``%LMQ%`` consume queue, or ``lmqConsumerOffset.json``
    (written only with enableLmq). Only then are the records' properties read: reading every
    record's properties again would cost every other import a second pass over its commitlog."""
    if (reader.root / CONFIG_DIR_NAME / LMQ_CONSUMER_OFFSET_FILE).is_file():
        return True
    base = reader.root / CONSUME_QUEUE_DIR_NAME
    return base.is_dir() and any(names.is_lmq(p.name) for p in base.iterdir())


def _queues(reader: StoreReader, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], _Queue]:
    """The units of every consume queue a dispatch names and of every ``%LMQ%`` queue."""
    found: dict[tuple[str, int], _Queue] = {}
    for topic, queue_id, files in reader.consume_queues():
        if (topic, queue_id) not in wanted and not names.is_lmq(topic):
            continue
        queue = found.setdefault((topic, queue_id), _Queue())
        for _path, _pos, unit in reader.cq_units(files):
            queue.units[unit.queue_offset] = (unit.phys_offset, unit.size)
    return found


def _state(queue: _Queue | None, offset: int | None, phys: int, settled: bool) -> str:
    """What the consume queue holds at a dispatch's offset (:data:`STATES`)."""
    if offset is None:
        return "NOT_DISPATCHED"
    if queue is None:
        return "NO_QUEUE"
    unit = queue.units.get(offset)
    if unit is not None:
        queue.claimed.add(offset)
        return "IN_QUEUE" if unit[0] == phys else "OTHER_RECORD"
    first, last = queue.first(), queue.last()
    if first is not None and offset < first:
        return "QUEUE_CUT"
    if not settled and (last is None or offset > last):
        return "PENDING"
    return "NOT_IN_QUEUE"


@dataclass
class _Broken:
    """Per queue, the dispatches in a broken state: a count and the first one."""

    counts: dict[tuple[str, int, str], list] = field(default_factory=dict)

    def add(self, queue: str, queue_id: int, state: str, offset: int, phys: int) -> None:
        entry = self.counts.setdefault((queue, queue_id, state), [0, offset, phys])
        entry[0] += 1

    def problems(self, broker: str) -> list[Problem]:
        words = {"NOT_IN_QUEUE": "dispatch(es) with no unit at the offset the record names",
                 "OTHER_RECORD": "dispatch(es) whose unit names another record",
                 "STRAY": "unit(s) naming a record that does not list this queue at that offset"}
        return [Problem(f"{CONSUME_QUEUE_DIR_NAME}/{queue}/{queue_id}", offset, PROBLEM_BROKEN,
                        f"broker {broker}: {count} {words[state]}; first: queue offset {offset}, record at "
                        f"commit-log offset {phys}", ERROR)
                for (queue, queue_id, state), (count, offset, phys) in sorted(self.counts.items())]


def write_lmq_dispatches(reader: StoreReader, parquet: Path, part: str, run_id: str,
                         broker: str) -> tuple[int, list[Problem]]:
    """Write ``lmq_dispatches`` of ``broker`` from the commitlog already written under ``parquet``
    and the store's consume queues; return its row count and the problems found. Call after the scan."""
    if not shows_lmq(reader):
        return TableWriter(parquet, "lmq_dispatches", part=part).close(), []
    records = dispatched_records(parquet / "commitlog", broker)
    problems: list[Problem] = []
    positions = []
    for row in records:
        found, why = parse_dispatch(row["dispatch"], row["offsets"], row["queue_id"])
        if why is not None:
            problems.append(Problem("commitlog", row["phys_offset"], PROBLEM_UNREADABLE,
                                    f"broker {broker}: record of {row['topic']}: {why}; its dispatches are "
                                    "not listed", WARNING))
        positions.extend((row, queue, queue_id, offset) for queue, queue_id, offset in found)
    queues = _queues(reader, {(q, i) for _r, q, i, _o in positions})
    settled = not reader.live and not reader.abort_file_present
    broken = _Broken()
    writer = TableWriter(parquet, "lmq_dispatches", part=part)
    for row, queue, queue_id, offset in positions:
        state = _state(queues.get((queue, queue_id)), offset, row["phys_offset"], settled)
        if state in BROKEN_STATES:
            broken.add(queue, queue_id, state, offset, row["phys_offset"])
        writer.write(_row(run_id, broker, queue, queue_id, offset, state, row))
    for (queue, queue_id), held in sorted(queues.items()):
        if names.is_lmq(queue):
            for offset, phys in _stray_units(reader, held):
                broken.add(queue, queue_id, "STRAY", offset, phys)
                writer.write(_row(run_id, broker, queue, queue_id, offset, "STRAY", {"phys_offset": phys}))
    return writer.close(), problems + broken.problems(broker)


def _stray_units(reader: StoreReader, queue: _Queue) -> list[tuple[int, int]]:
    """(offset, phys offset) of the units of a queue no dispatch claimed, within the valid log."""
    end = reader.valid_end if reader.valid_end is not None else 0
    return [(offset, phys) for offset, (phys, size) in sorted(queue.units.items())
            if offset not in queue.claimed and reader.first_offset <= phys and phys + size <= end]


def _row(run_id: str, broker: str, queue: str, queue_id: int, offset: int | None, state: str, record: dict) -> dict:
    return {"run_id": run_id, "broker": broker, "dispatch_queue": queue, "dispatch_queue_id": queue_id,
            "dispatch_offset": offset, "phys_offset": record["phys_offset"], "topic": record.get("topic"),
            "queue_id": record.get("queue_id"), "queue_offset": record.get("queue_offset"),
            "uniq_key": record.get("uniq_key"), "state": state}
