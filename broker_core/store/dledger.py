"""A DLedger commit log (``enableDLegerCommitLog=true``, RocketMQ 4.5+): where its files are and what
their bytes mean.

A broker in DLedger mode keeps no ``commitlog/``: its messages are entries of a Raft log
(openmessaging/dledger 0.2.6 in RocketMQ 4.9.4, 0.3.1.2 in 5.3.3: the same files, read alike from
both releases' real stores), one directory per node of the group under the store root
(``DLedgerConfig.getDefaultPath``)::

    <storePathRootDir>/dledger-<selfId>/data/<20-digit start offset>   the entries (below)
    <storePathRootDir>/dledger-<selfId>/index/<20-digit>               32 bytes per entry (dledger_index.py)
    <storePathRootDir>/dledger-<selfId>/checkpoint                     committedIndex=, endIndex=
    <storePathRootDir>/dledger-<selfId>/currterm                       currTerm=, voteLeader=

``consumequeue/``, ``config/`` and the store ``checkpoint`` stay where a normal broker keeps them.
``storePathDLedgerCommitLog`` moves ``data/`` elsewhere (the reader is then told where).

Each entry (``DLedgerEntryCoder.encode``, big-endian) is a 48-byte header and a body:

======  ====  =========================================================================
offset  size  field
======  ====  =========================================================================
0       4     magic, 1 (``DLedgerMmapFileStore.MAGIC_1``)
4       4     size: the whole entry, header included
8       8     index: the entry's place in the group's Raft log (0, 1, 2, ...)
16      8     term: the leader's term when it appended the entry
24      8     pos: the entry's own offset in the log (recovery checks it)
32      4     channel (0), chain CRC (never set: 0), body CRC (never set: 0), 4 bytes each
44      4     body length (size - 48)
48      n     body: one ordinary RocketMQ message (TOTALSIZE, magic, ...)
======  ====  =========================================================================

``DLedgerCommitLog``'s append hook writes ``pos + 48`` into the message's PHYSICALOFFSET before the
entry is stored, so the offset msgId, the consume queues and the index file all name the message
itself, 48 bytes into its entry. A file ends with a blank: magic -1 and the bytes left, at least 8
(``MmapFileList.BLANK_MAGIC_CODE``, ``MIN_BLANK_LEN``), unlike RocketMQ's ``[size][0xCBD43194]``.

Only committed entries are messages a broker handed out: ``DLedgerCommitLog.getMaxOffset`` is the
committed position, so nothing past it reaches a consume queue, and a leader change may truncate
it (``DLedgerMmapFileStore.truncate``). The node's ``checkpoint`` says how far its log was committed
when it was last written (every 3 s, ``checkPointInterval``, and at shutdown).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from broker_core.errors import BadInputError

DLEDGER_DIR_PREFIX = "dledger-"  # DLedgerConfig.getDefaultPath: <storeBaseDir>/dledger-<selfId>
DATA_DIR_NAME = "data"
CHECKPOINT_FILE_NAME = "checkpoint"  # DLedgerMmapFileStore.CHECK_POINT_FILE
COMMITTED_INDEX_KEY = "committedIndex"  # DLedgerMmapFileStore.COMMITTED_INDEX_KEY
END_INDEX_KEY = "endIndex"  # DLedgerMmapFileStore.END_INDEX_KEY
TERM_FILE_NAME = "currterm"  # MemberState.TERM_PERSIST_FILE
CURRENT_TERM_KEY = "currTerm"
VOTE_LEADER_KEY = "voteLeader"

# magic, size, index, term, pos, channel, chain CRC, body CRC, body length (DLedgerEntryCoder.encode)
ENTRY_HEADER = struct.Struct(">iiqqqiiii")
ENTRY_HEADER_BYTES = 48  # DLedgerEntry.BODY_OFFSET: where the message starts inside its entry
assert ENTRY_HEADER.size == ENTRY_HEADER_BYTES
ENTRY_MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1, the only CURRENT_MAGIC of 0.2.x and 0.3.x
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE
BLANK_MIN_BYTES = 8  # MmapFileList.MIN_BLANK_LEN: magic and the length left
_BLANK = struct.Struct(">ii")
# DLedgerMmapFileStore.recover checks the last three data files (mappedFiles.size() - 3), keeping
# earlier ones as they are, whether or not the broker shut down cleanly.
RECOVER_FILES_FROM_END = 3
_SELF_ID = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class EntryHeader:
    """The 48-byte header of one DLedger entry."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_len: int

    @property
    def message_offset(self) -> int:
        """The physical offset of the message the entry holds (what msgIds and consume queues name)."""
        return self.pos + ENTRY_HEADER_BYTES


def read_header(buf, at: int) -> EntryHeader:
    """The header at ``at`` (48 bytes must be there)."""
    return EntryHeader(*ENTRY_HEADER.unpack_from(buf, at))


def header_fault(header: EntryHeader, entry_offset: int, room: int,
                 last: tuple[int, int] | None) -> str | None:
    """Why an entry header at physical ``entry_offset`` is not one DLedger's recovery keeps (None: it is).

    ``room`` is the bytes from the header to the end of the file's data; ``last`` the (index, term)
    of the entry before it, when there is one. These are ``DLedgerMmapFileStore.recover``'s checks:
    the magic, the size against the body length, the stored position, the index one past the last
    and a term no lower than the last.
    """
    if header.magic != ENTRY_MAGIC:
        return f"magic {header.magic}, not {ENTRY_MAGIC}"
    if header.size <= ENTRY_HEADER_BYTES - 4 or header.body_len + ENTRY_HEADER_BYTES != header.size:
        return f"size {header.size} is not the header's {ENTRY_HEADER_BYTES} bytes plus the body length {header.body_len}"
    if header.size > room:
        return f"entry of {header.size} bytes runs past the end of the file's data ({room} bytes left)"
    if header.pos != entry_offset:
        return f"the entry stores pos {header.pos} but sits at {entry_offset}"
    if last is not None and header.index != last[0] + 1:
        return f"index {header.index} does not follow index {last[0]}"
    if last is not None and header.term < last[1]:
        return f"term {header.term} is lower than the term {last[1]} of index {last[0]}"
    return None


def read_blank(buf, at: int, room: int) -> int | None:
    """The length of the blank at ``at`` when one starts there (magic -1), else None.

    A blank with fewer than 8 bytes left or a length other than ``room`` is still a blank to
    DLedger's recovery (it moves to the next file on the magic alone); the caller reports it."""
    if room < BLANK_MIN_BYTES:
        return None
    magic, length = _BLANK.unpack_from(buf, at)
    return length if magic == BLANK_MAGIC else None


@dataclass(frozen=True)
class DLedgerCheckpoint:
    """A node's ``dledger-<selfId>/checkpoint``: Java properties written by ``persistCheckPoint``."""

    committed_index: int | None
    end_index: int | None


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` lines as ``IOUtils.properties2String`` writes them (``#`` comments skipped)."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        found[key.strip()] = value.strip()
    return found


def parse_checkpoint(text: str) -> DLedgerCheckpoint:
    """The committed and end index of a checkpoint file's text (None where absent or not a number)."""
    values = parse_properties(text)

    def number(key: str) -> int | None:
        try:
            return int(values[key])
        except (KeyError, ValueError):
            return None

    return DLedgerCheckpoint(number(COMMITTED_INDEX_KEY), number(END_INDEX_KEY))


@dataclass(frozen=True)
class DLedgerLayout:
    """Where a DLedger node's files are under a store root."""

    self_id: str  # the node's dLegerSelfId (n0, n1, ...)
    base: Path  # <root>/dledger-<selfId>
    data_dir: Path  # base/data, or storePathDLedgerCommitLog

    @property
    def checkpoint_path(self) -> Path:
        return self.base / CHECKPOINT_FILE_NAME

    @property
    def term_path(self) -> Path:
        return self.base / TERM_FILE_NAME


def find_layout(root: Path, data_dir: Path | None = None) -> DLedgerLayout | None:
    """The DLedger node directory of the store at ``root``; None for a store without one.

    ``data_dir`` is where the entries are when the broker set ``storePathDLedgerCommitLog``.
    A store root holds one node's directory (a broker runs one node); two are refused, since
    which of them the broker read cannot be told from the files.
    """
    nodes = sorted(p for p in Path(root).glob(f"{DLEDGER_DIR_PREFIX}*") if p.is_dir())
    if not nodes:
        return None
    if len(nodes) > 1:
        raise BadInputError(f"{len(nodes)} DLedger node directories ({', '.join(p.name for p in nodes)}): "
                            "a broker's store root holds one", where=str(root),
                            hint="import each node's store root on its own (--role replica merges them)")
    base = nodes[0]
    self_id = base.name[len(DLEDGER_DIR_PREFIX):]
    if not _SELF_ID.fullmatch(self_id):
        raise BadInputError(f"{base.name} is not a DLedger node directory name", where=str(base))
    data = Path(data_dir) if data_dir is not None else base / DATA_DIR_NAME
    if not data.is_dir():
        raise BadInputError(f"{base.name} has no {DATA_DIR_NAME}/ directory of entries", where=str(data),
                            hint="the broker may keep them elsewhere (storePathDLedgerCommitLog): pass "
                                 "that directory with --dledger-data")
    return DLedgerLayout(self_id, base, data)
