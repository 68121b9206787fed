"""Message-level encodings of RocketMQ: properties, Java hashes, message ids and UNIQ_KEY.

Everything here reproduces what a RocketMQ 4.9.4 broker or client computes, byte for byte:
``MessageDecoder.messageProperties2String`` / ``string2messageProperties``, Java's
``String.hashCode`` and ``HashMap`` iteration order (which decides the byte order of every
re-serialized property string), ``createMessageId`` / ``decodeMessageId`` and
``MessageClientIDSetter``. The 5.x differences (trailing ``\\x02``, ``HashMap(128)``) are
keyword options.
"""

from __future__ import annotations

import calendar
import datetime
import ipaddress
import zlib
from collections.abc import Iterable, Mapping
from functools import lru_cache

from broker_core.constants import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from broker_core.errors import BadInputError

# --- property names (MessageConst) -------------------------------------------------------------
PROP_KEYS = "KEYS"
PROP_TAGS = "TAGS"
PROP_WAIT = "WAIT"
PROP_DELAY = "DELAY"
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_TRAN_MSG = "TRAN_MSG"
PROP_PGROUP = "PGROUP"
PROP_MIN_OFFSET = "MIN_OFFSET"
PROP_MAX_OFFSET = "MAX_OFFSET"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_RECONSUME_TIME = "RECONSUME_TIME"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROP_CONSUME_START_TIME = "CONSUME_START_TIME"
PROP_CLUSTER = "CLUSTER"
PROP_TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROP_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROP_TRANSACTION_ID = "__transactionId__"  # 5.x: a half's UNIQ_KEY again (TransactionalMessageUtil.TRANSACTION_ID)
PROP_START_DELIVER_TIME = "__STARTDELIVERTIME"
PROP_MSG_REGION = "MSG_REGION"
PROP_TRACE_SWITCH = "TRACE_ON"
# 5.x only
PROP_CRC32 = "__CRC32#"  # the key of the enabledAppendPropCRC tail
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR between several KEYS

# --- Java HashMap parameters (java.util.HashMap, Java 8+) --------------------------------------
HASHMAP_CAPACITY_DEFAULT = 16  # new HashMap<>() in 4.9.4 string2messageProperties
HASHMAP_CAPACITY_MAX = 1 << 30  # HashMap.MAXIMUM_CAPACITY
HASHMAP_TREEIFY_BIN_ENTRIES = 9  # a bin reaching this many entries is treeified (or the table grows)
HASHMAP_TREEIFY_CAPACITY_MIN = 64  # below this capacity a long bin makes the table grow instead

# --- ids ---------------------------------------------------------------------------------------
MSG_ID_IPV4_HEX_CHARS = 32  # 4 addr + 4 port + 8 offset bytes
MSG_ID_IPV6_HEX_CHARS = 56  # 16 addr + 4 port + 8 offset bytes
MSG_ID_OFFSET_HEX_CHARS = 16  # the physical offset: the last 8 bytes of either form
# An offset message id as text, for Spark and SQL: 32 or 56 hex digits (a UNIQ_KEY has 32 too, so
# a caller tells the two apart by other means, e.g. that the value is not the record's UNIQ_KEY).
OFFSET_MSG_ID_REGEX = (f"^([0-9A-Fa-f]{{{MSG_ID_IPV4_HEX_CHARS}}}|"
                       f"[0-9A-Fa-f]{{{MSG_ID_IPV6_HEX_CHARS}}})$")
UNIQ_KEY_IPV4_BYTES = 16
UNIQ_KEY_IPV6_BYTES = 28
UNIQ_KEY_COUNTER_MODULUS = 1 << 16  # the counter is written as a short
UNIQ_KEY_SMALL_NEGATIVE_MS = 1_000_000  # a clock step back smaller than this is written as 0
PORT_MAX = 65535  # InetSocketAddress refuses anything outside 0..PORT_MAX
# A record stores a host's port as a Java int: a damaged or foreign record can hold any of them.
JAVA_INT_MIN = -(1 << 31)
JAVA_INT_MAX = (1 << 31) - 1


@lru_cache(maxsize=4096)  # tags and property names repeat; the cache is the function itself
def java_string_hash(s: str) -> int:
    """``String.hashCode()``: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    if s.isascii():
        for ch in s.encode("ascii"):
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        # Non-BMP characters are two UTF-16 code units (a surrogate pair) in Java.
        data = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=4096)  # every stored message asks; one C call when its tags were seen
def tags_code(tags: str | None) -> int:
    """The consume-queue tags code of a normal message: the Java hash of TAGS, 0 without tags."""
    if not tags:
        return 0
    return java_string_hash(tags)


def body_crc(body: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 of the stored body, masked to a non-negative int32."""
    return zlib.crc32(body) & 0x7FFFFFFF


# --- properties string ---------------------------------------------------------------------------

def properties_to_string(props: Mapping[str, str | None] | JavaHashMap, *,
                         trailing_separator: bool = False) -> str:
    """``messageProperties2String``: ``k\\x01v`` pairs joined by ``\\x02``, None values skipped.

    RocketMQ 4.9.4 drops the last ``\\x02`` (the default here); 5.x keeps it
    (``trailing_separator=True``). The pairs come out in the mapping's own order, so pass a
    :class:`JavaHashMap` to get the order a broker writes.
    """
    items = props.items()
    parts = [k + NAME_VALUE_SEPARATOR + v for k, v in items if v is not None]
    if not parts:
        return ""
    text = PROPERTY_SEPARATOR.join(parts)
    return text + PROPERTY_SEPARATOR if trailing_separator else text


def _parse_pairs(s: str) -> Iterable[tuple[str, str]]:
    """Yield the (key, value) segments ``string2messageProperties`` keeps, in string order."""
    length = len(s)
    index = 0
    while index < length:
        end = s.find(PROPERTY_SEPARATOR, index)
        if end < 0:
            end = length
        # Java also requires the segment to be >= 3 chars; a non-empty key, the separator and a
        # non-empty value imply that, so the two conditions below are the whole rule.
        sep = s.find(NAME_VALUE_SEPARATOR, index)
        if index < sep < end - 1:
            yield s[index:sep], s[sep + 1:end]
        index = end + 1


def string_to_properties(s: str | None) -> dict[str, str]:
    """``string2messageProperties``: parse a property string; malformed segments are skipped.

    A segment needs a non-empty key before its first ``\\x01`` and a non-empty value after it;
    the value keeps any further ``\\x01``; a repeated key keeps its last value; the trailing
    ``\\x02`` is optional. The dict keeps first-appearance order (use
    :meth:`JavaHashMap.from_properties_string` for the Java iteration order).
    """
    result: dict[str, str] = {}
    if s:
        # The same rule as _parse_pairs, written with split/partition because every decoded
        # record goes through here: a segment without "\x01", with an empty key or with an empty
        # value is dropped, and so is the empty segment after a trailing "\x02".
        for segment in s.split(PROPERTY_SEPARATOR):
            key, _, value = segment.partition(NAME_VALUE_SEPARATOR)
            if key and value:
                result[key] = value
    return result


def java_ordered_properties_string(props: Mapping[str, str | None], *,
                                   capacity: int = HASHMAP_CAPACITY_DEFAULT,
                                   trailing_separator: bool = False) -> str:
    """``messageProperties2String`` of a fresh ``HashMap`` filled with ``props`` in their order.

    Equal to ``JavaHashMap.from_items(props.items()).to_properties_string()`` -- what a 4.9.4
    broker writes when it re-serializes the map it decoded from a record -- without building the
    table: the iteration order depends on nothing but the key sequence, and a broker sees the same
    few sequences over and over, so it is worked out once per sequence and reused. A 5.x broker
    parses into ``new HashMap<>(128)`` and ends the string with ``\x02`` (``capacity=128``,
    ``trailing_separator=True``).
    """
    if not props:
        return ""
    if None in props.values():  # None values are skipped; rare enough for the general path
        return properties_to_string(JavaHashMap.from_items(props.items(), capacity),
                                    trailing_separator=trailing_separator)
    join_pair = NAME_VALUE_SEPARATOR.join
    order = _java_reorder(tuple(props), capacity)
    if order is None:
        text = PROPERTY_SEPARATOR.join(map(join_pair, props.items()))
    else:
        items = list(props.items())
        text = PROPERTY_SEPARATOR.join([join_pair(items[i]) for i in order])
    return text + PROPERTY_SEPARATOR if trailing_separator else text


@lru_cache(maxsize=4096)
def _java_reorder(keys: tuple[str, ...], capacity: int = HASHMAP_CAPACITY_DEFAULT) -> tuple[int, ...] | None:
    """Indices of ``keys`` in the iteration order of a ``new HashMap(capacity)`` they were put into
    in sequence; None when that order is the sequence itself (the usual case for a key sequence
    read back from a string a HashMap wrote)."""
    table = JavaHashMap.from_items(((key, "") for key in keys), capacity)
    position = {key: index for index, key in enumerate(keys)}
    order = tuple(position[key] for key in table.keys())
    return None if order == tuple(range(len(keys))) else order


def _table_size_for(capacity: int) -> int:
    """``HashMap.tableSizeFor``: the smallest power of two >= capacity (at least 1)."""
    assert capacity >= 0, f"negative HashMap capacity {capacity}"
    size = 1
    while size < capacity:
        size <<= 1
    return min(size, HASHMAP_CAPACITY_MAX)


class JavaHashMap:
    """A ``java.util.HashMap<String, String>`` whose iteration order matches Java 8+.

    Buckets are ``(h ^ (h >>> 16)) & (cap - 1)`` with h the key's Java hash; within a bucket,
    entries keep insertion order; the table doubles when size exceeds 0.75 * capacity (Java's
    split keeps relative order, which re-inserting in iteration order reproduces). Updating a key
    keeps its place; removing and putting it again moves it to the end of its bucket. A bin that
    reaches 9 entries grows a table smaller than 64 as Java does; in a larger table Java would turn
    the bin into a tree (and move the tree root first), which this model does not emulate: property
    maps never have 9 keys colliding in a 64+ table.
    """

    __slots__ = ("_capacity", "_table", "_values", "get")

    def __init__(self, initial_capacity: int = HASHMAP_CAPACITY_DEFAULT):
        self._capacity = _table_size_for(initial_capacity)
        self._table: list[list[str]] = [[] for _ in range(self._capacity)]
        self._values: dict[str, str] = {}
        # get(key, default=None): the value dict's own get, bound once. Every stored message
        # looks up DELAY and TAGS, and a call into C skips a Python frame per lookup.
        self.get = self._values.get

    @staticmethod
    def bucket_of(key: str, capacity: int) -> int:
        """The bucket index Java uses for ``key`` in a table of ``capacity`` slots."""
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    @classmethod
    def from_properties_string(cls, s: str | None,
                               initial_capacity: int = HASHMAP_CAPACITY_DEFAULT) -> JavaHashMap:
        """The map ``string2messageProperties`` builds (16 slots in 4.9.4, 128 in 5.x)."""
        result = cls(initial_capacity)
        if s:
            for key, value in _parse_pairs(s):
                result.put(key, value)
        return result

    @classmethod
    def from_items(cls, items: Iterable[tuple[str, str]],
                   initial_capacity: int = HASHMAP_CAPACITY_DEFAULT) -> JavaHashMap:
        """A map built by putting ``items`` in order (what a client's ``putProperty`` calls do)."""
        result = cls(initial_capacity)
        for key, value in items:
            result.put(key, value)
        return result

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def put(self, key: str, value: str) -> str | None:
        """Set ``key``; returns the previous value. A new key goes to the end of its bucket."""
        assert isinstance(key, str), f"property key must be str, got {type(key).__name__}"
        previous = self._values.get(key)
        if key in self._values:
            self._values[key] = value
            return previous
        bin_ = self._table[self.bucket_of(key, self._capacity)]
        bin_.append(key)
        self._values[key] = value
        if len(bin_) >= HASHMAP_TREEIFY_BIN_ENTRIES and self._capacity < HASHMAP_TREEIFY_CAPACITY_MIN:
            self._resize()  # treeifyBin on a small table resizes instead
        if len(self._values) > self._capacity * 3 // 4:
            self._resize()
        return previous

    def remove(self, key: str) -> str | None:
        """Delete ``key`` (no error when absent); returns the removed value."""
        if key not in self._values:
            return None
        self._table[self.bucket_of(key, self._capacity)].remove(key)
        return self._values.pop(key)

    def _resize(self) -> None:
        if self._capacity >= HASHMAP_CAPACITY_MAX:
            return
        order = list(self.keys())
        self._capacity *= 2
        self._table = [[] for _ in range(self._capacity)]
        for key in order:
            self._table[self.bucket_of(key, self._capacity)].append(key)

    def keys(self) -> list[str]:
        return [key for bin_ in self._table if bin_ for key in bin_]

    def items(self) -> list[tuple[str, str]]:
        """Entries in Java iteration order."""
        values = self._values
        return [(key, values[key]) for bin_ in self._table if bin_ for key in bin_]

    def to_dict(self) -> dict[str, str]:
        return dict(self.items())

    def to_properties_string(self, *, trailing_separator: bool = False) -> str:
        return properties_to_string(self, trailing_separator=trailing_separator)

    def copy(self) -> JavaHashMap:
        other = JavaHashMap.__new__(JavaHashMap)
        other._capacity = self._capacity
        other._table = [list(bin_) for bin_ in self._table]
        other._values = dict(self._values)
        other.get = other._values.get
        return other

    def __repr__(self) -> str:
        return f"JavaHashMap({self.items()!r}, capacity={self._capacity})"


# --- 4.9.4 broker paths that re-serialize properties ---------------------------------------------
# Each returns the exact stored property string; the map arguments are changed in place the way
# the broker changes its in-memory map, so a caller can chain the paths as the broker does.

def broker_receive_properties(client_properties: str, cluster: str | None, *,
                              capacity: int = HASHMAP_CAPACITY_DEFAULT,
                              added: Iterable[tuple[str, str]] = (), dlq_delay: str | None = None,
                              strip_wait: bool = True,
                              trailing_separator: bool = False) -> tuple[str, JavaHashMap]:
    """``SendMessageProcessor.asyncSendMessage`` (4.9.4): parse, add CLUSTER, drop WAIT from storage.

    Returns ``(stored_string, in_memory_map)``. The stored string lacks ``WAIT``; the map gets
    ``WAIT`` back at the end of its bucket (remove then put), which is the order a following delay
    rewrite serializes.

    5.x (``SendMessageProcessor.sendMessage`` @5.3.3) parses into a ``HashMap(128)``, puts the
    ``added`` properties (``buildMsgContext``: MSG_REGION, TRACE_ON), then ``dlq_delay`` (DELAY=-1
    when ``handleRetryAndDLQ`` diverts to the DLQ), then CLUSTER, and stores the whole map, WAIT
    included (``strip_wait=False``), with a trailing ``\x02``.
    """
    props = JavaHashMap.from_properties_string(client_properties, capacity)
    for key, value in added:
        props.put(key, value)
    if dlq_delay is not None:
        props.put(PROP_DELAY, dlq_delay)
    if cluster is not None:
        props.put(PROP_CLUSTER, cluster)
    if not strip_wait:
        stored = props.to_properties_string(trailing_separator=trailing_separator)
    elif PROP_WAIT in props:
        wait = props.remove(PROP_WAIT)
        stored = props.to_properties_string(trailing_separator=trailing_separator)
        props.put(PROP_WAIT, wait)
    else:
        stored = props.to_properties_string(trailing_separator=trailing_separator)
    return stored, props


def delay_rewrite_map(props: JavaHashMap, real_topic: str, real_qid: int,
                      clamped_delay_level: int | None = None, *, trailing_separator: bool = False) -> str:
    """``CommitLog.asyncPutMessage`` delay path on an in-memory map; returns the stored string.

    ``clamped_delay_level`` is given when DELAY exceeded the maximum level and the broker wrote
    the maximum back into DELAY before adding REAL_TOPIC and REAL_QID.
    """
    if clamped_delay_level is not None:
        props.put(PROP_DELAY, str(clamped_delay_level))
    props.put(PROP_REAL_TOPIC, real_topic)
    props.put(PROP_REAL_QID, str(real_qid))
    return props.to_properties_string(trailing_separator=trailing_separator)


def delay_rewrite_properties(props_string: str, real_topic: str, real_qid: int,
                             clamped_delay_level: int | None = None) -> str:
    """The delay path for a message whose in-memory map is its stored string re-parsed."""
    return delay_rewrite_map(JavaHashMap.from_properties_string(props_string), real_topic,
                             real_qid, clamped_delay_level)


def send_back_map(stored_properties: str, *, original_topic: str, delay_level: int | None,
                  offset_msg_id: str, wait: bool | None = False,
                  extra: Iterable[tuple[str, str]] = (),
                  capacity: int = HASHMAP_CAPACITY_DEFAULT) -> JavaHashMap:
    """``asyncConsumerSendMsgBack`` (4.9.4) property steps on the looked-up message's map.

    Steps in broker order: RETRY_TOPIC = original topic if absent; WAIT (``false`` on a live
    broker, ``None`` to skip it); DELAY = ``delay_level`` (0 on the DLQ branch; ``None`` skips it,
    as the fixture records c/d were built); then ``extra``
    puts (e.g. MAX_RECONSUME_TIMES); ORIGIN_MESSAGE_ID = ``offset_msg_id`` unless one is already
    set. The caller serializes the result, or passes it to :func:`delay_rewrite_map` when
    ``delay_level > 0`` (the store then routes it through SCHEDULE_TOPIC_XXXX).
    """
    props = JavaHashMap.from_properties_string(stored_properties, capacity)
    if PROP_RETRY_TOPIC not in props:
        props.put(PROP_RETRY_TOPIC, original_topic)
    if wait is not None:
        props.put(PROP_WAIT, "true" if wait else "false")
    if delay_level is not None:
        props.put(PROP_DELAY, str(delay_level))
    for key, value in extra:
        props.put(key, value)
    if not (props.get(PROP_ORIGIN_MESSAGE_ID) or "").strip():
        props.put(PROP_ORIGIN_MESSAGE_ID, offset_msg_id)
    return props


def schedule_deliver_properties(schedule_properties: str) -> str:
    """``messageTimeup``: the re-put keeps the schedule copy's string (DELAY, REAL_* included)."""
    return JavaHashMap.from_properties_string(schedule_properties).to_properties_string()


# --- hosts and offset message ids ----------------------------------------------------------------

@lru_cache(maxsize=1024)
def host_to_bytes(host: str) -> tuple[bytes, int]:
    """``"a.b.c.d:port"`` or ``"[v6]:port"`` -> (4 or 16 address bytes, port in 0..PORT_MAX)."""
    address, port = _parse_host(host)
    if not 0 <= port <= PORT_MAX:
        raise BadInputError(f"port out of range in host {host!r}")
    return address, port


def port_in_range(port: int) -> bool:
    """Whether a stored port is one InetSocketAddress accepts (0..PORT_MAX)."""
    return 0 <= port <= PORT_MAX


def host_port(host: str) -> int:
    """The port of a ``host:port`` string, whatever its value."""
    return _parse_host(host)[1]


def _parse_host(host: str) -> tuple[bytes, int]:
    try:
        if host.startswith("["):
            addr_text, _, port_text = host[1:].partition("]:")
            address = ipaddress.IPv6Address(addr_text)
        else:
            addr_text, _, port_text = host.rpartition(":")
            address = ipaddress.IPv4Address(addr_text)
        port = int(port_text)
    except ValueError as exc:
        raise BadInputError(f"not a host:port string: {host!r} ({exc})") from None
    return address.packed, port


def bytes_to_host(addr: bytes, port: int) -> str:
    """(address bytes, port) -> host string; IPv6 in Python's compressed form inside brackets."""
    if len(addr) == 4:
        return f"{ipaddress.IPv4Address(addr)}:{port}"
    if len(addr) == 16:
        return f"[{ipaddress.IPv6Address(addr)}]:{port}"
    raise BadInputError(f"host address must be 4 or 16 bytes, got {len(addr)}")


def create_message_id(store_host: str, phys_offset: int) -> str:
    """``MessageDecoder.createMessageId``: uppercase hex of store address, port and offset."""
    assert -(1 << 63) <= phys_offset < (1 << 63), f"physical offset {phys_offset} is not a Java long"
    # The offset as 8 big-endian two's-complement bytes, in hex.
    return f"{_message_id_prefix(store_host)}{phys_offset & 0xFFFF_FFFF_FFFF_FFFF:016X}"


@lru_cache(maxsize=1024)
def _message_id_prefix(store_host: str) -> str:
    """The store-host part of an offset message id (address and port), computed once per host.

    As ``createMessageId`` copies the record's host bytes, a port outside 0..PORT_MAX (a damaged
    or foreign record: every Java int fits the field) is its 4 bytes, two's complement.
    """
    addr, port = _parse_host(store_host)
    if not JAVA_INT_MIN <= port <= JAVA_INT_MAX:
        raise BadInputError(f"port is not a Java int in host {store_host!r}")
    return (addr + port.to_bytes(4, "big", signed=True)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[str, int]:
    """``decodeMessageId``: (store host, physical offset); 32 hex chars are IPv4, 56 IPv6."""
    if len(msg_id) not in (MSG_ID_IPV4_HEX_CHARS, MSG_ID_IPV6_HEX_CHARS):
        raise BadInputError(f"offset message id must be 32 or 56 hex chars: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise BadInputError(f"offset message id is not hex: {msg_id!r}") from None
    addr_len = 4 if len(msg_id) == MSG_ID_IPV4_HEX_CHARS else 16
    port = int.from_bytes(raw[addr_len:addr_len + 4], "big", signed=True)  # a Java int, as stored
    offset = int.from_bytes(raw[addr_len + 4:], "big", signed=True)
    return bytes_to_host(raw[:addr_len], port), offset


# --- UNIQ_KEY (MessageClientIDSetter) --------------------------------------------------------------

def _month_bounds_utc(now_ms: int) -> tuple[int, int]:
    """Start of the month containing ``now_ms`` and of the next one, both in UTC epoch ms."""
    day = _EPOCH + datetime.timedelta(milliseconds=now_ms)
    year, month = day.year, day.month
    start = calendar.timegm((year, month, 1, 0, 0, 0)) * 1000
    next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
    return start, calendar.timegm((next_year, next_month, 1, 0, 0, 0)) * 1000


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class UniqKeyGenerator:
    """UNIQ_KEY ids laid out as ``MessageClientIDSetter.createUniqID`` writes them.

    ip (4 or 16 bytes) + short pid + int class-loader hash + int ms since the month start + short
    counter, as uppercase hex. Java takes the month start in the JVM's local time zone; this model
    uses UTC so that a run does not depend on the machine it runs on. The caller supplies pid and
    class-loader hash (from a seeded stream) and the clock value; nothing here is random.
    """

    __slots__ = ("_prefix", "_counter", "_start_ms", "_next_start_ms")

    def __init__(self, ip: str, pid: int, classloader_hash: int):
        try:
            addr = ipaddress.ip_address(ip).packed
        except ValueError:
            raise BadInputError(f"UNIQ_KEY ip is not an IP address: {ip!r}") from None
        self._prefix = (addr + (pid & 0xFFFF).to_bytes(2, "big")
                        + (classloader_hash & 0xFFFFFFFF).to_bytes(4, "big")).hex().upper()
        self._counter = 0
        self._start_ms: int | None = None
        self._next_start_ms = 0

    @property
    def prefix(self) -> str:
        """The fixed hex part (ip, pid, class-loader hash) computed once, as Java does."""
        return self._prefix

    def next(self, now_ms: int) -> str:
        """The next id at clock value ``now_ms``; the counter wraps at 16 bits."""
        if self._start_ms is None or now_ms >= self._next_start_ms:
            self._start_ms, self._next_start_ms = _month_bounds_utc(now_ms)
        diff = now_ms - self._start_ms
        diff = ((diff + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # Java's (int) cast
        if -UNIQ_KEY_SMALL_NEGATIVE_MS < diff < 0:
            diff = 0
        counter = self._counter
        self._counter = (counter + 1) % UNIQ_KEY_COUNTER_MODULUS
        return f"{self._prefix}{diff & 0xFFFFFFFF:08X}{counter:04X}"


def _uniq_key_bytes(uniq_key: str) -> bytes:
    try:
        raw = bytes.fromhex(uniq_key)
    except ValueError:
        raise BadInputError(f"UNIQ_KEY is not hex: {uniq_key!r}") from None
    if len(raw) not in (UNIQ_KEY_IPV4_BYTES, UNIQ_KEY_IPV6_BYTES):
        raise BadInputError(f"UNIQ_KEY must be 16 or 28 bytes: {uniq_key!r}")
    return raw


def uniq_key_ip(uniq_key: str) -> str:
    """``getIPStrFromID``: the producer address embedded in a UNIQ_KEY."""
    raw = _uniq_key_bytes(uniq_key)
    addr_len = 16 if len(raw) == UNIQ_KEY_IPV6_BYTES else 4
    return str(ipaddress.ip_address(raw[:addr_len]))


def uniq_key_pid(uniq_key: str) -> int:
    """``getPidFromID``: the unsigned short at byte len-12."""
    raw = _uniq_key_bytes(uniq_key)
    return int.from_bytes(raw[len(raw) - 12:len(raw) - 10], "big")


def uniq_key_counter(uniq_key: str) -> int:
    """The 16-bit counter in the last two bytes."""
    return int.from_bytes(_uniq_key_bytes(uniq_key)[-2:], "big")


def uniq_key_time(uniq_key: str, now_ms: int) -> int:
    """``getNearlyTimeFromID`` (UTC month): this month's start + offset, or last month's if future."""
    raw = _uniq_key_bytes(uniq_key)
    span_ms = int.from_bytes(raw[-6:-2], "big")
    start, _ = _month_bounds_utc(now_ms)
    if start + span_ms >= now_ms:
        start, _ = _month_bounds_utc(start - 1)
    return start + span_ms
