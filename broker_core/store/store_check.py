"""A post-mortem of a store: what is damaged, and where, without raising (diskcache's ``check()``).

The commit log is read from its first byte with CRC checks; every consume-queue unit is then
compared with the record it points at. A torn tail after a crash shows up here as a warning-level
finding; tests promote findings to failures.
"""

from __future__ import annotations

from broker_core import codec
from broker_core.constants import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from broker_core.store.commit_log import COMMIT_LOG_DIR_NAME, CommitLog, Problem
from broker_core.store.consume_queue import CONSUME_QUEUE_DIR_NAME, PRE_BLANK_UNIT_SIZE, ConsumeQueue

# Problem kinds (stable strings: reports and tests match on them).
CORRUPT_RECORD = "corrupt_record"
DATA_ENDS_EARLY = "data_ends_early"
CQ_UNIT_DANGLING = "cq_unit_dangling"
CQ_UNIT_MISMATCH = "cq_unit_mismatch"
CQ_MISSING_UNITS = "cq_missing_units"
CQ_UNITS_PER_QUEUE_REPORTED_MAX = 20  # past this many bad units in one queue, only a count is added


def _file_of(commit_log: CommitLog, offset: int) -> str:
    mapped = commit_log.files.find_file(offset)
    name = mapped.path.name if mapped is not None else "?"
    return f"{COMMIT_LOG_DIR_NAME}/{name}"


def check_store(commit_log: CommitLog, queues: list[ConsumeQueue]) -> list[Problem]:
    """Every finding, in commit-log order and then queue by queue."""
    problems: list[Problem] = []
    records: dict[int, tuple[str, int, int, int]] = {}
    next_offset: dict[tuple[str, int], int] = {}
    end = commit_log.min_offset
    if commit_log.files.files:
        for step in commit_log.scan(commit_log.min_offset, check_crc=True):
            if step.record is None:
                end = step.phys_offset
                if step.error is not None:
                    problems.append(Problem(_file_of(commit_log, step.phys_offset), step.phys_offset,
                                            CORRUPT_RECORD, step.error.message))
                break
            if isinstance(step.record, codec.Blank):
                continue
            rec = step.record
            if rec.sys_flag & SYSFLAG_TRANSACTION_MASK in (SYSFLAG_TRANSACTION_PREPARED,
                                                           SYSFLAG_TRANSACTION_ROLLBACK):
                continue
            records[step.phys_offset] = (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size)
            key = (rec.topic, rec.queue_id)
            next_offset[key] = max(next_offset.get(key, 0), rec.queue_offset + 1)
    if end < commit_log.max_offset:
        problems.append(Problem(
            _file_of(commit_log, end), end, DATA_ENDS_EARLY,
            f"valid records end at {end} but the write position is {commit_log.max_offset} "
            f"({commit_log.max_offset - end} bytes unreadable)"))
    for cq in sorted(queues, key=lambda q: (q.topic, q.queue_id)):
        problems.extend(_check_queue(cq, records, next_offset.get((cq.topic, cq.queue_id), 0)))
    return problems


def _check_queue(cq: ConsumeQueue, records: dict, expected_max: int) -> list[Problem]:
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
            if size == PRE_BLANK_UNIT_SIZE and phys == 0:
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
