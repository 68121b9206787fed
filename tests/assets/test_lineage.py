"""The lineage rules on hand-built commit logs and on the real RocketMQ 4.9.4 fixture store.

Every input row is written out here and every expected hop and lineage row is written out by hand
from the rules in docs/lineage.md; nothing is compared against output of the code under test.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.lineage import (
    build_message_hops,
    build_message_lineage,
    classify_hops,
    conform,
    run_lineage,
)
from broker_core.export.parquet import COMPRESSION, write_rows
from broker_core.export.schema import (
    COMMITLOG,
    CONSUME_ATTEMPTS,
    CONSUMER_OFFSETS,
    INNER_MESSAGES,
    MESSAGE_HOPS,
    MESSAGE_LINEAGE,
    PRODUCED,
    RUNS,
)
from tests.conftest import STORE_FIXTURES

RUN = "r1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCHED = "SCHEDULE_TOPIC_XXXX"
# Inputs are written as Parquet (a DataFrame made from Python rows would run Python workers on
# every scan); one directory for the module, removed with the interpreter's temp files.
INPUT_DIR = tempfile.mkdtemp(prefix="retry-audit-lineage-tests-")


def ts(ms: int) -> datetime:
    """A store time ``ms`` milliseconds after the test epoch."""
    return T0 + timedelta(milliseconds=ms)


def rec(phys: int, topic: str, at: int, *, uniq: str | None = None, origin: str | None = None,
        real_topic: str | None = None, retry_topic: str | None = None, delay: int = 0,
        queue_id: int = 0, queue_offset: int = 0, reconsume: int = 0, born_at: int = 0,
        born_host: str = "10.0.0.9:5000", crc: int = 77, run: str = RUN,
        reconsume_time: int | None = None) -> dict:
    """One commit-log row in contract shape; properties carry what the broker would put there."""
    props = {}
    for name, value in (("UNIQ_KEY", uniq), ("ORIGIN_MESSAGE_ID", origin), ("REAL_TOPIC", real_topic),
                        ("RETRY_TOPIC", retry_topic), ("DELAY", str(delay) if delay else None),
                        ("RECONSUME_TIME", None if reconsume_time is None else str(reconsume_time))):
        if value is not None:
            props[name] = value
    return {
        "run_id": run, "broker": "broker-a", "phys_offset": phys, "total_size": 100, "topic": topic,
        "queue_id": queue_id, "queue_offset": queue_offset, "msg_id": f"M{phys:04d}",
        "uniq_key": uniq, "origin_msg_id": origin, "real_topic": real_topic, "real_queue_id": None,
        "retry_topic": retry_topic, "delay_level": delay, "reconsume_times": reconsume,
        "max_reconsume_times": None, "tags": None, "keys": None, "body_size": 10, "body_crc": crc,
        "sys_flag": 0, "born_ts": ts(born_at), "born_host": born_host, "store_ts": ts(at),
        "store_host": "10.0.0.1:10911", "properties": props, "magic": None, "file_name": None,
    }


def ms(value: datetime | None) -> int | None:
    """Milliseconds after the test epoch of a time Spark returned (naive datetimes are local time,
    as PySpark's collect() makes them)."""
    if value is None:
        return None
    return round(value.timestamp() * 1000) - round(T0.timestamp() * 1000)


def attempt(group: str, queue_topic: str, phys: int, outcome: str, *, uniq: str | None = None,
            topic: str | None = None, run: str = RUN) -> dict:
    """One delivery; its uniq_key is what the consumer reports: the record's UNIQ_KEY, else the
    offset msgId."""
    return {"run_id": run, "group": group, "consumer_id": "c1", "model": "CLUSTERING",
            "queue_topic": queue_topic, "queue_id": 0, "queue_offset": 0, "msg_id": f"M{phys:04d}",
            "uniq_key": uniq or f"M{phys:04d}", "topic": topic or queue_topic, "reconsume_times": 0,
            "start_ts": ts(0), "end_ts": ts(0), "status": "CONSUME_SUCCESS", "outcome": outcome,
            "phys_offset": phys}


def offset(group: str, topic: str, queue_id: int, value: int, at: int, run: str = RUN,
           broker: str = "broker-a") -> dict:
    return {"run_id": run, "broker": broker, "group": group, "topic": topic, "queue_id": queue_id,
            "offset": value, "ts": ts(at), "event": "PERSIST"}


def produced(uniq: str, topic: str, status: str = "SEND_OK", run: str = RUN) -> dict:
    return {"run_id": run, "uniq_key": uniq, "topic": topic, "queue_id": 0, "delay_level": 0,
            "send_ts": ts(0), "status": status, "msg_id": None, "phys_offset": None, "attempts": 1}


def frame(spark, rows, schema):
    """A DataFrame of ``rows`` read from a Parquet file, as the lineage reads a run directory."""
    folder = Path(tempfile.mkdtemp(prefix="lineage-input-", dir=INPUT_DIR))
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), folder / "part-0.parquet")
    return conform(spark.read.parquet(str(folder)), schema)


def lineage_of(spark, commitlog, attempts=(), offsets=(), produced_rows=(), runs_rows=(), inner=None):
    """Build hops and lineage; per run: (hops by (key, group, index), lineage by (key, group)).
    ``inner``: inner_messages rows (None: the run has no such table)."""
    cl = frame(spark, list(commitlog), COMMITLOG)
    runs_df = frame(spark, list(runs_rows), RUNS)
    inner_df = frame(spark, list(inner), INNER_MESSAGES) if inner is not None else None
    hops = build_message_hops(cl, runs_df=runs_df, inner_messages_df=inner_df)
    lineage = build_message_lineage(hops, cl, frame(spark, list(attempts), CONSUME_ATTEMPTS),
                                    frame(spark, list(offsets), CONSUMER_OFFSETS),
                                    frame(spark, list(produced_rows), PRODUCED), runs_df,
                                    inner_messages_df=inner_df)
    runs: dict[str, tuple[dict, dict]] = {}
    for r in hops.collect():
        runs.setdefault(r.run_id, ({}, {}))[0][(r.message_key, r.group, r.hop_index)] = r
    for r in lineage.collect():
        runs.setdefault(r.run_id, ({}, {}))[1][(r.message_key, r.group)] = r
    return runs


def chain(hop_rows, key, group):
    """(hop_index, hop_kind, topic) of a message's chain for a group: shared hops then its own."""
    return sorted((i, r.hop_kind, r.topic) for (k, g, i), r in hop_rows.items()
                  if k == key and (g is None or g == group))


# --- a plain message, and a delayed publish shared by two groups ------------------------------

PLAIN = [rec(0, "OrderTopic", 100, uniq="U1")]

# U2 is published with delay level 3. GroupA consumes the delivered record; GroupB fails it twice
# (retry at level 3, then 4) and the third failure sends it to %DLQ%GroupB.
DELAYED = [
    rec(100, SCHED, 1000, uniq="U2", real_topic="OrderTopic", delay=3, queue_id=2),
    rec(200, "OrderTopic", 11000, uniq="U2", real_topic="OrderTopic", delay=3, queue_offset=5),
    rec(300, SCHED, 11500, uniq="U2", real_topic="%RETRY%GroupB", retry_topic="OrderTopic",
        origin="M0200", delay=3, queue_id=2, reconsume=1),
    rec(400, "%RETRY%GroupB", 21500, uniq="U2", real_topic="%RETRY%GroupB", retry_topic="OrderTopic",
        origin="M0200", delay=3, reconsume=1),
    rec(500, SCHED, 22000, uniq="U2", real_topic="%RETRY%GroupB", retry_topic="OrderTopic",
        origin="M0200", delay=4, queue_id=3, reconsume=2),
    rec(600, "%RETRY%GroupB", 52000, uniq="U2", real_topic="%RETRY%GroupB", retry_topic="OrderTopic",
        origin="M0200", delay=4, queue_offset=1, reconsume=2),
    rec(700, "%DLQ%GroupB", 52100, uniq="U2", real_topic="%RETRY%GroupB", retry_topic="OrderTopic",
        origin="M0200", reconsume=3),
]
DELAYED_ATTEMPTS = [
    attempt("GroupA", "OrderTopic", 0, "ACKED", uniq="U1"),
    attempt("GroupA", "OrderTopic", 200, "ACKED", uniq="U2"),
    attempt("GroupB", "OrderTopic", 0, "ACKED", uniq="U1"),
    attempt("GroupB", "OrderTopic", 200, "SENT_BACK", uniq="U2"),
    attempt("GroupB", "%RETRY%GroupB", 400, "SENT_BACK", uniq="U2", topic="OrderTopic"),
    attempt("GroupB", "%RETRY%GroupB", 600, "SENT_BACK", uniq="U2", topic="OrderTopic"),
]


def test_plain_message_is_one_shared_publish_hop_consumed_by_each_group(built):
    """A message stored once in its real topic is one shared PUBLISH hop and CONSUMED by every
    group that acknowledged it."""
    hops, lineage = built[RUN]
    hop = hops[("U1", None, 0)]
    assert (hop.hop_kind, hop.topic, hop.phys_offset, hop.msg_id) == ("PUBLISH", "OrderTopic", 0, "M0000")
    assert hop.next_store_ts is None and hop.dwell_ms is None
    assert [k for k in hops if k[0] == "U1"] == [("U1", None, 0)]
    for group in ("GroupA", "GroupB"):
        row = lineage[("U1", group)]
        assert (row.origin_topic, row.origin_msg_id, row.hops, row.retries, row.path,
                row.final_topic, row.final_state) == (
            "OrderTopic", "M0000", 1, 0, "OrderTopic", "OrderTopic", "CONSUMED")
        assert ms(row.first_store_ts) == ms(row.last_store_ts) == 100 and row.total_delay_ms == 0


def test_delayed_publish_shares_schedule_and_deliver_and_one_group_retries_into_the_dlq(built):
    """SCHEDULE and DELIVER of a delayed publish are shared (group null, indexes 0-1); a group's
    retries continue the numbering, and its chain ends in the DLQ after two retries."""
    hops, lineage = built[RUN]
    assert chain(hops, "U2", "GroupA") == [(0, "SCHEDULE", SCHED), (1, "DELIVER", "OrderTopic")]
    assert chain(hops, "U2", "GroupB") == [
        (0, "SCHEDULE", SCHED), (1, "DELIVER", "OrderTopic"), (2, "SCHEDULE", SCHED),
        (3, "RETRY", "%RETRY%GroupB"), (4, "SCHEDULE", SCHED), (5, "RETRY", "%RETRY%GroupB"),
        (6, "DLQ", "%DLQ%GroupB")]
    assert {g for (k, g, _i) in hops if k == "U2"} == {None, "GroupB"}
    # Dwell: shared hops chain among themselves; the last shared hop has no next.
    assert hops[("U2", None, 0)].dwell_ms == 10000
    assert hops[("U2", None, 1)].next_store_ts is None
    assert [hops[("U2", "GroupB", i)].dwell_ms for i in range(2, 7)] == [10000, 500, 30000, 100, None]
    assert ms(hops[("U2", "GroupB", 5)].next_store_ts) == 52100

    a, b = lineage[("U2", "GroupA")], lineage[("U2", "GroupB")]
    assert (a.path, a.hops, a.retries, a.final_topic, a.final_state) == (
        "SCHEDULE_TOPIC_XXXX[3] > OrderTopic", 2, 0, "OrderTopic", "CONSUMED")
    assert (ms(a.first_store_ts), ms(a.last_store_ts), a.total_delay_ms) == (1000, 11000, 10000)
    assert b.path == ("SCHEDULE_TOPIC_XXXX[3] > OrderTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%GroupB"
                      " > SCHEDULE_TOPIC_XXXX[4] > %RETRY%GroupB > %DLQ%GroupB")
    assert (b.hops, b.retries, b.final_topic, b.final_state, b.total_delay_ms) == (
        7, 2, "%DLQ%GroupB", "DLQ", 51100)
    # origin: RETRY_TOPIC of the retries, and the ORIGIN_MESSAGE_ID they carry (the delivered record).
    assert {(r.origin_topic, r.origin_msg_id) for r in (a, b)} == {("OrderTopic", "M0200")}


# --- two groups retrying independently ---------------------------------------------------------

TWO_GROUPS = [
    rec(10, "PayTopic", 0, uniq="U3"),
    rec(20, SCHED, 50, uniq="U3", real_topic="%RETRY%G1", retry_topic="PayTopic", origin="M0010",
        delay=3, queue_id=2, reconsume=1),
    rec(30, SCHED, 60, uniq="U3", real_topic="%RETRY%G2", retry_topic="PayTopic", origin="M0010",
        delay=3, queue_id=2, reconsume=1),
    rec(40, "%RETRY%G2", 10060, uniq="U3", real_topic="%RETRY%G2", retry_topic="PayTopic",
        origin="M0010", delay=3, reconsume=1),
    rec(50, "%RETRY%G1", 10050, uniq="U3", real_topic="%RETRY%G1", retry_topic="PayTopic",
        origin="M0010", delay=3, reconsume=1),
    rec(60, SCHED, 10100, uniq="U3", real_topic="%RETRY%G2", retry_topic="PayTopic", origin="M0010",
        delay=4, queue_id=3, reconsume=2),
]
TWO_GROUPS_ATTEMPTS = [
    attempt("G1", "PayTopic", 10, "SENT_BACK", uniq="U3"),
    attempt("G2", "PayTopic", 10, "SENT_BACK", uniq="U3"),
    attempt("G1", "%RETRY%G1", 50, "ACKED", uniq="U3", topic="PayTopic"),
    attempt("G2", "%RETRY%G2", 40, "SENT_BACK", uniq="U3", topic="PayTopic"),
]


def test_two_groups_retry_independently_each_with_its_own_chain(built):
    """Each group's retries form their own chain after the shared PUBLISH: G1 is consumed on its
    first retry while G2 waits in the schedule (RETRYING)."""
    hops, lineage = built[RUN]
    assert chain(hops, "U3", "G1") == [(0, "PUBLISH", "PayTopic"), (1, "SCHEDULE", SCHED),
                                       (2, "RETRY", "%RETRY%G1")]
    assert chain(hops, "U3", "G2") == [(0, "PUBLISH", "PayTopic"), (1, "SCHEDULE", SCHED),
                                       (2, "RETRY", "%RETRY%G2"), (3, "SCHEDULE", SCHED)]
    assert hops[("U3", "G1", 1)].phys_offset == 20 and hops[("U3", "G2", 1)].phys_offset == 30
    assert hops[("U3", "G1", 1)].dwell_ms == 10000 and hops[("U3", "G2", 2)].dwell_ms == 40
    g1, g2 = lineage[("U3", "G1")], lineage[("U3", "G2")]
    assert (g1.path, g1.retries, g1.final_state) == (
        "PayTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%G1", 1, "CONSUMED")
    assert (g2.path, g2.retries, g2.final_state, g2.final_topic) == (
        "PayTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%G2 > SCHEDULE_TOPIC_XXXX[4]", 1, "RETRYING", SCHED)
    assert g1.origin_msg_id == g2.origin_msg_id == "M0010"
    assert (ms(g2.first_store_ts), ms(g2.last_store_ts), g2.total_delay_ms) == (0, 10100, 10100)


def test_hop_kinds_and_groups_follow_the_topic(spark):
    """SCHEDULE takes the group of its %RETRY% REAL_TOPIC, a delayed publish's SCHEDULE/DELIVER
    have none, RETRY/DLQ take the group of their topic, a plain record is a PUBLISH."""
    rows = classify_hops(frame(spark, TWO_GROUPS + DELAYED, COMMITLOG)).collect()
    kinds = {r.phys_offset: (r.hop_kind, r.group, r.message_key) for r in rows}
    assert kinds == {
        10: ("PUBLISH", None, "U3"), 20: ("SCHEDULE", "G1", "U3"), 30: ("SCHEDULE", "G2", "U3"),
        40: ("RETRY", "G2", "U3"), 50: ("RETRY", "G1", "U3"), 60: ("SCHEDULE", "G2", "U3"),
        100: ("SCHEDULE", None, "U2"), 200: ("DELIVER", None, "U2"), 300: ("SCHEDULE", "GroupB", "U2"),
        400: ("RETRY", "GroupB", "U2"), 500: ("SCHEDULE", "GroupB", "U2"),
        600: ("RETRY", "GroupB", "U2"), 700: ("DLQ", "GroupB", "U2")}


# --- records without UNIQ_KEY ------------------------------------------------------------------

NO_UNIQ_ATTEMPTS = [attempt("G9", "%RETRY%G9", 3, "ACKED", topic="OldTopic")]
NO_UNIQ = [
    # An old client's message M0001 fails once for G9: its retries carry ORIGIN_MESSAGE_ID=M0001.
    rec(1, "OldTopic", 0, born_at=-5, crc=11),
    rec(2, SCHED, 10, origin="M0001", real_topic="%RETRY%G9", retry_topic="OldTopic", delay=3,
        queue_id=2, born_at=-5, crc=11),
    rec(3, "%RETRY%G9", 10010, origin="M0001", real_topic="%RETRY%G9", retry_topic="OldTopic",
        delay=3, born_at=-5, crc=11),
    # Another old-client message, delayed, never retried: only born host, time and CRC join it.
    rec(4, SCHED, 20, real_topic="OldTopic", delay=2, queue_id=1, born_at=15, crc=22),
    rec(5, "OldTopic", 5020, real_topic="OldTopic", delay=2, born_at=15, crc=22),
]


def test_records_without_uniq_key_are_keyed_by_origin_message_id_then_born_fields(built):
    """Without UNIQ_KEY the key is ORIGIN_MESSAGE_ID (the original record joins its retries
    through the born fields they share), else born_host|born_ts|body_crc."""
    hops, lineage = built[RUN]
    assert chain(hops, "M0001", "G9") == [(0, "PUBLISH", "OldTopic"), (1, "SCHEDULE", SCHED),
                                          (2, "RETRY", "%RETRY%G9")]
    fallback = "10.0.0.9:5000|" + str(int(ts(15).timestamp() * 1000)) + "|22"
    assert chain(hops, fallback, "G9") == [(0, "SCHEDULE", SCHED), (1, "DELIVER", "OldTopic")]
    keys = {r.phys_offset: k for (k, _g, _i), r in hops.items() if r.phys_offset in range(1, 6)}
    assert keys == {1: "M0001", 2: "M0001", 3: "M0001", 4: fallback, 5: fallback}
    assert lineage[("M0001", "G9")].final_state == "CONSUMED"
    row = lineage[(fallback, "G9")]
    assert (row.path, row.origin_msg_id, row.final_state) == (
        "SCHEDULE_TOPIC_XXXX[2] > OldTopic", "M0004", "UNCONSUMED")


# --- final states ------------------------------------------------------------------------------

STATES = [
    rec(1000, "Shop", 0, uniq="UC"),                                       # consumed
    rec(1001, "Shop", 1, uniq="UU", queue_offset=1),                       # never consumed
    rec(1002, "Shop", 2, uniq="UR", queue_offset=2),                       # retry record waiting
    rec(1003, "%RETRY%Gs", 20002, uniq="UR", real_topic="%RETRY%Gs", retry_topic="Shop",
        origin="M1002", delay=3, reconsume=1),
    rec(1004, "Nobody", 5, uniq="UN"),                                     # no subscriber at all
    rec(1005, "Shop", 6, uniq="UX", queue_offset=3),                       # offset reused, below
]
STATES_ATTEMPTS = [attempt("Gs", "Shop", 1000, "ACKED", uniq="UC"),
                   attempt("Gs", "Shop", 1002, "SENT_BACK", uniq="UR"),
                   # An ACKED delivery of another message's record at 1005, lost in a crash before
                   # UX was stored at the same offset: it does not consume UX.
                   attempt("Gs", "Shop", 1005, "ACKED", uniq="UGONE")]
STATES_PRODUCED = [produced("UC", "Shop"), produced("UL", "Shop"), produced("UF", "Shop", "FAILED"),
                   produced("UL2", "Nobody2")]


def test_final_states_consumed_unconsumed_retrying_lost_and_group_null(built):
    """CONSUMED needs an ACKED delivery of the record that names its message, an unconsumed PUBLISH
    is UNCONSUMED, an unconsumed RETRY is RETRYING, a SEND_OK key with no record is LOST (hops 0),
    an unsubscribed topic gets group null."""
    _hops, lineage = built[RUN]
    lineage = {k: r for k, r in lineage.items()
               if k[0] in {"UC", "UU", "UR", "UN", "UL", "UL2", "UX", "UGONE"}}
    states = {key: (row.final_state, row.hops) for key, row in lineage.items()}
    assert states == {
        ("UC", "Gs"): ("CONSUMED", 1), ("UU", "Gs"): ("UNCONSUMED", 1), ("UX", "Gs"): ("UNCONSUMED", 1),
        ("UR", "Gs"): ("RETRYING", 2), ("UN", None): ("UNCONSUMED", 1),
        ("UL", "Gs"): ("LOST", 0), ("UL2", None): ("LOST", 0)}
    lost = lineage[("UL", "Gs")]
    assert (lost.origin_topic, lost.retries, lost.path, lost.first_store_ts) == ("Shop", 0, None, None)


IMPORT_RUN = "r2"  # an import: no delivery rows, so committed offsets decide consumption
IMPORTED = [rec(1, "Imp", 0, uniq="K0", queue_id=1, queue_offset=0, run=IMPORT_RUN),
            rec(2, "Imp", 1, uniq="K1", queue_id=1, queue_offset=1, run=IMPORT_RUN),
            rec(3, "Imp", 2, uniq="K2", queue_id=2, queue_offset=0, run=IMPORT_RUN)]
# Queue 1: committed 5 then 1 later (a reset): the last event (1) counts. Queue 2: nothing.
IMPORTED_OFFSETS = [offset("Gi", "Imp", 1, 5, 10, run=IMPORT_RUN),
                    offset("Gi", "Imp", 1, 1, 20, run=IMPORT_RUN)]


def test_imported_store_consumed_state_comes_from_the_last_committed_offset(built):
    """Without delivery rows, a record is CONSUMED when the group's last committed offset of its
    queue is past the record's queue offset."""
    _hops, lineage = built[IMPORT_RUN]
    assert {k: r.final_state for k, r in lineage.items()} == {
        ("K0", "Gi"): "CONSUMED", ("K1", "Gi"): "UNCONSUMED", ("K2", "Gi"): "UNCONSUMED"}


# --- an import whose oldest commit-log files retention deleted ----------------------------------

CUT_RUN = "r3"  # its commit log starts at 1000: every record below was in a deleted file
CUT_FIRST_OFFSET = 1000
CUT_RUNS = [{"run_id": CUT_RUN, "source": "import", "first_offset": CUT_FIRST_OFFSET, "broker": "broker-a",
             "msg_id_hosts": ["0A00000100002A9F"]}]


def offset_id(phys: int) -> str:
    """The offset msgId of the record at ``phys`` on the cut run's broker."""
    return f"0A00000100002A9F{phys:016X}"


def _cut(phys, topic, at, uniq, **kw):
    return rec(phys, topic, at, uniq=uniq, run=CUT_RUN, **kw)


_RETRY_GC = dict(real_topic="%RETRY%Gc", retry_topic="Cut")
# TF's UNIQ_KEY has an offset msgId's shape and ends in a small "offset": as an ORIGIN_MESSAGE_ID
# (a client's fallback send) it is the message itself, not a record below the first offset.
TF_KEY = "0A00000100002A9F00000000000000AA"
TRUNCATED = [
    # TA: its PUBLISH (500) is gone; both retries are left.
    _cut(1100, SCHED, 1100, "TA", origin=offset_id(500), delay=3, queue_id=2, reconsume=1, **_RETRY_GC),
    _cut(1200, "%RETRY%Gc", 1200, "TA", origin=offset_id(500), delay=3, reconsume=1, **_RETRY_GC),
    _cut(1300, SCHED, 1300, "TA", origin=offset_id(500), delay=4, queue_id=3, reconsume=2, **_RETRY_GC),
    _cut(1400, "%RETRY%Gc", 1400, "TA", origin=offset_id(500), delay=4, reconsume=2, **_RETRY_GC),
    # TB: its PUBLISH and first retry are gone: the second RETRY and the DLQ (whose count a
    # client's send put in RECONSUME_TIME) say two retries happened.
    _cut(1500, "%RETRY%Gc", 1500, "TB", origin=offset_id(600), delay=4, reconsume=2, **_RETRY_GC),
    _cut(1600, "%DLQ%Gc", 1600, "TB", origin=offset_id(600), reconsume=1, reconsume_time=3,
         retry_topic="Cut"),
    # TC: a delayed publish whose SCHEDULE (700) is gone: its DELIVER is first.
    _cut(1700, "Cut", 1700, "TC", real_topic="Cut", delay=2),
    # TD: whole; its retry names its PUBLISH, which is kept.
    _cut(1800, "Cut", 1800, "TD"),
    _cut(1900, SCHED, 1900, "TD", origin=offset_id(1800), delay=3, queue_id=2, reconsume=1, **_RETRY_GC),
    _cut(2000, "%RETRY%Gc", 2000, "TD", origin=offset_id(1800), delay=3, reconsume=1, **_RETRY_GC),
    # TE: sent twice; the first PUBLISH (800) is gone, its send-back names it; the second is kept.
    _cut(2100, "Cut", 2100, "TE"),
    _cut(2200, SCHED, 2200, "TE", origin=offset_id(800), delay=3, queue_id=2, reconsume=1, **_RETRY_GC),
    # TF: whole; a client's fallback send names the UNIQ_KEY as ORIGIN_MESSAGE_ID.
    _cut(2300, "Cut", 2300, TF_KEY),
    _cut(2400, SCHED, 2400, TF_KEY, origin=TF_KEY, delay=3, queue_id=2, reconsume=1, reconsume_time=1,
         **_RETRY_GC),
]
# A simulated run (no first_offset) whose message has no head at all: it is truncated too (the
# hop_grammar_valid check is what says that a simulation must not lose a head).
HEADLESS_RUN = "r4"
HEADLESS = [rec(5, "%RETRY%Gh", 50, uniq="H1", origin="M0001", real_topic="%RETRY%Gh",
                retry_topic="Lost", reconsume=1, run=HEADLESS_RUN)]


def test_chains_whose_head_retention_deleted_are_truncated_with_their_retries(built):
    """A chain without a shared hop, with a DELIVER first, or with a record naming one below the
    first offset is truncated; its retries are what its surviving records count, its final state
    and origin topic are read as for a whole chain; chains that start at their first hop are not."""
    _hops, lineage = built[CUT_RUN]
    got = {key: (r.truncated, r.retries, r.final_state, r.origin_topic, r.hops) for key, r in lineage.items()}
    assert got == {
        ("TA", "Gc"): (True, 2, "RETRYING", "Cut", 4),
        ("TB", "Gc"): (True, 2, "DLQ", "Cut", 2),
        ("TC", "Gc"): (True, 0, "UNCONSUMED", "Cut", 1),
        ("TD", "Gc"): (False, 1, "RETRYING", "Cut", 3),
        ("TE", "Gc"): (True, 0, "RETRYING", "Cut", 2),
        (TF_KEY, "Gc"): (False, 0, "RETRYING", "Cut", 2),
    }
    assert lineage[("TA", "Gc")].origin_msg_id == offset_id(500)
    assert built[HEADLESS_RUN][1][("H1", "Gh")].truncated is True


# --- a run of two brokers whose records name records on the other one ----------------------------

TWO_BROKER_RUN = "r5"  # broker-a's log starts at 1000 (retention); broker-b's at 0
HOST_A, HOST_B = "0A00000100002A9F", "0A00000200002A9F"  # 10.0.0.1:10911 and 10.0.0.2:10911
TWO_BROKER_RUNS = [
    {"run_id": TWO_BROKER_RUN, "source": "import", "broker": "broker-a", "first_offset": 1000,
     "msg_id_hosts": [HOST_A]},
    {"run_id": TWO_BROKER_RUN, "source": "import", "broker": "broker-b", "first_offset": 0,
     "msg_id_hosts": [HOST_B]},
]


def _on(broker, phys, topic, at, uniq, **kw):
    """A record of the two-broker run: its offset msgId starts with its broker's store host."""
    host = HOST_A if broker == "broker-a" else HOST_B
    return dict(rec(phys, topic, at, uniq=uniq, run=TWO_BROKER_RUN, **kw), broker=broker,
                msg_id=f"{host}{phys:016X}", store_host="10.0.0.1:10911" if host == HOST_A else "10.0.0.2:10911")


_RETRY_GX = dict(real_topic="%RETRY%Gx", retry_topic="Cross", delay=3, queue_id=2, reconsume=1)
CROSS_BROKER = [
    # XA: stored twice, on broker-a at 800 (deleted by retention) and on broker-b at 50; the
    # retry on broker-b names the deleted record on broker-a: truncated, though broker-b's own log
    # starts at 0.
    _on("broker-b", 50, "Cross", 50, "XA"),
    _on("broker-b", 60, SCHED, 60, "XA", origin=f"{HOST_A}{800:016X}", **_RETRY_GX),
    # XB: published on broker-b at 300 (kept); its retry landed on broker-a, whose log starts at
    # 1000, and names the record on broker-b: not truncated, though 300 is below broker-a's start.
    _on("broker-b", 300, "Cross", 300, "XB"),
    _on("broker-a", 1500, SCHED, 1500, "XB", origin=f"{HOST_B}{300:016X}", **_RETRY_GX),
    # XC: the same offset on both brokers holds two records of one message, one chain.
    _on("broker-a", 2000, "Cross", 2000, "XC"),
    _on("broker-b", 2000, SCHED, 2100, "XC", origin=f"{HOST_A}{2000:016X}", **_RETRY_GX),
    # XD: published on broker-b at 400 (kept); its first retry record is a RETRY on broker-a at
    # 2200 that the schedule re-put (DELAY kept) with no SCHEDULE before it: that SCHEDULE was on
    # broker-a below 1000, where no record of XD is left. Truncated, though a shared hop of XD
    # survived on broker-b: the SCHEDULE is looked for on the RETRY's own broker.
    _on("broker-b", 400, "Cross", 400, "XD"),
    _on("broker-a", 2200, "%RETRY%Gx", 2200, "XD", origin=f"{HOST_B}{400:016X}", **dict(_RETRY_GX, queue_id=0)),
    # XE: the same RETRY on broker-a after XE's PUBLISH there at 1100, past the first offset: its
    # SCHEDULE would be past it too, so retention did not take it. Not truncated.
    _on("broker-a", 1100, "Cross", 1100, "XE"),
    _on("broker-a", 2300, "%RETRY%Gx", 2300, "XE", origin=f"{HOST_A}{1100:016X}", **dict(_RETRY_GX, queue_id=0)),
]


def test_an_origin_message_id_is_judged_on_the_broker_its_store_host_names(built):
    """In a run of two brokers, a record's ORIGIN_MESSAGE_ID names a deleted record when it is
    below the first offset of the broker whose store host it starts with, whichever broker the
    record itself is on; one offset on two brokers is two records. A RETRY the schedule put, first
    of its chain, lost its SCHEDULE to retention when its own broker holds no shared hop of the
    message past that broker's first offset, whatever the other broker holds."""
    hops, lineage = built[TWO_BROKER_RUN]
    assert {k: r.truncated for k, r in lineage.items()} == {
        ("XA", "Gx"): True, ("XB", "Gx"): False, ("XC", "Gx"): False, ("XD", "Gx"): True, ("XE", "Gx"): False}
    assert [(h.broker, h.phys_offset, h.hop_kind) for h in (hops[("XC", None, 0)], hops[("XC", "Gx", 1)])] == [
        ("broker-a", 2000, "PUBLISH"), ("broker-b", 2000, "SCHEDULE")]
    assert lineage[("XC", "Gx")].path == "Cross > SCHEDULE_TOPIC_XXXX[3]"


def test_every_other_chain_is_not_truncated(built):
    """truncated is false on every row of the runs that start at offset 0 (LOST rows included)."""
    for run in (RUN, IMPORT_RUN, FIXTURE_RUN):
        flags = {key: r.truncated for key, r in built[run][1].items()}
        assert flags and set(flags.values()) == {False}, (run, [k for k, v in flags.items() if v is not False])


# --- the real RocketMQ 4.9.4 store --------------------------------------------------------------

def manifest_commitlog() -> list[dict]:
    """Commit-log rows in contract shape from the fixture manifest's decoded records."""
    manifest = json.loads((STORE_FIXTURES / "manifest.json").read_text())
    rows = []
    for r in manifest["commitLog"]:
        if r["kind"] != "MESSAGE":
            continue
        props = r["properties"]
        rows.append({
            "run_id": FIXTURE_RUN, "broker": "broker-a", "phys_offset": r["physicalOffset"],
            "total_size": r["size"], "topic": r["topic"], "queue_id": r["queueId"],
            "queue_offset": r["queueOffset"], "msg_id": r["offsetMsgId"],
            "uniq_key": props.get("UNIQ_KEY"), "origin_msg_id": props.get("ORIGIN_MESSAGE_ID"),
            "real_topic": props.get("REAL_TOPIC"),
            "real_queue_id": int(props["REAL_QID"]) if "REAL_QID" in props else None,
            "retry_topic": props.get("RETRY_TOPIC"), "delay_level": int(props.get("DELAY", 0)),
            "reconsume_times": r["reconsumeTimes"], "max_reconsume_times": None,
            "tags": props.get("TAGS"), "keys": props.get("KEYS"), "body_size": r["bodyLength"],
            "body_crc": r["bodyCRC"], "sys_flag": r["sysFlag"],
            "born_ts": datetime.fromtimestamp(r["bornTimestamp"] / 1000, UTC),
            "born_host": r["bornHost"],
            "store_ts": datetime.fromtimestamp(r["storeTimestamp"] / 1000, UTC),
            "store_host": r["storeHost"], "properties": props, "magic": r["magic"],
            "file_name": r["file"],
        })
    return rows


FIXTURE_RUN = "fixture"


def test_fixture_store_hops_match_the_manifest_for_every_message(built):
    """For each of the 54 UNIQ_KEYs of the real 4.9.4 store, the hop topics in hop order equal the
    manifest's expectedHops, and the records are exactly the manifest's."""
    manifest = json.loads((STORE_FIXTURES / "manifest.json").read_text())
    expected = manifest["uniqKeys"]
    assert len(expected) == 54
    hops, _lineage = built[FIXTURE_RUN]
    found: dict[str, list] = {}
    for (key, _group, _index), row in sorted(hops.items(), key=lambda item: (item[0][0], item[0][2])):
        found.setdefault(key, []).append((row.topic, row.phys_offset))
    assert set(found) == set(expected)
    for key, spec in expected.items():
        assert [t for t, _p in found[key]] == spec["expectedHops"], key
        assert [p for _t, p in found[key]] == spec["records"], key


def test_fixture_store_lineage_finds_groups_from_retry_topics_and_the_dlq(built):
    """In an imported store the groups come from %RETRY%/%DLQ% records: GroupA's eight messages
    end in its DLQ after two retries; GroupB's four wait in its retry topic."""
    _hops, lineage = built[FIXTURE_RUN]
    rows = list(lineage.values())
    assert len(rows) == 54  # OrderTopic messages x GroupA, PayTopic messages x GroupB
    by_state: dict[tuple, int] = {}
    for r in rows:
        by_state[(r.group, r.origin_topic, r.final_state, r.retries)] = (
            by_state.get((r.group, r.origin_topic, r.final_state, r.retries), 0) + 1)
    assert by_state == {("GroupA", "OrderTopic", "DLQ", 2): 8,
                        ("GroupA", "OrderTopic", "UNCONSUMED", 0): 42,
                        ("GroupB", "PayTopic", "RETRYING", 1): 4}
    dlq = lineage[("C00002027C225FFD2B276D1F615F0001", "GroupA")]
    assert dlq.path == ("OrderTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%GroupA > "
                        "SCHEDULE_TOPIC_XXXX[4] > %RETRY%GroupA > %DLQ%GroupA")
    assert dlq.origin_msg_id == "C0A8000100002A9F000000000000016B"


# --- a record sent back twice, and a schedule record re-put twice -----------------------------

# U7 reached two consumers of G7 and both failed it: two SCHEDULE records from one PUBLISH, and
# the two retry sequences interleave (as a real 4.9.4 broker wrote them after a consumer SIGKILL).
# U8's SCHEDULE record was delivered twice (a restarted broker re-put it from an older delay offset),
# and then the message, handed out again, was sent back once more (as a real 4.9.4 broker did).
INTERLEAVED = [
    rec(9700, "Basket", 0, uniq="U7"),
    *[rec(phys, topic, at, uniq="U7", origin="M9700", real_topic="%RETRY%G7", retry_topic="Basket",
          delay=level, queue_id=level - 1 if topic == SCHED else 0, reconsume=level - 2)
      for phys, topic, at, level in ((9710, SCHED, 100, 3), (9720, SCHED, 180, 3),
                                     (9730, "%RETRY%G7", 1100, 3), (9740, SCHED, 1160, 4),
                                     (9750, "%RETRY%G7", 1200, 3), (9760, SCHED, 1205, 4),
                                     (9770, "%RETRY%G7", 2160, 4), (9780, "%RETRY%G7", 2205, 4))],
    rec(9800, "Basket", 0, uniq="U8"),
    *[rec(phys, topic, at, uniq="U8", origin="M9800", real_topic="%RETRY%G8", retry_topic="Basket",
          delay=3, queue_id=2 if topic == SCHED else 0, reconsume=1)
      for phys, topic, at in ((9810, SCHED, 10), (9820, "%RETRY%G8", 1010), (9830, "%RETRY%G8", 5000),
                              (9840, SCHED, 5200), (9850, "%RETRY%G8", 6200))],
]

# U9, after a broker outage (as a real 4.9.4 broker wrote it): its SCHEDULE record S1 was delivered
# (R1), the broker was killed and restarted, the message was handed out again and sent back once
# more (S2), and the restarted broker re-put S1 a second time (R1', its delay offset died with it)
# before S2 was due; S2's own delivery R2 came 1 s after S2. In a run whose broker's delay levels
# are known, R1' is stored before S2 is due, so it cannot be S2's delivery; where they are not
# known (no runs row), the copy pairs with S2, the oldest SCHEDULE waiting when it is stored.
LEVEL_DELAYS_RUN, NO_LEVELS_RUN = "outage-levels", "outage-no-levels"
OUTAGE_DELAYS_MS = [1000, 1000, 1000]
OUTAGE_REPUT = [
    rec(phys, topic, at, uniq="U9", origin="M9900" if topic != "Basket" else None, run=run,
        real_topic=None if topic == "Basket" else "%RETRY%G9", retry_topic=None if topic == "Basket" else "Basket",
        delay=0 if topic == "Basket" else 3, queue_id=2 if topic == SCHED else 0,
        reconsume=0 if topic == "Basket" else 1)
    for run in (LEVEL_DELAYS_RUN, NO_LEVELS_RUN)
    for phys, topic, at in ((9900, "Basket", 0), (9910, SCHED, 10), (9920, "%RETRY%G9", 1010),
                            (9930, SCHED, 5000), (9940, "%RETRY%G9", 5100), (9950, "%RETRY%G9", 6000))]
OUTAGE_RUNS = [{"run_id": LEVEL_DELAYS_RUN, "source": "import", "broker": "broker-a", "first_offset": 0,
                "msg_id_hosts": ["0A00000100002A9F"], "delay_levels_ms": OUTAGE_DELAYS_MS}]


def test_a_copy_stored_before_a_newer_schedule_record_is_due_is_not_its_delivery(built):
    """With the broker's delay levels known, a SCHEDULE record waits from its due time: the re-put
    copy a restarted broker stored 100 ms after a newer SCHEDULE record of the same level pairs
    with nothing, and that record dwells its level's 1 s until its own delivery. Without them the
    copy is taken for the newer record's delivery (the lineage cannot tell them apart)."""
    expected = {
        LEVEL_DELAYS_RUN: [("SCHEDULE", 1000), ("RETRY", 3990), ("SCHEDULE", 1000), ("RETRY", 900), ("RETRY", None)],
        NO_LEVELS_RUN: [("SCHEDULE", 1000), ("RETRY", 3990), ("SCHEDULE", 100), ("RETRY", 900), ("RETRY", None)],
    }
    for run, dwells in expected.items():
        hops, _lineage = built[run]
        assert [(h[1], hops[("U9", "G9", h[0])].dwell_ms) for h in chain(hops, "U9", "G9")[1:]] == dwells, run


def test_a_schedule_hop_dwells_until_its_own_delivery_when_retry_sequences_interleave(built):
    """A SCHEDULE hop's next_store_ts is the record the schedule re-put from it (each re-put record
    of a level and reconsume count pairs with the oldest SCHEDULE of the same still waiting), not
    the next hop: the interleaved sequences of a twice-failed record each wait their level's 1 s,
    and a re-put copy pairs with nothing, so the SCHEDULE after it waits for its own delivery."""
    hops, _lineage = built[RUN]
    assert [h[1] for h in chain(hops, "U7", "G7")] == [
        "PUBLISH", "SCHEDULE", "SCHEDULE", "RETRY", "SCHEDULE", "RETRY", "SCHEDULE", "RETRY", "RETRY"]
    dwell = {hops[("U7", "G7", i)].phys_offset: hops[("U7", "G7", i)].dwell_ms for i in range(1, 9)}
    # SCHEDULE 9710 -> RETRY 9730, 9720 -> 9750, 9740 -> 9770, 9760 -> 9780; a RETRY: its chain's next.
    assert dwell == {9710: 1000, 9720: 1020, 9730: 60, 9740: 1000, 9750: 5, 9760: 1000, 9770: 45, 9780: None}
    assert [(h[1], hops[("U8", "G8", h[0])].dwell_ms) for h in chain(hops, "U8", "G8")[1:]] == [
        ("SCHEDULE", 1000), ("RETRY", 3990), ("RETRY", 200), ("SCHEDULE", 1000), ("RETRY", None)]


def test_a_forked_chain_counts_its_copies_and_its_depth_not_its_retry_records(built):
    """Records beyond one per (attempt, hop kind) are forks: retries is the chain's depth (the
    deepest reconsume count), hops every record, and the first copy's hop, broker and cause are
    kept; a chain with a record the schedule put again forked at a broker restart."""
    cases = {
        # U7: a record sent back twice; both retry sequences run to reconsume count 2.
        (RUN, "U7", "G7"): (9, 2, 4, 2, "DUPLICATE_DELIVERY"),
        # U8: a copy re-put with no SCHEDULE waiting (index 3), then a second send-back.
        (RUN, "U8", "G8"): (6, 1, 3, 3, "BROKER_RESTART"),
        # U9: the second send-back comes first (index 3); the re-put copy still names the restart.
        (LEVEL_DELAYS_RUN, "U9", "G9"): (6, 1, 3, 3, "BROKER_RESTART"),
        (NO_LEVELS_RUN, "U9", "G9"): (6, 1, 3, 3, "BROKER_RESTART"),
    }
    for (run, key, group), expected in cases.items():
        row = built[run][1][(key, group)]
        assert (row.hops, row.retries, row.forks, row.fork_hop_index, row.fork_cause) == expected, (run, key)
        assert row.fork_broker == "broker-a"


def test_a_chain_without_copies_has_no_fork(built):
    """A chain with one record per (attempt, hop kind) has forks 0 and no fork hop, broker or
    cause, and its retries are its RETRY hops."""
    row = built[RUN][1][("U2", "GroupB")]
    assert (row.hops, row.retries, row.forks, row.fork_hop_index, row.fork_broker, row.fork_cause) == (
        7, 2, 0, None, None, None)
    assert all(r.forks == 0 for r in built[FIXTURE_RUN][1].values())


# --- every journey above, built once (each Spark build costs seconds) ----------------------------

@pytest.fixture(scope="module")
def built(spark):
    """Hops and lineage of the hand-built run, the import-style run and the fixture store, by run."""
    return lineage_of(
        spark,
        PLAIN + DELAYED + TWO_GROUPS + NO_UNIQ + STATES + IMPORTED + manifest_commitlog() + TRUNCATED
        + HEADLESS + CROSS_BROKER + INTERLEAVED + OUTAGE_REPUT,
        DELAYED_ATTEMPTS + TWO_GROUPS_ATTEMPTS + NO_UNIQ_ATTEMPTS + STATES_ATTEMPTS,
        IMPORTED_OFFSETS, STATES_PRODUCED, CUT_RUNS + TWO_BROKER_RUNS + OUTAGE_RUNS)


# --- run directories ---------------------------------------------------------------------------

@pytest.fixture
def run_dir(tmp_path):
    """A run directory holding the hand-built tables above as Parquet."""
    parquet = tmp_path / "run" / "parquet"
    write_rows(parquet, "commitlog", PLAIN + DELAYED + STATES)
    write_rows(parquet, "consume_attempts", DELAYED_ATTEMPTS + STATES_ATTEMPTS)
    write_rows(parquet, "consumer_offsets", [])
    write_rows(parquet, "produced", STATES_PRODUCED)
    return tmp_path / "run"


def test_run_lineage_writes_contract_schemas_and_replaces_output_whole(spark, run_dir):
    """run_lineage writes lineage/<table>/ Parquet with exactly the contract schemas and returns the
    row counts; a second run (given a URI) replaces the directory, leaving no temporary siblings."""
    messages: list[str] = []
    counts = run_lineage(run_dir, spark, progress=messages.append)
    # Hops: U1 1 + U2 7 + STATES 6. Lineage: U1 x2, U2 x2, UC/UU/UR/UX x Gs, UN x null, UL x Gs, UL2.
    assert counts == {"message_hops": 14, "message_lineage": 11}
    assert any("message_hops 14 rows" in m for m in messages)
    # The final states as the CLI and Dagster write them (the tests above build them from a hops table).
    states = {(r["message_key"], r["group"]): r["final_state"]
              for r in pq.read_table(run_dir / "lineage" / "message_lineage").to_pylist()}
    assert states == {("U1", "GroupA"): "CONSUMED", ("U1", "GroupB"): "CONSUMED",
                      ("U2", "GroupA"): "CONSUMED", ("U2", "GroupB"): "DLQ",
                      ("UC", "Gs"): "CONSUMED", ("UU", "Gs"): "UNCONSUMED", ("UR", "Gs"): "RETRYING",
                      ("UX", "Gs"): "UNCONSUMED", ("UN", None): "UNCONSUMED", ("UL", "Gs"): "LOST",
                      ("UL2", None): "LOST"}
    for table, schema in (("message_hops", MESSAGE_HOPS), ("message_lineage", MESSAGE_LINEAGE)):
        written = pq.read_table(run_dir / "lineage" / table)
        assert written.schema.equals(schema, check_metadata=False), (table, written.schema)
        assert written.num_rows == counts[table]
    # Raw tables and lineage share one codec (what every warehouse query decompresses).
    for part in [*(run_dir / "lineage").rglob("*.parquet"), *(run_dir / "parquet").rglob("*.parquet")]:
        meta = pq.ParquetFile(part).metadata
        if meta.num_row_groups:
            assert meta.row_group(0).column(0).compression == COMPRESSION.upper(), part
    first = {t: pq.read_table(run_dir / "lineage" / t) for t in ("message_hops", "message_lineage")}
    # Again, through the Hadoop file system a cluster would use (a URI instead of a path).
    assert run_lineage(run_dir.as_uri(), spark) == counts
    for table, rows in first.items():
        assert pq.read_table(run_dir / "lineage" / table).equals(rows), table
    assert sorted(p.name for p in run_dir.iterdir()) == ["lineage", "parquet"]
