"""Commit-log records in RocketMQ's on-disk layout: encode, decode, iterate one file.

The layout is ``CommitLog.MessageExtEncoder`` / ``checkMessageAndReturnSize`` (4.9.4) plus the
5.x v2 magic (2-byte topic length). Bytes are exact: encoding the fields a 4.9.4 broker decodes
gives back the same record. Decoding distinguishes three outcomes the way RocketMQ's recovery
does: a record (or an end-of-file BLANK), ``None`` where no record starts (zeros or an unknown
magic: the end of the valid data), and :class:`CorruptRecordError` for a record that starts
with a valid magic but is damaged.

Choices where RocketMQ gives none:

* Topic and properties must be valid UTF-8 when decoded. Java decodes with replacement
  characters, but a broker only ever writes ``String.getBytes(UTF_8)`` output, which is always
  valid, so invalid bytes mean damage: :class:`CorruptRecordError`.
* The V6 sysFlag bits (0x10 born host, 0x20 store host) are derived from the host strings on
  encode, as the broker does from the address type; the bits in ``Record.sys_flag`` are replaced.
* Properties keep the decoded order; malformed segments (no key or no value) are dropped by the
  parse as in ``string2messageProperties``, so only well-formed property strings re-encode to
  the same bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker_core.constants import (
    BLANK_MAGIC_CODE,
    BODY_SIZE_BYTES_MAX,
    END_FILE_MIN_BLANK_LENGTH_BYTES,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTIES_LENGTH_BYTES_MAX,
    PROPERTY_SEPARATOR,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_TYPE_MASK,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_MASK,
    TOPIC_LENGTH_V1_BYTES_MAX,
    TOPIC_LENGTH_V2_BYTES_MAX,
)
from broker_core.errors import BadInputError, CorruptRecordError
from broker_core.message import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
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
    body_crc,
    bytes_to_host,
    create_message_id,
    host_to_bytes,
    properties_to_string,
    string_to_properties,
)

# The record header (MessageExtEncoder, §1.2): every field up to the body length, in this order:
# total size, magic, body CRC, queue id, flag, queue offset, physical offset, sysFlag, born
# timestamp, born host, store timestamp, store host, reconsume times, prepared transaction offset,
# body length. A host is its 4 (IPv4) or 16 (IPv6) address bytes and an int32 port; the sysFlag
# bits 0x10 / 0x20 say which. This module owns the layout: the store's append path, the readers'
# peeks at a file's first record and the columnar decoder take the struct and positions from here.
_HEAD_BEFORE_BORN_HOST = ">iIiiiqqiq"  # total size .. born timestamp
_HEAD_AFTER_STORE_HOST = "iqi"  # reconsume times, prepared transaction offset, body length
TOTAL_SIZE_POS = 0
MAGIC_POS = 4
BODY_CRC_POS = 8
QUEUE_ID_POS = 12
QUEUE_OFFSET_POS = 20
PHYS_OFFSET_POS = 28
SYSFLAG_POS = 36
BORN_TS_POS = 40
BORN_HOST_POS = 48
assert struct.calcsize(_HEAD_BEFORE_BORN_HOST) == BORN_HOST_POS
HOST_V4_BYTES = 8  # 4 address bytes + int32 port
HOST_V6_BYTES = 20  # 16 address bytes + int32 port
# Everything but the variable parts: 84 bytes up to the body length with two IPv4 hosts,
# then int32 body length; the topic length (1 or 2) and int16 properties length come after.
RECORD_FIXED_V4_BYTES = 88
PROPERTIES_LENGTH_FIELD_BYTES = 2
PROPERTIES_LENGTH = struct.Struct(">h")
assert PROPERTIES_LENGTH.size == PROPERTIES_LENGTH_FIELD_BYTES
# The bytes of a file's first record that hold its store timestamp, whatever its born host.
FIRST_RECORD_HEAD_BYTES = BORN_HOST_POS + HOST_V6_BYTES + 8
COMPRESSION_TYPE_SHIFT = 8
COMPRESSION_ZLIB_LEGACY = 0  # CompressionType.findByValue(0) reads as ZLIB
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3

_SIZE_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_MAGIC_BYTES = tuple(m.to_bytes(4, "big") for m in
                     (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE))


def record_header_struct(born_v6: bool, store_v6: bool, *, hosts_packed: bool = False) -> struct.Struct:
    """The header struct for a pair of host kinds.

    By default each host is two fields, its address bytes and its port (what a decode wants).
    With ``hosts_packed`` each host is one bytes field, address and port together as
    :func:`host_field` makes it: the append path packs a host once and reuses it, and a field
    packed is a fixed cost on every record.
    """
    if hosts_packed:
        born = f"{HOST_V6_BYTES if born_v6 else HOST_V4_BYTES}s"
        store = f"{HOST_V6_BYTES if store_v6 else HOST_V4_BYTES}s"
    else:
        born = "16si" if born_v6 else "4si"
        store = "16si" if store_v6 else "4si"
    return struct.Struct(f"{_HEAD_BEFORE_BORN_HOST}{born}q{store}{_HEAD_AFTER_STORE_HOST}")


# Indexed by (sys_flag >> 4) & 3: bit 0 born host v6, bit 1 store host v6.
RECORD_HEADERS = tuple(record_header_struct(bool(i & 1), bool(i & 2)) for i in range(4))
RECORD_HEADERS_HOSTS_PACKED = tuple(record_header_struct(bool(i & 1), bool(i & 2), hosts_packed=True)
                                    for i in range(4))
assert RECORD_HEADERS[0].size == RECORD_FIXED_V4_BYTES


def host_field(host: str) -> bytes:
    """A record's host field: the 4 or 16 address bytes, then the port as a Java int."""
    addr, port = host_to_bytes(host)
    return addr + _I32.pack(port)


def store_ts_position(sys_flag: int) -> int:
    """Where the store timestamp starts: right after the born host, 8 or 20 bytes by sysFlag."""
    return BORN_HOST_POS + (HOST_V6_BYTES if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_BYTES)


def record_head_bytes(sys_flag: int) -> int:
    """A record's fixed header up to and including its store timestamp: TOTALSIZE, MAGIC, BODYCRC,
    QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP
    (64 bytes, 76 with an IPv6 born host)."""
    return store_ts_position(sys_flag) + 8


def peek_magic_and_store_ts(head: bytes) -> tuple[int, int] | None:
    """(magic, store timestamp) from a record's first bytes, None when too few to hold them.

    Recovery reads these from each file's first record without decoding it
    (``isMappedFileMatchedRecover``); the caller decides which magics it accepts.
    """
    if len(head) < SYSFLAG_POS + 4:
        return None
    (magic,) = _I32.unpack_from(head, MAGIC_POS)
    (sys_flag,) = _I32.unpack_from(head, SYSFLAG_POS)
    at = store_ts_position(sys_flag)
    if at + 8 > len(head):
        return None
    return magic & 0xFFFFFFFF, _I64.unpack_from(head, at)[0]


def encode_topic_field(topic: str, magic: int = MESSAGE_MAGIC_CODE_V1) -> bytes:
    """The topic's length (1 byte in a v1 record, 2 in v2) and its UTF-8 bytes."""
    raw = topic.encode("utf-8")
    if magic == MESSAGE_MAGIC_CODE_V1:
        if len(raw) > TOPIC_LENGTH_V1_BYTES_MAX:
            raise RecordTooLargeError(
                f"topic of {len(raw)} UTF-8 bytes exceeds {TOPIC_LENGTH_V1_BYTES_MAX} (v1 record)",
                part="topic", where=f"topic {topic[:40]}")
        return bytes((len(raw),)) + raw
    if magic == MESSAGE_MAGIC_CODE_V2:
        if len(raw) > TOPIC_LENGTH_V2_BYTES_MAX:
            raise RecordTooLargeError(
                f"topic of {len(raw)} UTF-8 bytes exceeds {TOPIC_LENGTH_V2_BYTES_MAX} (v2 record)",
                part="topic", where=f"topic {topic[:40]}")
        return _I16.pack(len(raw)) + raw
    raise BadInputError(f"unknown record magic {magic:#x}", where=f"topic {topic}")


class RecordTooLargeError(BadInputError):
    """A record to encode breaks a size limit of the format; ``part`` is topic, properties or body."""

    def __init__(self, message: str, *, part: str, where: str | None = None):
        self.part = part
        super().__init__(message, where=where)


@dataclass(frozen=True, slots=True)
class Blank:
    """An END_OF_FILE record: ``size`` bytes from here to the end of the file are filler."""

    size: int


@dataclass(slots=True)
class Record:
    """One commit-log record with every stored field (``body`` as stored, maybe compressed)."""

    topic: str
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_ts: int
    born_host: str
    store_ts: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = -1  # -1: compute on encode; otherwise must match the body
    total_size: int = 0  # 0: compute on encode; otherwise must match the encoded length
    magic: int = MESSAGE_MAGIC_CODE_V1
    # 5.x writes a trailing \x02 after the last property; 4.9.4 does not.
    properties_trailing_separator: bool = False

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROP_UNIQ_KEY)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROP_KEYS)

    @property
    def delay_level(self) -> int:
        """The DELAY property; 0 when absent or not a number."""
        return _int_or(self.properties.get(PROP_DELAY), 0)

    @property
    def real_topic(self) -> str | None:
        return self.properties.get(PROP_REAL_TOPIC)

    @property
    def real_queue_id(self) -> int | None:
        return _int_or(self.properties.get(PROP_REAL_QID), None)

    @property
    def retry_topic(self) -> str | None:
        return self.properties.get(PROP_RETRY_TOPIC)

    @property
    def origin_msg_id(self) -> str | None:
        return self.properties.get(PROP_ORIGIN_MESSAGE_ID)

    @property
    def max_reconsume_times(self) -> int | None:
        return _int_or(self.properties.get(PROP_MAX_RECONSUME_TIMES), None)

    @property
    def msg_id(self) -> str:
        """The offset message id: store host + physical offset."""
        return create_message_id(self.store_host, self.phys_offset)

    @property
    def is_compressed(self) -> bool:
        return bool(self.sys_flag & SYSFLAG_COMPRESSED)

    @property
    def transaction_type(self) -> int:
        """``sys_flag & 0xC``: NOT 0, PREPARED 4, COMMIT 8, ROLLBACK 12."""
        return self.sys_flag & SYSFLAG_TRANSACTION_MASK

    def decompressed_body(self) -> bytes:
        """The body a consumer sees: inflated when COMPRESSED_FLAG is set (zlib only)."""
        if not self.is_compressed:
            return self.body
        kind = (self.sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT
        where = f"phys offset {self.phys_offset}"
        if kind in (COMPRESSION_LZ4, COMPRESSION_ZSTD):
            name = "LZ4" if kind == COMPRESSION_LZ4 else "ZSTD"
            raise CorruptRecordError(
                f"body is {name}-compressed; decompressing it needs a library this tool does not ship",
                where=where)
        if kind not in (COMPRESSION_ZLIB, COMPRESSION_ZLIB_LEGACY):
            raise CorruptRecordError(f"unknown compression type {kind} in sysFlag {self.sys_flag:#x}",
                                     where=where)
        try:
            return zlib.decompress(self.body)
        except zlib.error as exc:
            raise CorruptRecordError(f"zlib body does not inflate: {exc}", where=where) from None


def _int_or(text: str | None, default):
    """The property as a number, else ``default``: absent, not a number, or outside the Java int
    the broker parses it into (``Integer.parseInt``) and the contract's int32 column holds."""
    value = parse_int_property(text)
    return value if value is not None and JAVA_INT_MIN <= value <= JAVA_INT_MAX else default


def parse_int_property(text: str | None) -> int | None:
    """A numeric property's value as Python's int() reads it; None when absent or not a number."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def int_property_out_of_range(text: str | None) -> bool:
    """Whether a numeric property holds a number that does not fit a Java int."""
    value = parse_int_property(text)
    return value is not None and not JAVA_INT_MIN <= value <= JAVA_INT_MAX


# --- encode ------------------------------------------------------------------------------------

def encode_for_append(rec: Record) -> bytearray:
    """Encode ``rec`` into a fresh buffer; :func:`patch_append` can then set the append-time fields."""
    born_addr, born_port = host_to_bytes(rec.born_host)
    store_addr, store_port = host_to_bytes(rec.store_host)
    v6_bits = (SYSFLAG_BORNHOST_V6 if len(born_addr) == 16 else 0) | (
        SYSFLAG_STOREHOST_V6 if len(store_addr) == 16 else 0)
    sys_flag = (rec.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)) | v6_bits
    header = RECORD_HEADERS[v6_bits >> 4]

    body = rec.body
    if len(body) > BODY_SIZE_BYTES_MAX:
        raise RecordTooLargeError(f"body of {len(body)} bytes exceeds {BODY_SIZE_BYTES_MAX}",
                                  part="body", where=f"topic {rec.topic}")
    crc = body_crc(body) if body else 0
    if rec.body_crc not in (-1, crc):
        raise BadInputError(f"body_crc {rec.body_crc} does not match the body (CRC {crc})",
                            where=f"topic {rec.topic}")
    topic_field = encode_topic_field(rec.topic, rec.magic)
    props = properties_to_string(rec.properties,
                                 trailing_separator=rec.properties_trailing_separator).encode("utf-8")
    if len(props) > PROPERTIES_LENGTH_BYTES_MAX:
        raise RecordTooLargeError(
            f"properties of {len(props)} bytes exceed {PROPERTIES_LENGTH_BYTES_MAX}",
            part="properties", where=f"topic {rec.topic}")

    total = header.size + len(body) + len(topic_field) + PROPERTIES_LENGTH_FIELD_BYTES + len(props)
    if rec.total_size not in (0, total):
        raise BadInputError(f"total_size {rec.total_size} does not match the encoded length {total}",
                            where=f"topic {rec.topic}")
    buf = bytearray(total)
    try:
        header.pack_into(buf, 0, total, rec.magic, crc, rec.queue_id, rec.flag, rec.queue_offset,
                         rec.phys_offset, sys_flag, rec.born_ts, born_addr, born_port, rec.store_ts,
                         store_addr, store_port, rec.reconsume_times, rec.prepared_tx_offset,
                         len(body))
    except struct.error as exc:
        raise BadInputError(f"a record field is out of its Java type's range: {exc}",
                            where=f"topic {rec.topic}") from None
    pos = header.size
    end = pos + len(body)
    buf[pos:end] = body
    pos, end = end, end + len(topic_field)
    buf[pos:end] = topic_field
    PROPERTIES_LENGTH.pack_into(buf, end, len(props))
    buf[end + PROPERTIES_LENGTH_FIELD_BYTES:] = props
    return buf


def encode_record(rec: Record) -> bytes:
    """The exact bytes RocketMQ stores for ``rec`` (v1, or v2 when ``rec.magic`` says so)."""
    return bytes(encode_for_append(rec))


def patch_append(buf: bytearray, queue_offset: int, phys_offset: int, store_ts: int,
                 pos: int = 0) -> None:
    """Write the three fields ``doAppend`` sets inside the lock into the record at ``pos``."""
    _I64.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset)
    _I64.pack_into(buf, pos + PHYS_OFFSET_POS, phys_offset)
    (sys_flag,) = _I32.unpack_from(buf, pos + SYSFLAG_POS)
    _I64.pack_into(buf, pos + store_ts_position(sys_flag), store_ts)


def encode_blank(size: int) -> bytes:
    """The 8 bytes of an END_OF_FILE record covering ``size`` bytes to the end of the file."""
    assert size >= END_FILE_MIN_BLANK_LENGTH_BYTES, f"blank of {size} bytes is below the minimum"
    return _SIZE_MAGIC.pack(size, BLANK_MAGIC_CODE)


# --- decode ------------------------------------------------------------------------------------

_HOST_CACHE: dict[tuple[bytes, int], str] = {}
_HOST_CACHE_ENTRIES_MAX = 4096


def _host(addr: bytes, port: int) -> str:
    key = (addr, port)
    host = _HOST_CACHE.get(key)
    if host is None:
        host = bytes_to_host(addr, port)
        if len(_HOST_CACHE) < _HOST_CACHE_ENTRIES_MAX:
            _HOST_CACHE[key] = host
    return host


def _no_record_here(chunk: bytes) -> bool:
    """True when fewer than 8 bytes cannot be the start of a record (zeros or a foreign magic)."""
    if not any(chunk):
        return True
    seen = chunk[4:]
    return len(chunk) > 4 and not any(m.startswith(seen) for m in _MAGIC_BYTES)


def decode_record(buf, pos: int, *, check_crc: bool = True, limit: int | None = None,
                  detect_torn_tail: bool = True) -> Record | Blank | None:
    """Decode the record at ``pos``: a Record, a Blank (end of file), or None (no record starts).

    ``limit`` is the end of the readable bytes (default ``len(buf)``). Raises
    :class:`CorruptRecordError` with ``offset=pos`` when a valid magic starts a damaged record.

    The body CRC does not cover the topic and properties, so a write torn inside them (the rest
    still zero, as in a fresh mapped file) passes every check RocketMQ makes, and RocketMQ's
    recovery keeps such a record. With ``detect_torn_tail`` (the default) a topic containing NUL
    (no valid topic does) or properties ending in NUL (no broker-written string does unless a
    user value ends with one) is reported as a torn write instead; pass False for RocketMQ's
    exact acceptance rule.
    """
    assert pos >= 0, f"negative read position {pos}"
    end = len(buf) if limit is None else min(limit, len(buf))
    avail = end - pos
    if avail <= 0:
        return None
    if avail < 8:
        if _no_record_here(bytes(buf[pos:end])):
            return None
        raise CorruptRecordError(f"truncated record header: {avail} bytes left", offset=pos)
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total < END_FILE_MIN_BLANK_LENGTH_BYTES or total > avail:
            raise CorruptRecordError(f"END_OF_FILE record of size {total} with {avail} bytes left",
                                     offset=pos)
        return Blank(total)
    if magic == MESSAGE_MAGIC_CODE_V1:
        topic_len_bytes = 1
    elif magic == MESSAGE_MAGIC_CODE_V2:
        topic_len_bytes = 2
    else:
        # Zeros (unwritten space) or any other magic end the valid data, as in RocketMQ.
        return None
    if total > avail:
        raise CorruptRecordError(f"truncated record: TOTALSIZE {total} but {avail} bytes left",
                                 offset=pos)
    if total < RECORD_FIXED_V4_BYTES + topic_len_bytes + PROPERTIES_LENGTH_FIELD_BYTES:
        raise CorruptRecordError(f"TOTALSIZE {total} is smaller than any record", offset=pos)
    (sys_flag,) = _I32.unpack_from(buf, pos + SYSFLAG_POS)
    header = RECORD_HEADERS[(sys_flag >> 4) & 3]
    rec_end = pos + total
    fixed = header.size + topic_len_bytes + PROPERTIES_LENGTH_FIELD_BYTES
    if total < fixed:
        raise CorruptRecordError(f"TOTALSIZE {total} is smaller than the fixed fields ({fixed})",
                                 offset=pos)
    (_, _, crc, queue_id, flag, queue_offset, phys_offset, _, born_ts, born_addr, born_port,
     store_ts, store_addr, store_port, reconsume_times, prepared, body_len) = header.unpack_from(buf, pos)
    cursor = pos + header.size
    if body_len < 0 or body_len > total - fixed:
        raise CorruptRecordError(f"body length {body_len} does not fit TOTALSIZE {total}", offset=pos)
    body = bytes(buf[cursor:cursor + body_len])
    cursor += body_len
    if topic_len_bytes == 1:
        topic_len = buf[cursor]
        if topic_len > TOPIC_LENGTH_V1_BYTES_MAX:  # a negative signed byte in Java
            raise CorruptRecordError(f"negative topic length {topic_len - 256}", offset=pos)
        cursor += 1
    else:
        (topic_len,) = _I16.unpack_from(buf, cursor)
        if topic_len < 0:
            raise CorruptRecordError(f"negative topic length {topic_len}", offset=pos)
        cursor += 2
    if cursor + topic_len + PROPERTIES_LENGTH_FIELD_BYTES > rec_end:
        raise CorruptRecordError(f"topic length {topic_len} runs past TOTALSIZE {total}", offset=pos)
    topic_raw = bytes(buf[cursor:cursor + topic_len])
    cursor += topic_len
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, cursor)
    cursor += PROPERTIES_LENGTH_FIELD_BYTES
    if props_len < 0:
        raise CorruptRecordError(f"negative properties length {props_len}", offset=pos)
    if cursor + props_len != rec_end:
        # CommitLog.checkMessageAndReturnSize: "[BUG]read total count not equals msg total size"
        raise CorruptRecordError(
            f"read total count not equals msg total size: computed {cursor + props_len - pos}, "
            f"TOTALSIZE {total}", offset=pos)
    props_raw = bytes(buf[cursor:rec_end])
    if check_crc and body_len > 0 and body_crc(body) != crc:
        raise CorruptRecordError(f"body CRC mismatch: stored {crc}, computed {body_crc(body)}",
                                 offset=pos)
    try:
        topic = topic_raw.decode("utf-8")
        props_text = props_raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"topic or properties are not valid UTF-8: {exc.reason}",
                                 offset=pos) from None
    if detect_torn_tail and ("\x00" in topic or props_text.endswith("\x00")):
        raise CorruptRecordError("zero bytes inside the topic or at the end of the properties: "
                                 "a torn write", offset=pos)
    # Positional, in Record's field order: every read of the store builds one of these.
    return Record(topic, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts,
                  _host(born_addr, born_port), store_ts, _host(store_addr, store_port),
                  reconsume_times, prepared, body, string_to_properties(props_text), crc, total,
                  magic, props_text.endswith(PROPERTY_SEPARATOR))


PROP_CRC_RESERVED_BYTES = 20  # 5.x CRC32_RESERVED_LEN: "__CRC32#" \x01 ten digits \x02
_PROP_CRC_PREFIX = (PROP_CRC32 + NAME_VALUE_SEPARATOR).encode()


def property_crc_digits(crc: int) -> bytes:
    """The ten digits a tail holds for ``crc``: least significant first, zero-padded."""
    return str(crc & 0x7FFFFFFF)[::-1].ljust(10, "0").encode()


def property_crc_values(buf, start: int, end: int) -> tuple[str, str] | None:
    """(stored, computed) digits of the 5.x ``enabledAppendPropCRC`` tail of the record at
    ``buf[start:end]``; None when the record does not end in such a tail.

    The tail holds CRC32(the record's bytes before it) & 0x7FFFFFFF as ten decimal digits, least
    significant first (``MessageDecoder.createCrc32``); a real 5.3.3 or 5.5.0 broker writes it on
    every record with the flag on (docs/rocketmq-5x.md). Nothing is copied but the tail.
    """
    if end - start < PROP_CRC_RESERVED_BYTES:
        return None
    tail = bytes(buf[end - PROP_CRC_RESERVED_BYTES:end])
    if not tail.startswith(_PROP_CRC_PREFIX) or not tail.endswith(PROPERTY_SEPARATOR.encode()):
        return None
    with memoryview(buf) as view:
        computed = property_crc_digits(zlib.crc32(view[start:end - PROP_CRC_RESERVED_BYTES]))
    return tail[len(_PROP_CRC_PREFIX):-1].decode("latin-1"), computed.decode()


def property_crc_matches(record_bytes: bytes) -> bool | None:
    """Check a 5.x ``enabledAppendPropCRC`` tail; None when the record has no such tail."""
    values = property_crc_values(record_bytes, 0, len(record_bytes))
    return None if values is None else values[0] == values[1]


def iter_records(buf, start_offset: int = 0, check_crc: bool = True, *,
                 detect_torn_tail: bool = True) -> Iterator[tuple[int, Record | Blank]]:
    """Yield ``(position in buf, record)`` through one commit-log file's bytes.

    Stops where no record starts (None) and after a Blank (the rest of the file is filler);
    raises :class:`CorruptRecordError` at the first damaged record.
    """
    pos = start_offset
    while True:
        item = decode_record(buf, pos, check_crc=check_crc, detect_torn_tail=detect_torn_tail)
        if item is None:
            return
        yield pos, item
        if isinstance(item, Blank):
            return
        pos += item.total_size


# --- batch wire body (client -> broker) ----------------------------------------------------------
# A batch send carries its messages in the request body, each encoded by
# ``MessageDecoder.encodeMessage`` (§1.9): int32 totalSize, int32 magic (0), int32 bodyCRC (0),
# int32 flag, int32 bodyLen + body, int16 propLen + the properties string. The broker reads the
# fields in order and ignores totalSize, magic and bodyCRC (``MessageExtBatchEncoder.encode``).

_BATCH_ITEM_HEAD = struct.Struct(">iiiii")
_BATCH_FLAG_BODY_LEN = struct.Struct(">12xii")  # the head's fields the broker reads
_BATCH_PROPS_LEN = struct.Struct(">h")
BATCH_ITEM_FIXED_BYTES = _BATCH_ITEM_HEAD.size + _BATCH_PROPS_LEN.size


def encode_batch_body(messages) -> bytes:
    """``MessageDecoder.encodeMessages``: the body of a batch send.

    ``messages`` yields ``(flag, body, properties string)``; the string is what
    ``messageProperties2String`` gave the client (``properties_to_string``).
    """
    parts = []
    for index, (flag, body, props) in enumerate(messages):
        props_bytes = props.encode("utf-8")
        if len(props_bytes) > PROPERTIES_LENGTH_BYTES_MAX:
            raise BadInputError(f"properties of {len(props_bytes)} bytes do not fit the int16 length "
                                f"of a batch entry", where=f"batch message {index}")
        parts += (_BATCH_ITEM_HEAD.pack(BATCH_ITEM_FIXED_BYTES + len(body) + len(props_bytes), 0, 0,
                                        flag, len(body)),
                  body, _BATCH_PROPS_LEN.pack(len(props_bytes)), props_bytes)
    return b"".join(parts)


def decode_batch_body(wire) -> list[tuple[int, bytes, bytes]]:
    """The ``(flag, body, properties)`` of each message in a batch body, in order.

    The properties stay the UTF-8 bytes the client sent (the broker copies them into the record).
    Raises :class:`BadInputError` naming the message and byte where the body stops making sense:
    a length running past the end, a negative length, or properties that are not UTF-8 (a client
    encodes them with ``getBytes(UTF_8)``, so they always are).
    """
    wire = bytes(wire)
    messages = []
    append = messages.append
    end = len(wire)
    pos = 0
    head = _BATCH_FLAG_BODY_LEN.unpack_from
    props_length = _BATCH_PROPS_LEN.unpack_from
    head_bytes = _BATCH_ITEM_HEAD.size
    length_bytes = _BATCH_PROPS_LEN.size
    while pos < end:
        if pos + BATCH_ITEM_FIXED_BYTES > end:
            raise _batch_error(messages, pos, f"{end - pos} bytes left, a message needs at least "
                                              f"{BATCH_ITEM_FIXED_BYTES}")
        flag, body_len = head(wire, pos)
        body_at = pos + head_bytes
        props_len_at = body_at + body_len
        if body_len < 0 or props_len_at + length_bytes > end:
            raise _batch_error(messages, pos, f"body length {body_len} runs past the end of the batch "
                                              f"({end} bytes)")
        (props_len,) = props_length(wire, props_len_at)
        props_at = props_len_at + length_bytes
        next_pos = props_at + props_len
        if props_len < 0 or next_pos > end:
            raise _batch_error(messages, pos, f"properties length {props_len} runs past the end of "
                                              f"the batch ({end} bytes)")
        props = wire[props_at:next_pos]
        try:
            props.isascii() or props.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _batch_error(messages, pos, f"properties are not UTF-8 ({exc.reason} at byte "
                                              f"{exc.start})") from None
        append((flag, wire[body_at:props_len_at], props))
        pos = next_pos
    return messages


def _batch_error(messages: list, pos: int, problem: str) -> BadInputError:
    return BadInputError(problem, where=f"batch message {len(messages)} at byte {pos}")
