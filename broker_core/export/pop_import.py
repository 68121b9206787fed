"""The 5.x POP tables of an import: ``pop_evidence`` and ``retry_topics``.

``pop_evidence`` holds one row per POP checkpoint or ack record of the broker's commit log
(:mod:`broker_core.store.pop`). The commitlog table keeps no bodies, so the bookkeeping records are
found in the broker's commitlog Parquet (topic and REAL_TOPIC) and only their bytes are read again
from the store, by physical offset: a store of messages costs one column scan, not a second read of
the log. A record whose file retention has deleted since an earlier import is left out.

``retry_topics`` says who owns every ``%RETRY%`` topic the store knows (``topics.json`` and the
commit log): a checkpoint of a message topic names its group exactly, so the POP retry topic
names the revive service builds from it are that group's (``checkpoint``); on 5.4 and later the
revive service's records name their group too (``ORIGIN_GROUP``: ``record``); otherwise the name is
read against the groups and topics the store's config and offsets know
(:func:`broker_core.names.retry_topic_owner`: ``config``, or ``ambiguous`` with no group);
a name nothing knows keeps the 4.9.4 reading (``name``: the whole rest is the group, or a v2
name's part before '+').
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from broker_core import names
from broker_core.codec import Record, decode_record
from broker_core.constants import (
    POP_RETRY_V1_SEPARATOR,
    POP_RETRY_V2_SEPARATOR,
    PROP_ORIGIN_GROUP,
    RETRY_GROUP_TOPIC_PREFIX,
    TIMER_TOPIC,
)
from broker_core.errors import CorruptRecordError
from broker_core.export.broker_parts import broker_parts_of
from broker_core.export.parquet import TableWriter
from broker_core.store import pop, pop_kv
from broker_core.store.config_files import split_topic_group
from broker_core.store.problem import WARNING, Problem
from broker_core.store.reader import StoreReader

RESOLVED_BY_CHECKPOINT = "checkpoint"
RESOLVED_BY_RECORD = "record"
RESOLVED_BY_CONFIG = "config"
RESOLVED_AMBIGUOUS = "ambiguous"
RESOLVED_BY_NAME = "name"
PROBLEM_POP_BODY = "pop-body-undecodable"
PROBLEM_POP_KV = "pop-kv-not-read"


def _bookkeeping_rows(commitlog_dir: Path, broker: str, topics: Iterable[str]) -> list[dict]:
    """The broker's POP bookkeeping records (phys_offset, total_size, topic, tags, store_ts,
    stage), in physical order, of a commitlog directory (or one file of it); ``topics`` are the
    topics its records are in (none of the timer or revive topics: nothing to read)."""
    if not any(t == TIMER_TOPIC or pop.is_revive_topic(t) for t in topics):
        return []
    if not (commitlog_dir.is_file() or (commitlog_dir.is_dir() and any(commitlog_dir.glob("*.parquet")))):
        return []
    data = ds.dataset(str(commitlog_dir), format="parquet")
    mine = ds.field("broker") == broker
    # A timer message's own records (REAL_TOPIC a message topic) are left out here already.
    candidates = (((ds.field("topic") == TIMER_TOPIC) & pc.starts_with(ds.field("real_topic"), pop.REVIVE_TOPIC_PREFIX))
                  | pc.starts_with(ds.field("topic"), pop.REVIVE_TOPIC_PREFIX))
    table = data.to_table(columns=["phys_offset", "total_size", "topic", "real_topic", "tags", "store_ts"],
                          filter=mine & candidates)
    rows = []
    for row in table.to_pylist():
        stage = pop.pop_stage(row["topic"], row["real_topic"])
        if stage is not None:
            rows.append({**row, "stage": stage})
    rows.sort(key=lambda r: r["phys_offset"])
    return rows


def records_at(reader: StoreReader, rows: list[dict]) -> Iterator[tuple[dict, Record | None]]:
    """Each row with its record read again from the store (rows in physical order; one open file
    at a time); None when the record's file is gone (retention) or no record decodes there."""
    files = sorted(reader.files, key=lambda cf: cf.start)
    index, handle = 0, None
    try:
        for row in rows:
            phys = row["phys_offset"]
            while index < len(files) and files[index].start + files[index].length <= phys:
                index += 1
                if handle is not None:
                    handle.close()
                    handle = None
            if index == len(files) or phys < files[index].start:
                yield row, None
                continue
            data = reader.scanned_bytes(phys, row["total_size"])
            if data is not None:  # read by this import's scan: not read again
                record = decode_record(data, 0, check_crc=False)
                yield row, record if isinstance(record, Record) else None
                continue
            if handle is None:
                handle = open(files[index].path, "rb")
            handle.seek(phys - files[index].start)
            data = handle.read(row["total_size"])
            reader.bytes_read["commitlog"] += len(data)
            record = decode_record(data, 0, check_crc=False)
            yield row, record if isinstance(record, Record) else None
    finally:
        if handle is not None:
            handle.close()


def commitlog_topics(parquet: Path) -> list[str]:
    """The distinct topics of the commitlog table written under ``parquet`` (a simulated run's)."""
    table = ds.dataset(str(parquet / "commitlog"), format="parquet").to_table(columns=["topic"])
    return sorted(pc.unique(table.column("topic")).to_pylist())


def earlier_evidence(old_parquet: Path, broker: str, keep_from: int | None) -> list[dict]:
    """``broker``'s ``pop_evidence`` rows of commit-log records in an earlier import (``old_parquet``),
    less those of records retention deleted since (below ``keep_from``): the rows an increment
    keeps without reading their records again. The KV service's rows are read again (its state)."""
    files = broker_parts_of(Path(old_parquet) / "pop_evidence", broker)
    if not files:
        return []
    rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    return [r for r in rows if r["stage"] != pop.STAGE_KV and (keep_from is None or r["phys_offset"] >= keep_from)]


def _checkpoint_of(row: dict) -> pop.PopRecord:
    return pop.PopRecord(row["kind"], row["group"], row["topic"], row["queue_id"], row["start_offset"],
                         tuple(row["offsets"] or ()), row["pop_ts"], row["invisible_ms"], row["revive_ts"],
                         row["broker_name"])


def write_pop_tables(reader: StoreReader, parquet: Path, part: str, run_id: str, broker: str,
                     topics_in_log: Iterable[str], earlier: tuple[list[dict], Path | None] | None = None,
                     ) -> tuple[int, int, list[Problem]]:
    """Write ``pop_evidence`` and ``retry_topics`` of ``broker`` from the commitlog already
    written under ``parquet`` (``topics_in_log``: the topics of its records, as the import counted
    them); return their row counts and the bodies that did not decode. ``earlier``: an increment's
    rows kept from the last import (:func:`earlier_evidence`) and its own commitlog file (None: no
    new record), whose bookkeeping records alone are read from the store."""
    topics_in_log = set(topics_in_log)
    if earlier is None:
        rows = _bookkeeping_rows(parquet / "commitlog", broker, topics_in_log)
    else:
        rows = _bookkeeping_rows(earlier[1], broker, topics_in_log) if earlier[1] is not None else []
    retry_in_log = {t for t in topics_in_log if names.is_retry_topic(t)}
    problems: list[Problem] = []
    evidence = TableWriter(parquet, "pop_evidence", part=part)
    checkpoints: list[pop.PopRecord] = []
    for row in earlier[0] if earlier is not None else ():
        if row["kind"] == pop.TAG_CHECKPOINT:
            checkpoints.append(_checkpoint_of(row))
        evidence.write({**row, "run_id": run_id, "broker": broker})
    for row, record in records_at(reader, rows):
        where = f"commitlog@{row['phys_offset']}"
        if record is None:
            continue
        try:
            decoded = pop.decode_pop_body(row["tags"], record.body, where)
        except CorruptRecordError as exc:
            problems.append(Problem("commitlog", row["phys_offset"], PROBLEM_POP_BODY,
                                    f"{row['topic']} record: {exc.message}", WARNING))
            continue
        if decoded.kind == pop.TAG_CHECKPOINT:
            checkpoints.append(decoded)
        evidence.write({"run_id": run_id, "broker": broker, "phys_offset": row["phys_offset"],
                        "store_ts": row["store_ts"], "stage": row["stage"], "kind": decoded.kind,
                        "group": decoded.group, "topic": decoded.topic, "queue_id": decoded.queue_id,
                        "start_offset": decoded.start_offset, "offsets": list(decoded.offsets),
                        "pop_ts": decoded.pop_ts_ms, "invisible_ms": decoded.invisible_ms,
                        "revive_ts": decoded.revive_ts_ms, "broker_name": decoded.broker_name})
    kv_checkpoints, kv_problem = _kv_checkpoints(reader)
    problems += kv_problem
    for ck in kv_checkpoints:
        checkpoints.append(ck)
        evidence.write({"run_id": run_id, "broker": broker, "phys_offset": None, "store_ts": None,
                        "stage": pop.STAGE_KV, "kind": ck.kind, "group": ck.group, "topic": ck.topic,
                        "queue_id": ck.queue_id, "start_offset": ck.start_offset, "offsets": list(ck.offsets),
                        "pop_ts": ck.pop_ts_ms, "invisible_ms": ck.invisible_ms, "revive_ts": ck.revive_ts_ms,
                        "broker_name": None})
    evidence_rows = evidence.close()

    owners = TableWriter(parquet, "retry_topics", part=part)
    groups, topics = known_names(reader)
    named = _origin_groups(parquet / "commitlog", broker, retry_in_log)
    for topic, group, origin, how in retry_topic_owners(groups, topics, retry_in_log, checkpoints, named):
        owners.write({"run_id": run_id, "broker": broker, "retry_topic": topic, "group": group,
                      "origin_topic": origin, "resolution": how})
    return evidence_rows, owners.close(), problems


def _kv_checkpoints(reader: StoreReader) -> tuple[list[pop.PopRecord], list[Problem]]:
    """The POP KV service's in-flight pops (``kvStore/``) as checkpoints nobody acked, and the
    warning when the store has that directory but it cannot be read: then a record popped and not
    acked looks consumed (the group's committed offset is past it) and the lineage says CONSUMED.

    The directory is read whole by every import, as the config files are: it is the service's
    state now (a row goes when its pop is acked or revived, and RocksDB rewrites its files as it
    compacts them), with no place where what was added since the last import begins."""
    root = reader.root
    if not pop_kv.has_pop_kv_store(root):
        return [], []
    reader.bytes_read[pop_kv.POP_KV_DIR_NAME] += pop_kv.kv_store_bytes(root)
    try:
        records = pop_kv.read_pop_kv_records(root)
    except pop_kv.PopKVError as exc:
        return [], [Problem(pop_kv.POP_KV_DIR_NAME, 0, PROBLEM_POP_KV,
                            f"the POP KV service's in-flight pops were not read ({exc}); a record popped "
                            "and not acked is CONSUMED in the lineage", WARNING)]
    return [pop.PopRecord(pop.TAG_CHECKPOINT, r.group, r.topic, r.queue_id, r.offset, (r.offset,), r.pop_ts_ms,
                          r.invisible_ms, r.pop_ts_ms + r.invisible_ms, None) for r in records], []


def known_names(reader: StoreReader) -> tuple[set[str], set[str]]:
    """The groups and topics a store's config knows: ``subscriptionGroup.json``, ``topics.json``
    and the keys of ``consumerOffset.json``."""
    groups, topics = set(reader.subscription_groups()), set(reader.topics())
    for key in reader.consumer_offsets():
        topic, group = split_topic_group(key)
        groups.add(group)
        topics.add(topic)
    return groups, topics


def _origin_groups(commitlog_dir: Path, broker: str, retry_in_log: Iterable[str]) -> dict[str, set[str]]:
    """The ``ORIGIN_GROUP`` values of each retry topic's records in ``broker``'s commitlog Parquet
    (a 5.4+ revive service's retry records carry their group): one column scan of the records of
    the retry topics a POP group's could be. Only a name with a separator after its group
    (``%RETRY%<group>_<topic>``, ``%RETRY%<group>+<topic>``) can be resolved by its records
    (:func:`_named_by_record`), so a 4.x ``%RETRY%<group>`` topic's records, often a large share
    of the log, are not read again."""
    retry_in_log = sorted(t for t in set(retry_in_log) if _may_name_a_topic(t))
    if not retry_in_log or not commitlog_dir.is_dir() or not any(commitlog_dir.glob("*.parquet")):
        return {}
    data = ds.dataset(str(commitlog_dir), format="parquet")
    table = data.to_table(columns=["topic", "properties"],
                          filter=(ds.field("broker") == broker) & ds.field("topic").isin(retry_in_log))
    if table.num_rows == 0:
        return {}
    origin = pc.map_lookup(table["properties"], pa.scalar(PROP_ORIGIN_GROUP), "first")
    pairs = pa.table({"topic": table["topic"], "group": origin}).filter(pc.is_valid(origin))
    out: dict[str, set[str]] = {}
    for row in pairs.group_by(["topic", "group"]).aggregate([]).to_pylist():
        out.setdefault(row["topic"], set()).add(row["group"])
    return out


POP_RETRY_SEPARATORS = (POP_RETRY_V1_SEPARATOR, POP_RETRY_V2_SEPARATOR)


def _may_name_a_topic(name: str) -> bool:
    """Whether a retry topic's name has a POP separator after ``%RETRY%``: only then can its
    records' ``ORIGIN_GROUP`` resolve it (:func:`_named_by_record`)."""
    rest = name[len(RETRY_GROUP_TOPIC_PREFIX):]
    return any(sep in rest for sep in POP_RETRY_SEPARATORS)


def _named_by_record(name: str, groups: set[str] | None) -> tuple[str, str] | None:
    """(group, origin topic) of a POP retry topic whose records all name one group that the
    topic's name starts with (``%RETRY%<group>_<topic>`` or ``+<topic>``); None otherwise."""
    if not groups or len(groups) != 1:
        return None
    (group,) = groups
    rest = name[len(RETRY_GROUP_TOPIC_PREFIX):]
    if len(rest) > len(group) + 1 and rest.startswith(group) and rest[len(group)] in POP_RETRY_SEPARATORS:
        return group, rest[len(group) + 1:]
    return None


def retry_topic_owners(groups: Iterable[str], topics: Iterable[str], retry_in_log: Iterable[str],
                       checkpoints: Iterable[pop.PopRecord], origin_groups: dict[str, set[str]] | None = None,
                       ) -> list[tuple[str, str | None, str | None, str]]:
    """(retry topic, group, origin topic, resolution) for every %RETRY% topic among ``topics``
    (a store's config) and ``retry_in_log`` (its commit log), sorted by topic.

    A checkpoint of a message topic names the POP retry topics of its group exactly
    (``checkpoint``); so do the ``ORIGIN_GROUP`` values of the topic's records (``origin_groups``,
    5.4+: ``record``) when they name one group the name starts with; otherwise the name is read
    against ``groups`` and the plain ``topics`` (and the checkpoints' groups and topics): one
    reading they know is ``config``, several are ``ambiguous`` (no group), none leaves the name's
    own reading (``name``)."""
    origin_groups = origin_groups or {}
    groups, topics = set(groups), set(topics)
    by_checkpoint: dict[str, tuple[str, str]] = {}
    for ck in checkpoints:
        groups.add(ck.group)
        topics.add(ck.topic)
        for name in pop.retry_topic_names(ck.group, ck.topic) or ():
            by_checkpoint[name] = (ck.group, ck.topic)
    plain = {t for t in topics if not (names.is_retry_topic(t) or names.is_dlq_topic(t))}
    out = []
    for name in sorted({t for t in topics if names.is_retry_topic(t)} | set(retry_in_log)):
        if name in by_checkpoint:
            out.append((name, *by_checkpoint[name], RESOLVED_BY_CHECKPOINT))
            continue
        by_record = _named_by_record(name, origin_groups.get(name))
        if by_record is not None:
            out.append((name, *by_record, RESOLVED_BY_RECORD))
            continue
        owner = names.retry_topic_owner(name, groups, plain)
        assert owner is not None, f"{name} is a retry topic"
        if owner.ambiguous:
            out.append((name, None, None, RESOLVED_AMBIGUOUS))
        elif owner.group in groups and (owner.origin_topic is None or owner.origin_topic in plain):
            out.append((name, owner.group, owner.origin_topic, RESOLVED_BY_CONFIG))
        else:
            out.append((name, owner.group, owner.origin_topic, RESOLVED_BY_NAME))
    return out
