"""The message-trace body decoder on records as RocketMQ's TraceDataEncoder writes them."""

from __future__ import annotations

from broker_core.store.trace import (
    END_TRANSACTION,
    PUB,
    SUB_AFTER,
    SUB_BEFORE,
    decode_trace_body,
    encode_trace_record,
)

PUB_FIELDS = [1700000000123, "DefaultRegion", "order-producer", "OrderTopic", "7F00000100002A9F0000000000000001",
              "order", "k1", "127.0.0.1:10911", 64, 3, 0, "7F00000100002A9F0000000000000A00", True]
SUB_BEFORE_FIELDS = [1700000000200, "DefaultRegion", "order-service", "REQ1", "7F00000100002A9F0000000000000001", 2,
                     "k1"]
SUB_AFTER_FIELDS = ["REQ1", "7F00000100002A9F0000000000000001", 5, False, "k1", 3, 1700000000205]
END_TX_FIELDS = [1700000000300, "DefaultRegion", "tx-producer", "TxTopic", "7F00000100002A9F0000000000000002", "tx",
                 None, "127.0.0.1:10911", 2, "7F00000100002A9F0000000000000002", "COMMIT_MESSAGE", True]


def test_a_body_of_every_record_type_decodes_to_named_fields():
    """Each record type's fields land in their columns; null is None and booleans are parsed."""
    body = "".join([encode_trace_record(PUB, PUB_FIELDS), encode_trace_record(SUB_BEFORE, SUB_BEFORE_FIELDS),
                    encode_trace_record(SUB_AFTER, SUB_AFTER_FIELDS),
                    encode_trace_record(END_TRANSACTION, END_TX_FIELDS)]).encode()
    decoded = decode_trace_body(body)
    assert decoded.bad == ()
    pub, before, after, end = decoded.records
    assert [r.index for r in decoded.records] == [0, 1, 2, 3]
    assert pub.values["offset_msg_id"] == "7F00000100002A9F0000000000000A00" and pub.values["success"] is True
    assert pub.values["msg_type"] == "Normal_Msg" and pub.values["body_length"] == 64
    assert (before.values["group"], before.values["request_id"], before.values["retry_times"]) == (
        "order-service", "REQ1", 2)
    assert (after.values["success"], after.values["consume_return"], after.values["ts_ms"]) == (
        False, "RETURNNULL", 1700000000205)
    assert end.values["keys"] is None and end.values["transaction_state"] == "COMMIT_MESSAGE"
    assert end.values["from_transaction_check"] is True and end.values["msg_type"] == "Trans_msg_Commit"


def test_records_that_do_not_parse_are_set_apart_and_unknown_types_kept():
    """A record too short or with a field that is no number is bad (with the reason); a type the
    decoder does not know keeps its fields; the good records around them stay."""
    body = "".join([encode_trace_record(SUB_BEFORE, SUB_BEFORE_FIELDS[:4]),
                    encode_trace_record(SUB_AFTER, ["REQ1", "id", "five", True, "k", 0, 1]),
                    encode_trace_record("Recall", [1, "x"]),
                    encode_trace_record(SUB_BEFORE, SUB_BEFORE_FIELDS)]).encode()
    decoded = decode_trace_body(body)
    assert [(i, reason.split(":")[0]) for i, reason in decoded.bad] == [
        (0, "a SubBefore record of 4 fields, fewer than 7"), (1, "a SubAfter record whose field does not parse")]
    assert [(r.index, r.trace_type, r.values.get("group")) for r in decoded.records] == [
        (2, "Recall", None), (3, SUB_BEFORE, "order-service")]
    assert decoded.records[0].fields == ("1", "x")


def test_an_older_client_s_shorter_forms_decode():
    """A Pub without the offset msgId and a SubAfter without its context code and time decode with
    those columns empty (TraceDataEncoder reads both forms)."""
    old_pub = PUB_FIELDS[:11] + [True]
    body = (encode_trace_record(PUB, old_pub) + encode_trace_record(SUB_AFTER, SUB_AFTER_FIELDS[:5])).encode()
    pub, after = decode_trace_body(body).records
    assert pub.values["success"] is True and "offset_msg_id" not in pub.values
    assert after.values["success"] is False and "ts_ms" not in after.values and "consume_return" not in after.values
