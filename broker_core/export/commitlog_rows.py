"""The ``commitlog`` contract row of one decoded record: its columns in order, and the values.

Shared by every writer of decoded records (``store_import``'s decoder, ``tier_import``'s restored
records); the columnar decoder (``columnar``) builds the same rows without a Record per row.
"""

from __future__ import annotations

from broker_core.codec import Record
from broker_core.export.schema import RAW_TABLES
from broker_core.message import create_message_id

_MAGIC_NAMES_MAX = 8  # distinct magic codes ever seen: v1 and v2; the cache stays tiny
_magic_names: dict[int, str] = {}
_msg_id_prefixes: dict[str, str] = {}
_MSG_ID_PREFIXES_MAX = 1024  # distinct store hosts in one store: a handful
_MSG_ID_OFFSET_HEX_CHARS = 16  # the int64 physical offset at the end of an offset msgId


def msg_id_host(store_host: str) -> str:
    """The store-host part of the offset msgIds of records stored at ``store_host`` (address and
    port as upper-case hex: all but the last 16 digits)."""
    return create_message_id(store_host, 0)[:-_MSG_ID_OFFSET_HEX_CHARS]


def _msg_id(record: Record) -> str:
    """``record.msg_id`` with the host part computed once per store host (the hot path of an import)."""
    if record.phys_offset < 0:
        return record.msg_id
    prefix = _msg_id_prefixes.get(record.store_host)
    if prefix is None:
        prefix = create_message_id(record.store_host, 0)[:-_MSG_ID_OFFSET_HEX_CHARS]
        if len(_msg_id_prefixes) < _MSG_ID_PREFIXES_MAX:
            _msg_id_prefixes[record.store_host] = prefix
    return f"{prefix}{record.phys_offset:016X}"


def _magic_name(magic: int) -> str:
    name = _magic_names.get(magic)
    if name is None:
        name = f"0x{magic & 0xFFFFFFFF:08X}"
        if len(_magic_names) < _MAGIC_NAMES_MAX:
            _magic_names[magic] = name
    return name


# The commitlog columns in the order record_to_values gives them (checked against the schema).
COMMITLOG_COLUMNS = (
    "run_id", "broker", "phys_offset", "total_size", "topic", "queue_id", "queue_offset", "msg_id",
    "uniq_key", "origin_msg_id", "real_topic", "real_queue_id", "retry_topic", "delay_level",
    "reconsume_times", "max_reconsume_times", "tags", "keys", "body_size", "body_crc", "sys_flag",
    "prepared_tx_offset", "born_ts", "born_host", "store_ts", "store_host", "properties", "magic", "file_name")
assert COMMITLOG_COLUMNS == tuple(RAW_TABLES["commitlog"].names), "commitlog columns moved"
TOPIC_AT = COMMITLOG_COLUMNS.index("topic")
STORE_HOST_AT = COMMITLOG_COLUMNS.index("store_host")


def record_to_values(record: Record, run_id: str, broker: str, file_name: str) -> tuple:
    """The ``commitlog`` contract row of one record as values in ``COMMITLOG_COLUMNS`` order.

    Timestamps stay in ms and msg_id is the offset id. A tuple rather than a dict because every
    record of a store goes through here and straight into a :class:`TableWriter`.
    """
    return (
        run_id,
        broker,
        record.phys_offset,
        record.total_size,
        record.topic,
        record.queue_id,
        record.queue_offset,
        _msg_id(record),
        record.uniq_key,
        record.origin_msg_id,
        record.real_topic,
        record.real_queue_id,
        record.retry_topic,
        record.delay_level,
        record.reconsume_times,
        record.max_reconsume_times,
        record.tags,
        record.keys,
        len(record.body),
        record.body_crc,
        record.sys_flag,
        record.prepared_tx_offset,
        record.born_ts,
        record.born_host,
        record.store_ts,
        record.store_host,
        # A list of pairs keeps the stored property order in the Parquet map.
        list(record.properties.items()),
        _magic_name(record.magic),
        file_name,
    )
