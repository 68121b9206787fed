"""Store recovery at load, as 4.9.4 does it (DefaultMessageStore.recover, §3.8), and check().

* Every consume queue is recovered first (its valid units up to the first invalid one), and the
  largest ``offset + size`` over them is remembered.
* Normal recovery (no ``abort`` file) scans the commit log from the third-last file and only finds
  where the valid data ends. Abnormal recovery (``abort`` present: the last run did not shut down)
  walks back to the newest file whose first record is no newer than the checkpoint's minimum
  timestamp, scans from there and re-dispatches every valid record to the consume queues
  (duplicates are skipped by each queue's ``max_physic_offset`` guard).
* Either way the commit log is truncated at the end of the last valid record, and when any
  consume queue points at or past that end, every queue drops the units that do.

:func:`check_store` is the post-mortem (diskcache's ``check()``): it reads the whole commit log
with CRC checks and compares every consume-queue unit with the record it points at, reporting
findings without raising. A torn tail after a crash shows up there; tests promote findings to
failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core import codec
from broker_core.constants import RECOVER_NORMAL_FILES_FROM_END
from broker_core.errors import CorruptRecordError
from broker_core.store.checkpoint import StoreCheckpoint

# The commit log owns the kinds its own half of check() reports; they are named here too, beside
# the queue kinds, for whoever reads a whole check_store() report.
from broker_core.store.commit_log import CORRUPT_RECORD as CORRUPT_RECORD
from broker_core.store.commit_log import DATA_ENDS_EARLY as DATA_ENDS_EARLY
from broker_core.store.commit_log import CommitLog
from broker_core.store.consume_queue import CONSUME_QUEUE_DIR_NAME, PRE_BLANK_UNIT_SIZE, ConsumeQueue
from broker_core.store.problem import Problem

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
    """recoverTopicQueueTable: the next queue offset of each ``topic-queueId`` is its CQ max, and
    each queue's min offset is corrected against the commit log's first offset (the first file's
    name, past 0 once retention deleted older files)."""
    table = {}
    min_phys = commit_log.min_offset
    for cq in queues:
        table[f"{cq.topic}-{cq.queue_id}"] = cq.max_offset
        cq.correct_min_offset(min_phys)
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


# --- check(): the post-mortem ------------------------------------------------------------------

# Problem kinds (stable strings: reports and tests match on them); the commit log owns its own.
CQ_UNIT_DANGLING = "cq_unit_dangling"
CQ_UNIT_MISMATCH = "cq_unit_mismatch"
CQ_MISSING_UNITS = "cq_missing_units"
CQ_UNITS_PER_QUEUE_REPORTED_MAX = 20  # past this many bad units in one queue, only a count is added


def check_store(commit_log: CommitLog, queues: list[ConsumeQueue]) -> list[Problem]:
    """Every finding, in commit-log order and then queue by queue."""
    found = commit_log.check_records()
    problems = list(found.problems)
    for cq in sorted(queues, key=lambda q: (q.topic, q.queue_id)):
        problems.extend(_check_queue(cq, found.records, found.next_offset.get((cq.topic, cq.queue_id), 0),
                                     commit_log.min_offset))
    return problems


def _check_queue(cq: ConsumeQueue, records: dict, expected_max: int, first_offset: int) -> list[Problem]:
    """The queue's units against the records; units wholly before the commit log's first offset
    name records retention removed and are not judged."""
    where = f"{CONSUME_QUEUE_DIR_NAME}/{cq.topic}/{cq.queue_id}"
    found: list[Problem] = []
    bad = 0
    index = cq.min_offset
    batch = 1024
    while index < cq.max_offset:
        units = cq.units(index, batch)
        if not units:
            break
        for phys, size, _tags in units:
            if (size == PRE_BLANK_UNIT_SIZE and phys == 0) or phys + size <= first_offset:
                index += 1
                continue
            record = records.get(phys)
            problem = None
            if record is None:
                problem = Problem(where, index, CQ_UNIT_DANGLING,
                                  f"unit points at phys {phys} where no valid record starts")
            elif record != (cq.topic, cq.queue_id, index, size):
                problem = Problem(where, index, CQ_UNIT_MISMATCH,
                                  f"unit (phys {phys}, size {size}) but the record there is "
                                  f"{record[0]}/{record[1]} queue offset {record[2]}, size {record[3]}")
            if problem is not None:
                bad += 1
                if bad <= CQ_UNITS_PER_QUEUE_REPORTED_MAX:
                    found.append(problem)
            index += 1
    if bad > CQ_UNITS_PER_QUEUE_REPORTED_MAX:
        found.append(Problem(where, cq.max_offset, CQ_UNIT_MISMATCH,
                             f"{bad - CQ_UNITS_PER_QUEUE_REPORTED_MAX} more bad units not listed"))
    if expected_max > cq.max_offset:
        found.append(Problem(where, cq.max_offset, CQ_MISSING_UNITS,
                             f"the commit log has records up to queue offset {expected_max - 1} "
                             f"but the queue ends at {cq.max_offset}"))
    return found
