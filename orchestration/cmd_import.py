"""``retry-audit import-store STORE_DIR --out RUN_DIR``: a RocketMQ store (read-only) into Parquet.

Progress goes to stderr (files and records) unless ``--quiet``; the summary goes to stdout, as text
or as JSON with ``--json``. Damage is listed; with ``--strict`` it is an error (exit 2) and no run
directory is written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from assets.progress import TERMINAL_PROGRESS_INTERVAL_S, Throttle
from broker_core.errors import BadInputError
from broker_core.export.store_import import ImportSummary
from broker_core.export.store_import import import_store as run_import
from broker_core.store.reader import ScanProgress
from orchestration.term import say

PROBLEMS_SHOWN_MAX = 20  # the text summary lists this many problems; --json lists all


def _progress_printer(quiet: bool):
    if quiet:
        return None
    throttle = Throttle(TERMINAL_PROGRESS_INTERVAL_S)

    def report(p: ScanProgress) -> None:
        if not throttle.ready():
            return
        say(f"import-store: file {p.file_index + 1}/{p.file_count} {p.file_name}, {p.records} records")

    return report


def format_summary(summary: ImportSummary) -> str:
    """The short text summary: where, how many records by topic, what was damaged."""
    lines = [
        f"imported {summary.store_dir} -> {summary.out_dir} (run {summary.run_id}, broker {summary.broker})",
        f"  commit log: {summary.commitlog_files} file(s) of {summary.commitlog_file_size_bytes} bytes, "
        f"{summary.records} records, {summary.blanks} blanks, valid data ends at {summary.valid_end}",
    ]
    if summary.resumed_from is not None:
        lines.append(f"  continued the last import of {summary.broker} from offset {summary.resumed_from}: "
                     f"{summary.records_added} new records, {summary.bytes_read} commit-log bytes decoded, "
                     f"{sum(summary.store_bytes_read.values())} bytes read from the store in all")
    elif summary.full_import_reason:
        lines.append(f"  read the store whole: {summary.full_import_reason}")
    if summary.merged is not None:
        m = summary.merged
        lines.append(f"  {summary.role} of {summary.broker}, merged with its other side: {m['records']} records, "
                     f"{m['only_on_master']} on the master only, {m['only_on_slave']} on the slave only, "
                     f"{m['offsets_differ']} offset(s) where they differ")
    if summary.controller is not None or (summary.merged or {}).get("epochs"):
        lines.extend(_controller_lines(summary.controller, (summary.merged or {}).get("epochs")))
    if summary.dledger is not None:
        lines.extend(_dledger_lines(summary.dledger))
    if len(summary.brokers) > 1:
        lines.append(f"  the run holds brokers {', '.join(summary.brokers)}")
    if summary.first_offset:
        lines.append(f"  first offset {summary.first_offset}: older commit-log files were deleted by "
                     "retention (normal for a broker); chains that started before it are marked "
                     "truncated by the lineage")
    if summary.tiered is not None:
        lines.extend(_tier_lines(summary.tiered, summary.first_offset))
    if summary.checkpoint is not None:
        cp = summary.checkpoint
        lines.append(f"  checkpoint: physicMsgTimestamp {cp.physic_msg_timestamp}, logicsMsgTimestamp "
                     f"{cp.logics_msg_timestamp}, indexMsgTimestamp {cp.index_msg_timestamp}")
    lines.append(f"  last shutdown: {'abnormal (abort file present)' if summary.abort_file_present else 'clean'}"
                 f"; recovery would check from file {summary.recovery_start_file}")
    if summary.store_items_5x:
        lines.append("  RocketMQ 5.x items, not read unless said (every record is in the commit log):")
        lines.extend(f"    {item}" for item in summary.store_items_5x.values())
    width = max((len(t) for t in summary.records_by_topic), default=0)
    for topic, count in summary.records_by_topic.items():
        lines.append(f"    {topic:<{width}}  {count}")
    if summary.problems:
        errors = len(summary.errors)
        lines.append(f"  problems: {errors} error(s), {len(summary.problems) - errors} warning(s)")
        for p in summary.problems[:PROBLEMS_SHOWN_MAX]:
            lines.append(f"    {p}")
        if len(summary.problems) > PROBLEMS_SHOWN_MAX:
            lines.append(f"    ... {len(summary.problems) - PROBLEMS_SHOWN_MAX} more in "
                         f"{summary.out_dir}/parquet/store_problems")
    else:
        lines.append("  problems: none")
    return "\n".join(lines)


def _controller_lines(files: dict | None, merged: dict | None) -> list[str]:
    """A controller-mode store's identity and epochs, and what merging its copies by epoch cut."""
    lines = []
    if files is not None:
        who = files["identity"]
        epochs = ", ".join(f"{e['epoch']} from {e['start_offset']}" for e in files["epochs"]) or "none read"
        lines.append(f"  controller mode: broker id {who['broker_id'] if who else '?'}; epochs {epochs} "
                     f"({files['epoch_file'] or 'no epoch file'})")
    if merged is not None:
        lines.append(f"  epochs: the {merged['history']} holds the broker's history"
                     + (f"; the {merged['cut_role']}'s records from offset {merged['cut_offset']} on are a tail a "
                        f"failover cut: {merged['truncated_records']} record(s), not imported"
                        if merged["cut_offset"] is not None else ""))
        for r in merged["truncated"]:
            lines.append(f"    cut: offset {r['phys_offset']} {r['topic']} queue {r['queue_id']} "
                         f"offset {r['queue_offset']} {r['uniq_key']} (stored by {r['store_host']})")
    return lines


def _dledger_lines(raft: dict) -> list[str]:
    """What a DLedger store's summary says beside the records: its committed index, its
    uncommitted tail (not imported), and what merging the group's replicas found."""
    terms = ", ".join(f"{t}: {r['first_index']}-{r['last_index']}" for t, r in raft["terms"].items())
    lines = [f"  DLedger node {raft['self_id']}: entries {raft['first_index']}-{raft['last_index']} (terms {terms or '-'}), "
             f"committed through index {raft['committed_through']} (checkpoint committedIndex "
             f"{raft['checkpoint_committed_index']}, taken by the {raft['committed_by'] or '-'})"]
    if raft["uncommitted"]:
        lines.append(f"  uncommitted: {raft['uncommitted']} entr(ies) from index {raft['first_uncommitted_index']} "
                     f"(offset {raft['first_uncommitted_offset']}) were never committed: not damage, not imported as "
                     "records (dledger_entries lists them)")
    merged = raft.get("merged")
    if merged is not None:
        lines.append(f"  DLedger group of replicas {', '.join(merged['replicas'])}: {merged['entries']} entries, "
                     f"{merged['committed']} committed (through index {merged['committed_through']}), "
                     f"{merged['uncommitted']} uncommitted, {merged['divergent']} divergent; {merged['records']} records")
        for e in merged["divergent_entries"]:
            lines.append(f"    divergent: index {e['raft_index']} term {e['term']} only on {', '.join(e['replicas'])}: "
                         f"{e['topic']} queue {e['queue_id']} offset {e['queue_offset']} {e['uniq_key']}")
    return lines


def _tier_lines(tier, first_offset: int) -> list[str]:
    """What the summary says of a tiered store read with --tiered."""
    added = ", ".join(f"{t} {n}" for t, n in sorted(tier.added_by_topic.items())) or "none"
    lines = [f"  tiered store {tier.tier_dir} ({tier.broker_dir}): {tier.queues} queue(s), {tier.segments} "
             f"file(s), {tier.records} records ({tier.duplicates} stored twice)"
             + ("" if tier.metadata_found else "; no tieredStoreMetadata.json in the store"),
             f"    {tier.added} record(s) retention deleted locally (below the first offset {first_offset}) "
             f"imported from the tier ({added}), {tier.offset_unknown} of them with an unknown original offset "
             f"(no local consume-queue unit names them: negative phys_offset); {tier.already_local} still in "
             "the local log"]
    return lines


def import_store(args) -> int:
    """CLI handler: check the arguments, import, print the summary; 0 on success."""
    engine = getattr(args, "engine", "local")
    decoder = getattr(args, "decoder", "columnar")
    if engine == "spark":
        from assets.spark_import import local_path

        store, out = local_path(args.store_dir), local_path(args.out)
        if decoder != "columnar":
            raise BadInputError(f"--engine spark decodes with the columnar decoder, not {decoder!r}",
                                where="--decoder", hint="drop --decoder, or use --engine local")
    else:
        store, out = Path(args.store_dir), Path(args.out)
        if getattr(args, "spark_master", None):
            raise BadInputError("--spark-master needs --engine spark", where="--spark-master")
    if not store.exists():
        raise BadInputError("store directory does not exist", where=str(store),
                            hint="pass the RocketMQ store root (storePathRootDir, e.g. ~/store)")
    if not (store / "commitlog").is_dir() and not any(p.is_dir() for p in store.glob("dledger-*")):
        raise BadInputError("no commitlog/ directory: not a RocketMQ store root", where=str(store),
                            hint="pass the directory that holds commitlog/ (or a DLedger broker's "
                                 "dledger-<selfId>/), consumequeue/ and config/")
    options = dict(name=args.name, strict=args.strict, broker=getattr(args, "broker", None),
                   role=getattr(args, "role", "master"),
                   progress=_progress_printer(getattr(args, "quiet", False)),
                   wall_clock=time.monotonic, decoder=decoder, live=getattr(args, "live", False),
                   dledger_data=getattr(args, "dledger_data", None), tiered=getattr(args, "tiered", None))
    if engine == "spark":
        from assets.spark import spark_session
        from assets.spark_import import SparkStoreReader

        quiet = getattr(args, "quiet", False) and not getattr(args, "debug", False)
        # A process that already runs Spark (a test run, a notebook calling main()) keeps its session.
        with spark_session(args.spark_master, quiet=quiet) as spark:
            summary = run_import(store, out, **options, reader_factory=lambda root, **kw: SparkStoreReader(
                root, spark, stage_parent=out.absolute().parent, **kw))
    else:
        summary = run_import(store, out, **options)
    if summary.full_import_reason and not getattr(args, "quiet", False):
        say(f"import-store: {summary.broker} was imported into {summary.out_dir} before, but the store is "
            f"read whole: {summary.full_import_reason}")
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    elif not getattr(args, "quiet", False):
        print(format_summary(summary))
    return 0
