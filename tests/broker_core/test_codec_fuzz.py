"""Property-based fuzzing of the record codec and the properties parser (hypothesis, seconds to run)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import COMMITLOG_FIXTURES

from broker_core.codec import Blank, Record, decode_record, encode_record, iter_records
from broker_core.constants import MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
from broker_core.errors import CorruptRecordError
from broker_core.message import (
    JavaHashMap,
    bytes_to_host,
    properties_to_string,
    string_to_properties,
)

FIXTURES = COMMITLOG_FIXTURES
COMMITLOG = (FIXTURES / "commitlog.bin").read_bytes()
SEEDS = [COMMITLOG] + [(FIXTURES / name).read_bytes() for name in (
    "extra_x1_ipv6_hosts.bin", "extra_y1_v2_topic200_HEAD.bin", "extra_y2_v1_prop_crc32_HEAD.bin")]
# Enough examples to find shallow bugs while the whole file stays well under 20 s on 2 cores.
EXAMPLES_DECODE = 800
EXAMPLES_MUTATE = 800
EXAMPLES_PROPS = 1500
EXAMPLES_ROUNDTRIP = 300
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


EXAMPLES_RUN: dict[str, int] = {}


def _count(name: str) -> None:
    EXAMPLES_RUN[name] = EXAMPLES_RUN.get(name, 0) + 1


def _run(check, name: str) -> None:
    """Run a hypothesis check, print how many examples it tried, and require that it tried some."""
    EXAMPLES_RUN[name] = 0
    check()
    print(f"{name}: {EXAMPLES_RUN[name]} examples")
    assert EXAMPLES_RUN[name] > 0


def _decode_or_typed_error(buf: bytes, pos: int, limit: int | None) -> None:
    try:
        item = decode_record(buf, pos, limit=limit)
    except CorruptRecordError as exc:
        assert exc.offset == pos
        return
    assert item is None or isinstance(item, (Record, Blank))
    if isinstance(item, Record):
        assert item.total_size <= len(buf) - pos


@settings(FUZZ, max_examples=EXAMPLES_DECODE)
@given(buf=st.binary(max_size=400), pos=st.integers(0, 64), limit=st.none() | st.integers(0, 400))
def _arbitrary_bytes(buf, pos, limit):
    _count("arbitrary bytes")
    _decode_or_typed_error(buf, pos, limit)


def test_arbitrary_bytes_raise_only_typed_errors():
    """Any bytes at any position decode to a record, a blank, None or CorruptRecordError, nothing else."""
    _run(_arbitrary_bytes, "arbitrary bytes")


@settings(FUZZ, max_examples=EXAMPLES_MUTATE)
@given(data=st.data(), seed=st.sampled_from(SEEDS))
def _mutated_records(data, seed):
    _count("mutated records")
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(buf) - 1))
        buf[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        for pos, item in iter_records(bytes(buf[:cut])):
            assert isinstance(item, (Record, Blank)) and pos < cut
    except CorruptRecordError as exc:
        assert exc.offset is not None


def test_mutated_and_torn_real_records_raise_only_typed_errors():
    """Java-written records with bytes changed and a torn end iterate or raise CorruptRecordError only."""
    _run(_mutated_records, "mutated records")


@settings(FUZZ, max_examples=EXAMPLES_PROPS)
@given(text=st.text(alphabet=st.sampled_from("ab\x01\x02 k=\x00é") | st.characters(), max_size=60))
def _properties_text(text):
    _count("properties text")
    parsed = string_to_properties(text)
    for key, value in parsed.items():
        assert key and value and "\x01" not in key and "\x02" not in key + value
    assert JavaHashMap.from_properties_string(text).to_dict() == parsed
    assert string_to_properties(properties_to_string(parsed)) == parsed


def test_properties_parser_accepts_any_text():
    """string_to_properties never raises, keeps only well-formed pairs, and re-parses its own output."""
    _run(_properties_text, "properties text")


_TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02")
_KEY = st.text(_TEXT, min_size=1, max_size=12)
_VALUE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x02"),
                 min_size=1, max_size=20).filter(lambda v: not v.endswith("\x00"))


@st.composite
def _hosts(draw):
    addr = draw(st.ip_addresses())
    return bytes_to_host(addr.packed, draw(st.integers(0, 65535)))


@st.composite
def _records(draw):
    magic = draw(st.sampled_from([MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2]))
    topic = draw(st.text(_TEXT, max_size=140))
    if magic == MESSAGE_MAGIC_CODE_V1:  # the 1-byte length holds at most 127 UTF-8 bytes
        topic = topic.encode()[:127].decode("utf-8", "ignore")
    return Record(
        topic=topic, queue_id=draw(INT32), flag=draw(INT32), queue_offset=draw(INT64),
        phys_offset=draw(INT64), sys_flag=draw(INT32) & ~0x30, born_ts=draw(INT64),
        born_host=draw(_hosts()), store_ts=draw(INT64), store_host=draw(_hosts()),
        reconsume_times=draw(INT32), prepared_tx_offset=draw(INT64),
        body=draw(st.binary(max_size=300)), properties=draw(st.dictionaries(_KEY, _VALUE, max_size=6)),
        magic=magic, properties_trailing_separator=draw(st.booleans()))


@settings(FUZZ, max_examples=EXAMPLES_ROUNDTRIP)
@given(rec=_records())
def _round_trip(rec):
    _count("record round trip")
    data = encode_record(rec)
    back = decode_record(data + bytes(8), 0)
    assert back.total_size == len(data)
    for name in ("topic", "queue_id", "flag", "queue_offset", "phys_offset", "born_ts", "born_host",
                 "store_ts", "store_host", "reconsume_times", "prepared_tx_offset", "body", "magic"):
        assert getattr(back, name) == getattr(rec, name), name
    assert list(back.properties.items()) == list(rec.properties.items())
    assert back.sys_flag & ~0x30 == rec.sys_flag
    assert encode_record(back) == data
    assert [p for p, _ in iter_records(data + data)] == [0, len(data)]


def test_generated_records_round_trip():
    """Any record with valid fields (unicode topic, properties, IPv4/IPv6 hosts, v1/v2) decodes to itself."""
    _run(_round_trip, "record round trip")
