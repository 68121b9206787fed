"""Commit-log files decoded into Arrow columns: the ``import-store`` decoder.

The reference decoder (:class:`~broker_core.store.reader.StoreReader` with
:func:`~broker_core.codec.decode_record`) builds a Python object per record and a tuple per row,
which costs about twenty times the CPU of writing the same rows to Parquet. Here the only per-record
Python step is the walk over the TOTALSIZE fields (each record's start depends on the previous
one's size); every other field is gathered for a whole slice of records at once:

* fixed-width fields by fancy indexing a big-endian, byte-strided view of the mapped file
  (element ``i`` of the ``>i8`` view is the 8 bytes at byte ``i``), at offsets computed from the
  record starts and the sysFlag's IPv6 bits;
* topic and properties by cutting the slice's bytes into pieces at computed boundaries (one
  zero-copy Arrow binary array over the mapping) and ``take``-ing the pieces wanted;
* the ``key\\x01value\\x02`` properties by finding the separators with numpy and cutting again;
* hosts and message-id prefixes once per distinct address, body CRCs with ``zlib.crc32`` on
  views of the mapping (about 0.25 us a record).

Every acceptance rule is the reference's: a slice's records are checked with vector tests equal
to ``decode_record``'s (sizes, lengths, CRC, UTF-8, torn tails), and at the first record that
fails one, or wherever the walk meets anything but a v1/v2 record that fits (a BLANK, zeros, a
foreign magic, a torn tail), the reference's own decode and classification run for that one
position. :class:`ColumnarStoreReader` subclasses the reference reader and hands its scan loop
(``StoreReader._scan_buffer``) only a faster way through runs of plain records, so the loop itself,
file listing, recovery windows, gaps, consume queues, config files and the checkpoint are the
reference's code, and ``tests/broker_core/export/test_columnar.py`` holds the
two decoders to the same rows and the same problems.

Memory: one slice (at most :data:`SLICE_RECORDS` records and :data:`SLICE_BYTES` of the file) is
decoded at a time, and mapped pages already read are handed back as the reference does.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core import codec
from broker_core.codec import parse_int_property
from broker_core.constants import (
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TOPIC_LENGTH_V1_BYTES_MAX,
)
from broker_core.export.parquet import COMPRESSION, DEFAULT_PART, ROW_GROUP_ROWS, EncodingWriter
from broker_core.export.schema import COMMITLOG, DLEDGER_ENTRIES, DLEDGER_STATES
from broker_core.message import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    PORT_MAX,
    PROP_CRC32,
    PROP_DELAY,
    PROP_KEYS,
    PROP_MAX_RECONSUME_TIMES,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_RETRY_TOPIC,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    bytes_to_host,
    create_message_id,
)
from broker_core.store.dledger import ENTRY_HEADER, ENTRY_HEADER_BYTES, ENTRY_MAGIC
from broker_core.store.dledger_scan import RaftLog
from broker_core.store.reader import (
    _SIZE_MAGIC,
    CQ_PRE_BLANK_UNIT_SIZE,
    HOST_ROLES,
    INT_PROPERTIES,
    PROGRESS_EVERY_RECORDS,
    WARNING,
    CommitLogFile,
    LogEntry,
    Problem,
    ScanProgress,
    StoreReader,
    host_port_problem,
    int_property_problem,
    property_crc_problem,
)

# A slice is decoded at once: this many records at most, and at most this much of the file, so
# the gathered columns and their temporaries stay bounded (a few MiB) whatever the file size.
# Smaller slices keep the temporaries in cache: on 300,000 records of 450 bytes, 4 MiB slices
# decoded in about 20 % less CPU than 16 MiB ones, and 1 MiB ones lost it again to per-slice calls.
SLICE_RECORDS = 16 * 1024
SLICE_BYTES = 4 * 1024 * 1024

# Record layout: positions from the record start, all the codec's (it owns the header layout).
_TOTAL, _MAGIC, _CRC, _QUEUE_ID, _QUEUE_OFFSET, _PHYS, _SYSFLAG, _BORN_TS, _BORN_HOST = (
    codec.TOTAL_SIZE_POS, codec.MAGIC_POS, codec.BODY_CRC_POS, codec.QUEUE_ID_POS,
    codec.QUEUE_OFFSET_POS, codec.PHYS_OFFSET_POS, codec.SYSFLAG_POS, codec.BORN_TS_POS,
    codec.BORN_HOST_POS)
_HOST_V6_EXTRA = codec.HOST_V6_BYTES - codec.HOST_V4_BYTES  # a v6 host's bytes beyond a v4 one's
# Header bytes with two v4 hosts up to the reconsume times: born host, store timestamp, store host.
_AFTER_HOSTS = codec.BORN_HOST_POS + codec.HOST_V4_BYTES + 8 + codec.HOST_V4_BYTES
_HEADER_V4 = codec.RECORD_FIXED_V4_BYTES  # with two v4 hosts, up to and including the body length
_PROPS_LEN_BYTES = codec.PROPERTIES_LENGTH_FIELD_BYTES
# The least TOTALSIZE decode_record accepts for a v1 record; the walk hands anything smaller
# (and any v2 record of this size) to the reference path.
_MIN_TOTAL = _HEADER_V4 + 1 + _PROPS_LEN_BYTES
# The first 8 bytes of a 5.x __CRC32# tail, read as the >i8 view reads them.
_PROP_CRC_HEAD = int.from_bytes(PROP_CRC32.encode(), "big")

_EXTRACTED = {  # contract column -> property it comes from (codec.Record's properties)
    "uniq_key": PROP_UNIQ_KEY, "origin_msg_id": PROP_ORIGIN_MESSAGE_ID, "real_topic": PROP_REAL_TOPIC,
    "real_queue_id": PROP_REAL_QID, "retry_topic": PROP_RETRY_TOPIC, "delay_level": PROP_DELAY,
    "max_reconsume_times": PROP_MAX_RECONSUME_TIMES, "tags": PROP_TAGS, "keys": PROP_KEYS,
}
_INT_DEFAULTS = {"real_queue_id": None, "delay_level": 0, "max_reconsume_times": None}
# Values Arrow's string-to-int32 cast reads exactly as Python's int() does; anything else (a
# sign, spaces, underscores, other digits, too many digits) goes through int() itself.
_PLAIN_INT = r"^-?[0-9]{1,9}$"
_MSG_ID_OFFSET_HEX_CHARS = 16
# Byte value -> its two upper-case hex digits, as the 2 bytes of one uint16 element.
_HEX_PAIRS = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint16)
_MAGIC_NAMES = {m: f"0x{m:08X}" for m in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)}
_COLUMN_NAMES = tuple(COMMITLOG.names)
_CQ_UNIT = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])  # reader.CQ_UNIT


@dataclass(frozen=True)
class RecordColumns:
    """The commitlog columns (all but run_id and broker) of consecutive records of one file."""

    file_name: str
    columns: dict[str, pa.Array]
    num_rows: int
    # A DLedger log's records: each one's entry (raft_index, term, entry_size arrays), and whether
    # they are committed (a slice never holds both kinds).
    raft: dict[str, np.ndarray] | None = None
    committed: bool = True

    def table(self, run_id: str, broker: str) -> pa.Table:
        """The ``commitlog`` contract table of these records."""
        n = self.num_rows
        constant = {"run_id": _repeat_string(run_id, n), "broker": _repeat_string(broker, n)}
        return pa.Table.from_arrays([constant[name] if name in constant else self.columns[name]
                                     for name in _COLUMN_NAMES],
                                    schema=COMMITLOG)

    def dledger_table(self, run_id: str, broker: str, self_id: str) -> pa.Table:
        """The ``dledger_entries`` rows of these records' entries (a DLedger log's slice)."""
        assert self.raft is not None, "not a DLedger log's slice"
        n = self.num_rows
        state = DLEDGER_STATES[0] if self.committed else DLEDGER_STATES[1]
        values = {"run_id": _repeat_string(run_id, n), "broker": _repeat_string(broker, n),
                  "raft_index": pa.array(self.raft["raft_index"], pa.int64()),
                  "term": pa.array(self.raft["term"], pa.int64()),
                  "entry_size": pa.array(self.raft["entry_size"], pa.int32()),
                  "state": _repeat_string(state, n),
                  "replicas": pa.array([[self_id]] * n, pa.list_(pa.string()))}
        return pa.Table.from_arrays([values[name] if name in values else self.columns[name]
                                     for name in DLEDGER_ENTRIES.names], schema=DLEDGER_ENTRIES)


class ColumnarStoreReader(StoreReader):
    """:class:`StoreReader` whose commit-log walk yields :class:`RecordColumns` per slice.

    :meth:`entries` yields RecordColumns for records and :class:`LogEntry` for BLANKs; counts,
    store times, ``valid_end`` and problems are kept exactly as the reference scan keeps them.
    """

    def batches(self, progress: Callable[[ScanProgress], None] | None = None) -> Iterator[RecordColumns]:
        """The records in physical order, a slice at a time, up to where recovery stops."""
        return (b for b in self.entries(progress) if isinstance(b, RecordColumns))

    def _scan_buffer(self, cf: CommitLogFile, buf, limit: int, progress, index: int, lenient: bool,
                     start: int = 0):
        self._hosts = _HostNames()  # per file, as the message-id prefixes are
        return (yield from super()._scan_buffer(cf, buf, limit, progress, index, lenient, start))

    def _fast_records(self, cf: CommitLogFile, rel: str, buf, pos: int, limit: int, progress, index: int):
        """Walk a slice of records from ``pos`` and emit those that pass every vector check.

        Stops at the first record that fails one, or wherever the walk meets anything but a v1/v2
        record that fits: the reference's decode and classification decide what is there.
        """
        starts, walked_to = _walk(buf, pos, limit)
        if not starts:
            return pos, False
        at = np.frombuffer(starts, dtype=np.int64)
        raw = _read_slice(buf, limit, at, self.check_crc)
        if raw.count:
            self._last_record_at = cf.start + int(at[raw.count - 1])
            yield self._emit(cf, rel, raw, self._hosts, progress, index)
        if raw.count == len(starts):
            return walked_to, True
        return starts[raw.count], False

    def _fast_dledger_entries(self, cf: CommitLogFile, rel: str, buf, pos: int, limit: int, progress,
                              index: int):
        """Walk a slice of DLedger entries from ``pos`` and emit the messages of those that pass
        every check, as :meth:`_fast_records` does for a commitlog/ file; the reference
        (``DLedgerScan._scan_dledger_buffer``) judges the entry where it stops."""
        walk = _walk_dledger(buf, pos, limit, cf.start, self._raft_last, self.raft)
        if not walk.starts:
            return pos, False
        starts = np.frombuffer(walk.starts, dtype=np.int64)
        raw = _read_slice(buf, limit, starts + ENTRY_HEADER_BYTES, self.check_crc)
        taken = raw.count
        if taken:
            indexes = np.frombuffer(walk.indexes, dtype=np.int64)[:taken]
            terms = np.frombuffer(walk.terms, dtype=np.int64)[:taken]
            sizes = np.frombuffer(walk.sizes, dtype=np.int64)[:taken]
            # One count per run of entries of one term (the walk made the slice all committed or not).
            cuts = [0, *(np.flatnonzero(np.diff(terms)) + 1).tolist(), taken]
            for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
                last_offset = int(starts[hi - 1]) + cf.start
                _, by_checkpoint = self.raft.committed(int(indexes[hi - 1]), last_offset + ENTRY_HEADER_BYTES)
                self.raft.add_run(int(indexes[lo]), int(indexes[hi - 1]), int(terms[lo]), hi - lo,
                                  int(starts[lo]) + cf.start, walk.committed, by_checkpoint)
            self._raft_last = (int(indexes[-1]), int(terms[-1]))
            yield self._emit(cf, rel, raw, self._hosts, progress, index,
                             raft={"raft_index": indexes, "term": terms, "entry_size": sizes.astype(np.int32)},
                             committed=walk.committed)
        if taken == len(starts):
            return walk.walked_to, True
        return int(starts[taken]), False

    def _record_entry(self, cf: CommitLogFile, rel: str, buf, pos: int, item, counted: bool = True) -> LogEntry:
        raise AssertionError(f"{rel}@{cf.start + pos}: decode_record accepts a record the "
                             "columnar checks refused")

    def _check_zero_tail(self, cf: CommitLogFile, buf, pos: int, limit: int) -> None:
        """The reference's check, run only when numpy finds a non-zero byte after the data.

        The rest of the last file is usually tens of MiB of zeros; the reference copies it out
        in chunks to strip them, which cost as much as decoding a tenth of the records.
        """
        if limit > pos and _any_nonzero(cf.path, pos, limit):
            super()._check_zero_tail(cf, buf, pos, limit)

    def _valid_units(self, data: bytes) -> int:
        units = np.frombuffer(data, dtype=_CQ_UNIT, count=len(data) // _CQ_UNIT.itemsize)
        phys, size = units["phys"], units["size"]
        pre_blank = (phys == 0) & (size == CQ_PRE_BLANK_UNIT_SIZE) & (units["tags"] == 0)
        return _first(~pre_blank & ((phys < 0) | (size <= 0)))

    def _unit_findings(self, path, pos: int, data: bytes, valid_end: int, found) -> None:
        """The reference's check of a piece of a queue, run only when arrays show a unit it names.

        The reference reads every unit into an object (a third of an import's CPU when the log is
        decoded by columns). The arrays answer the question it asks of each unit -- does it point
        past ``valid_end``, or start before the first file and end inside it -- and only a piece
        where some unit does goes to the reference, to name them.
        """
        units = np.frombuffer(data, dtype=_CQ_UNIT)
        phys, size = units["phys"], units["size"].astype(np.int64)
        used = ~((phys == 0) & (size == CQ_PRE_BLANK_UNIT_SIZE) & (units["tags"] == 0))
        phys, size = phys[used], size[used]
        first = self.first_offset
        # end = phys + size, compared without forming it (no int64 overflow)
        if np.any(phys > valid_end - size) or np.any((phys < first) & (phys > first - size)):
            super()._unit_findings(path, pos, data, valid_end, found)

    def _emit(self, cf: CommitLogFile, rel: str, raw: _Slice, hosts: _HostNames, progress,
              index: int, raft: dict[str, np.ndarray] | None = None, committed: bool = True) -> RecordColumns:
        """Count the slice's records (a DLedger log's committed ones), note misplaced ones and
        values their columns cannot hold, and build their columns."""
        sits_at = raw.starts + cf.start
        columns, odd_values = _columns(raw, cf.name, hosts)
        # (row, rank, problem) in the order the reference lists a record's problems: the misplaced
        # offset, then record_value_problems' order (hosts, then numeric properties).
        found = [(at, 0, Problem(
            rel, int(sits_at[at]), "phys-offset-mismatch",
            f"record stores PHYSICALOFFSET {int(raw.phys[at])} but sits at {int(sits_at[at])}",
            WARNING)) for at in np.flatnonzero(raw.phys != sits_at).tolist()]
        for rank, (row, what, value) in odd_values:
            make = host_port_problem if rank <= len(HOST_ROLES) else int_property_problem
            found.append((row, rank, make(rel, int(sits_at[row]), what, value)))
        # After the values, as the reference lists them.
        crc_rank = len(HOST_ROLES) + len(INT_PROPERTIES) + 1
        found.extend((row, crc_rank, property_crc_problem(rel, int(sits_at[row]), stored, computed))
                     for row, stored, computed in raw.prop_crc_bad)
        self._scan_problems.extend(problem for _, _, problem in sorted(found, key=lambda f: f[:2]))
        if not committed:
            return RecordColumns(cf.name, columns, raw.count, raft, committed)
        before = self.record_count
        self.record_count += raw.count
        if self.first_store_ts is None:
            self.first_store_ts = int(raw.store_ts[0])
        self.last_store_ts = int(raw.store_ts[-1])
        if progress is not None and self.record_count // PROGRESS_EVERY_RECORDS > before // PROGRESS_EVERY_RECORDS:
            progress(ScanProgress(cf.name, index, len(self.files), self.record_count))
        return RecordColumns(cf.name, columns, raw.count, raft, committed)


def _walk(buf, pos: int, limit: int) -> tuple[array, int]:
    """Starts of the plain v1/v2 records from ``pos`` that fit in the file, one slice's worth.

    The one sequential step: each start is the previous one plus its TOTALSIZE. Stops at the
    slice's bounds or at anything else (BLANK, zeros, another magic, a size that cannot be a
    record or runs past ``limit``); returns the starts and where the walk stopped.
    """
    starts = array("q")
    append = starts.append
    unpack = _SIZE_MAGIC.unpack_from
    v1, v2 = MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
    last_header = limit - 8
    stop_after = min(last_header, pos + SLICE_BYTES)
    for _ in range(SLICE_RECORDS):
        if pos > stop_after:
            break
        total, magic = unpack(buf, pos)
        if (magic != v1 and magic != v2) or total < _MIN_TOTAL or total > limit - pos:
            break
        append(pos)
        pos += total
    return starts, pos


@dataclass
class _DLedgerWalk:
    """Where the entries of one DLedger slice start, and their header fields."""

    starts: array  # each entry's position in the file (its message is 48 bytes on)
    indexes: array
    terms: array
    sizes: array
    walked_to: int
    committed: bool  # every entry of the slice is, or none is


def _walk_dledger(buf, pos: int, limit: int, file_start: int, last: tuple[int, int] | None,
                  log: RaftLog) -> _DLedgerWalk:
    """The DLedger entries from ``pos`` whose header DLedger's recovery keeps (``header_fault``)
    and whose body starts a v1/v2 message of the body's length, one slice's worth.

    Stops at the slice's bounds, at anything else (a blank, zeros, a header or body that fails a
    check) and where the committed entries end, so a slice is all committed or all not.
    """
    starts, indexes, terms, sizes = array("q"), array("q"), array("q"), array("q")
    unpack = ENTRY_HEADER.unpack_from
    message_head = _SIZE_MAGIC.unpack_from
    v1, v2 = MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
    stop_after = min(limit - ENTRY_HEADER_BYTES - 8, pos + SLICE_BYTES)
    committed: bool | None = None
    for _ in range(SLICE_RECORDS):
        if pos > stop_after:
            break
        magic, size, index, term, stored_pos, _, _, _, body_len = unpack(buf, pos)
        if magic != ENTRY_MAGIC or body_len + ENTRY_HEADER_BYTES != size or size > limit - pos \
                or stored_pos != file_start + pos:
            break
        if last is not None and (index != last[0] + 1 or term < last[1]):
            break
        total, message_magic = message_head(buf, pos + ENTRY_HEADER_BYTES)
        if (message_magic != v1 and message_magic != v2) or total < _MIN_TOTAL or total != body_len:
            break
        this, _ = log.committed(index, stored_pos + ENTRY_HEADER_BYTES)
        if committed is None:
            committed = this
        elif this != committed:
            break
        starts.append(pos)
        indexes.append(index)
        terms.append(term)
        sizes.append(size)
        last = (index, term)
        pos += size
    return _DLedgerWalk(starts, indexes, terms, sizes, pos, bool(committed))


@dataclass
class _Slice:
    """The raw fields of the slice's first ``count`` records, every one accepted by decode_record."""

    count: int
    starts: np.ndarray  # int64 position in the file
    total: np.ndarray
    magic: np.ndarray
    crc: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    phys: np.ndarray
    sys_flag: np.ndarray
    born_ts: np.ndarray
    store_ts: np.ndarray
    reconsume: np.ndarray
    prepared: np.ndarray  # PREPARED_TRANSACTION_OFFSET, right after the reconsume times
    body_len: np.ndarray
    born_host: tuple[np.ndarray, np.ndarray]  # v4 key (address << 32 | port) and v6 20-byte rows
    store_host: tuple[np.ndarray, np.ndarray]
    v6_born: np.ndarray
    v6_store: np.ndarray
    topic: pa.Array  # binary, valid UTF-8
    properties: pa.Array  # binary, valid UTF-8
    prop_crc_bad: list  # (row, stored, computed) of each 5.x __CRC32# tail that does not match


def _read_slice(buf, limit: int, starts: np.ndarray, check_crc: bool) -> _Slice:
    """Check the records at ``starts`` as decode_record does and copy out the accepted prefix.

    Nothing returned refers to ``buf``, so the mapping can close once this returns.
    """
    i8 = _strided(buf, limit, ">i8")
    i4 = _strided(buf, limit, ">i4")
    i2 = _strided(buf, limit, ">i2")
    u1 = np.frombuffer(buf, dtype=np.uint8, count=limit)
    try:
        return _check_and_copy(buf, limit, starts, check_crc, i8, i4, i2, u1)
    finally:
        # A traceback keeps frames alive; views of the mapping in them would stop it closing.
        del i8, i4, i2, u1


def _check_and_copy(buf, limit, p, check_crc, i8, i4, i2, u1) -> _Slice:
    def at(view, offsets):
        """Gather where a damaged record's fields may point anywhere (its values are not used)."""
        return view[np.minimum(offsets, len(view) - 1)]

    # The walk saw at least _MIN_TOTAL bytes at each start: the first fields are there.
    total = i4[p + _TOTAL].astype(np.int32)
    magic = i4[p + _MAGIC].astype(np.int64) & 0xFFFFFFFF
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    topic_len_bytes = 1 + v2.astype(np.int64)
    sys_flag = i4[p + _SYSFLAG].astype(np.int32)
    v6_born = (sys_flag & SYSFLAG_BORNHOST_V6) != 0
    v6_store = (sys_flag & SYSFLAG_STOREHOST_V6) != 0
    born_extra = v6_born * _HOST_V6_EXTRA
    hosts_extra = born_extra + v6_store * _HOST_V6_EXTRA
    header = _HEADER_V4 + hosts_extra
    fixed = header + topic_len_bytes + _PROPS_LEN_BYTES
    end = p + total
    bad = (total < _HEADER_V4 + topic_len_bytes + _PROPS_LEN_BYTES) | (total < fixed)
    body_len = at(i4, p + header - 4).astype(np.int64)
    bad |= (body_len < 0) | (body_len > total - fixed)
    topic_len_at = p + header + np.where(bad, 0, body_len)
    topic_len = np.where(v2, at(i2, topic_len_at), at(u1, topic_len_at)).astype(np.int64)
    bad |= np.where(v2, topic_len < 0, topic_len > TOPIC_LENGTH_V1_BYTES_MAX)
    topic_at = topic_len_at + topic_len_bytes
    props_len_at = topic_at + topic_len
    bad |= props_len_at + _PROPS_LEN_BYTES > end
    props_len = at(i2, np.where(bad, p, props_len_at)).astype(np.int64)
    bad |= (props_len < 0) | (props_len_at + _PROPS_LEN_BYTES + props_len != end)
    count = _first(bad)

    crc = i4[p[:count] + _CRC].astype(np.int32)
    if check_crc:
        body_at = (p[:count] + header[:count]).tolist()
        body_end = (p[:count] + header[:count] + body_len[:count]).tolist()
        with memoryview(buf) as view:
            # map() all the way: no Python frame per body
            computed = np.array(list(map(zlib.crc32, map(view.__getitem__, map(slice, body_at, body_end)))),
                                dtype=np.int64) & 0x7FFFFFFF
        count = _first((computed != crc) & (body_len[:count] > 0), count)

    # Topic and properties: the slice's bytes cut at each record's topic and properties bounds,
    # as one binary array over the mapping (no copy), then the wanted pieces taken out.
    topic, props = _pieces(buf, p[:count], topic_at[:count], props_len_at[:count], end[:count])
    bad_text = _bad_text(topic, props)
    if bad_text < count:
        count = bad_text
        topic, props = topic.slice(0, count), props.slice(0, count)

    sl = slice(0, count)
    q = p[sl]
    # 5.x __CRC32# tails: spotted by their fixed bytes, then checked one by one as the reference does.
    tail_at = end[sl] - codec.PROP_CRC_RESERVED_BYTES
    tailed = np.flatnonzero((tail_at >= q) & (at(i8, np.maximum(tail_at, 0)) == _PROP_CRC_HEAD)
                            & (at(u1, np.maximum(tail_at, 0) + 8) == 1) & (at(u1, end[sl] - 1) == 2))
    prop_crc_bad = []
    for row in tailed.tolist():
        values = codec.property_crc_values(buf, int(q[row]), int(end[row]))
        if values is not None and values[0] != values[1]:
            prop_crc_bad.append((row, *values))
    born_at = q + _BORN_HOST
    store_at = q + _BORN_TS + 16 + born_extra[sl]  # store time: after born time and born host
    return _Slice(
        count=count, starts=q.copy(), total=total[sl], magic=magic[sl], crc=crc[sl],
        queue_id=i4[q + _QUEUE_ID].astype(np.int32), queue_offset=i8[q + _QUEUE_OFFSET].astype(np.int64),
        phys=i8[q + _PHYS].astype(np.int64), sys_flag=sys_flag[sl],
        born_ts=i8[q + _BORN_TS].astype(np.int64), store_ts=i8[store_at].astype(np.int64),
        reconsume=i4[q + _AFTER_HOSTS + hosts_extra[sl]].astype(np.int32),
        prepared=i8[q + _AFTER_HOSTS + 4 + hosts_extra[sl]].astype(np.int64), body_len=body_len[sl],
        born_host=_host_keys(i4, u1, born_at, v6_born[sl]),
        store_host=_host_keys(i4, u1, store_at + 8, v6_store[sl]),
        v6_born=v6_born[sl], v6_store=v6_store[sl], topic=topic, properties=props, prop_crc_bad=prop_crc_bad)


def _any_nonzero(path, start: int, end: int) -> bool:
    """Whether bytes ``[start, end)`` of the file hold a non-zero byte (True when unreadable).

    Read into one buffer rather than through the mapping: faulting in tens of MiB of mapped
    zeros page by page costs several times the copy.
    """
    piece = bytearray(min(SLICE_BYTES, end - start))
    try:
        with open(path, "rb", buffering=0) as fh:
            fh.seek(start)
            while start < end:
                got = fh.readinto(memoryview(piece)[:min(len(piece), end - start)])
                if not got or np.count_nonzero(np.frombuffer(piece, dtype=np.uint8, count=got)):
                    return True
                start += got
    except OSError:
        return True
    return False


def _strided(buf, limit: int, dtype: str) -> np.ndarray:
    """A view whose element ``i`` is the big-endian number in the ``dtype``'s bytes at byte ``i``."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((max(0, limit - width + 1),), dtype=dtype, buffer=buf, offset=0, strides=(1,))


def _first(bad: np.ndarray, count: int | None = None) -> int:
    """Index of the first True in ``bad`` (its length, or ``count``, when there is none)."""
    hits = np.flatnonzero(bad)
    n = len(bad) if count is None else count
    return int(hits[0]) if len(hits) and hits[0] < n else n


def _host_keys(i4, u1, at: np.ndarray, v6: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hosts as sortable keys: (address << 32 | port) for v4 rows; 20 raw bytes for v6 rows."""
    address = i4[at].astype(np.int64) & 0xFFFFFFFF
    port = i4[at + 4].astype(np.int64) & 0xFFFFFFFF
    keys = (address << 32 | port).astype(np.uint64)
    rows6 = np.flatnonzero(v6)
    raw6 = u1[at[rows6, None] + np.arange(20)] if len(rows6) else np.empty((0, 20), np.uint8)
    return keys, raw6


def _pieces(buf, starts, topic_at, props_at, end) -> tuple[pa.Array, pa.Array]:
    """Topic and properties of consecutive records, as binary arrays of their own."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary()), pa.array([], pa.binary())
    base = int(starts[0])
    bounds = np.empty(4 * n + 1, dtype=np.int64)
    # Piece 4k runs from the end of record k-1 (a DLedger entry's header lies between records).
    bounds[0] = starts[0]
    bounds[4:-1:4] = end[:-1]
    bounds[1::4] = topic_at
    bounds[2::4] = props_at
    bounds[3::4] = props_at + _PROPS_LEN_BYTES
    bounds[-1] = end[-1]
    bounds -= base
    whole = pa.py_buffer(buf)
    try:
        cut = pa.Array.from_buffers(pa.binary(), 4 * n, [None, pa.py_buffer(bounds.astype(np.int32)),
                                                         whole.slice(base, int(end[-1]) - base)])
        pieces = np.arange(1, 4 * n, 4)
        return cut.take(pieces), cut.take(pieces + 2)
    finally:
        del whole


def _values(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data bytes) of a binary or string array with no nulls and no slice offset."""
    _, offsets, data = values.buffers()
    n, skip = len(values), values.offset
    offs = np.frombuffer(offsets, dtype=np.int32, count=n + 1 + skip)[skip:]
    return offs, (np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8))


def _bad_text(topic: pa.Array, props: pa.Array) -> int:
    """Index of the first record whose topic or properties decode_record refuses, else the count.

    Refused: not UTF-8, a NUL inside the topic, properties ending in NUL (a torn write).
    """
    n = len(topic)
    bad = np.zeros(n, dtype=bool)
    for text in (topic, props):
        offs, data = _values(text)
        non_ascii = np.flatnonzero(data[offs[0]:offs[-1]] >= 0x80) + offs[0]
        if len(non_ascii):
            rows = np.unique(np.searchsorted(offs, non_ascii, side="right") - 1)
            for row in rows.tolist():
                try:
                    bytes(data[offs[row]:offs[row + 1]]).decode("utf-8")
                except UnicodeDecodeError:
                    bad[row] = True
        if text is topic:
            nul = np.flatnonzero(data[offs[0]:offs[-1]] == 0) + offs[0]
            bad[np.searchsorted(offs, nul, side="right") - 1] = True
        else:
            ends = offs[1:]
            bad |= (ends > offs[:-1]) & (data[np.maximum(ends - 1, 0)] == 0) if len(data) else False
    return _first(bad)


class _HostNames:
    """Host strings and message-id prefixes, each computed once per distinct address."""

    def __init__(self):
        self.by_key: dict[int | bytes, str] = {}
        self.prefix: dict[str, str] = {}

    def column(self, keys: np.ndarray, raw6: np.ndarray, v6: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(distinct host strings, each row's index into them)."""
        index = np.empty(len(keys), dtype=np.int64)
        rows4 = np.flatnonzero(~v6)
        names: list[str] = []
        if len(rows4):
            distinct, inverse = np.unique(keys[rows4], return_inverse=True)
            names = [self._v4(key) for key in distinct.tolist()]
            index[rows4] = inverse.reshape(-1)
        position: dict[str, int] = {}
        for row, raw in zip(np.flatnonzero(v6).tolist(), raw6, strict=True):
            key = raw.tobytes()
            name = self.by_key.get(key)
            if name is None:
                name = self.by_key[key] = bytes_to_host(key[:16], int.from_bytes(key[16:], "big", signed=True))
            if name not in position:
                position[name] = len(names)
                names.append(name)
            index[row] = position[name]
        return names, index

    def _v4(self, key: int) -> str:
        name = self.by_key.get(key)
        if name is None:
            port = key & 0xFFFFFFFF
            name = self.by_key[key] = bytes_to_host((key >> 32).to_bytes(4, "big"),
                                                    port - (1 << 32) if port >= 1 << 31 else port)
        return name

    def msg_id_prefix(self, host: str) -> str:
        """The store-host part of an offset message id (raises as create_message_id does)."""
        prefix = self.prefix.get(host)
        if prefix is None:
            prefix = self.prefix[host] = create_message_id(host, 0)[:-_MSG_ID_OFFSET_HEX_CHARS]
        return prefix


def _columns(raw: _Slice, file_name: str, hosts: _HostNames) -> tuple[dict[str, pa.Array], list]:
    """The slice's commitlog columns (all but run_id and broker), and the values they cannot hold.

    The second item lists ``(rank, (row, what, value))``: rank 1 and 2 a born or store host whose
    port is outside 0..PORT_MAX (what: the role, value: the host), rank 3 on a numeric property
    past int32 (what: the property, value: its text), ranked in :data:`INT_PROPERTIES` order.
    """
    n = raw.count
    born_names, born_index = hosts.column(*raw.born_host, raw.v6_born)
    store_names, store_index = hosts.column(*raw.store_host, raw.v6_store)
    # Prefixes in the order rows first use the hosts, so a store port create_message_id refuses
    # raises for the same host as in the reference.
    prefixes = [""] * len(store_names)
    used, first_row = np.unique(store_index, return_index=True)
    for host in used[np.argsort(first_row, kind="stable")].tolist():
        prefixes[host] = hosts.msg_id_prefix(store_names[host])
    columns = {
        "phys_offset": pa.array(raw.phys, pa.int64()),
        "total_size": pa.array(raw.total, pa.int32()),
        "topic": raw.topic.view(pa.string()),
        "queue_id": pa.array(raw.queue_id, pa.int32()),
        "queue_offset": pa.array(raw.queue_offset, pa.int64()),
        "msg_id": _msg_ids(prefixes, store_index, raw.phys),
        "reconsume_times": pa.array(raw.reconsume, pa.int32()),
        "body_size": pa.array(raw.body_len.astype(np.int32), pa.int32()),
        "body_crc": pa.array(raw.crc, pa.int32()),
        "sys_flag": pa.array(raw.sys_flag, pa.int32()),
        "prepared_tx_offset": pa.array(raw.prepared, pa.int64()),
        "born_ts": _timestamps(raw.born_ts),
        "born_host": pa.array(born_names, pa.string()).take(pa.array(born_index)),
        "store_ts": _timestamps(raw.store_ts),
        "store_host": pa.array(store_names, pa.string()).take(pa.array(store_index)),
        "magic": pa.array([_MAGIC_NAMES[MESSAGE_MAGIC_CODE_V1], _MAGIC_NAMES[MESSAGE_MAGIC_CODE_V2]],
                          pa.string()).take(pa.array((raw.magic == MESSAGE_MAGIC_CODE_V2).astype(np.int8))),
        "file_name": _repeat_string(file_name, n),
    }
    properties, past_int32 = _properties(raw.properties)
    columns.update(properties)
    odd: list = []
    for rank, (role, (keys, raw6), v6) in enumerate(zip(HOST_ROLES, (raw.born_host, raw.store_host),
                                                        (raw.v6_born, raw.v6_store), strict=True), 1):
        port = (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)  # the int32 read unsigned: negatives are big
        if len(raw6):
            port[np.flatnonzero(v6)] = raw6[:, 16:20].copy().view(">u4").reshape(-1)
        rows = np.flatnonzero(port > PORT_MAX).tolist()
        if rows:
            names = columns[f"{role}_host"].take(pa.array(rows)).to_pylist()
            odd.extend((rank, (row, role, name)) for row, name in zip(rows, names, strict=True))
    for key, rows in past_int32:
        odd.extend((len(HOST_ROLES) + 1 + INT_PROPERTIES.index(key), (row, key, text)) for row, text in rows)
    return columns, odd


def _timestamps(ms: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(COMMITLOG.field("born_ts").type, len(ms),
                                 [None, pa.py_buffer(np.ascontiguousarray(ms, dtype=np.int64))])


def _repeat_string(value: str, n: int) -> pa.Array:
    data = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def _msg_ids(prefixes: list[str], store_index: np.ndarray, phys: np.ndarray) -> pa.Array:
    """Store-host prefix + the physical offset as 16 upper-case hex digits (two's complement)."""
    n = len(phys)
    digits = _HEX_PAIRS[phys.astype(">i8").view(np.uint8)]  # two hex digits per big-endian byte
    offsets = np.arange(n + 1, dtype=np.int32) * _MSG_ID_OFFSET_HEX_CHARS
    hex_part = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(digits)])
    prefix = pa.array(prefixes, pa.string()).take(pa.array(store_index))
    return pc.binary_join_element_wise(prefix, hex_part, "")


def _properties(props: pa.Array) -> tuple[dict[str, pa.Array], list]:
    """``string_to_properties`` of every record: the map column and the extracted columns, and
    ``(property, [(row, text), ...])`` for the numeric values past int32 (left as absent).

    A segment between ``\\x02`` separators is kept when it has a non-empty key before its first
    ``\\x01`` and a non-empty value after it; a repeated key keeps its first place and last value.
    """
    n = len(props)
    offs, data = _values(props)
    offs = offs.astype(np.int64)
    data = data[:offs[-1]]
    seps = np.flatnonzero(data == 2)
    seps = seps[seps >= offs[0]]
    sep_row = np.searchsorted(offs, seps, side="right") - 1
    seg_counts = np.bincount(sep_row, minlength=n) + 1
    seg_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(seg_counts, out=seg_offsets[1:])
    segments = int(seg_offsets[-1])
    # Separator k (in byte order) ends segment sep_row[k] + k and starts the next one.
    ends_at_sep = sep_row + np.arange(len(seps))
    seg_start = np.empty(segments, dtype=np.int64)
    seg_start[seg_offsets[:-1]] = offs[:-1]
    seg_start[ends_at_sep + 1] = seps + 1
    seg_end = np.empty(segments, dtype=np.int64)
    seg_end[seg_offsets[1:] - 1] = offs[1:]
    seg_end[ends_at_sep] = seps
    # A segment's split is its first \x01 (if it comes before the segment's end).
    ones = np.flatnonzero(data == 1)
    ones = ones[ones >= offs[0]]
    nxt = np.searchsorted(ones, seg_start)
    split = ones[np.minimum(nxt, len(ones) - 1)] if len(ones) else np.zeros(segments, dtype=np.int64)
    kept = np.flatnonzero((nxt < len(ones)) & (split > seg_start) & (split + 1 < seg_end))
    entry_row = np.repeat(np.arange(n), seg_counts)[kept]

    # Cut the data at each kept segment's start, split and end: key, \x01, value, and whatever
    # lies before the next kept segment. Keys and values are taken out of this one zero-copy array.
    bounds = np.empty(4 * len(kept) + 1, dtype=np.int64)
    bounds[0:-1:4] = seg_start[kept]
    bounds[1::4] = split[kept]
    bounds[2::4] = split[kept] + 1
    bounds[3::4] = seg_end[kept]
    bounds[-1] = bounds[-2] if len(kept) else 0
    cut = pa.Array.from_buffers(pa.string(), len(bounds) - 1,
                                [None, pa.py_buffer(bounds.astype(np.int32)), props.buffers()[2]])
    key_piece = np.arange(0, 4 * len(kept), 4)
    value_piece = key_piece + 2

    keys = cut.take(pa.array(key_piece))
    encoded = pc.dictionary_encode(keys)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    dictionary = encoded.dictionary.to_pylist()
    key_take, value_take = _last_value_first_place(entry_row, codes, len(dictionary), n)
    if key_take is not None:
        entry_row, codes = entry_row[key_take], codes[key_take]
        key_piece, value_piece = key_piece[key_take], value_piece[value_take]
        keys = cut.take(pa.array(key_piece))
    values = cut.take(pa.array(value_piece))
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(entry_row, minlength=n), out=map_offsets[1:])
    out = {"properties": pa.MapArray.from_arrays(pa.array(map_offsets), keys, values,
                                                 type=COMMITLOG.field("properties").type)}

    # Each entry's extracted column (or -1), then one row of entry indexes per column.
    wanted = list(_EXTRACTED.values())
    column_of = np.array([wanted.index(key) if key in wanted else -1 for key in dictionary] + [-1],
                         dtype=np.int64)[codes]
    hit = np.flatnonzero(column_of >= 0)
    take = np.full((len(wanted), n), -1, dtype=np.int64)
    take[column_of[hit], entry_row[hit]] = hit
    present = np.bincount(column_of[hit], minlength=len(wanted))
    flat = take.ravel()
    texts = values.take(pa.array(flat, mask=flat < 0))  # every extracted column in one take
    past_int32: list = []
    for slot, column in enumerate(_EXTRACTED):
        if not present[slot]:
            default = _INT_DEFAULTS.get(column)
            out[column] = (pa.nulls(n, pa.string()) if column not in _INT_DEFAULTS else
                           pa.nulls(n, pa.int32()) if default is None else
                           pa.array(np.full(n, default, dtype=np.int32), pa.int32()))
            continue
        mine = texts.slice(slot * n, n)
        if column in _INT_DEFAULTS:
            out[column], past = _ints(mine, _INT_DEFAULTS[column])
            if past:
                past_int32.append((_EXTRACTED[column], past))
        else:
            out[column] = mine
    return out, past_int32


def _last_value_first_place(entry_row, codes, distinct: int, n: int):
    """Which entries a dict fill keeps when a row repeats a key: (key entries, value entries).

    None, None when no row repeats a key (the usual case).
    """
    if len(codes) == 0:
        return None, None
    if n * distinct <= 1 << 24:
        repeated = np.flatnonzero(np.bincount(entry_row * distinct + codes, minlength=n * distinct) > 1)
    else:
        pairs = np.sort(entry_row * distinct + codes)
        repeated = np.unique(pairs[1:][pairs[1:] == pairs[:-1]])
    if len(repeated) == 0:
        return None, None
    rows = np.unique(repeated // distinct)
    keep = np.ones(len(codes), dtype=bool)
    value_of = np.arange(len(codes))
    starts = np.searchsorted(entry_row, rows)
    ends = np.searchsorted(entry_row, rows, side="right")
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        first: dict[int, int] = {}
        for entry in range(lo, hi):
            code = int(codes[entry])
            if code in first:
                keep[entry] = False
                value_of[first[code]] = entry
            else:
                first[code] = entry
    kept = np.flatnonzero(keep)
    return kept, value_of[kept]


def _ints(texts: pa.Array, default: int | None) -> tuple[pa.Array, list[tuple[int, str]]]:
    """``codec._int_or`` of each text: Python's int(), the default when absent, not a number or
    past int32; and ``(row, text)`` of each number past int32."""
    plain = pc.fill_null(pc.match_substring_regex(texts, _PLAIN_INT), False)
    if pc.all(pc.or_(plain, pc.is_null(texts))).as_py():
        ints = pc.cast(texts, pa.int32())
        return (ints if default is None else pc.fill_null(ints, default)), []
    values = []
    past: list[tuple[int, str]] = []
    for row, text in enumerate(texts.to_pylist()):
        value = parse_int_property(text)
        if value is not None and not JAVA_INT_MIN <= value <= JAVA_INT_MAX:
            past.append((row, text))
            value = None
        values.append(default if value is None else value)
    return pa.array(values, pa.int32()), past


class CommitlogWriter:
    """Writes commitlog tables (or another table's, ``schema``) into ``<parquet_dir>/<table>/<part>``.

    Row groups are :data:`ROW_GROUP_ROWS` rows, as :class:`~broker_core.export.parquet.TableWriter`
    writes them, so the file holds the same row groups whichever decoder filled it. Each is encoded
    while the caller decodes the next (:class:`~broker_core.export.parquet.EncodingWriter`).
    """

    def __init__(self, parquet_dir, table: str = "commitlog", part: str = DEFAULT_PART,
                 schema: pa.Schema = COMMITLOG):
        self.schema = schema
        self.dir = parquet_dir / table
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / part
        self._writer: EncodingWriter | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.rows_written = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            whole = pa.concat_tables(self._pending)
            cut = whole.num_rows - whole.num_rows % ROW_GROUP_ROWS
            for start in range(0, cut, ROW_GROUP_ROWS):
                self._write(whole.slice(start, ROW_GROUP_ROWS))
            rest = whole.slice(cut)
            self._pending = [rest] if rest.num_rows else []
            self._pending_rows = rest.num_rows

    def _write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._writer = EncodingWriter(self.path, self.schema, compression=COMPRESSION)
        self._writer.write_table(table.combine_chunks())
        self.rows_written += table.num_rows

    def close(self) -> int:
        """Write what is pending; an empty table still gets a file with its schema."""
        if self._pending_rows:
            self._write(pa.concat_tables(self._pending))
        self._pending = []
        if self._writer is None:
            pq.write_table(self.schema.empty_table(), self.path, compression=COMPRESSION)
        else:
            self._writer.close()
        return self.rows_written
