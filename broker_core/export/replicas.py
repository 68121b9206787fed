"""A broker imported from its master's store and its slave's: one set of rows, each record once.

A RocketMQ slave (brokerRole SLAVE, the same brokerName) holds a copy of its master's commit log,
byte for byte at the same physical offsets, replicated as the master writes it (HAService). The
two stores differ only where replication had not caught up (the slave is behind), where the
master lost a tail the slave had already copied (a master crash under async flush), where
retention deleted different files on each, or where they really disagree (damage, or a master
that rewrote offsets the slave holds after an unclean failover).

``import-store --broker NAME --role slave`` imports a slave's store as broker NAME's other side.
Each side's own tables are kept under ``replicas/NAME/<role>/parquet/`` and the broker's tables in
``parquet/`` are their merge: one commitlog row per physical offset (the master's record where both
have one; a record only one side has is kept), the master's consumer and delay offsets (the slave
syncs them from the master), both sides' store problems plus what the merge found, and one runs
row. What the merge found is reported as ``store_problems`` rows: ``slave-behind`` (records only the
master has), ``slave-only-records`` (records only the slave has) and ``replicas-differ`` (master and
slave hold different records at one offset).

The merge streams both commit logs in physical order, a row group at a time.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.export.broker_parts import PARQUET_DIR_NAME, REPLICAS_DIR_NAME, broker_parts_of, part_name
from broker_core.export.columnar import CommitlogWriter
from broker_core.export.controller_epochs import (
    EpochDecision,
    cut_tail,
    decide,
    explain_master_only,
    write_cut_records,
    write_merged_epochs,
)
from broker_core.export.parquet import TableWriter
from broker_core.export.schema import RAW_TABLES
from broker_core.store.problem import Problem

ROLE_MASTER = "master"
ROLE_SLAVE = "slave"
ROLES = (ROLE_MASTER, ROLE_SLAVE)
KIND_SLAVE_BEHIND = "slave-behind"
KIND_SLAVE_ONLY = "slave-only-records"
KIND_DIFFER = "replicas-differ"
# Offsets where master and slave differ are listed one problem each up to this many; the rest are
# counted in one more problem (a diverged pair of logs would otherwise list every record).
DIFFERENCES_LISTED_MAX = 100
# The fields that tell two records at one offset apart: a slave's record is the master's bytes, so
# every one of them is equal on both sides (the size covers the properties, the msgId the store host).
COMPARED_COLUMNS = ("total_size", "msg_id", "topic", "queue_id", "queue_offset", "body_crc", "store_ts",
                    "uniq_key", "born_ts")
# Tables whose rows come from one side: the master's when it is imported (the slave copies the
# master's consumerOffset.json and delayOffset.json), else the slave's. A controller-mode broker's
# epochs are both sides' (controller_epochs).
_ONE_SIDE_TABLES = tuple(t for t in RAW_TABLES if t not in ("commitlog", "store_problems", "runs", "replica_epochs",
                                                                "failover_cut"))


def other_role(role: str) -> str:
    return ROLE_SLAVE if role == ROLE_MASTER else ROLE_MASTER


def side_dir(run_dir: Path, broker: str, role: str) -> Path:
    """The parquet/ directory of one side of a replicated broker."""
    return Path(run_dir) / REPLICAS_DIR_NAME / broker / role / PARQUET_DIR_NAME


def earlier_side(out_dir: Path, broker: str, role: str) -> dict[Path, Path] | None:
    """The files of ``broker``'s other side in the existing run, to keep beside this import:
    {source path: path relative to the other side's parquet/ directory}; None when the import of
    ``role`` is not merged with anything (a master with no slave imported).

    A slave imported into a run whose broker was imported plainly (a master) takes those files
    as the master's side. Empty when the other side is not there yet (a slave first).
    """
    out_dir = Path(out_dir)
    other = other_role(role)
    kept = side_dir(out_dir, broker, other)
    if kept.is_dir():
        return {p: p.relative_to(kept) for p in sorted(kept.rglob(f"*{part_name(broker)}"))}
    if role == ROLE_MASTER:
        return None
    plain = out_dir / PARQUET_DIR_NAME
    return ({p: p.relative_to(plain) for t in sorted(plain.iterdir()) for p in broker_parts_of(t, broker)}
            if plain.is_dir() else {})


def link_side(files: dict[Path, Path], dest: Path) -> None:
    for src, rel in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, target)
        except OSError:
            shutil.copy2(src, target)


@dataclass
class MergeResult:
    """What merging a broker's master and slave found."""

    records: int = 0
    only_master: int = 0
    only_slave: int = 0
    differ: int = 0
    problems: list[Problem] = field(default_factory=list)
    # A controller-mode broker's copies: which holds the history and what the failover cut
    # (controller_epochs.EpochDecision.to_json); None without epoch files on both sides.
    epochs: dict | None = None


def merge_sides(run_dir: Path, broker: str, dest_parquet: Path) -> MergeResult:
    """Merge ``broker``'s sides under ``run_dir``/replicas into ``dest_parquet``/<table>/part-<broker>."""
    master, slave = (side_dir(run_dir, broker, r) for r in ROLES)
    part = part_name(broker)
    have_master = (master / "commitlog" / part).is_file()
    have_slave = (slave / "commitlog" / part).is_file()
    assert have_master or have_slave, f"no side of {broker} to merge under {run_dir}"
    result = MergeResult()
    sides = {role: side for role, side, have in ((ROLE_MASTER, master, have_master), (ROLE_SLAVE, slave, have_slave))
             if have}
    decision = decide(sides, part)
    if have_master and have_slave:
        _merge_cut_commitlogs(sides, part, dest_parquet, decision, result)
        explain_master_only(result.problems, decision, KIND_SLAVE_BEHIND)
    else:
        only = master if have_master else slave
        link_side({only / "commitlog" / part: Path("commitlog") / part}, dest_parquet)
        result.records = pq.ParquetFile(only / "commitlog" / part).metadata.num_rows
    primary = master if have_master else slave
    link_side({primary / t / part: Path(t) / part for t in _ONE_SIDE_TABLES if (primary / t / part).is_file()},
              dest_parquet)
    write_merged_epochs(sides, part, dest_parquet, decision)
    write_cut_records(dest_parquet, part, decision)
    result.problems.extend(decision.problems)
    if decision.history is not None:
        result.epochs = decision.to_json()
    _write_problems(master if have_master else None, slave if have_slave else None, dest_parquet, part,
                    broker, result)
    _write_runs(master if have_master else None, slave if have_slave else None, dest_parquet, part, result)
    return result


def _merge_cut_commitlogs(sides: dict[str, Path], part: str, dest: Path, decision: EpochDecision,
                          result: MergeResult) -> None:
    """Merge both sides' commit logs, the tail a failover cut from one side left out first."""
    logs = {role: side / "commitlog" / part for role, side in sides.items()}
    work = dest.parent / f".{part}.cut"
    try:
        if decision.cut_offset is not None:
            role = decision.cut_role
            logs[role] = cut_tail(logs[role], work / part, decision, role)
        _merge_commitlog(logs[ROLE_MASTER], logs[ROLE_SLAVE], dest, part, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _row_groups(path: Path) -> Iterator[pa.Table]:
    f = pq.ParquetFile(path)
    for i in range(f.num_row_groups):
        table = f.read_row_group(i)
        if table.num_rows:
            yield table


def _offsets(table: pa.Table) -> np.ndarray:
    return table.column("phys_offset").to_numpy()


def _merge_commitlog(master: Path, slave: Path, dest: Path, part: str, result: MergeResult,
                     names: tuple[str, str] = ROLES) -> None:
    """Both commit logs in physical order, one window of master rows at a time: the slave's rows
    up to the window's last offset are taken; those at an offset the master has are compared with
    its record, the others kept. Memory holds one master row group and the slave rows it spans.
    ``names`` are the two sides' names in the problems (two DLedger replicas': their ids)."""
    writer = CommitlogWriter(dest, part=part)
    slaves = _row_groups(slave)
    pending = pa.Table.from_batches([], schema=RAW_TABLES["commitlog"])
    first_master_only: int | None = None
    first_slave_only: int | None = None

    def keep_slave_only(rows: pa.Table) -> None:
        nonlocal first_slave_only
        if rows.num_rows:
            result.only_slave += rows.num_rows
            if first_slave_only is None:
                first_slave_only = int(rows.column("phys_offset")[0].as_py())

    for window in _row_groups(master):
        offsets = _offsets(window)
        lo, hi = int(offsets[0]), int(offsets[-1])
        # Slave rows below the window are records the master does not have: written as they come,
        # so a slave that kept files the master's retention deleted streams through too.
        while True:
            if pending.num_rows == 0:
                pending = next(slaves, pending)
                if pending.num_rows == 0:
                    break
            below = int(np.searchsorted(_offsets(pending), lo, side="left"))
            if below:
                keep_slave_only(pending.slice(0, below))
                writer.write(pending.slice(0, below))
                pending = pending.slice(below)
            if pending.num_rows:
                break
        while pending.num_rows and int(_offsets(pending)[-1]) <= hi:
            more = next(slaves, None)
            if more is None:
                break
            pending = pa.concat_tables([pending, more])
        upto = int(np.searchsorted(_offsets(pending), hi, side="right")) if pending.num_rows else 0
        seen, pending = pending.slice(0, upto), pending.slice(upto)
        seen_offsets = _offsets(seen) if seen.num_rows else np.empty(0, dtype=np.int64)
        on_master = np.isin(seen_offsets, offsets)
        on_slave = np.isin(offsets, seen_offsets)
        missing = int((~on_slave).sum())
        if missing:
            result.only_master += missing
            if first_master_only is None:
                first_master_only = int(offsets[~on_slave][0])
        _compare(window.filter(pa.array(on_slave)), seen.filter(pa.array(on_master)), result, names)
        slave_only = seen.filter(pa.array(~on_master))
        keep_slave_only(slave_only)
        merged = pa.concat_tables([window, slave_only]) if slave_only.num_rows else window
        writer.write(merged.sort_by("phys_offset") if slave_only.num_rows else merged)
    while True:
        if pending.num_rows:
            keep_slave_only(pending)
            writer.write(pending)
        pending = next(slaves, None)
        if pending is None:
            break
    result.records = writer.close()
    if result.only_master:
        result.problems.append(Problem(
            "commitlog", first_master_only, KIND_SLAVE_BEHIND,
            f"{result.only_master} record(s) from offset {first_master_only} are on the master only: "
            "the slave had not replicated them", "warning"))
    if result.only_slave:
        result.problems.append(Problem(
            "commitlog", first_slave_only, KIND_SLAVE_ONLY,
            f"{result.only_slave} record(s) from offset {first_slave_only} are on the slave only (the "
            "master lost them, or its retention deleted them first): kept from the slave", "warning"))
    if result.differ > DIFFERENCES_LISTED_MAX:
        result.problems.append(Problem(
            "commitlog", None, KIND_DIFFER,
            f"{names[0]} and {names[1]} differ at {result.differ} offsets in all ({DIFFERENCES_LISTED_MAX} listed); "
            f"the {names[0]}'s records are kept", "error"))


def _compare(master: pa.Table, slave: pa.Table, result: MergeResult, names: tuple[str, str] = ROLES) -> None:
    """Record a problem at each offset where the two sides' records (aligned by offset) differ."""
    if master.num_rows == 0:
        return
    same = None
    for name in COMPARED_COLUMNS:
        a, b = master.column(name), slave.column(name)
        equal = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        same = equal if same is None else pc.and_(same, equal)
    differ = pc.invert(same)
    count = pc.sum(differ).as_py() or 0
    if not count:
        return
    rows = master.filter(differ).select(["phys_offset", "file_name", "msg_id", "topic"]).to_pylist()
    theirs = slave.filter(differ).select(["msg_id", "topic"]).to_pylist()
    for mine, other in zip(rows, theirs, strict=True):
        result.differ += 1
        if result.differ <= DIFFERENCES_LISTED_MAX:
            result.problems.append(Problem(
                f"commitlog/{mine['file_name']}" if mine["file_name"] else "commitlog", mine["phys_offset"],
                KIND_DIFFER,
                f"{names[0]} and {names[1]} differ at offset {mine['phys_offset']}: {mine['topic']} "
                f"{mine['msg_id']} on the {names[0]}, {other['topic']} {other['msg_id']} on the {names[1]}; "
                f"the {names[0]}'s is kept",
                "error"))


def _write_problems(master: Path | None, slave: Path | None, dest: Path, part: str, broker: str,
                    result: MergeResult) -> None:
    writer = TableWriter(dest, "store_problems", part=part)
    for side, role in ((master, ROLE_MASTER), (slave, ROLE_SLAVE)):
        if side is None or not (side / "store_problems" / part).is_file():
            continue
        for row in pq.read_table(side / "store_problems" / part).to_pylist():
            row["detail"] = f"{role}: {row['detail']}"
            writer.write(row)
    run_id = _run_id(master or slave, part)
    for p in result.problems:
        writer.write({"run_id": run_id, "broker": broker, "file_name": p.file, "offset": p.offset,
                      "kind": p.kind, "detail": p.reason, "severity": p.severity})
    writer.close()


def _run_id(side: Path, part: str) -> str:
    return pq.read_table(side / "runs" / part, columns=["run_id"]).column(0)[0].as_py()


def merged_runs_row(rows: list[dict], records: int) -> dict:
    """One runs row for a broker whose store several copies (master and slave, DLedger replicas)
    hold: the first row's, over every copy's records (the earliest first offset and start, the
    latest end, every store host, each delay level from the first copy that knows it)."""
    row = dict(rows[0])
    firsts = [r["first_offset"] for r in rows if r["first_offset"] is not None]
    row["first_offset"] = min(firsts) if firsts else None
    starts = [r["sim_start_ts"] for r in rows if r["sim_start_ts"] is not None]
    ends = [r["sim_end_ts"] for r in rows if r["sim_end_ts"] is not None]
    row["sim_start_ts"] = min(starts) if starts else None
    row["sim_end_ts"] = max(ends) if ends else None
    row["records_written"] = records
    row["msg_id_hosts"] = sorted({h for r in rows for h in (r["msg_id_hosts"] or [])})
    # The copies run one delay table; a level one has no schedule record of is read from another.
    levels = [r.get("delay_levels_ms") or [] for r in rows]
    known = [next((side[k] for side in levels if k < len(side) and side[k] is not None), None)
             for k in range(max(map(len, levels)))]
    row["delay_levels_ms"] = known or None
    return row


def _write_runs(master: Path | None, slave: Path | None, dest: Path, part: str, result: MergeResult) -> None:
    """One runs row for the broker: the master's (else the slave's), over both sides' records."""
    rows = [pq.read_table(s / "runs" / part).to_pylist()[0] for s in (master, slave) if s is not None]
    row = merged_runs_row(rows, result.records)
    writer = TableWriter(dest, "runs", part=part)
    writer.write(row)
    writer.close()
