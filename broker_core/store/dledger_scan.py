"""The walk over a DLedger commit log's entries: :class:`StoreReader`'s scan of a DLedger data file.

DLedger's recovery (``DLedgerMmapFileStore.recover``) checks the last three data files, entry
by entry: the header's magic, size and stored position, the index one past the last entry's and
a term no lower. The first entry that fails ends the log (the node truncates there); a blank
(magic -1) moves to the next file; zeros end the data. Older files are kept as they are. The walk
does the same, and decodes each entry's body as the one RocketMQ message it is, with the checks of
an ordinary record (:func:`~broker_core.codec.decode_record`), at its physical offset (the entry's
position + 48), which is also what its PHYSICALOFFSET, its msgId and its consume-queue units say.

An entry past the node's committed index is yielded as uncommitted (``RaftEntry.committed`` False):
its broker never dispatched it, a leader change may truncate it, and no consumer can have seen it.
The committed index is the node's ``checkpoint`` (persisted every 3 s and at shutdown) or, when a
consume queue names a later entry (a broker killed between two checkpoints), that entry: only
committed entries reach a consume queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core.codec import Blank, Record, decode_record
from broker_core.errors import CorruptRecordError
from broker_core.store.dledger import (
    ENTRY_HEADER_BYTES,
    DLedgerCheckpoint,
    EntryHeader,
    header_fault,
    read_blank,
    read_header,
)
from broker_core.store.log_files import (
    KEPT_NOTE,
    PROGRESS_EVERY_RECORDS,
    RELEASE_MAPPED_EVERY_BYTES,
    CommitLogFile,
    LogEntry,
    RaftEntry,
    ScanProgress,
    release_pages,
)
from broker_core.store.problem import WARNING, Problem

KIND_BAD_ENTRY = "dledger-bad-entry"  # a header DLedger's recovery refuses
KIND_BAD_BODY = "dledger-bad-body"  # an entry whose body is not one message
KIND_BLANK_SIZE = "dledger-blank-size"
KIND_CHECKPOINT_MISSING = "dledger-checkpoint-missing"
# What follows the last entry the checkpoint names and fails recovery's checks: a truncated tail's bytes.
KIND_LEFT_BEHIND = "dledger-left-behind"


@dataclass
class RaftTerm:
    """The entries of one term in a node's log."""

    first_index: int
    last_index: int
    entries: int = 1


@dataclass
class RaftLog:
    """What a scan of one node's DLedger log found, beside the records."""

    self_id: str
    checkpoint: DLedgerCheckpoint | None
    # The highest message offset a consume queue of the store names: committed, whatever the checkpoint says.
    consume_queue_offset: int | None
    entries: int = 0
    first_index: int | None = None
    last_index: int | None = None
    last_term: int | None = None
    committed_through: int | None = None  # the last entry taken as committed
    committed_by: str | None = None  # "checkpoint" or "consume queue": what made it committed
    uncommitted: int = 0
    first_uncommitted_index: int | None = None
    first_uncommitted_offset: int | None = None  # the entry's physical offset (its header)
    terms: dict[int, RaftTerm] = field(default_factory=dict)

    def committed(self, index: int, message_offset: int) -> tuple[bool, bool]:
        """Whether the node's files prove the entry committed (module docstring), and whether its
        checkpoint does (else a consume queue)."""
        by_checkpoint = (self.checkpoint is not None and self.checkpoint.committed_index is not None
                         and index <= self.checkpoint.committed_index)
        by_queue = self.consume_queue_offset is not None and message_offset <= self.consume_queue_offset
        return by_checkpoint or by_queue, by_checkpoint

    def add(self, index: int, term: int, entry_offset: int, committed: bool, by_checkpoint: bool = True) -> None:
        """Count one entry of the walk (in log order)."""
        self.add_run(index, index, term, 1, entry_offset, committed, by_checkpoint)

    def add_run(self, first_index: int, last_index: int, term: int, count: int, first_offset: int,
                committed: bool, by_checkpoint: bool) -> None:
        """Count ``count`` consecutive entries of one term, all committed or none (in log order);
        ``by_checkpoint`` is the last one's."""
        self.entries += count
        if self.first_index is None:
            self.first_index = first_index
        self.last_index, self.last_term = last_index, term
        known = self.terms.get(term)
        if known is None:
            self.terms[term] = RaftTerm(first_index, last_index, count)
        else:
            known.last_index = last_index
            known.entries += count
        if committed:
            self.committed_through = last_index
            self.committed_by = "checkpoint" if by_checkpoint else "consume queue"
        else:
            self.uncommitted += count
            if self.first_uncommitted_index is None:
                self.first_uncommitted_index, self.first_uncommitted_offset = first_index, first_offset

    def to_json(self) -> dict:
        return {"self_id": self.self_id,
                "checkpoint_committed_index": self.checkpoint.committed_index if self.checkpoint else None,
                "checkpoint_end_index": self.checkpoint.end_index if self.checkpoint else None,
                "consume_queue_offset": self.consume_queue_offset, "entries": self.entries,
                "first_index": self.first_index, "last_index": self.last_index, "last_term": self.last_term,
                "committed_through": self.committed_through, "committed_by": self.committed_by,
                "uncommitted": self.uncommitted, "first_uncommitted_index": self.first_uncommitted_index,
                "first_uncommitted_offset": self.first_uncommitted_offset,
                "terms": {str(t): {"first_index": r.first_index, "last_index": r.last_index, "entries": r.entries}
                          for t, r in sorted(self.terms.items())}}


class DLedgerScan:
    """The DLedger half of :class:`~broker_core.store.reader.StoreReader`'s commit-log scan."""

    raft: RaftLog | None = None
    _raft_last: tuple[int, int] | None = None  # (index, term) of the last entry walked

    def _raft_entry(self, header: EntryHeader) -> RaftEntry:
        """Count the entry in :attr:`raft` and say whether it is committed."""
        committed, by_checkpoint = self.raft.committed(header.index, header.message_offset)
        self.raft.add(header.index, header.term, header.pos, committed, by_checkpoint)
        self._raft_last = (header.index, header.term)
        return RaftEntry(header.index, header.term, header.size, committed)

    def _scan_dledger_buffer(self, cf: CommitLogFile, buf, limit: int, progress, index: int, lenient: bool,
                             start: int = 0):
        """Yield one mapped DLedger data file's entries from ``start``; return (outcome, physical
        end of valid data), the outcomes of ``StoreReader._scan_buffer``.

        :meth:`_fast_dledger_entries` may take a run of plain entries first (the columnar decoder
        does); wherever it stops, the entry there is read and judged here.
        """
        pos = start
        released = 0
        rel = self._rel(cf.path)
        if lenient or index == self.recovery_start_index():
            # Recovery starts its checks afresh at the first file it reads; an older file is kept
            # whatever it holds, so each is judged on its own.
            self._raft_last = None
        while pos < limit:
            if pos - released >= RELEASE_MAPPED_EVERY_BYTES:
                released = release_pages(buf, released, pos)
            pos, took_every_entry = yield from self._fast_dledger_entries(cf, rel, buf, pos, limit, progress, index)
            if took_every_entry:
                continue
            room = limit - pos
            blank = read_blank(buf, pos, room)
            if blank is not None:
                if pos + blank != self.file_size:
                    self._scan_problems.append(Problem(
                        rel, cf.start + pos, KIND_BLANK_SIZE,
                        f"the file's blank says {blank} bytes, {self.file_size - pos} remain", WARNING))
                self.blank_count += 1
                yield LogEntry(cf.name, cf.start + pos, blank, None)
                return "blank", cf.start + self.file_size
            head = bytes(buf[pos:pos + min(room, ENTRY_HEADER_BYTES)])
            if not any(head):
                # Zeros: the data ends (recovery's header checks fail here and it stops).
                self._check_zero_tail(cf, buf, pos, limit)
                if lenient:
                    self._scan_problems.append(Problem(
                        rel, cf.start + pos, "no-end-of-file-record",
                        "the file's data ends without a blank; the next file is read", WARNING))
                    return "skip", cf.start + pos
                return "end", cf.start + pos
            problem = self._entry_problem(cf, rel, buf, pos, limit)
            if isinstance(problem, Problem):
                if not lenient and self._past_end_index():
                    self._scan_problems.append(Problem(
                        problem.file, problem.offset, KIND_LEFT_BEHIND,
                        f"{problem.reason}; the log already holds every entry up to the checkpoint's endIndex "
                        f"{self.raft.checkpoint.end_index}: bytes a truncation left behind (DLedger cuts its log "
                        "by moving the write position, without zeroing), where recovery stops", WARNING))
                    return "end", cf.start + pos
                if not lenient:
                    self._scan_problems.append(problem)
                    return "damage", cf.start + pos
                self._scan_problems.append(Problem(problem.file, problem.offset, problem.kind,
                                                   problem.reason + KEPT_NOTE, problem.severity))
                return "skip", cf.start + pos
            header, record = problem
            yield self._dledger_record_entry(cf, rel, buf, pos + ENTRY_HEADER_BYTES, record, header)
            pos += header.size
            if progress is not None and self.record_count and self.record_count % PROGRESS_EVERY_RECORDS == 0:
                progress(ScanProgress(cf.name, index, len(self.files), self.record_count))
        return ("skip" if lenient else "end"), cf.start + pos

    def _past_end_index(self) -> bool:
        """Whether the walk has read the entry the node's checkpoint names as its last (endIndex)."""
        log = self.raft
        return (log.checkpoint is not None and log.checkpoint.end_index is not None and log.last_index is not None
                and log.last_index >= log.checkpoint.end_index)

    def _entry_problem(self, cf: CommitLogFile, rel: str, buf, pos: int,
                       limit: int) -> Problem | tuple[EntryHeader, Record]:
        """The entry at ``pos`` as (header, its message), or the problem that makes recovery stop there."""
        entry_offset = cf.start + pos
        if limit - pos < ENTRY_HEADER_BYTES:
            return Problem(rel, entry_offset, KIND_BAD_ENTRY,
                           f"an entry header needs {ENTRY_HEADER_BYTES} bytes, {limit - pos} are left in the file")
        header = read_header(buf, pos)
        fault = header_fault(header, entry_offset, limit - pos, self._raft_last)
        if fault is not None:
            return Problem(rel, entry_offset, KIND_BAD_ENTRY,
                           f"entry header refused (index {header.index}, term {header.term}): {fault}")
        at = pos + ENTRY_HEADER_BYTES
        try:
            item = decode_record(buf, at, check_crc=self.check_crc, limit=pos + header.size)
        except CorruptRecordError as exc:
            found = self._classify(cf, buf, at, pos + header.size, exc)
            return Problem(found.file, found.offset, found.kind,
                           f"in the entry at {entry_offset} (index {header.index}, term {header.term}): {found.reason}",
                           found.severity)
        if not isinstance(item, Record) or item.total_size != header.body_len:
            what = ("no message (zeros or an unknown magic)" if item is None else
                    "an END_OF_FILE record" if isinstance(item, Blank) else
                    f"a message of {item.total_size} bytes")
            return Problem(rel, entry_offset, KIND_BAD_BODY,
                           f"the entry (index {header.index}, term {header.term}) holds a {header.body_len}-byte "
                           f"body that is {what}, not one message of that size")
        return header, item

    def _dledger_record_entry(self, cf: CommitLogFile, rel: str, buf, at: int, item: Record,
                              header: EntryHeader) -> LogEntry:
        """The entry of a message at ``at`` (48 bytes into its entry), counted when committed."""
        raft = self._raft_entry(header)
        entry = self._record_entry(cf, rel, buf, at, item, counted=raft.committed)
        return LogEntry(entry.file_name, entry.phys_offset, entry.size, entry.record, raft)

    def _fast_dledger_entries(self, cf: CommitLogFile, rel: str, buf, pos: int, limit: int, progress, index: int):
        """Yield what a faster decoder takes from ``pos`` on; return (where it stopped, whether it
        took every entry it walked over). The reference takes none: every entry is read here."""
        yield from ()
        return pos, False
