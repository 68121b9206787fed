"""A broker's tiered store as an extra source of ``commitlog`` rows (``import-store --tiered DIR``).

Local retention deletes the oldest commit-log files; the tier (:mod:`broker_core.store.tiered`)
keeps copies of the records of every topic it tiers for longer. The import reads the local log
as always, then the tier: each tier record the local log no longer holds (its queue offset is
below the first one the local log holds for its queue) becomes a ``commitlog`` row again, with
``file_name`` ``tier:<path under the tier root>``; a record the local log still holds adds nothing.

The tier rewrote each record's PHYSICALOFFSET to its position in the queue's tier log, so the
original physical offset is taken from the local consume queue, whose unit for that queue offset
(of the same size) outlives the commit-log file while its consume-queue file is kept. When no
unit names it any more the original offset is unknown: the row's ``phys_offset`` is then negative,
``-1 - n`` for the broker's n-th such record (in topic, queue, queue-offset order), and its
``msg_id`` null. The rows are their own file of the broker's commitlog table (:func:`tier_part_name`).

The tier never keeps SCHEDULE_TOPIC_XXXX, timer or transaction records, so a chain whose schedule
hops retention deleted keeps a gap where they were; the lineage marks such a chain ``truncated``
(docs/lineage.md), never LOST.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from broker_core.export.broker_parts import INCREMENT_SEPARATOR, PART_PREFIX, PART_SUFFIX
from broker_core.export.commitlog_rows import COMMITLOG_COLUMNS, record_to_values
from broker_core.export.parquet import TableWriter
from broker_core.store.problem import ERROR, Problem
from broker_core.store.tiered import TieredStore

# The tier's rows of a broker: one of its commitlog files (``part-<broker>+tiered.parquet``), so a
# later import of the broker replaces it with the rest of the broker's files.
TIER_PART_TAG = "tiered"


def tier_part_name(broker: str) -> str:
    return f"{PART_PREFIX}{broker}{INCREMENT_SEPARATOR}{TIER_PART_TAG}{PART_SUFFIX}"


@dataclass
class TierImport:
    """What the import took from a tier."""

    tier_dir: str
    broker_dir: str
    cluster: str
    queues: int
    segments: int
    records: int  # distinct records the tier holds
    duplicates: int  # copies of a record a queue's tier log holds twice
    added: int  # records the local log no longer holds: commitlog rows again
    already_local: int  # records the local log still holds
    offset_unknown: int  # of the added, those no local consume-queue unit names (negative phys_offset)
    added_by_topic: dict[str, int] = field(default_factory=dict)
    metadata_found: bool = False
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    def to_json(self) -> dict:
        return {"tier_dir": self.tier_dir, "broker_dir": self.broker_dir, "cluster": self.cluster,
                "queues": self.queues, "segments": self.segments, "records": self.records,
                "duplicates": self.duplicates, "added": self.added, "already_local": self.already_local,
                "offset_unknown": self.offset_unknown,
                "added_by_topic": dict(sorted(self.added_by_topic.items())),
                "metadata_found": self.metadata_found, "problems": len(self.problems)}


def open_tier(tier_dir: Path | str, broker: str | None, store_root: Path) -> TieredStore:
    """The tier of ``broker`` (or the tier's only broker) under ``tier_dir``; BadInputError if none."""
    return TieredStore(tier_dir, broker, store_root)


def write_tier_rows(tier: TieredStore, reader, parquet: Path, local_part: Path, run_id: str,
                    broker: str) -> TierImport:
    """Write the tier's records the local log no longer holds as ``broker``'s tier commitlog file.

    ``reader`` is the local store's (its consume queues give original offsets), ``local_part``
    the commitlog file the import wrote of the local log (its queue offsets say what it holds)."""

    msg_id_at = COMMITLOG_COLUMNS.index("msg_id")
    held = local_queue_offsets(local_part)
    wanted = {(q.topic, q.queue_id) for q in tier.queues}
    offsets = deleted_offsets(reader, wanted)
    writer = TableWriter(parquet, "commitlog", part=tier_part_name(broker))
    added, local, unknown, by_topic = 0, 0, 0, {}
    for entry in tier.entries():
        record = entry.record
        low = held.get((record.topic, record.queue_id))
        if low is not None and low[0] <= record.queue_offset <= low[1]:
            local += 1
            continue
        phys = offsets.get((record.topic, record.queue_id, record.queue_offset, record.total_size))
        if phys is None:
            unknown += 1
            phys = -unknown
        values = record_to_values(dataclasses.replace(record, phys_offset=max(phys, 0)), run_id, broker,
                                  entry.file_name)
        values = (*values[:2], phys, *values[3:msg_id_at], values[msg_id_at] if phys >= 0 else None,
                  *values[msg_id_at + 1:])
        writer.write_values(values)
        added += 1
        by_topic[record.topic] = by_topic.get(record.topic, 0) + 1
    writer.close()
    counts = tier.counts
    return TierImport(str(tier.root), str(tier.broker_dir.relative_to(tier.root)), tier.cluster, counts.queues,
                      counts.segments, counts.records, counts.duplicates, added, local, unknown, by_topic,
                      tier.metadata is not None, list(tier.problems))


def local_queue_offsets(local_part: Path) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, queue id): (least, greatest) queue offset} of the records the local log holds."""
    table = pq.read_table(local_part, columns=["topic", "queue_id", "queue_offset"])
    if table.num_rows == 0:
        return {}
    grouped = table.group_by(["topic", "queue_id"]).aggregate([("queue_offset", "min"), ("queue_offset", "max")])
    return {(r["topic"], r["queue_id"]): (r["queue_offset_min"], r["queue_offset_max"])
            for r in grouped.to_pylist()}


def deleted_offsets(reader, queues: set[tuple[str, int]]) -> dict[tuple[str, int, int, int], int]:
    """{(topic, queue id, queue offset, size): physical offset} of the local consume-queue units
    of ``queues`` that name a record below the log's first offset (deleted by retention)."""
    found = {}
    for topic, queue_id, files in reader.consume_queues():
        if (topic, queue_id) not in queues:
            continue
        for _path, _pos, unit in reader.cq_units(files):
            if unit.phys_offset < reader.first_offset:
                found[(topic, queue_id, unit.queue_offset, unit.size)] = unit.phys_offset
    return found
