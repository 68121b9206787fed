"""Message encodings checked against RocketMQ's own outputs (fixture vectors, a 4.9.4 store, §10.1)."""

from __future__ import annotations

import json
import random

import pytest
from testdata import COMMITLOG_FIXTURES, STORE_FIXTURES

from broker_core.errors import BadInputError
from broker_core.message import (
    PROP_DELAY,
    PROP_WAIT,
    JavaHashMap,
    UniqKeyGenerator,
    body_crc,
    broker_receive_properties,
    bytes_to_host,
    create_message_id,
    decode_message_id,
    delay_rewrite_map,
    delay_rewrite_properties,
    host_to_bytes,
    java_ordered_properties_string,
    java_string_hash,
    properties_to_string,
    schedule_deliver_properties,
    send_back_map,
    string_to_properties,
    tags_code,
    uniq_key_counter,
    uniq_key_ip,
    uniq_key_pid,
    uniq_key_time,
)

VECTORS = json.loads((COMMITLOG_FIXTURES / "vectors.json").read_text())
RECORDS_494 = {r["id"]: r for r in VECTORS["records"] + VECTORS["extra_records"]}
RECORDS_5X = {r["id"]: r for r in VECTORS["head_5x"]["records"]}
MANIFEST = json.loads((STORE_FIXTURES / "manifest.json").read_text())
STORE_MESSAGES = [r for r in MANIFEST["commitLog"] if r["kind"] == "MESSAGE"]


# --- hashes and CRC ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("TagA", 2598919), ("abc", 96354), ("*", 42), ("schedule_tag", 1162501618), ("", 0)])
def test_java_string_hash_examples(text, expected):
    """String.hashCode gives RocketMQ's documented example values."""
    assert java_string_hash(text) == expected


def test_java_string_hash_counts_utf16_units():
    """A character outside the BMP hashes as its two UTF-16 surrogates, and results wrap to int32."""
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("城市") == 31 * ord("城") + ord("市")
    value = java_string_hash("UNIQ_KEY" * 10)
    assert -(2**31) <= value < 2**31


def test_hash_and_buckets_match_every_fixture_key():
    """Every key's Java hash and bucket equal the values RocketMQ's generator recorded."""
    for rec in RECORDS_494.values():
        for entry in rec["properties_java_hashmap"]:
            assert java_string_hash(entry["key"]) == entry["string_hashCode"]
            assert JavaHashMap.bucket_of(entry["key"], 16) == entry["bucket16"]
    for rec in RECORDS_5X.values():
        for entry in rec["properties_java_hashmap"]:
            assert JavaHashMap.bucket_of(entry["key"], 128) == entry["bucket128"]


def test_tags_code_and_body_crc():
    """tagsCode is the TAGS hash (0 without tags); body CRC is zlib CRC-32 masked to 31 bits."""
    for rec in RECORDS_494.values():
        if "tags_code" in rec:
            assert tags_code(rec["properties"].get("TAGS")) == rec["tags_code"]
        assert body_crc(bytes.fromhex(rec["body_hex"])) == rec["body_crc"]
    assert tags_code(None) == 0 and tags_code("") == 0
    assert body_crc(b"hello!q!") == 1020379427


# --- properties string ---------------------------------------------------------------------------

def test_properties_to_string_494_and_5x():
    """4.9.4 writes no trailing separator, 5.x keeps it; None values are skipped."""
    for rec in RECORDS_494.values():
        assert properties_to_string(rec["properties"]) == rec["properties_string"]
    y0 = RECORDS_5X["y0"]
    assert properties_to_string(y0["properties"], trailing_separator=True) == y0["properties_string"]
    assert properties_to_string({"a": "1", "n": None, "b": "2"}) == "a\x011\x02b\x012"
    assert properties_to_string({}) == "" and properties_to_string({"n": None}) == ""


@pytest.mark.parametrize("text, expected", [
    ("k1\x01v1", {"k1": "v1"}),
    ("", {}), (" ", {}), ("aaa", {}),
    ("k1\x01", {}),
    ("\x01v1", {}),
    ("k1\x01v1\x02", {"k1": "v1"}),
    ("k1\x01v1\x02k2\x01v2", {"k1": "v1", "k2": "v2"}),
    ("k1\x01v1\x02\x01v2", {"k1": "v1"}),
    ("k1\x01v1\x02k2\x01", {"k1": "v1"}),
    ("\x01v1\x02k2\x01v2", {"k2": "v2"}),
    ("k1\x01\x02k2\x01v2", {"k2": "v2"}),
    ("1\x011\x022\x012", {"1": "1", "2": "2"}),
    ("\x011\x022\x012", {"2": "2"}),
    ("1\x011\x022\x01", {"1": "1"}),
    ("1\x011\x02\x012", {"1": "1"}),
])
def test_string2message_properties_cases(text, expected):
    """Every MessageDecoderTest.testString2messageProperties line parses to RocketMQ's result."""
    assert string_to_properties(text) == expected
    assert JavaHashMap.from_properties_string(text).to_dict() == expected


def test_string_to_properties_value_keeps_extra_separators_and_last_key_wins():
    """A value keeps further \\x01 characters and a repeated key keeps its last value."""
    assert string_to_properties("k\x01a\x01b\x02k\x01c\x02z\x01y") == {"k": "c", "z": "y"}
    assert string_to_properties("k\x01a\x01b") == {"k": "a\x01b"}
    assert string_to_properties(None) == {}


# --- Java HashMap order --------------------------------------------------------------------------

def test_hashmap_order_reproduces_every_fixture_property_string():
    """Parsing and re-serializing each fixture string through the HashMap gives its exact bytes."""
    for rec in RECORDS_494.values():
        props = JavaHashMap.from_properties_string(rec["properties_string"])
        assert props.keys() == rec["properties_order"]
        assert props.to_properties_string() == rec["properties_string"]
    for rid in ("y0", "y1"):
        rec = RECORDS_5X[rid]
        props = JavaHashMap.from_properties_string(rec["properties_string"], initial_capacity=128)
        assert props.capacity == 128
        assert props.to_properties_string(trailing_separator=True) == rec["properties_string"]


def test_hashmap_update_keeps_place_and_reput_moves_to_bucket_end():
    """Updating a key keeps its position; removing and putting it again moves it behind its bucket mates."""
    assert JavaHashMap.bucket_of(PROP_WAIT, 16) == JavaHashMap.bucket_of(PROP_DELAY, 16)
    props = JavaHashMap.from_items([(PROP_WAIT, "true"), (PROP_DELAY, "3")])
    assert props.keys() == [PROP_WAIT, PROP_DELAY]
    props.put(PROP_WAIT, "false")
    assert props.keys() == [PROP_WAIT, PROP_DELAY] and props.get(PROP_WAIT) == "false"
    assert props.remove(PROP_WAIT) == "false" and PROP_WAIT not in props
    props.put(PROP_WAIT, "true")
    assert props.keys() == [PROP_DELAY, PROP_WAIT]
    assert props.remove("absent") is None


def test_hashmap_resize_orders_by_new_buckets_keeping_insertion_order():
    """Above 0.75 * capacity the table doubles and iteration follows the new buckets, ties in put order."""
    keys = [f"key{i}" for i in range(13)]
    props = JavaHashMap.from_items((k, "v") for k in keys)
    assert props.capacity == 32
    expected = sorted(keys, key=lambda k: JavaHashMap.bucket_of(k, 32))  # sorted() is stable
    assert props.keys() == expected
    assert JavaHashMap(100).capacity == 128 and JavaHashMap(128).capacity == 128


def test_hashmap_long_bin_grows_small_table():
    """Nine keys in one bucket of a table below 64 slots make Java grow the table (treeifyBin)."""
    same = [k for k in (f"p{i}" for i in range(5000)) if JavaHashMap.bucket_of(k, 16) == 5][:9]
    props = JavaHashMap.from_items((k, "v") for k in same[:8])
    assert props.capacity == 16
    props.put(same[8], "v")
    assert props.capacity == 32
    assert props.keys() == sorted(same, key=lambda k: JavaHashMap.bucket_of(k, 32))



def test_hashmap_get_reads_its_own_entries_after_puts_removes_resizes_and_copies():
    """get sees every change to its own map and none to a copy's (or the copy's to it)."""
    props = JavaHashMap.from_items([("TAGS", "a"), ("KEYS", "k")])
    assert props.get("TAGS") == "a" and props.get("DELAY") is None and props.get("DELAY", "0") == "0"
    twin = props.copy()
    twin.put("TAGS", "b")
    twin.put("DELAY", "3")
    props.remove("KEYS")
    for i in range(40):  # past two resizes
        props.put(f"k{i}", str(i))
    assert (props.get("TAGS"), props.get("DELAY"), props.get("KEYS"), props.get("k39")) == ("a", None, None, "39")
    assert (twin.get("TAGS"), twin.get("DELAY"), twin.get("KEYS"), twin.get("k39")) == ("b", "3", "k", None)

# --- 4.9.4 broker paths ----------------------------------------------------------------------------

def test_delay_rewrite_reproduces_record_b():
    """The CommitLog delay path on record a's message plus DELAY=3 gives record b's property bytes."""
    a = RECORDS_494["a"]
    client = JavaHashMap.from_properties_string(a["properties_string"])
    client.put(PROP_DELAY, "3")
    got = delay_rewrite_properties(client.to_properties_string(), "TopicTest", 3)
    assert got == RECORDS_494["b"]["properties_string"]


def test_send_back_reproduces_records_c_and_d():
    """The send-back steps on decoded record a give records c (via the delay path) and d (DLQ) exactly."""
    a = RECORDS_494["a"]
    c_map = send_back_map(a["properties_string"], original_topic="TopicTest", delay_level=4,
                          offset_msg_id=a["msg_id"], wait=None, extra=[("MAX_RECONSUME_TIMES", "16")])
    assert delay_rewrite_map(c_map, "%RETRY%GroupA", 0) == RECORDS_494["c"]["properties_string"]
    d_map = send_back_map(a["properties_string"], original_topic="TopicTest", delay_level=None,
                          offset_msg_id=a["msg_id"], wait=None)
    assert d_map.to_properties_string() == RECORDS_494["d"]["properties_string"]


def _chains():
    chains: dict[str, list[dict]] = {}
    for rec in STORE_MESSAGES:
        chains.setdefault(rec["properties"]["UNIQ_KEY"], []).append(rec)
    return chains


def test_broker_paths_reproduce_every_record_of_a_494_store():
    """Send, delay, schedule delivery, retry and DLQ paths give every stored property string of a real 4.9.4 store."""
    checked = 0
    for uniq_key, chain in _chains().items():
        previous = None
        for rec in chain:
            props = rec["properties"]
            if previous is None:
                # A 4.9.4 client puts TAGS, KEYS, WAIT (constructor), DELAY, then UNIQ_KEY at send.
                puts = [("TAGS", props["TAGS"]), ("KEYS", props["KEYS"]), ("WAIT", "true")]
                if PROP_DELAY in props:
                    puts.append((PROP_DELAY, props[PROP_DELAY]))
                puts.append(("UNIQ_KEY", uniq_key))
                client = JavaHashMap.from_items(puts).to_properties_string()
                stored, in_memory = broker_receive_properties(client, "DefaultCluster")
                if rec["topic"] == "SCHEDULE_TOPIC_XXXX":
                    stored = delay_rewrite_map(in_memory, props["REAL_TOPIC"], int(props["REAL_QID"]))
            elif previous["topic"] == "SCHEDULE_TOPIC_XXXX":
                stored = schedule_deliver_properties(previous["propertiesString"])
            else:
                level = int(props[PROP_DELAY])
                in_memory = send_back_map(previous["propertiesString"], original_topic=previous["topic"],
                                          delay_level=level, offset_msg_id=previous["offsetMsgId"])
                stored = (delay_rewrite_map(in_memory, props["REAL_TOPIC"], 0) if level > 0
                          else in_memory.to_properties_string())
            assert stored == rec["propertiesString"], (rec["physicalOffset"], stored)
            checked += 1
            previous = rec
    assert checked == MANIFEST["recordCounts"]["messages"] == 112


def test_schedule_record_order_of_the_store():
    """A delayed send stores REAL_TOPIC, KEYS, UNIQ_KEY, CLUSTER, DELAY, WAIT, TAGS, REAL_QID (WAIT re-put last)."""
    first = next(r for r in STORE_MESSAGES if r["topic"] == "SCHEDULE_TOPIC_XXXX")
    assert list(first["properties"]) == ["REAL_TOPIC", "KEYS", "UNIQ_KEY", "CLUSTER", "DELAY", "WAIT",
                                         "TAGS", "REAL_QID"]
    client = JavaHashMap.from_items([("TAGS", "TagA"), ("KEYS", "k"), ("WAIT", "true"), ("DELAY", "3"),
                                     ("UNIQ_KEY", "U")]).to_properties_string()
    stored, in_memory = broker_receive_properties(client, "DefaultCluster")
    assert "WAIT" not in string_to_properties(stored)
    assert list(string_to_properties(delay_rewrite_map(in_memory, "T", 0))) == list(first["properties"])


def test_java_ordered_string_equals_a_fresh_hashmap_for_any_key_sequence():
    """java_ordered_properties_string gives the bytes of a new JavaHashMap filled in the same order."""
    rng = random.Random(6)
    names = ["KEYS", "TAGS", "WAIT", "DELAY", "UNIQ_KEY", "CLUSTER", "REAL_TOPIC", "REAL_QID",
             "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "MAX_RECONSUME_TIMES", "Aa", "BB", "x" * 40]
    for _ in range(3000):
        props = {key: rng.choice(["1", "v", "true", "a\x01b"])
                 for key in rng.sample(names, rng.randint(0, len(names)))}
        props.update((f"k{rng.randrange(10_000)}", "v") for _ in range(rng.randint(0, 14)))
        if props and rng.random() < 0.05:
            props[next(iter(props))] = None
        assert java_ordered_properties_string(props) == JavaHashMap.from_items(
            props.items()).to_properties_string(), props
    for rec in RECORDS_494.values():
        decoded = string_to_properties(rec["properties_string"])
        assert java_ordered_properties_string(decoded) == rec["properties_string"]


# --- hosts and message ids -------------------------------------------------------------------------

def test_message_id_examples():
    """createMessageId/decodeMessageId round-trip (MessageDecoderTest.testMessageId, IPv4 and IPv6)."""
    assert create_message_id("127.0.0.1:9103", 123456) == "7F0000010000238F000000000001E240"
    assert decode_message_id("7F0000010000238F000000000001E240") == ("127.0.0.1:9103", 123456)
    assert decode_message_id("7f0000010000238f000000000001e240") == ("127.0.0.1:9103", 123456)
    v6 = create_message_id("[::1]:0", 123456)
    assert len(v6) == 56 and decode_message_id(v6) == ("[::1]:0", 123456)
    for rec in RECORDS_494.values():
        assert create_message_id(rec["store_host"], rec["physical_offset"]) == rec["msg_id"]


def test_host_strings_both_ipv6_forms():
    """Java's uncompressed and Python's compressed IPv6 forms give the same bytes; output is compressed."""
    x1 = RECORDS_494["x1"]
    addr, port = host_to_bytes(x1["born_host"])
    assert (addr + port.to_bytes(4, "big")).hex() == x1["born_host_hex"]
    assert host_to_bytes("[2001:db8::10]:50000") == (addr, port)
    assert bytes_to_host(addr, port) == "[2001:db8::10]:50000"
    assert bytes_to_host(*host_to_bytes("192.168.0.10:50000")) == "192.168.0.10:50000"


@pytest.mark.parametrize("bad", ["nohost", "1.2.3.4", "1.2.3.4:70000", "[::1:5", "300.1.1.1:1"])
def test_bad_host_strings_are_typed_errors(bad):
    """A malformed host string raises BadInputError naming it."""
    with pytest.raises(BadInputError):
        host_to_bytes(bad)


@pytest.mark.parametrize("bad", ["", "XYZ", "7F00", "G" * 32])
def test_bad_message_ids_are_typed_errors(bad):
    """A message id of the wrong length or not hex raises BadInputError."""
    with pytest.raises(BadInputError):
        decode_message_id(bad)


# --- UNIQ_KEY --------------------------------------------------------------------------------------

def test_uniq_key_matches_a_java_client_id():
    """The generator reproduces an id a Java 4.9.4 client wrote (UTC month start, counter 0)."""
    first = STORE_MESSAGES[0]
    key = first["properties"]["UNIQ_KEY"]
    assert key == "C00002027C225FFD2B276D1F61390000"
    gen = UniqKeyGenerator("192.0.2.2", 0x7C22, 0x5FFD2B27)
    assert gen.next(first["bornTimestamp"] - 1) == key
    assert uniq_key_ip(key) == "192.0.2.2" and uniq_key_pid(key) == 0x7C22
    for rec in STORE_MESSAGES:
        assert rec["properties"]["UNIQ_KEY"].startswith(gen.prefix)


def test_uniq_key_counter_ip_pid_time():
    """Consecutive ids differ by one in the counter; ip, pid and nearly-now time decode back."""
    now = 1_700_000_000_123
    gen = UniqKeyGenerator("192.168.0.10", 70000, -5)
    one, two = gen.next(now), gen.next(now + 1)
    assert len(one) == 32 and one == one.upper()
    assert uniq_key_counter(two) == uniq_key_counter(one) + 1
    assert uniq_key_ip(one) == "192.168.0.10"
    assert uniq_key_pid(one) == 70000 & 0xFFFF
    assert uniq_key_time(one, now + 5) == now
    assert uniq_key_ip(UniqKeyGenerator("2001:db8::10", 1, 2).next(now)) == "2001:db8::10"
    assert uniq_key_ip(RECORDS_494["a"]["client_msg_id"]) == RECORDS_494["a"]["uniq_key_ip"]


def test_uniq_key_counter_wraps_and_month_restarts():
    """The counter wraps at 16 bits and the time field restarts at the next (UTC) month."""
    gen = UniqKeyGenerator("10.0.0.1", 1, 1)
    ids = [gen.next(0) for _ in range(65537)]
    assert uniq_key_counter(ids[65535]) == 0xFFFF and uniq_key_counter(ids[65536]) == 0
    feb_1970_ms = 31 * 86_400_000
    assert gen.next(feb_1970_ms - 1)[-12:-4] == f"{feb_1970_ms - 1:08X}"
    assert gen.next(feb_1970_ms + 7)[-12:-4] == "00000007"


def test_uniq_key_bad_ids():
    """A UNIQ_KEY that is not 16 or 28 hex bytes raises BadInputError."""
    with pytest.raises(BadInputError):
        uniq_key_pid("ABC")
    with pytest.raises(BadInputError):
        UniqKeyGenerator("not-an-ip", 1, 1)
