"""A 5.x controller-mode broker's epochs: which master wrote which offsets, and the tail a failover cut.

Each imported copy of a controller-mode broker (``import-store --role master|slave``) gets one
``replica_epochs`` row per epoch of its ``epochFileCheckpoint`` (:mod:`broker_core.store.
controller_files`): the offsets the epoch covers in this copy, how many of the copy's records lie
there and the STOREHOST they carry (a slave's records are its master's bytes, so that is the address
of the master that wrote them).

Merging the two copies (:func:`broker_core.export.replicas.merge_sides`) uses the epochs as a
rejoining slave does (``AutoSwitchHAClient.doTruncate``): the copy whose last epoch is the highest
holds the broker's history (a tie: the copy imported as master); the other copy agrees with it up to
the **consistent point** (``EpochFileCache.findConsistentPoint``: of the latest epoch both hold with
the same start offset, the smaller of the two copies' ends of it). Copies whose last epochs are the
same saw no failover between them and merge as any master and slave do. A record of the other copy past
that point was written by a master that lost its role before any replica had it, and RocketMQ
truncates it when that broker rejoins. A producer's send waits for the SyncStateSet only with
``allAckInSyncStateSet=true`` (the default, false with ``inSyncReplicas=1``, waits for no replica),
and a consumer's send-back never waits (``AbstractSendMessageProcessor.consumerSendMsgBack`` sets
WAIT false), so such a record may have been acknowledged and then lost: a real 5.3.3 master killed 36 ms after a send-back left exactly
that record, and the group never saw the message again. The merge leaves such records out of
``commitlog`` (they hold offsets the broker's history gave to other records), writes each to
``failover_cut`` (the warehouse's anomaly FAILOVER_CUT names its message), counts them in
``truncated_records``, lists them in the summary and reports them as one ``failover-truncated`` warning. Two copies with no consistent point
(``epochs-disjoint``) are merged without the rule, as copies without epochs are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.export.broker_parts import broker_parts_of
from broker_core.export.parquet import TableWriter
from broker_core.export.schema import RAW_TABLES
from broker_core.store.controller_files import ControllerFiles, read_controller_files
from broker_core.store.problem import ERROR, WARNING, Problem

KIND_FAILOVER_TRUNCATED = "failover-truncated"
KIND_EPOCHS_DISJOINT = "epochs-disjoint"
KIND_IDENTITY_MISMATCH = "broker-identity-mismatch"
TRUNCATED_LISTED_MAX = 20  # truncated records listed by name in the summary; the rest are counted


def write_replica_epochs(root: Path, parquet: Path, part: str, run_id: str, broker: str, role: str,
                         log_end: int) -> tuple[int, list[Problem], ControllerFiles | None]:
    """This copy's ``replica_epochs`` rows (none without controller files); (rows, problems, files)."""
    files = read_controller_files(root, log_end)
    writer = TableWriter(parquet, "replica_epochs", part=part)
    if files is not None and files.epochs:
        ranges = files.ranges(log_end)
        counts, hosts = _count_by_range(broker_parts_of(parquet / "commitlog", broker), ranges)
        for (entry, end), count, found in zip(ranges, counts, hosts, strict=True):
            writer.write({"run_id": run_id, "broker": broker, "role": role,
                          "broker_id": files.identity.broker_id if files.identity else None,
                          "epoch": entry.epoch, "start_offset": entry.start_offset, "end_offset": end,
                          "records": count, "store_hosts": sorted(found), "truncated_records": 0})
    return writer.close(), (files.problems if files is not None else []), files


def _count_by_range(files: list[Path], ranges: list) -> tuple[list[int], list[set[str]]]:
    """Per epoch range: this copy's records there, and the store hosts of those that are not a
    delivery from the schedule or timer (its topic is its REAL_TOPIC again), a row group at a time.

    A delivery keeps the STOREHOST of the record it was put from (ScheduleMessageService.
    messageTimeup copies it), so after a failover the new master's deliveries of records the old
    one scheduled carry the old master's address (seen on a real 5.3.3 pair): they name no writer."""
    counts = [0] * len(ranges)
    hosts: list[set[str]] = [set() for _ in ranges]
    for path in files:
        f = pq.ParquetFile(path)
        for i in range(f.num_row_groups):
            group = f.read_row_group(i, columns=["phys_offset", "store_host", "topic", "real_topic"])
            offsets = group.column("phys_offset")
            own = pc.invert(pc.fill_null(pc.equal(group.column("topic"), group.column("real_topic")), False))
            for k, (entry, end) in enumerate(ranges):
                inside = pc.and_(pc.greater_equal(offsets, entry.start_offset), pc.less(offsets, end))
                counts[k] += pc.sum(inside).as_py() or 0
                hosts[k].update(h for h in pc.unique(group.column("store_host").filter(pc.and_(inside, own)))
                                .to_pylist() if h is not None)
    return counts, hosts


@dataclass
class EpochDecision:
    """How the epochs of a broker's two copies merge: which copy holds the history, and from which
    offset the other's records are a failover-truncated tail."""

    history: str | None = None  # the role of the copy holding the broker's history
    cut_role: str | None = None  # the other copy, whose records from cut_offset on are left out
    cut_offset: int | None = None
    truncated: list[dict] = field(default_factory=list)  # up to TRUNCATED_LISTED_MAX of them
    truncated_count: int = 0
    problems: list[Problem] = field(default_factory=list)
    cut_records: pa.Table | None = None  # every record left out (failover_cut's columns)

    def to_json(self) -> dict:
        return {"history": self.history, "cut_role": self.cut_role, "cut_offset": self.cut_offset,
                "truncated_records": self.truncated_count, "truncated": self.truncated}


def _epochs(side: Path, part: str) -> list[dict]:
    path = side / "replica_epochs" / part
    return sorted(pq.read_table(path).to_pylist(), key=lambda r: r["epoch"]) if path.is_file() else []


def consistent_point(mine: list[dict], theirs: list[dict]) -> int:
    """``EpochFileCache.findConsistentPoint``: from the latest epoch down, the first both copies hold
    with the same start offset; the smaller of their ends of it. -1 when there is none."""
    by_epoch = {r["epoch"]: r for r in theirs}
    for row in reversed(mine):
        other = by_epoch.get(row["epoch"])
        if other is not None and other["start_offset"] == row["start_offset"]:
            return min(row["end_offset"], other["end_offset"])
    return -1


def decide(sides: dict[str, Path], part: str) -> EpochDecision:
    """The merge rule for the copies ``sides`` ({role: parquet dir}, master first)."""
    decision = EpochDecision()
    epochs = {role: _epochs(side, part) for role, side in sides.items()}
    if len(epochs) != 2 or not all(epochs.values()):
        return decision
    decision.problems.extend(_identity_problems(epochs))
    (first, a), (second, b) = epochs.items()
    history, other = (second, first) if b[-1]["epoch"] > a[-1]["epoch"] else (first, second)
    point = consistent_point(epochs[other], epochs[history])
    decision.history = history
    if epochs[other][-1]["epoch"] == epochs[history][-1]["epoch"] and point >= 0:
        # One epoch on both: no failover between them. A slave behind, or one holding what its
        # master lost in a crash, merges as any pair does.
        return decision
    if point < 0:
        decision.problems.append(Problem(
            "epochFileCheckpoint", None, KIND_EPOCHS_DISJOINT,
            f"the {first}'s and the {second}'s epoch files share no epoch with one start offset: they are not "
            "copies of one broker's log (RocketMQ refuses such a slave), merged without the epochs", ERROR))
        return decision
    decision.cut_role, decision.cut_offset = other, point
    return decision


def _identity_problems(epochs: dict[str, list[dict]]) -> list[Problem]:
    ids = {role: rows[0]["broker_id"] for role, rows in epochs.items()}
    if None in ids.values() or len(set(ids.values())) == len(ids):
        return []
    return [Problem("brokerIdentity", None, KIND_IDENTITY_MISMATCH,
                    f"both copies say broker id {next(iter(ids.values()))}: the controller gives each broker of a "
                    "name its own id, so these are two copies of one broker's store, not a master and its slave",
                    WARNING)]


def cut_tail(commitlog: Path, out: Path, decision: EpochDecision, role: str) -> Path:
    """``commitlog`` without the records from ``decision.cut_offset`` on (written to ``out``, a row
    group at a time), noting them in ``decision``; ``commitlog`` itself when nothing is cut."""
    f = pq.ParquetFile(commitlog)
    offsets = pq.read_table(commitlog, columns=["phys_offset"]).column(0)
    count = pc.sum(pc.greater_equal(offsets, decision.cut_offset)).as_py() or 0
    if not count:
        return commitlog
    out.parent.mkdir(parents=True, exist_ok=True)
    tails = []
    with pq.ParquetWriter(out, f.schema_arrow) as writer:
        for i in range(f.num_row_groups):
            group = f.read_row_group(i)
            past = pc.greater_equal(group.column("phys_offset"), decision.cut_offset)
            writer.write_table(group.filter(pc.invert(past)))
            tails.append(group.filter(past))
    tail = pa.concat_tables(tails)
    decision.truncated_count = count
    decision.cut_records = tail
    columns = ["phys_offset", "topic", "queue_id", "queue_offset", "uniq_key", "store_host"]
    decision.truncated = tail.select(columns).slice(0, TRUNCATED_LISTED_MAX).to_pylist()
    first, last = tail.column("phys_offset")[0].as_py(), tail.column("phys_offset")[-1].as_py()
    decision.problems.append(Problem(
        "commitlog", first, KIND_FAILOVER_TRUNCATED,
        f"{count} record(s) of the {role} from offset {first} to {last} are past offset {decision.cut_offset}, "
        f"where its epochs leave the {decision.history}'s: written by a master that lost its role before a replica "
        "had them; RocketMQ truncates them when that broker rejoins. A consumer's send-back (and, unless "
        "allAckInSyncStateSet, a send) is acknowledged without waiting for a replica, so one may have been "
        "acknowledged and lost (anomaly FAILOVER_CUT). Left out of commitlog, listed in failover_cut", WARNING))
    return out


def write_cut_records(dest: Path, part: str, decision: EpochDecision) -> None:
    """The ``failover_cut`` rows: each record the merge left out (none when nothing was cut)."""
    writer = TableWriter(dest, "failover_cut", part=part)
    tail = decision.cut_records
    if tail is not None:
        names = [n for n in RAW_TABLES["failover_cut"].names if n not in ("role", "cut_offset")]
        for row in tail.select(names).to_pylist():
            writer.write({**row, "role": decision.cut_role, "cut_offset": decision.cut_offset})
    writer.close()


def explain_master_only(problems: list[Problem], decision: EpochDecision, slave_behind_kind: str) -> None:
    """A slave cut at a failover is not behind: the master's records past the cut are the epochs the
    slave never served in. Say so in the merge's ``slave-behind`` warning."""
    if decision.cut_offset is None or decision.cut_role != "slave":
        return
    for i, p in enumerate(problems):
        if p.kind == slave_behind_kind and p.offset is not None and p.offset >= decision.cut_offset:
            problems[i] = Problem(p.file, p.offset, p.kind, p.reason.replace(
                "the slave had not replicated them",
                f"written from offset {decision.cut_offset} on by the master of a later epoch, after the slave's "
                "copy stopped at a failover"), p.severity)


def write_merged_epochs(sides: dict[str, Path], part: str, dest: Path, decision: EpochDecision) -> None:
    """Both copies' epoch rows, the cut copy's ``truncated_records`` filled in."""
    writer = TableWriter(dest, "replica_epochs", part=part)
    for role, side in sides.items():
        for row in _epochs(side, part):
            if role == decision.cut_role and decision.truncated_count:
                start, end = max(row["start_offset"], decision.cut_offset), row["end_offset"]
                row["truncated_records"] = _count_in(side, part, start, end) if start < end else 0
            writer.write(row)
    writer.close()


def _count_in(side: Path, part: str, start: int, end: int) -> int:
    offsets = pq.read_table(side / "commitlog" / part, columns=["phys_offset"]).column(0).to_numpy()
    return int(((offsets >= start) & (offsets < end)).sum())


assert "replica_epochs" in RAW_TABLES
