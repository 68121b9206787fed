"""Store recovery at load, as 4.9.4 does it (DefaultMessageStore.recover, §3.8).

* Every consume queue is recovered first (its valid units up to the first invalid one), and the
  largest ``offset + size`` over them is remembered.
* Normal recovery (no ``abort`` file) scans the commit log from the third-last file and only finds
  where the valid data ends. Abnormal recovery (``abort`` present: the last run did not shut down)
  walks back to the newest file whose first record is no newer than the checkpoint's minimum
  timestamp, scans from there and re-dispatches every valid record to the consume queues
  (duplicates are skipped by each queue's ``max_physic_offset`` guard).
* Either way the commit log is truncated at the end of the last valid record, and when any
  consume queue points at or past that end, every queue drops the units that do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core import codec
from broker_core.constants import RECOVER_NORMAL_FILES_FROM_END
from broker_core.errors import CorruptRecordError
from broker_core.store.checkpoint import StoreCheckpoint
from broker_core.store.commit_log import CommitLog
from broker_core.store.consume_queue import ConsumeQueue

RECOVERY_NORMAL = "normal"
RECOVERY_ABNORMAL = "abnormal"


@dataclass
class RecoveryReport:
    """What load() found: the mode, where the scan started and stopped, and why it stopped."""

    mode: str
    scan_start_offset: int = 0
    process_offset: int = 0
    records_scanned: int = 0
    records_dispatched: int = 0
    stop_error: CorruptRecordError | None = None
    consume_queues_truncated: bool = False
    max_phys_offset_of_consume_queues: int = -1
    notes: list[str] = field(default_factory=list)


def recover_consume_queues(queues: list[ConsumeQueue]) -> int:
    """ConsumeQueue.recover on each queue; return the largest ``offset + size`` of any unit."""
    max_phys = -1
    for cq in queues:
        cq.recover()
        max_phys = max(max_phys, cq.max_physic_offset)
    return max_phys


def _scan_to_end(commit_log: CommitLog, start: int, report: RecoveryReport,
                 dispatch: Callable[[codec.Record, int], None] | None) -> int:
    """Walk records from ``start``; return the offset where the valid data ends."""
    end = start
    for step in commit_log.scan(start):
        if step.record is None:
            end = step.phys_offset
            report.stop_error = step.error
            break
        if isinstance(step.record, codec.Blank):
            continue
        report.records_scanned += 1
        if dispatch is not None:
            dispatch(step.record, step.tags_code)
            report.records_dispatched += 1
        end = step.phys_offset + step.record.total_size
    return end


def recover_commit_log(commit_log: CommitLog, checkpoint: StoreCheckpoint, *, last_exit_ok: bool,
                       dispatch: Callable[[codec.Record, int], None]) -> RecoveryReport:
    """Find the end of valid data (re-dispatching after an abnormal exit) and truncate there."""
    files = commit_log.files.files
    report = RecoveryReport(RECOVERY_NORMAL if last_exit_ok else RECOVERY_ABNORMAL)
    if not files:
        report.notes.append("no commit-log files")
        return report
    if last_exit_ok:
        index = max(0, len(files) - RECOVER_NORMAL_FILES_FROM_END)
        start = files[index].start
        report.scan_start_offset = start
        process = _scan_to_end(commit_log, start, report, None)
    else:
        min_ts = checkpoint.min_timestamp()
        index = len(files) - 1
        while index >= 0:
            # isMappedFileMatchedRecover: a message magic, a store time, and not newer than the
            # checkpoint, so that everything from this file on is re-dispatched.
            store_ts = commit_log.first_store_timestamp(files[index])
            if store_ts is not None and store_ts != 0 and store_ts <= min_ts:
                break
            index -= 1
        index = max(index, 0)
        start = files[index].start
        report.scan_start_offset = start
        process = _scan_to_end(commit_log, start, report, dispatch)
    report.process_offset = process
    commit_log.truncate_to(process)
    return report


def truncate_consume_queues(queues: list[ConsumeQueue], process_offset: int,
                            max_phys_of_queues: int, report: RecoveryReport) -> None:
    """truncateDirtyLogicFiles on every queue when any of them points past the commit log."""
    report.max_phys_offset_of_consume_queues = max_phys_of_queues
    if max_phys_of_queues >= process_offset:
        report.consume_queues_truncated = True
        for cq in queues:
            cq.truncate_dirty(process_offset)


def rebuild_topic_queue_table(commit_log: CommitLog, queues: list[ConsumeQueue]) -> None:
    """recoverTopicQueueTable: the next queue offset of each ``topic-queueId`` is its CQ max."""
    table = {}
    for cq in queues:
        table[f"{cq.topic}-{cq.queue_id}"] = cq.max_offset
    commit_log.topic_queue_table = table


def rebuild_consume_queues(commit_log: CommitLog, queues: dict, dispatch) -> int:
    """Destroy every consume queue and build them again from the whole commit log.

    Not a RocketMQ code path (an operator deletes ``consumequeue/`` and restarts abnormally);
    used to repair a store whose queues were lost. Returns the number of records dispatched.
    """
    for cq in list(queues.values()):
        cq.destroy()
    queues.clear()
    count = 0
    for step in commit_log.scan(commit_log.min_offset):
        if step.record is None:
            break
        if isinstance(step.record, codec.Blank):
            continue
        dispatch(step.record, step.tags_code)
        count += 1
    return count
