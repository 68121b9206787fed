"""The body of a message-trace record: what a RocketMQ client says it did (docs/client-trace.md).

A client with message trace on (``enableMsgTrace``) hands each send, each consume and each
transaction decision to its ``AsyncTraceDispatcher``, which encodes them
(``TraceDataEncoder.encoderFromContextBean``) and sends them, many to a message, to the trace
topic (``RMQ_SYS_TRACE_TOPIC`` unless the client names another) on a broker that hosts it
(``traceTopicEnable=true``). A body is records, each ended by ``\\u0002``; a record is fields
split by ``\\u0001``, the first its type:

* ``Pub``: ts, region, producer group, topic, msgId, tags, keys, store host, body length, cost ms,
  message type (ordinal), offset msgId, success;
* ``SubBefore``: ts, region, consumer group, request id, msgId, retry times, keys;
* ``SubAfter``: request id, msgId, cost ms, success, keys, context code (``ConsumeReturnType``
  ordinal), ts (later clients append the group);
* ``EndTransaction``: ts, region, producer group, topic, msgId, tags, keys, store host, message
  type, transaction id, state (``LocalTransactionState`` name), from a check.

The client writes a null value as the text ``null`` (StringBuilder.append), read back here as
None. Java's ``String.split`` drops trailing empty fields, and the reader does the same, so a
field the client left empty at the end is absent. A record of a type this module does not know
(``Recall`` of 5.x clients) keeps its type and raw fields; a record whose known fields do not
parse is returned in ``bad`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RECORD_SEPARATOR = "\u0002"  # TraceConstants.FIELD_SPLITOR: ends every record
FIELD_SEPARATOR = "\u0001"  # TraceConstants.CONTENT_SPLITOR: between a record's fields
NULL_TEXT = "null"  # what StringBuilder.append writes for a null String

PUB = "Pub"
SUB_BEFORE = "SubBefore"
SUB_AFTER = "SubAfter"
END_TRANSACTION = "EndTransaction"
TRACE_TYPES = (PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION)

# org.apache.rocketmq.common.message.MessageType, by ordinal (4.9.4).
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg")
# org.apache.rocketmq.client.consumer.listener.ConsumeReturnType, by ordinal: what the listener did.
CONSUME_RETURN_TYPES = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")
# A body holds at most this many records: the dispatcher cuts a message at 118,000 characters
# (maxMsgSize 128,000 - 10,000), and no record is shorter than a few dozen, so more is no client's.
TRACE_RECORDS_PER_BODY_MAX = 20_000
# The fields each type needs (its shortest form a client writes), and the position of its fields.
_MIN_FIELDS = {PUB: 13, SUB_BEFORE: 8, SUB_AFTER: 6, END_TRANSACTION: 13}


@dataclass(frozen=True)
class TraceRecord:
    """One record of a trace body, its fields named (None where its type has no such field)."""

    index: int  # its position in the body, from 0
    trace_type: str
    fields: tuple[str, ...]  # every field after the type, as written
    values: dict = field(default_factory=dict)  # the named fields (client_trace's columns)


@dataclass(frozen=True)
class TraceBody:
    """The records of a trace body, and the pieces that are no record (index, reason)."""

    records: tuple[TraceRecord, ...]
    bad: tuple[tuple[int, str], ...] = ()


def _text(value: str) -> str | None:
    return None if value == NULL_TEXT else value


def _bool(value: str) -> bool:
    # Boolean.parseBoolean: "true" in any case is true, anything else false.
    return value.lower() == "true"


def _ordinal_name(value: str, names: tuple[str, ...]) -> str:
    n = int(value)
    return names[n] if 0 <= n < len(names) else f"#{n}"


def _pub(f: list[str]) -> dict:
    out = {"ts_ms": int(f[0]), "region_id": _text(f[1]), "group": _text(f[2]), "topic": _text(f[3]),
           "msg_id": _text(f[4]), "tags": _text(f[5]), "keys": _text(f[6]), "store_host": _text(f[7]),
           "body_length": int(f[8]), "cost_ms": int(f[9]), "msg_type": _ordinal_name(f[10], MESSAGE_TYPES)}
    if len(f) == 12:  # clients before the offset msgId
        out["success"] = _bool(f[11])
    else:
        out.update(offset_msg_id=_text(f[11]), success=_bool(f[12]))
        if len(f) > 13:
            out["client_host"] = _text(f[13])
    return out


def _sub_before(f: list[str]) -> dict:
    return {"ts_ms": int(f[0]), "region_id": _text(f[1]), "group": _text(f[2]), "request_id": _text(f[3]),
            "msg_id": _text(f[4]), "retry_times": int(f[5]), "keys": _text(f[6])}


def _sub_after(f: list[str]) -> dict:
    out = {"request_id": _text(f[0]), "msg_id": _text(f[1]), "cost_ms": int(f[2]), "success": _bool(f[3]),
           "keys": _text(f[4])}
    if len(f) > 5:
        out["context_code"] = int(f[5])
        out["consume_return"] = _ordinal_name(f[5], CONSUME_RETURN_TYPES)
    if len(f) > 6:
        out["ts_ms"] = int(f[6])
    if len(f) > 7:
        out["group"] = _text(f[7])
    return out


def _end_transaction(f: list[str]) -> dict:
    return {"ts_ms": int(f[0]), "region_id": _text(f[1]), "group": _text(f[2]), "topic": _text(f[3]),
            "msg_id": _text(f[4]), "tags": _text(f[5]), "keys": _text(f[6]), "store_host": _text(f[7]),
            "msg_type": _ordinal_name(f[8], MESSAGE_TYPES), "transaction_id": _text(f[9]),
            "transaction_state": _text(f[10]), "from_transaction_check": _bool(f[11])}


_PARSERS = {PUB: _pub, SUB_BEFORE: _sub_before, SUB_AFTER: _sub_after, END_TRANSACTION: _end_transaction}


def encode_trace_record(trace_type: str, fields: list[object]) -> str:
    """One record as a client writes it (None as ``null``, booleans as ``true``/``false``)."""
    def text(v: object) -> str:
        if v is None:
            return NULL_TEXT
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    return FIELD_SEPARATOR.join([trace_type, *map(text, fields)]) + RECORD_SEPARATOR


def decode_trace_body(body: bytes) -> TraceBody:
    """The records of a trace body, in order, as ``TraceDataEncoder.decoderFromTraceDataString``
    splits them; bytes that are not UTF-8 are replaced (the client encodes with the JVM's charset)."""
    text = body.decode("utf-8", errors="replace")
    pieces = text.split(RECORD_SEPARATOR)
    while pieces and pieces[-1] == "":
        pieces.pop()
    records, bad = [], []
    for index, piece in enumerate(pieces[:TRACE_RECORDS_PER_BODY_MAX]):
        parts = piece.split(FIELD_SEPARATOR)
        while len(parts) > 1 and parts[-1] == "":
            parts.pop()
        kind, fields = parts[0], parts[1:]
        parser = _PARSERS.get(kind)
        if parser is None:
            records.append(TraceRecord(index, kind, tuple(fields)))
            continue
        if len(fields) < _MIN_FIELDS[kind] - 1:
            bad.append((index, f"a {kind} record of {len(fields)} fields, fewer than {_MIN_FIELDS[kind] - 1}"))
            continue
        try:
            values = parser(fields)
        except ValueError as exc:
            bad.append((index, f"a {kind} record whose field does not parse: {exc}"))
            continue
        records.append(TraceRecord(index, kind, tuple(fields), values))
    if len(pieces) > TRACE_RECORDS_PER_BODY_MAX:
        bad.append((TRACE_RECORDS_PER_BODY_MAX, f"{len(pieces) - TRACE_RECORDS_PER_BODY_MAX} more records "
                                                "than a client writes to one message, not read"))
    return TraceBody(tuple(records), tuple(bad))
