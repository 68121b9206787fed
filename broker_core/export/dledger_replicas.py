"""A DLedger group imported from several of its replicas' stores: one broker, each entry once.

The nodes of a DLedger group (``dLegerGroup``, one ``brokerName``) hold one Raft log: a follower
appends the leader's entries byte for byte at the same positions, so an entry is known by its
(index, term) and its record sits at the same physical offset on every replica holding it. The
replicas differ where one is behind (not replicated yet, or killed), where retention deleted files
on one first, and at the tail a leader appended but never committed: a leader killed, or cut off
from the others, keeps entries no other replica has, and once another leader is elected the same
indexes get other entries, of a higher term, on the others. Such a tail is **divergent**: its
entries were never committed, no consumer saw them, and the old leader cuts them off when it
rejoins (``DLedgerMmapFileStore.truncate``).

``import-store STORE --broker NAME --role replica`` imports a replica's store as one side of broker
NAME, under ``replicas/NAME/dledger-<selfId>/parquet/``; the broker's tables in ``parquet/`` are the
merge of every replica imported so far:

* ``dledger_entries``: one row per (index, term) any replica holds; ``replicas`` lists which hold
  it; ``state`` is ``committed`` when some replica's files prove it committed (its checkpoint or a
  consume queue), ``divergent`` when some replica holds a committed entry of another term at its
  index, else ``uncommitted``;
* ``commitlog``: every replica's committed records, one per physical offset (they are equal where
  several replicas hold them; two different committed records at one offset are a
  ``replicas-differ`` error);
* ``consumer_offsets`` and ``delay_offsets``: per queue (per level) the largest any replica holds
  (a new master starts from what it copied from the old one, every 10 s, and moves on);
  ``schedule_units`` every replica's, each unit once; ``pop_evidence``, ``retry_topics`` and
  ``inner_messages`` the replica's that committed furthest; ``store_problems`` every replica's
  (detail prefixed with its id) and the merge's; one ``runs`` row.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.export.broker_parts import PARQUET_DIR_NAME, REPLICAS_DIR_NAME, part_name
from broker_core.export.parquet import COMPRESSION, ROW_GROUP_ROWS, TableWriter
from broker_core.export.replicas import (
    KIND_DIFFER,
    MergeResult,
    _merge_commitlog,
    link_side,
    merged_runs_row,
    side_dir,
)
from broker_core.export.schema import DLEDGER_STATES, RAW_TABLES
from broker_core.store.dledger import DLEDGER_DIR_PREFIX
from broker_core.store.problem import ERROR, Problem

ROLE_REPLICA = "replica"
COMMITTED, UNCOMMITTED, DIVERGENT = DLEDGER_STATES
# Divergent entries listed by name in an import's summary; the rest are counted.
DIVERGENT_LISTED_MAX = 20
# Tables taken from the replica that committed furthest.
_PRIMARY_TABLES = ("pop_evidence", "retry_topics", "inner_messages", "transaction_ops", "consume_attempts",
                   "schedule_deliveries", "faults", "produced", "transaction_calls", "client_trace",
                   "replica_epochs", "failover_cut", "lmq_dispatches")
_MERGED_ELSEWHERE = ("commitlog", "dledger_entries", "store_problems", "runs", "consumer_offsets", "delay_offsets",
                     "schedule_units")
assert set(_PRIMARY_TABLES) | set(_MERGED_ELSEWHERE) == set(RAW_TABLES), "a raw table no merge rule covers"


def replica_side(self_id: str) -> str:
    """The side name of a DLedger replica under ``replicas/<broker>/``."""
    return f"{DLEDGER_DIR_PREFIX}{self_id}"


def replica_sides(run_dir: Path, broker: str) -> list[Path]:
    """The parquet/ directories of the broker's imported replicas, by side name."""
    base = Path(run_dir) / REPLICAS_DIR_NAME / broker
    if not base.is_dir():
        return []
    return [p / PARQUET_DIR_NAME for p in sorted(base.iterdir())
            if p.name.startswith(DLEDGER_DIR_PREFIX) and (p / PARQUET_DIR_NAME).is_dir()]


def link_replicas(out_dir: Path, tmp: Path, broker: str, replaced: str) -> None:
    """Keep the broker's replicas imported before (not ``replaced``, the one being imported now)."""
    for side in replica_sides(out_dir, broker):
        name = side.parent.name
        if name == replaced:
            continue
        files = {p: p.relative_to(side) for p in sorted(side.rglob(f"*{part_name(broker)}"))}
        link_side(files, side_dir(tmp, broker, name))


@dataclass
class ReplicaMerge:
    """What merging a DLedger group's replicas found."""

    replicas: list[str] = field(default_factory=list)
    records: int = 0
    entries: int = 0
    committed: int = 0
    uncommitted: int = 0
    divergent: int = 0
    committed_through: int | None = None
    primary: str | None = None
    # Up to DIVERGENT_LISTED_MAX entries only an old leader had: what their records were.
    divergent_entries: list[dict] = field(default_factory=list)
    uncommitted_entries: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    def to_json(self) -> dict:
        return {"replicas": self.replicas, "records": self.records, "entries": self.entries,
                "committed": self.committed, "uncommitted": self.uncommitted, "divergent": self.divergent,
                "committed_through": self.committed_through, "primary": self.primary,
                "divergent_entries": self.divergent_entries, "uncommitted_entries": self.uncommitted_entries}


def merge_replicas(run_dir: Path, broker: str, dest: Path) -> ReplicaMerge:
    """Merge the replicas under ``run_dir``/replicas/``broker`` into ``dest``/<table>/part-<broker>."""
    sides = replica_sides(run_dir, broker)
    assert sides, f"no replica of {broker} to merge under {run_dir}"
    part = part_name(broker)
    result = ReplicaMerge(replicas=[s.parent.name[len(DLEDGER_DIR_PREFIX):] for s in sides])
    entries = _merge_entries(sides, part, result)
    (dest / "dledger_entries").mkdir(parents=True, exist_ok=True)
    pq.write_table(entries, dest / "dledger_entries" / part, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    primary = _primary(sides, part, result)
    _merge_commitlogs(sides, part, dest, result)
    link_side({primary / t / part: Path(t) / part for t in _PRIMARY_TABLES if (primary / t / part).is_file()}, dest)
    _merge_largest(sides, part, dest, "consumer_offsets", ["group", "topic", "queue_id"], "offset")
    _merge_largest(sides, part, dest, "delay_offsets", ["delay_level"], "offset")
    _merge_union(sides, part, dest, "schedule_units", ["delay_level", "queue_offset", "phys_offset"])
    _write_problems(sides, part, dest, broker, result)
    _write_runs(sides, part, dest, result)
    return result


def _read(side: Path, table: str, part: str) -> pa.Table:
    path = side / table / part
    return pq.read_table(path) if path.is_file() else RAW_TABLES[table].empty_table()


def _merge_entries(sides: list[Path], part: str, result: ReplicaMerge) -> pa.Table:
    """One row per (index, term) of every replica, with its replicas and its state."""
    tables = [_read(side, "dledger_entries", part) for side in sides]
    every = pa.concat_tables(tables).combine_chunks()
    if every.num_rows == 0:
        return RAW_TABLES["dledger_entries"].empty_table()
    index = every.column("raft_index").to_numpy()
    term = every.column("term").to_numpy()
    committed_here = pc.equal(every.column("state"), COMMITTED).to_numpy(zero_copy_only=False)
    replica = pc.list_element(every.column("replicas"), 0).to_pylist()
    order = np.lexsort((np.arange(len(index)), term, index))
    index, term, committed_here = index[order], term[order], committed_here[order]
    replica = [replica[i] for i in order.tolist()]
    first = np.ones(len(index), dtype=bool)
    first[1:] = (index[1:] != index[:-1]) | (term[1:] != term[:-1])
    group = np.cumsum(first) - 1
    keys = np.flatnonzero(first)
    committed = np.zeros(len(keys), dtype=bool)
    np.logical_or.at(committed, group, committed_here)
    holders: list[list[str]] = [[] for _ in keys]
    for g, name in zip(group.tolist(), replica, strict=True):
        if name not in holders[g]:
            holders[g].append(name)
    key_index, key_term = index[keys], term[keys]
    committed_index = key_index[committed]
    twice = np.unique(committed_index[1:][committed_index[1:] == committed_index[:-1]])
    for i in twice.tolist()[:DIVERGENT_LISTED_MAX]:
        terms = sorted(set(key_term[committed & (key_index == i)].tolist()))
        result.problems.append(Problem(
            "dledger_entries", i, KIND_DIFFER,
            f"replicas hold committed entries of terms {terms} at index {i}: a committed entry is the same "
            "on every replica (Raft), so one of the stores is damaged or not of this group"))
    divergent = ~committed & np.isin(key_index, committed_index)
    state = np.where(committed, COMMITTED, np.where(divergent, DIVERGENT, UNCOMMITTED))
    rows = every.take(pa.array(order[keys]))
    columns = {name: rows.column(name) for name in rows.column_names}
    columns["state"] = pa.array(state.tolist(), pa.string())
    columns["replicas"] = pa.array(holders, pa.list_(pa.string()))
    merged = pa.Table.from_arrays([columns[n] for n in RAW_TABLES["dledger_entries"].names],
                                  schema=RAW_TABLES["dledger_entries"])
    result.entries = merged.num_rows
    result.committed = int(committed.sum())
    result.divergent = int(divergent.sum())
    result.uncommitted = result.entries - result.committed - result.divergent
    result.committed_through = int(committed_index.max()) if len(committed_index) else None
    for state_name, listed in ((DIVERGENT, result.divergent_entries), (UNCOMMITTED, result.uncommitted_entries)):
        picked = merged.filter(pc.equal(merged.column("state"), state_name)).slice(0, DIVERGENT_LISTED_MAX)
        listed.extend({k: v for k, v in row.items() if k not in ("run_id", "broker", "state")}
                      for row in picked.to_pylist())
    for row in result.divergent_entries + result.uncommitted_entries:
        if row.get("store_ts") is not None:
            row["store_ts"] = row["store_ts"].isoformat()
    return merged


def _primary(sides: list[Path], part: str, result: ReplicaMerge) -> Path:
    """The replica that committed furthest (ties: the first by name)."""
    def reach(side: Path) -> int:
        entries = _read(side, "dledger_entries", part)
        committed = entries.filter(pc.equal(entries.column("state"), COMMITTED)).column("raft_index")
        return pc.max(committed).as_py() if len(committed) else -1

    best = sorted(sides, key=lambda s: (-reach(s), s.parent.name))[0]
    result.primary = best.parent.name[len(DLEDGER_DIR_PREFIX):]
    return best


def _merge_commitlogs(sides: list[Path], part: str, dest: Path, result: ReplicaMerge) -> None:
    """Every replica's committed records, one per offset, merged two at a time in physical order."""
    work = dest.parent / f".{part}.replicas"
    work.mkdir(exist_ok=True)
    try:
        merged = sides[0] / "commitlog" / part
        name = result.replicas[0]
        for step, side in enumerate(sides[1:], 1):
            out = work / str(step)
            found = MergeResult()
            other = result.replicas[step]
            _merge_commitlog(merged, side / "commitlog" / part, out, part, found, names=(name, other))
            # A replica behind another, or one whose retention deleted files first, is normal here.
            result.problems.extend(p for p in found.problems if p.kind == KIND_DIFFER)
            merged, name = out / "commitlog" / part, f"{name}+{other}"
        target = dest / "commitlog" / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if len(sides) == 1:
            shutil.copyfile(merged, target)
        else:
            os.replace(merged, target)
        result.records = pq.ParquetFile(target).metadata.num_rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _merge_largest(sides: list[Path], part: str, dest: Path, table: str, keys: list[str], value: str) -> None:
    """One row per key: the one with the largest ``value`` (ties: the first replica's)."""
    every = pa.concat_tables([_read(side, table, part) for side in sides])
    rows: dict[tuple, dict] = {}
    for row in every.to_pylist():
        key = tuple(row[k] for k in keys)
        if key not in rows or row[value] > rows[key][value]:
            rows[key] = row
    writer = TableWriter(dest, table, part=part)
    for key in sorted(rows, key=lambda k: tuple((v is None, v) for v in k)):
        writer.write(rows[key])
    writer.close()


def _merge_union(sides: list[Path], part: str, dest: Path, table: str, keys: list[str]) -> None:
    """Every replica's rows, each key once (the first replica's), in key order."""
    seen: dict[tuple, dict] = {}
    for row in pa.concat_tables([_read(side, table, part) for side in sides]).to_pylist():
        seen.setdefault(tuple(row[k] for k in keys), row)
    writer = TableWriter(dest, table, part=part)
    for key in sorted(seen):
        writer.write(seen[key])
    writer.close()


def _write_problems(sides: list[Path], part: str, dest: Path, broker: str, result: ReplicaMerge) -> None:
    writer = TableWriter(dest, "store_problems", part=part)
    run_id = None
    for side, name in zip(sides, result.replicas, strict=True):
        for row in _read(side, "store_problems", part).to_pylist():
            row["detail"] = f"{name}: {row['detail']}"
            writer.write(row)
        runs = _read(side, "runs", part)
        run_id = run_id or (runs.column("run_id")[0].as_py() if runs.num_rows else None)
    for p in result.problems:
        writer.write({"run_id": run_id, "broker": broker, "file_name": p.file, "offset": p.offset,
                      "kind": p.kind, "detail": p.reason, "severity": p.severity})
    writer.close()


def _write_runs(sides: list[Path], part: str, dest: Path, result: ReplicaMerge) -> None:
    """One runs row for the broker: the first replica's, over every replica's records."""
    rows = [r for side in sides for r in _read(side, "runs", part).to_pylist()]
    row = merged_runs_row(rows, result.records)
    writer = TableWriter(dest, "runs", part=part)
    writer.write(row)
    writer.close()
