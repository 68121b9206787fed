"""Commit-log record codec checked byte for byte against records written by RocketMQ's Java code."""

from __future__ import annotations

import dataclasses
import json
import zlib

import pytest
from testdata import COMMITLOG_FIXTURES, STORE_FIXTURES

from broker_core.codec import (
    Blank,
    Record,
    RecordTooLargeError,
    decode_record,
    encode_blank,
    encode_for_append,
    encode_record,
    iter_records,
    patch_append,
    property_crc_matches,
)
from broker_core.constants import (
    BLANK_MAGIC_CODE,
    BODY_SIZE_BYTES_MAX,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
)
from broker_core.errors import BadInputError, CorruptRecordError
from broker_core.message import body_crc, create_message_id, host_to_bytes

FIXTURES = COMMITLOG_FIXTURES
STORE = STORE_FIXTURES
VECTORS = json.loads((FIXTURES / "vectors.json").read_text())
RECORDS_494 = VECTORS["records"] + VECTORS["extra_records"]
RECORDS_5X = VECTORS["head_5x"]["records"]
ALL = {r["id"]: r for r in RECORDS_494 + RECORDS_5X}
PROP_CRC_RESERVED_BYTES = 20  # len("__CRC32#") + 1 + 10 digits + 1 (5.x CRC32_RESERVED_LEN)


def _bin(rec: dict) -> bytes:
    return (FIXTURES / rec["file"]).read_bytes()


def _same_host(text: str, vec: dict, name: str) -> bool:
    """The decoded host string has the fixture's bytes (hex when listed, else its host text)."""
    addr, port = host_to_bytes(text)
    if name + "_hex" in vec:
        return (addr + port.to_bytes(4, "big")).hex() == vec[name + "_hex"]
    return (addr, port) == host_to_bytes(vec[name])


@pytest.mark.parametrize("rid", list(ALL))
def test_every_fixture_record_decodes_to_every_listed_field(rid):
    """Each fixture record decodes to exactly the field values RocketMQ's decoder reported."""
    vec = ALL[rid]
    rec = decode_record(_bin(vec), 0)
    assert isinstance(rec, Record)
    assert rec.total_size == vec["total_size"] == vec["length"]
    assert f"{rec.magic:#x}" == vec["magic_code_hex"]
    assert rec.body_crc == vec["body_crc"]
    assert (rec.queue_id, rec.flag, rec.queue_offset) == (vec["queue_id"], vec["flag"], vec["queue_offset"])
    assert rec.phys_offset == vec["physical_offset"] and rec.sys_flag == vec["sys_flag"]
    assert rec.born_ts == vec["born_timestamp"] and rec.store_ts == vec["store_timestamp"]
    assert _same_host(rec.born_host, vec, "born_host") and _same_host(rec.store_host, vec, "store_host")
    assert rec.reconsume_times == vec["reconsume_times"]
    assert rec.prepared_tx_offset == vec["prepared_transaction_offset"]
    assert rec.body.hex() == vec["body_hex"] and len(rec.body) == vec["body_length"]
    assert rec.topic == vec["topic"] and len(rec.topic.encode()) == vec["topic_length"]
    assert rec.properties == vec["properties"]
    assert list(rec.properties) == list(vec["properties"])
    assert len(rec.topic.encode()) == vec["topic_length"]
    assert (len(rec.body), len(encode_record(rec))) == (vec["body_length"], vec["length"])
    assert rec.msg_id == vec["msg_id"]
    assert rec.uniq_key == vec["properties"].get("UNIQ_KEY")
    assert rec.tags == vec["properties"].get("TAGS") and rec.keys == vec["properties"].get("KEYS")


@pytest.mark.parametrize("rid", [r["id"] for r in RECORDS_494])
def test_encoding_the_listed_fields_reproduces_the_java_bytes(rid):
    """A Record built from the fixture's field values encodes to the bytes RocketMQ 4.9.4 wrote."""
    vec = ALL[rid]
    rec = Record(
        topic=vec["topic"], queue_id=vec["queue_id"], flag=vec["flag"], queue_offset=vec["queue_offset"],
        phys_offset=vec["physical_offset"], sys_flag=vec["sys_flag"], born_ts=vec["born_timestamp"],
        born_host=vec["born_host"], store_ts=vec["store_timestamp"], store_host=vec["store_host"],
        reconsume_times=vec["reconsume_times"], prepared_tx_offset=vec["prepared_transaction_offset"],
        body=bytes.fromhex(vec["body_hex"]), properties=dict(vec["properties"]))
    assert encode_record(rec) == _bin(vec)


@pytest.mark.parametrize("rid", list(ALL))
def test_decode_then_encode_is_identity(rid):
    """Re-encoding a decoded record (4.9.4 and 5.x, v1 and v2) gives its bytes back."""
    data = _bin(ALL[rid])
    assert encode_record(decode_record(data, 0)) == data


def test_commitlog_file_iterates_as_one_file():
    """commitlog.bin yields records a-h at the listed offsets and ends where the data ends."""
    data = (FIXTURES / "commitlog.bin").read_bytes()
    got = [(pos, rec.topic, rec.total_size) for pos, rec in iter_records(data)]
    expected = [(r["offset"], r["topic"], r["length"]) for r in VECTORS["records"]]
    assert got == expected and len(got) == VECTORS["record_count"] == 8
    assert sum(size for _, _, size in got) == VECTORS["commitlog_length"] == len(data)
    assert all(rec.phys_offset == pos for pos, rec in iter_records(data))


def test_v2_record_has_two_byte_topic_length():
    """The 5.x v2 record (200-char retry topic) decodes with the v2 magic and re-encodes exactly."""
    vec = ALL["y1"]
    data = _bin(vec)
    rec = decode_record(data, 0)
    assert rec.magic == MESSAGE_MAGIC_CODE_V2 and len(rec.topic) == 200
    assert rec.topic.startswith("%RETRY%")
    assert rec.properties_trailing_separator
    assert encode_record(dataclasses.replace(rec, magic=MESSAGE_MAGIC_CODE_V1, topic="short",
                                             total_size=0))[4:8] == MESSAGE_MAGIC_CODE_V1.to_bytes(4, "big")


def test_5x_property_crc_matches_record_bytes():
    """The 5.x __CRC32# property holds CRC(bytes before it) with the least significant digit first."""
    data = _bin(ALL["y2"])
    rec = decode_record(data, 0)
    digits = rec.properties["__CRC32#"]
    crc = zlib.crc32(data[:rec.total_size - PROP_CRC_RESERVED_BYTES]) & 0x7FFFFFFF
    assert crc == VECTORS["head_5x"]["property_crc32_value_of_y2"]
    assert digits == str(crc)[::-1].ljust(10, "0")
    assert property_crc_matches(data) is True
    flipped = bytearray(data)
    flipped[120] ^= 0x01
    assert property_crc_matches(bytes(flipped)) is False
    assert property_crc_matches(_bin(ALL["a"])) is None


def test_spec_worked_example_bytes():
    """The §1.2 worked example (TopicTest / Hello / TAGS=TagA with a trailing separator) is 115 exact bytes."""
    rec = Record(topic="TopicTest", queue_id=0, flag=0, queue_offset=0, phys_offset=0, sys_flag=0,
                 born_ts=1700000000000, born_host="127.0.0.1:50000", store_ts=1700000000123,
                 store_host="127.0.0.1:10911", reconsume_times=0, prepared_tx_offset=0, body=b"Hello",
                 properties={"TAGS": "TagA"}, properties_trailing_separator=True)
    expected = bytes.fromhex(
        "00000073 DAA320A7 77D18982 00000000 00000000 0000000000000000 0000000000000000"
        "00000000 0000018BCFE56800 7F000001 0000C350 0000018BCFE5687B 7F000001 00002A9F"
        "00000000 0000000000000000 00000005 48656C6C6F 09 546F70696354657374 000A 54414753 01 54616741 02")
    assert encode_record(rec) == expected
    assert rec.msg_id == "7F00000100002A9F0000000000000000"


def _decoder_test_message(born: str, store: str) -> Record:
    return Record(topic="abc", queue_id=1, flag=0, queue_offset=123, phys_offset=123456, sys_flag=0,
                  born_ts=0, born_host=born, store_ts=0, store_host=store, reconsume_times=0,
                  prepared_tx_offset=0, body=b"hello!q!",
                  properties={"a": "123", "b": "hello", "c": "3.14"}, body_crc=body_crc(b"hello!q!"))


@pytest.mark.parametrize("born, store, host_bytes", [
    ("127.0.0.1:0", "127.0.0.1:0", 8), ("[::1]:0", "[::1]:0", 20)])
def test_message_decoder_encode_and_decode(born, store, host_bytes):
    """MessageDecoderTest.testEncodeAndDecode (+IPv6, testDecodeProperties): fields and msgId survive."""
    rec = _decoder_test_message(born, store)
    data = encode_record(rec)
    props_len = len("a\x01123\x02b\x01hello\x02c\x013.14")
    assert len(data) == 4 * 5 + 8 * 2 + 4 + 8 + host_bytes + 8 + host_bytes + 4 + 8 + 4 + 8 + 1 + 3 + 2 + props_len
    back = decode_record(data, 0)
    assert (back.queue_id, back.phys_offset, back.body, back.topic) == (1, 123456, b"hello!q!", "abc")
    assert back.msg_id == create_message_id(store, 123456)
    assert back.properties == {"a": "123", "b": "hello", "c": "3.14"}
    assert back.sys_flag == (0x30 if host_bytes == 20 else 0)


def test_v6_bits_follow_the_host_strings():
    """Encoding sets or clears the V6 sysFlag bits from the host address types and keeps the others."""
    rec = dataclasses.replace(_decoder_test_message("127.0.0.1:1", "[2001:db8::1]:2"), sys_flag=0x10 | 0x8)
    back = decode_record(encode_record(rec), 0)
    assert back.sys_flag == 0x20 | 0x8
    assert back.born_host == "127.0.0.1:1" and back.store_host == "[2001:db8::1]:2"
    assert back.transaction_type == 0x8


@pytest.mark.parametrize("born, store", [("10.0.0.1:1", "10.0.0.2:2"), ("[::1]:3", "[fe80::2]:4")])
def test_append_patch_equals_direct_encoding(born, store):
    """encode_for_append + patch_append gives the bytes of encoding with the final offsets and time."""
    rec = _decoder_test_message(born, store)
    buf = encode_for_append(dataclasses.replace(rec, queue_offset=0, phys_offset=0, store_ts=0))
    patch_append(buf, 77, 1 << 40, 1_700_000_000_999)
    final = dataclasses.replace(rec, queue_offset=77, phys_offset=1 << 40, store_ts=1_700_000_000_999)
    assert bytes(buf) == encode_record(final)
    bigger = bytearray(10) + buf
    patch_append(bigger, 5, 6, 7, pos=10)
    assert decode_record(bigger, 10).queue_offset == 5 and decode_record(bigger, 10).store_ts == 7


def test_encode_limits_are_typed_errors():
    """Topic, properties and body limits and a bad magic raise BadInputError subclasses."""
    rec = _decoder_test_message("10.0.0.1:1", "10.0.0.2:2")
    with pytest.raises(RecordTooLargeError):
        encode_record(dataclasses.replace(rec, topic="t" * 128))
    with pytest.raises(RecordTooLargeError):
        encode_record(dataclasses.replace(rec, topic="城" * 43))  # 129 UTF-8 bytes
    assert decode_record(encode_record(dataclasses.replace(rec, topic="t" * 300, magic=MESSAGE_MAGIC_CODE_V2)),
                         0).topic == "t" * 300
    with pytest.raises(RecordTooLargeError) as too_large:
        encode_record(dataclasses.replace(rec, properties={"k": "v" * 32766}))
    assert too_large.value.part == "properties"
    encode_record(dataclasses.replace(rec, properties={"k": "v" * 32765}))  # exactly 32767 bytes
    with pytest.raises(RecordTooLargeError):
        encode_record(dataclasses.replace(rec, body=bytes(BODY_SIZE_BYTES_MAX + 1), body_crc=-1))
    with pytest.raises(BadInputError):
        encode_record(dataclasses.replace(rec, magic=0x12345678))
    with pytest.raises(BadInputError):
        encode_record(dataclasses.replace(rec, body_crc=1))
    with pytest.raises(BadInputError):
        encode_record(dataclasses.replace(rec, total_size=5))
    with pytest.raises(BadInputError):
        encode_record(dataclasses.replace(rec, queue_id=2**31))


def test_record_convenience_fields():
    """delay level, real topic/queue, retry topic, origin id and max reconsume times read the properties."""
    c = decode_record(_bin(ALL["c"]), 0)
    assert (c.delay_level, c.real_topic, c.real_queue_id) == (4, "%RETRY%GroupA", 0)
    assert c.retry_topic == "TopicTest" and c.origin_msg_id == ALL["a"]["msg_id"]
    assert c.max_reconsume_times == 16 and c.reconsume_times == 1
    a = decode_record(_bin(ALL["a"]), 0)
    assert (a.delay_level, a.real_topic, a.real_queue_id, a.max_reconsume_times) == (0, None, None, None)
    weird = dataclasses.replace(a, properties={"DELAY": "x", "REAL_QID": "y"})
    assert weird.delay_level == 0 and weird.real_queue_id is None


def test_compressed_body():
    """A zlib-compressed body (sysFlag 0x301) inflates to record f's body; LZ4/ZSTD say they are unsupported."""
    x2 = decode_record(_bin(ALL["x2"]), 0)
    f = decode_record(_bin(ALL["f"]), 0)
    assert x2.is_compressed and x2.sys_flag == 0x301
    assert x2.body_crc == body_crc(x2.body) and x2.decompressed_body() == f.body
    assert f.decompressed_body() == f.body
    assert dataclasses.replace(x2, sys_flag=0x001).decompressed_body() == f.body
    for flag, name in ((0x101, "LZ4"), (0x201, "ZSTD")):
        with pytest.raises(CorruptRecordError, match=name):
            dataclasses.replace(x2, sys_flag=flag).decompressed_body()
    with pytest.raises(CorruptRecordError):
        dataclasses.replace(x2, body=b"not zlib").decompressed_body()


# --- damage --------------------------------------------------------------------------------------

@pytest.mark.parametrize("rid", ["a", "e", "h", "x1", "y1"])
def test_torn_record_never_decodes(rid):
    """A record cut at any byte is CorruptRecordError or None, never a record or another exception."""
    data = _bin(ALL[rid])
    for cut in range(len(data)):
        try:
            assert decode_record(data[:cut], 0) is None
        except CorruptRecordError as exc:
            assert exc.offset == 0
        try:
            assert decode_record(data + b"\0" * 16, 0, limit=cut) is None
        except CorruptRecordError:
            pass
        padded = data[:cut] + bytes(len(data) - cut)  # a torn write into a zero-filled file
        if padded == data:
            continue  # the cut only removed bytes that were zero anyway
        try:
            assert decode_record(padded, 0) is None
        except CorruptRecordError:
            pass


def test_flipped_body_byte_is_a_crc_error():
    """Changing one body byte fails the CRC check; with check_crc=False the record still decodes."""
    data = bytearray(_bin(ALL["a"]))
    data[90] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_record(data, 0)
    assert decode_record(data, 0, check_crc=False).body_crc == ALL["a"]["body_crc"]


def test_zeroed_tail_ends_the_data():
    """Zeros after a record (unwritten space) end iteration without an error."""
    data = bytearray((FIXTURES / "commitlog.bin").read_bytes())
    data[740:] = bytes(len(data) - 740)
    assert [pos for pos, _ in iter_records(data)] == [0, 180, 410]
    assert decode_record(data, 740) is None and decode_record(data, len(data)) is None


def test_bad_total_size_and_lengths_are_corrupt():
    """A TOTALSIZE that disagrees with the field lengths, or negative lengths, raise CorruptRecordError."""
    good = _bin(ALL["a"])
    for patch in ((0, (179).to_bytes(4, "big")), (0, (100).to_bytes(4, "big")), (0, (-5).to_bytes(4, "big", signed=True)),
                  (84, (-1).to_bytes(4, "big", signed=True)), (84, (170).to_bytes(4, "big")),
                  (104, b"\xff"), (104, b"\x50"), (114, b"\x80\x00"), (114, b"\x00\x01")):
        data = bytearray(good)
        data[patch[0]:patch[0] + len(patch[1])] = patch[1]
        with pytest.raises(CorruptRecordError):
            decode_record(data, 0)


def test_torn_tail_detection_can_be_switched_off():
    """Zeroed property bytes are a torn write by default; detect_torn_tail=False accepts them like RocketMQ."""
    data = bytearray(_bin(ALL["a"]))
    data[-10:] = bytes(10)
    with pytest.raises(CorruptRecordError, match="torn"):
        decode_record(data, 0)
    assert decode_record(data, 0, detect_torn_tail=False).properties["KEYS"] == "order-1"
    topic_zeroed = bytearray(_bin(ALL["e"]))
    topic_zeroed[-4:-2] = bytes(2)
    with pytest.raises(CorruptRecordError, match="torn"):
        decode_record(topic_zeroed, 0)


def test_invalid_utf8_properties_are_corrupt():
    """Properties bytes that are not UTF-8 (a broker never writes them) raise CorruptRecordError."""
    data = bytearray(_bin(ALL["a"]))
    data[120] = 0xFF
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_record(data, 0)


def test_unknown_magic_is_end_of_data_and_blank_is_end_of_file():
    """An unknown magic returns None; a BLANK record returns Blank(size) and stops iteration."""
    data = bytearray(_bin(ALL["a"]))
    data[4:8] = b"\x12\x34\x56\x78"
    assert decode_record(data, 0) is None
    file_ = _bin(ALL["a"]) + encode_blank(100) + bytes(92)
    items = list(iter_records(file_))
    assert [pos for pos, _ in items] == [0, 180] and items[1][1] == Blank(100)
    assert encode_blank(8) == (8).to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big")
    with pytest.raises(CorruptRecordError):
        decode_record(encode_blank(100), 0)  # claims 100 bytes where only 8 remain
    with pytest.raises(CorruptRecordError):
        decode_record((4).to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big"), 0)


def test_real_494_store_files_decode_and_reencode():
    """Every file of a real 4.9.4 store iterates to the manifest's records and blanks and re-encodes exactly."""
    manifest = json.loads((STORE / "manifest.json").read_text())
    expected = {r["physicalOffset"]: r for r in manifest["commitLog"] if r["kind"] != "END"}
    seen = 0
    for path in sorted((STORE / "store-clean" / "commitlog").iterdir()):
        data = path.read_bytes()
        base = int(path.name)
        for pos, item in iter_records(data):
            want = expected[base + pos]
            seen += 1
            if isinstance(item, Blank):
                assert want["kind"] == "BLANK" and item.size == want["size"] == len(data) - pos
                continue
            assert (item.topic, item.queue_id, item.queue_offset) == (want["topic"], want["queueId"], want["queueOffset"])
            assert item.msg_id == want["offsetMsgId"] and item.properties == want["properties"]
            assert encode_record(item) == data[pos:pos + item.total_size]
    assert seen == len(expected) == 115
