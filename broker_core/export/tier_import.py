"""A broker's tiered store as an extra source of ``commitlog`` rows (``import-store --tiered DIR``).

Local retention deletes the oldest commit-log files; the tier (:mod:`broker_core.store.tiered`)
keeps raw copies of the records of every topic it tiers for longer. The import reads the local log
as always, then the tier: each tier record whose physical offset is below the local log's first
offset (a record retention deleted locally) becomes a ``commitlog`` row again, with the offset,
msgId and properties it was stored with and ``file_name`` ``tier:<path under the tier root>``.
A tier record at or past the first offset is the local record's copy and adds nothing. The rows
are their own file of the broker's commitlog table (:func:`tier_part_name`).

The tier never keeps SCHEDULE_TOPIC_XXXX, timer or transaction records, so a chain whose schedule
hops retention deleted keeps a gap where they were; the lineage marks such a chain ``truncated``
(docs/lineage.md), never LOST.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker_core.export.broker_parts import INCREMENT_SEPARATOR, PART_PREFIX, PART_SUFFIX
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
    added: int  # records below the local log's first offset: commitlog rows again
    already_local: int  # records the local log still holds
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
                "added_by_topic": dict(sorted(self.added_by_topic.items())),
                "metadata_found": self.metadata_found, "problems": len(self.problems)}


def open_tier(tier_dir: Path | str, broker: str | None, store_root: Path) -> TieredStore:
    """The tier of ``broker`` (or the tier's only broker) under ``tier_dir``; BadInputError if none."""
    return TieredStore(tier_dir, broker, store_root)


def write_tier_rows(tier: TieredStore, parquet: Path, run_id: str, broker: str, first_offset: int) -> TierImport:
    """Write the tier's records below ``first_offset`` as ``broker``'s tier commitlog file."""
    from broker_core.export.store_import import record_to_values  # it imports this module

    writer = TableWriter(parquet, "commitlog", part=tier_part_name(broker))
    added, local, by_topic = 0, 0, {}
    for entry in tier.entries():
        if entry.record.phys_offset >= first_offset:
            local += 1
            continue
        writer.write_values(record_to_values(entry.record, run_id, broker, entry.file_name))
        added += 1
        by_topic[entry.record.topic] = by_topic.get(entry.record.topic, 0) + 1
    writer.close()
    counts = tier.counts
    return TierImport(str(tier.root), str(tier.broker_dir.relative_to(tier.root)), tier.cluster, counts.queues,
                      counts.segments, counts.records, counts.duplicates, added, local, by_topic,
                      tier.metadata is not None, list(tier.problems))
