"""The import of the message trace real 4.9.4 clients wrote (tests/data/rocketmq-4.9.4-trace).

The stores and the driver's own log (clients.jsonl) come from real brokers and clients with trace
on; docs/client-trace.md says what the records are.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from broker_core.export.client_trace import PROBLEM_TRACE_UNREADABLE
from broker_core.export.store_import import import_store

DATA = Path(__file__).resolve().parents[2] / "data" / "rocketmq-4.9.4-trace"
BROKERS = ("broker-a", "broker-b")
BODY_CRC_AT, BODY_LENGTH_AT = 8, 84  # a v1 record with IPv4 hosts


def _import(stores: Path, out: Path) -> list[dict]:
    for broker in BROKERS:
        import_store(stores / broker, out, name="trace", broker=broker)
    return pq.read_table(out / "parquet" / "client_trace").to_pylist()


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> list[dict]:
    return _import(DATA, tmp_path_factory.mktemp("trace") / "run")


def test_every_record_the_clients_traced_is_a_row_with_its_fields(traced):
    """The import holds, per broker, each trace record the real clients wrote, and they are the
    driver's own events: each SEND_OK with its offset msgId, each listener call with its group,
    reconsume times and outcome, each transaction answer."""
    events = [json.loads(line) for line in (DATA / "clients.jsonl").read_text().splitlines()]
    assert {r["broker"] for r in traced} == set(BROKERS)
    pubs = {r["msg_id"]: r for r in traced if r["trace_type"] == "Pub"}
    plain = [e for e in events if e["ev"] == "send" and e.get("msg_id")]
    assert plain and all(pubs[e["uniq_key"]]["offset_msg_id"] == e["msg_id"] and pubs[e["uniq_key"]]["success"]
                         for e in plain)
    before = {(r["request_id"], r["msg_id"]): r for r in traced if r["trace_type"] == "SubBefore"}
    calls = Counter((before[(r["request_id"], r["msg_id"])]["group"], r["msg_id"],
                     before[(r["request_id"], r["msg_id"])]["retry_times"], r["success"])
                    for r in traced if r["trace_type"] == "SubAfter")
    assert calls == Counter((e["group"], e["uniq_key"], e["reconsume_times"], e["status"] == "CONSUME_SUCCESS")
                            for e in events if e["ev"] == "consume")
    answers = Counter((r["msg_id"], r["from_transaction_check"], r["transaction_state"])
                      for r in traced if r["trace_type"] == "EndTransaction")
    assert answers == Counter((e["uniq_key"], e["stage"] == "check", e["answer"]) for e in events if e["ev"] == "txn")
    after = [r for r in traced if r["trace_type"] == "SubAfter"]
    assert all(r["group"] and r["ts"] and r["consume_return"] for r in after)  # 4.9.4 writes all three


def test_a_record_that_does_not_parse_is_a_warning_and_its_neighbours_are_kept(traced, tmp_path):
    """A trace record whose retry times is no number is left out with a store_problems warning
    naming the trace message and the record; the other records of its body are imported."""
    stores = tmp_path / "stores"
    shutil.copytree(DATA, stores)
    victim = next(r for r in traced if r["trace_type"] == "SubBefore" and r["broker"] == "broker-a")
    path = stores / "broker-a" / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    pos = victim["phys_offset"]
    old = f"\x01{victim['msg_id']}\x01{victim['retry_times']}\x01".encode()
    at = data.find(old, pos)
    assert 0 <= at < pos + struct.unpack_from(">i", data, pos)[0]
    data[at + len(old) - 2] = ord("x")  # the retry times' last digit
    size = struct.unpack_from(">i", data, pos + BODY_LENGTH_AT)[0]
    body = bytes(data[pos + BODY_LENGTH_AT + 4:pos + BODY_LENGTH_AT + 4 + size])
    struct.pack_into(">i", data, pos + BODY_CRC_AT, zlib.crc32(body) & 0x7FFFFFFF)
    path.write_bytes(bytes(data))
    rows = _import(stores, tmp_path / "run")
    assert len(rows) == len(traced) - 1
    same_message = [r for r in traced if (r["broker"], r["phys_offset"]) == ("broker-a", pos)]
    assert len([r for r in rows if (r["broker"], r["phys_offset"]) == ("broker-a", pos)]) == len(same_message) - 1
    problems = pq.read_table(tmp_path / "run" / "parquet" / "store_problems").to_pylist()
    assert [(p["kind"], p["severity"], p["offset"]) for p in problems] == [(PROBLEM_TRACE_UNREADABLE, "warning", pos)]
    assert f"record {victim['record_index']}: a SubBefore record whose field does not parse" in problems[0]["detail"]


def test_an_increment_keeps_the_trace_rows_it_read_and_reads_only_new_trace_messages(traced, tmp_path):
    """A traced real store imported at a cut and again once grown past it: the trace messages read
    before are not read again, the new ones once, and client_trace equals a fresh import's."""
    from growing_store import cut_in_half

    stores = tmp_path / "stores"
    shutil.copytree(DATA, stores)
    last, data, after = cut_in_half(stores / "broker-a")
    run = tmp_path / "run"
    first = import_store(stores / "broker-a", run, name="trace", broker="broker-a")
    last.write_bytes(data)
    again = import_store(stores / "broker-a", run, name="trace", broker="broker-a")
    assert again.resumed_from == first.valid_end and again.records_added == after
    assert again.store_bytes_read["commitlog"] <= again.bytes_read + 64 + 8 + 8 + 4096, again.store_bytes_read
    rows = sorted(map(repr, pq.read_table(run / "parquet" / "client_trace").to_pylist()))
    want = [r for r in traced if r["broker"] == "broker-a"]
    assert len(rows) == len(want) and rows == sorted(repr({**r, "run_id": "trace"}) for r in want)
