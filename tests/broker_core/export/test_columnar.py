"""The columnar commit-log decoder gives the reference decoder's rows and problems, store by store.

The reference is whatever :class:`StoreReader` and ``record_to_values`` do when the test runs:
every comparison decodes the same store with both and requires the same ``commitlog`` table
(every column), the same problems in the same order, the same counts and store times, or the
same error.
"""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import COMMITLOG_FIXTURES, STORE_MANIFEST

from broker_core import codec
from broker_core.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2
from broker_core.export import columnar
from broker_core.export.columnar import ColumnarStoreReader
from broker_core.export.schema import COMMITLOG
from broker_core.export.store_import import DECODERS, commitlog_values, import_store
from broker_core.store.reader import StoreReader

ROOT = Path(__file__).resolve().parents[3]
ENCODED = COMMITLOG_FIXTURES
RUN, BROKER = "run", "broker-a"


def decode(store: Path, reader_class, check_crc: bool = True) -> tuple:
    """What one decoder makes of a store: its table, problems and counts, or the error it raised."""
    try:
        reader = reader_class(store, check_crc=check_crc)
        if reader_class is StoreReader:
            rows = list(commitlog_values(reader, RUN, BROKER))
            columns = list(zip(*rows, strict=True)) if rows else [()] * len(COMMITLOG)
            table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, COMMITLOG,
                                                                                          strict=True)],
                                         schema=COMMITLOG)
        else:
            tables = [batch.table(RUN, BROKER) for batch in reader.batches()]
            table = pa.concat_tables(tables) if tables else COMMITLOG.empty_table()
    except Exception as exc:  # the reference's failures are part of what must be equal
        return ("error", type(exc).__name__, str(exc))
    facts = (reader.valid_end, reader.record_count, reader.blank_count, reader.first_store_ts,
             reader.last_store_ts)
    return ("ok", table, reader.problems, facts)


def assert_same(store: Path, check_crc: bool = True) -> tuple:
    """Both decoders agree on ``store``; returns the reference's outcome."""
    want = decode(store, StoreReader, check_crc)
    got = decode(store, ColumnarStoreReader, check_crc)
    assert got[0] == want[0], (want, got)
    if want[0] == "error":
        assert got == want
        return want
    _, want_table, want_problems, want_facts = want
    _, got_table, got_problems, got_facts = got
    assert got_table.num_rows == want_table.num_rows
    for name in COMMITLOG.names:
        # Timestamps as their int64 ms: a Java long store time can be out of datetime's range.
        plain = (lambda c: c.cast(pa.int64())) if pa.types.is_timestamp(COMMITLOG.field(name).type) else (lambda c: c)
        a, b = plain(want_table[name]).to_pylist(), plain(got_table[name]).to_pylist()
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
        assert first is None, f"{name} row {first}: reference {a[first]!r}, columnar {b[first]!r}"
    assert got_table.equals(want_table)
    assert [str(p) for p in got_problems] == [str(p) for p in want_problems]
    assert got_problems == want_problems
    assert got_facts == want_facts
    return want


# --- stores to compare ---------------------------------------------------------------------------

def write_store(root: Path, files: list[bytes], file_size: int) -> Path:
    """A store root whose commit log holds ``files`` (each zero-padded to ``file_size``)."""
    log = root / "commitlog"
    log.mkdir(parents=True)
    for index, data in enumerate(files):
        assert len(data) <= file_size
        (log / str(index * file_size).zfill(20)).write_bytes(data + bytes(file_size - len(data)))
    return root


def test_records_from_rocketmqs_encoder_decode_alike(tmp_path):
    """Records written by RocketMQ's own encoder (v1 and 5.x v2 magic, IPv6 hosts, a compressed
    body, a property CRC, UTF-8 properties, a 127-byte topic) give the same rows from both."""
    chained = [ENCODED / name for name in ("commitlog.bin", "extra_x1_ipv6_hosts.bin",
                                           "extra_x2_zlib_compressed.bin", "extra_y1_v2_topic200_HEAD.bin",
                                           "extra_y2_v1_prop_crc32_HEAD.bin")]
    # Then each record again, away from the offset it was encoded for: phys-offset warnings.
    loose = sorted(p for p in ENCODED.glob("*.bin") if p.name != "commitlog.bin")
    data = b"".join(p.read_bytes() for p in chained + loose)
    _, table, problems, _ = assert_same(write_store(tmp_path / "store", [data], 64 * 1024))
    assert table.num_rows == 12 + len(loose)
    assert set(table["magic"].to_pylist()) == {"0xDAA320A7", "0xDAA320AB"}
    assert any(h.startswith("[") for h in table["store_host"].to_pylist())
    assert {p.kind for p in problems} == {"phys-offset-mismatch", "checkpoint-missing"}


@pytest.mark.parametrize("check_crc", [True, False])
def test_property_crc_tails_that_do_not_match_are_the_same_warning_from_both(tmp_path, check_crc):
    """A 5.x __CRC32# tail is checked against the record's bytes by both decoders: a changed tail
    digit or a changed byte before it (outside the body) is one property-crc-mismatch warning at
    that record, the record kept; a sound tail and a record without one give none."""
    good = (ENCODED / "extra_y2_v1_prop_crc32_HEAD.bin").read_bytes()
    plain = (ENCODED / "extra_x1_ipv6_hosts.bin").read_bytes()
    assert codec.property_crc_matches(good) is True and codec.property_crc_matches(plain) is None
    digit_at = len(good) - 2  # the tail's last digit, before its \x02
    bad_digit = bytearray(good)
    bad_digit[digit_at] = ord("0") + (good[digit_at] - ord("0") + 1) % 10
    bad_born = bytearray(good)
    bad_born[codec.BORN_HOST_POS - 1] ^= 0x01  # the born timestamp's last byte: no body CRC covers it
    records = [good, bytes(bad_digit), plain, bytes(bad_born), good]
    _, table, problems, _ = assert_same(write_store(tmp_path / "store", [b"".join(records)], 64 * 1024),
                                        check_crc=check_crc)
    assert table.num_rows == len(records)
    starts = [sum(len(r) for r in records[:i]) for i in range(len(records))]
    crc_problems = [p for p in problems if p.kind == "property-crc-mismatch"]
    assert [p.offset for p in crc_problems] == [starts[1], starts[3]]
    assert all(p.severity == "warning" for p in crc_problems), crc_problems


@pytest.mark.parametrize("name", ["store-clean", "store-crashed"])
def test_real_4_9_4_stores_decode_alike(store_fixtures, name):
    """The stores a real 4.9.4 broker wrote, clean and after a crash, give the same rows and problems."""
    _, table, problems, _ = assert_same(store_fixtures / name)
    assert table.num_rows in (111, 112)
    assert (problems != []) == (name == "store-crashed")


@pytest.mark.parametrize("name", ["store-clean", "store-crashed"])
@pytest.mark.parametrize("deleted", [1, 2])
def test_stores_retention_truncated_decode_alike(writable_store_copy, name, deleted):
    """A 4.9.4 store whose oldest commit-log files retention deleted (consume-queue units below its
    first offset) gives the same rows and problems from both decoders."""
    store = writable_store_copy(name)
    for path in sorted((store / "commitlog").iterdir())[:deleted]:
        path.unlink()
    _, table, _, facts = assert_same(store)
    assert table.num_rows > 0 and table["phys_offset"][0].as_py() >= deleted * 16 * 1024


@pytest.fixture(scope="module")
def simulated(simulated_run):
    """The stores of simulated runs: every hop kind, a torn write, a broker crash."""
    return {scenario: simulated_run(scenario) / "store"
            for scenario in ("small", "fault-torn-write", "fault-broker-crash")}


@pytest.mark.parametrize("scenario", ["small", "fault-torn-write", "fault-broker-crash"])
def test_simulated_stores_decode_alike(simulated, scenario):
    """A simulated broker's store gives the same rows and problems from both decoders."""
    _, table, _, _ = assert_same(simulated[scenario])
    assert table.num_rows > 500


def test_slices_of_any_size_decode_alike(simulated, monkeypatch):
    """Slices cut anywhere (a few records, a few KiB) join into the same rows."""
    for records, size in ((7, 1 << 20), (1 << 16, 3000), (1, 1)):
        monkeypatch.setattr(columnar, "SLICE_RECORDS", records)
        monkeypatch.setattr(columnar, "SLICE_BYTES", size)
        assert_same(simulated["small"])
        batches = list(ColumnarStoreReader(simulated["small"]).batches())
        assert max(b.num_rows for b in batches) <= records and len(batches) > 1


@pytest.mark.parametrize("source", ["small", "store-crashed"])
def test_import_writes_the_same_files_with_either_decoder(simulated, store_fixtures, tmp_path, source):
    """import-store writes byte-identical Parquet files and the same summary with either decoder."""
    store = simulated[source] if source in simulated else store_fixtures / source
    summaries = {}
    for decoder in ("reference", "columnar"):
        summary = import_store(store, tmp_path / decoder, name="run", decoder=decoder)
        summaries[decoder] = {k: v for k, v in summary.to_json().items() if k != "out_dir"}
    assert summaries["columnar"] == summaries["reference"]
    files = sorted(p.relative_to(tmp_path / "reference") for p in (tmp_path / "reference").rglob("*.parquet"))
    assert files and files == sorted(p.relative_to(tmp_path / "columnar")
                                     for p in (tmp_path / "columnar").rglob("*.parquet"))
    for rel in files:
        assert (tmp_path / "columnar" / rel).read_bytes() == (tmp_path / "reference" / rel).read_bytes(), rel
    assert pq.read_table(tmp_path / "columnar" / "parquet" / "commitlog").num_rows == summary.records > 0


def test_unknown_decoder_is_bad_input(store_fixtures, tmp_path):
    """A decoder name import_store does not know is refused before anything is written."""
    with pytest.raises(Exception, match="unknown decoder 'fast'"):
        import_store(store_fixtures / "store-clean", tmp_path / "x", decoder="fast")
    assert not (tmp_path / "x").exists()


# --- damaged copies of a real store --------------------------------------------------------------

STORE_FILES = 4  # store-clean: four 16 KiB files, so damage lands before and inside the recovery window
FILE_SIZE = 16 * 1024
MANIFEST = STORE_MANIFEST
# (commit-log file index, position) of every record and BLANK of store-clean
ENTRIES = [(int(e["file"].rsplit("/", 1)[1]) // FILE_SIZE, e["filePos"])
           for e in json.loads(MANIFEST.read_text())["commitLog"]]
# A record's fields by position: TOTALSIZE, magic, body CRC, sysFlag, body length, and (by the
# record's own sizes, see apply_damage) the topic length, properties length and last byte.
FIELDS = [0, 4, 8, 36, 84, "topic_len", "props_len", "last"]

damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, STORE_FILES - 1), st.integers(0, FILE_SIZE - 1),
              st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, STORE_FILES - 1), st.integers(0, FILE_SIZE - 4),
              st.sampled_from([b"\0\0\0\0", b"\xff\xff\xff\xff", b"\0\0\0\x10", b"\x7f\xff\xff\xff",
                               struct.pack(">I", BLANK_MAGIC_CODE), struct.pack(">I", MESSAGE_MAGIC_CODE_V2),
                               b"\xc3\x28", b"\x02\x02", b"\x01\x01"])),
    st.tuples(st.just("truncate"), st.integers(0, STORE_FILES - 1), st.integers(0, FILE_SIZE), st.just(0)),
    st.tuples(st.just("zeros"), st.integers(0, STORE_FILES - 1), st.integers(0, FILE_SIZE - 1),
              st.integers(1, 600)),
    st.tuples(st.just("append"), st.integers(0, STORE_FILES - 1), st.just(0), st.integers(1, 40)),
    st.tuples(st.just("abort"), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("field"), st.integers(0, len(ENTRIES) - 1), st.sampled_from(FIELDS),
              st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])),
)


def apply_damage(store: Path, kind: str, index: int, pos, value) -> None:
    if kind == "abort":
        (store / "abort").write_bytes(b"")
        return
    if kind == "field":  # one byte of a record's field set to value (the low byte of a number)
        index, start = ENTRIES[index]
        path = sorted((store / "commitlog").iterdir())[index]
        data = bytearray(path.read_bytes())
        if start + 89 > len(data):  # an earlier damage cut the file here, or a BLANK at its end
            return
        total, = struct.unpack_from(">i", data, start)
        if isinstance(pos, int):
            at = start + pos + (3 if pos != 0 or value != 0x80 else 0)  # 0x80 into TOTALSIZE's top byte
        else:
            body_len, = struct.unpack_from(">i", data, start + 84)
            topic_at = start + 88 + max(0, body_len)
            at = {"topic_len": topic_at,
                  "props_len": topic_at + 1 + (data[topic_at] if topic_at < len(data) else 0),
                  "last": start + total - 1}[pos]
        if 0 <= at < len(data):
            data[at] = value
        path.write_bytes(bytes(data))
        return
    path = sorted((store / "commitlog").iterdir())[index]
    data = bytearray(path.read_bytes())
    if kind == "flip" and pos < len(data):
        data[pos] ^= value
    elif kind == "set":
        data[pos:pos + len(value)] = value
    elif kind == "truncate":
        del data[pos:]
    elif kind == "zeros":
        data[pos:pos + value] = bytes(len(data[pos:pos + value]))
    elif kind == "append":
        data += bytes(range(1, value + 1))
    path.write_bytes(bytes(data))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damages=st.lists(damage, min_size=1, max_size=4))
def test_damaged_stores_decode_alike(store_fixtures, damages):
    """A real store with bytes flipped, fields overwritten (sizes, magics, CRCs, lengths, separators),
    files cut, zeroed or grown, or an abort file, gives the same rows and problems from both decoders."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        shutil.copytree(store_fixtures / "store-clean", store)
        for d in damages:
            apply_damage(store, *d)
        assert_same(store)


# --- generated records ---------------------------------------------------------------------------

_KEYS = ["UNIQ_KEY", "ORIGIN_MESSAGE_ID", "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "DELAY",
         "MAX_RECONSUME_TIMES", "TAGS", "KEYS", "CLUSTER", "k", ""]
# Numbers as Python's int() reads them and Arrow's cast does not, or neither does.
_INT_TEXTS = ["0", "3", "-1", "007", "+5", " 5", "1_0", "\u0663", "x", "2147483647", "999999999", ""]
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"),
               max_size=12)


def pairs(values):
    return st.tuples(st.sampled_from(_KEYS), values).map(lambda kv: f"{kv[0]}\x01{kv[1]}".encode())


# A broker's records: valid UTF-8, no torn tail, ports in range, the right CRC; the properties
# still with what string2messageProperties must sort out (empty or repeated keys, empty values,
# a trailing separator, \x01 inside a value, numbers only Python reads).
good_props = st.tuples(
    st.lists(pairs(st.one_of(st.sampled_from(_INT_TEXTS), text, st.text(alphabet="ab\x01é", max_size=6))),
             max_size=8).map(lambda ps: b"\x02".join(ps)),
    st.sampled_from([b"", b"", b"", b"\x02", b"\x02\x02x"]),
).map(lambda pt: pt[0] + pt[1])
good_host = st.one_of(st.sampled_from([(bytes([10, 0, 0, 1]), 10911), (bytes([10, 0, 0, 2]), 50000)]),
                      st.tuples(st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
                      st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 65535)))
good = st.fixed_dictionaries({
    "v2": st.booleans(),
    "topic": st.one_of(st.sampled_from(["OrderTopic", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"]), text,
                       st.text(alphabet="aé", min_size=100, max_size=200)).map(str.encode),
    "props": good_props, "body": st.binary(max_size=64), "born": good_host, "store": good_host,
    "queue_id": st.integers(-2**31, 2**31 - 1), "queue_offset": st.integers(-2**63, 2**63 - 1),
    "ts": st.integers(-2**63, 2**63 - 1), "sys_flag": st.sampled_from([0, 1, 4, 8, 0x300]),
    "bad_crc": st.just(False), "misplaced": st.integers(0, 9).map(lambda i: i == 0),
})
# What a broker does not write: bytes that are not UTF-8, NULs, a wrong CRC, a port out of
# range, a number past int32 (both decoders keep the record and list a warning for those two).
odd = good.flatmap(lambda rec: st.one_of(
    st.binary(max_size=40).map(lambda b: {**rec, "props": b}),
    st.lists(st.sampled_from([b"\x01", b"\x02", b"a", b"\xc3\xa9", b"\xff", b"\x00", b"DELAY", b"3"]),
             max_size=16).map(lambda bs: {**rec, "props": b"".join(bs)}),
    st.binary(max_size=20).map(lambda b: {**rec, "topic": b}),
    st.just({**rec, "bad_crc": True, "body": rec["body"] or b"x"}),
    st.integers(-2**31, 2**31 - 1).map(lambda port: {**rec, "store": (rec["store"][0], port)}),
    st.sampled_from(["DELAY", "REAL_QID", "MAX_RECONSUME_TIMES"]).map(
        lambda key: {**rec, "props": rec["props"] + f"\x02{key}\x0112345678901".encode()}),
))


def encode(rec: dict, phys: int) -> bytes:
    """A record with the given raw topic and properties bytes, hosts, fields and magic."""
    born_addr, born_port = rec["born"]
    store_addr, store_port = rec["store"]
    v6 = (0x10 if len(born_addr) == 16 else 0) | (0x20 if len(store_addr) == 16 else 0)
    header = codec.RECORD_HEADERS[v6 >> 4]
    topic = rec["topic"]
    if not rec["v2"] and len(topic) > 127:
        topic = topic[:127].decode("utf-8", "ignore").encode()  # a v1 topic has at most 127 bytes
    topic_field = (struct.pack(">h", len(topic)) if rec["v2"] else bytes([len(topic)])) + topic
    body = rec["body"]
    crc = zlib.crc32(body) & 0x7FFFFFFF if body else 0
    if rec["bad_crc"]:
        crc ^= 1
    total = header.size + len(body) + len(topic_field) + 2 + len(rec["props"])
    stored_phys = phys + rec["misplaced"]
    head = header.pack(total, MESSAGE_MAGIC_CODE_V2 if rec["v2"] else MESSAGE_MAGIC_CODE_V1, crc,
                       rec["queue_id"], 0, rec["queue_offset"], stored_phys, rec["sys_flag"] | v6, rec["ts"],
                       born_addr, born_port, rec["ts"] ^ 1, store_addr, store_port, 3, 0, len(body))
    return head + body + topic_field + struct.pack(">h", len(rec["props"])) + rec["props"]


def layout(records: list[bytes], file_size: int) -> list[bytes]:
    """Commit-log files as a broker fills them: records in order, a BLANK where the next does not fit."""
    files, current = [], b""
    for data in records:
        if len(current) + len(data) + 8 > file_size:
            files.append(current + struct.pack(">iI", file_size - len(current), BLANK_MAGIC_CODE))
            current = b""
        current += data
    return files + [current]


def build(recs: list[dict], file_size: int) -> list[bytes]:
    """The records' commit-log files; a record that does not fit in a file is left out."""
    encoded, phys = [], 0
    for rec in recs:
        data = encode(rec, phys)
        if len(data) + 8 > file_size:
            continue
        if phys % file_size + len(data) + 8 > file_size:
            phys += file_size - phys % file_size
            data = encode(rec, phys)
        encoded.append(data)
        phys += len(data)
    return layout(encoded, file_size)


@settings(max_examples=200, deadline=None)
@given(recs=st.lists(good, min_size=3, max_size=40), odds=st.lists(st.tuples(st.integers(0, 40), odd), max_size=3),
       slice_records=st.sampled_from([1, 3, 1 << 16]), check_crc=st.booleans())
def test_generated_records_decode_alike(recs, odds, slice_records, check_crc):
    """Records with any topic and properties bytes (malformed pairs, repeated keys, numbers Python
    reads and Arrow does not, invalid UTF-8, NULs), v4 and v6 hosts, any ports, wrong CRCs and
    misplaced offsets give the same rows, problems or error from both decoders, with the CRC
    check on or off."""
    for at, rec in odds:
        recs.insert(at, rec)
    file_size = 1024
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(columnar, "SLICE_RECORDS", slice_records)
        assert_same(write_store(Path(tmp) / "store", build(recs, file_size), file_size), check_crc)


# --- values a record can hold that the contract's columns cannot --------------------------------

def _plain(**changes) -> dict:
    rec = {"v2": False, "topic": b"OrderTopic", "props": b"UNIQ_KEY\x01u1\x02TAGS\x01a", "body": b"hello",
           "born": (bytes([10, 0, 0, 9]), 40000), "store": (bytes([10, 0, 0, 1]), 10911),
           "queue_id": 0, "queue_offset": 0, "ts": 1_700_000_000_000, "sys_flag": 0,
           "bad_crc": False, "misplaced": False}
    return {**rec, **changes}


@pytest.mark.parametrize("check_crc", [True, False])
def test_ports_out_of_range_are_problems_not_crashes(tmp_path, check_crc):
    """A host port outside 0-65535 (the record's int32 holds any value) keeps the record, as the
    broker's recovery does, names the record in a warning, and its msgId carries the stored port
    bytes, as RocketMQ's createMessageId copies them; both decoders agree."""
    recs = [_plain(), _plain(store=(bytes([10, 0, 0, 1]), 70000)), _plain(born=(bytes([10, 0, 0, 9]), -1)),
            _plain(store=(bytes(range(16)), 2**31 - 1)), _plain(), _plain(store=(bytes([10, 0, 0, 1]), -5))]
    store = write_store(tmp_path / "store", build(recs, 4096), 4096)
    status, table, problems, _ = assert_same(store, check_crc)
    assert status == "ok" and table.num_rows == len(recs)
    hosts = table["store_host"].to_pylist()
    assert hosts[1] == "10.0.0.1:70000" and hosts[5] == "10.0.0.1:-5"
    msg_ids = table["msg_id"].to_pylist()
    phys = table["phys_offset"].to_pylist()
    assert msg_ids[1] == f"0A000001{70000:08X}{phys[1]:016X}"
    assert msg_ids[5] == f"0A000001FFFFFFFB{phys[5]:016X}"
    assert msg_ids[3] == f"{bytes(range(16)).hex().upper()}7FFFFFFF{phys[3]:016X}"
    bad = [(p.offset, p.severity) for p in problems if p.kind == "host-port-out-of-range"]
    assert bad == [(phys[i], "warning") for i in (1, 2, 3, 5)]
    summary = import_store(store, tmp_path / "run", name="run")
    assert summary.records == len(recs)
    assert [p.kind for p in summary.problems].count("host-port-out-of-range") == 4


@pytest.mark.parametrize("key,column,absent", [("DELAY", "delay_level", 0), ("REAL_QID", "real_queue_id", None),
                                               ("MAX_RECONSUME_TIMES", "max_reconsume_times", None)])
@pytest.mark.parametrize("text", ["2147483648", "3000000000", "-2147483649", "99999999999999999999"])
def test_int_properties_past_int32_are_problems_not_crashes(tmp_path, key, column, absent, text):
    """A DELAY, REAL_QID or MAX_RECONSUME_TIMES value outside int32 (Java's Integer.parseInt
    refuses it) leaves the column as if the property were absent and names the record in a
    warning; the record itself is kept, and both decoders agree."""
    props = f"UNIQ_KEY\x01u1\x02{key}\x01{text}".encode()
    recs = [_plain(), _plain(props=props), _plain(props=f"{key}\x012147483647".encode()), _plain(props=props)]
    store = write_store(tmp_path / "store", build(recs, 4096), 4096)
    for reader_class in (StoreReader, ColumnarStoreReader):
        assert decode(store, reader_class)[0] == "ok", reader_class
    _, table, problems, _ = assert_same(store)
    assert table[column].to_pylist() == [absent, absent, 2147483647, absent]
    assert table["properties"].to_pylist()[1][1] == (key, text)  # the map keeps the text as stored
    phys = table["phys_offset"].to_pylist()
    bad = [p for p in problems if p.kind == "property-out-of-range"]
    assert [(p.offset, p.severity) for p in bad] == [(phys[1], "warning"), (phys[3], "warning")]
    assert key in bad[0].reason and text in bad[0].reason
    for decoder in DECODERS:
        summary = import_store(store, tmp_path / decoder, name="run", decoder=decoder)
        assert summary.records == len(recs)
        assert pq.read_table(tmp_path / decoder / "parquet" / "store_problems")["kind"].to_pylist().count(
            "property-out-of-range") == 2


def test_a_row_group_that_fails_to_encode_fails_the_write_and_the_rows_before_it_stand(tmp_path, monkeypatch):
    """Row groups are encoded on a thread while the next is decoded: a group that fails there
    (here a column of the wrong type) raises from the writer's next call, not silently."""
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", 2)
    schema = pa.schema([("n", pa.int64())])
    writer = columnar.CommitlogWriter(tmp_path, "t", part="p.parquet", schema=schema)
    writer.write(pa.table({"n": pa.array([1, 2], pa.int64())}))
    writer.write(pa.table({"n": pa.array(["x", "y"])}))  # not the file's schema
    with pytest.raises(ValueError, match="schema"):
        writer.write(pa.table({"n": pa.array([5, 6], pa.int64())}))
    writer._writer.close()
    assert pq.read_table(tmp_path / "t" / "p.parquet")["n"].to_pylist() == [1, 2]


def test_row_groups_written_on_the_encoding_thread_are_the_rows_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", 3)
    schema = pa.schema([("n", pa.int64())])
    writer = columnar.CommitlogWriter(tmp_path, "t", part="p.parquet", schema=schema)
    for start in range(0, 20, 4):
        writer.write(pa.table({"n": pa.array(range(start, start + 4), pa.int64())}))
    assert writer.close() == 20
    written = pq.ParquetFile(tmp_path / "t" / "p.parquet")
    assert written.read()["n"].to_pylist() == list(range(20))
    assert [written.metadata.row_group(i).num_rows for i in range(written.num_row_groups)] == [3] * 6 + [2]
