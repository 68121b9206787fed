"""A hand-built run directory: four messages whose journeys are worked out by hand.

Run ``tiny`` (broker-a, topic OrderTopic, group ``g1`` with max reconsume times 1):

* ``UA``: published, consumed at the first delivery                      -> CONSUMED, path P
* ``UB``: published, failed, SCHEDULE[3] -> %RETRY%g1, failed again -> %DLQ%g1  -> DLQ, 1 retry
* ``UC``: delayed publish SCHEDULE[2] -> DELIVER, consumed twice (a duplicate)   -> CONSUMED
* ``UD``: SEND_OK but no commit-log record; a broker_crash after the send explains it -> LOST

``write_tiny_run(path, change)`` lets a test break one thing on purpose: ``change(tables)`` gets
the rows of every table (a dict of lists of dicts) and the ``run.json`` manifest (a dict, or set it
to None for none), and may edit them before they are written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from broker_core.export.parquet import write_rows
from broker_core.export.schema import LINEAGE_TABLES, RAW_TABLES

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "tiny"
GROUP = "g1"
TOPIC = "OrderTopic"
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
RETRY = "%RETRY%g1"
DLQ = "%DLQ%g1"


def ts(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def msg_id(phys: int) -> str:
    return f"0A00000100002A9F{phys:016X}"


def _record(phys, topic, uniq, store_ms, *, queue_id=0, queue_offset=0, origin=None, real_topic=None,
            retry_topic=None, delay=0, reconsume=0, max_reconsume=None, props=None):
    properties = {"UNIQ_KEY": uniq, "TAGS": "TagA", "KEYS": f"order-{uniq}", "color": "blue"}
    if origin:
        properties["ORIGIN_MESSAGE_ID"] = origin
    if real_topic:
        properties["REAL_TOPIC"] = real_topic
        properties["REAL_QID"] = "0"
    if retry_topic:
        properties["RETRY_TOPIC"] = retry_topic
    if delay:
        properties["DELAY"] = str(delay)
    properties.update(props or {})
    return {
        "run_id": RUN, "broker": "broker-a", "phys_offset": phys, "total_size": 100, "topic": topic,
        "queue_id": queue_id, "queue_offset": queue_offset, "msg_id": msg_id(phys), "uniq_key": uniq,
        "origin_msg_id": origin, "real_topic": real_topic, "real_queue_id": 0 if real_topic else None,
        "retry_topic": retry_topic, "delay_level": delay, "reconsume_times": reconsume,
        "max_reconsume_times": max_reconsume, "tags": "TagA", "keys": f"order-{uniq}", "body_size": 10,
        "body_crc": 1234, "sys_flag": 0, "born_ts": ts(0), "born_host": "10.0.0.9:50000",
        "store_ts": ts(store_ms), "store_host": "10.0.0.1:10911", "properties": list(properties.items()),
        "magic": "v1", "file_name": "00000000000000000000",
    }


def _hop(key, group, index, kind, rec, next_ms):
    store_ms = int((rec["store_ts"] - T0).total_seconds() * 1000)
    return {
        "run_id": RUN, "message_key": key, "group": group, "hop_index": index, "hop_kind": kind,
        "topic": rec["topic"], "queue_id": rec["queue_id"], "broker": rec["broker"], "phys_offset": rec["phys_offset"],
        "msg_id": rec["msg_id"], "delay_level": rec["delay_level"], "reconsume_times": rec["reconsume_times"],
        "store_ts": rec["store_ts"], "next_store_ts": ts(next_ms) if next_ms is not None else None,
        "dwell_ms": next_ms - store_ms if next_ms is not None else None,
    }


def _attempt(uniq, rec, start_ms, status, outcome, consumer="c1", reconsume=0):
    return {
        "run_id": RUN, "group": GROUP, "consumer_id": consumer, "model": "CLUSTERING",
        "queue_topic": rec["topic"], "queue_id": rec["queue_id"], "queue_offset": rec["queue_offset"],
        "msg_id": rec["msg_id"], "uniq_key": uniq, "topic": TOPIC, "reconsume_times": reconsume,
        "start_ts": ts(start_ms), "end_ts": ts(start_ms + 5), "status": status, "outcome": outcome,
        "phys_offset": rec["phys_offset"],
    }


def tiny_tables() -> dict:
    """Every table of the tiny run, as rows, and its run.json manifest."""
    a = _record(0, TOPIC, "UA", 0, queue_offset=0)
    b = _record(100, TOPIC, "UB", 10, queue_offset=1)
    b_sched = _record(200, SCHEDULE, "UB", 20, queue_id=2, origin=b["msg_id"], real_topic=RETRY,
                      retry_topic=TOPIC, delay=3, reconsume=1, max_reconsume=1)
    b_retry = _record(300, RETRY, "UB", 10_020, origin=b["msg_id"], real_topic=RETRY, retry_topic=TOPIC,
                      delay=3, reconsume=1, max_reconsume=1)
    b_dlq = _record(400, DLQ, "UB", 10_030, origin=b["msg_id"], retry_topic=TOPIC, reconsume=2,
                    max_reconsume=1)
    c_sched = _record(500, SCHEDULE, "UC", 30, queue_id=1, real_topic=TOPIC, delay=2)
    c_deliver = _record(600, TOPIC, "UC", 5_030, queue_offset=2, real_topic=TOPIC, delay=2)
    commitlog = [a, b, b_sched, b_retry, b_dlq, c_sched, c_deliver]

    hops = [
        _hop("UA", None, 0, "PUBLISH", a, None),
        _hop("UB", None, 0, "PUBLISH", b, None),
        _hop("UB", GROUP, 1, "SCHEDULE", b_sched, 10_020),
        _hop("UB", GROUP, 2, "RETRY", b_retry, 10_030),
        _hop("UB", GROUP, 3, "DLQ", b_dlq, None),
        _hop("UC", None, 0, "SCHEDULE", c_sched, 5_030),
        _hop("UC", None, 1, "DELIVER", c_deliver, None),
    ]
    lineage = [
        {"run_id": RUN, "message_key": "UA", "group": GROUP, "origin_topic": TOPIC,
         "origin_msg_id": a["msg_id"], "hops": 1, "retries": 0, "path": TOPIC, "final_topic": TOPIC,
         "final_state": "CONSUMED", "first_store_ts": ts(0), "last_store_ts": ts(0), "total_delay_ms": 0},
        {"run_id": RUN, "message_key": "UB", "group": GROUP, "origin_topic": TOPIC,
         "origin_msg_id": b["msg_id"], "hops": 4, "retries": 1,
         "path": f"{TOPIC} > {SCHEDULE}[3] > {RETRY} > {DLQ}", "final_topic": DLQ, "final_state": "DLQ",
         "first_store_ts": ts(10), "last_store_ts": ts(10_030), "total_delay_ms": 10_020},
        {"run_id": RUN, "message_key": "UC", "group": GROUP, "origin_topic": TOPIC,
         "origin_msg_id": c_sched["msg_id"], "hops": 2, "retries": 0, "path": f"{SCHEDULE}[2] > {TOPIC}",
         "final_topic": TOPIC, "final_state": "CONSUMED", "first_store_ts": ts(30),
         "last_store_ts": ts(5_030), "total_delay_ms": 5_000},
        {"run_id": RUN, "message_key": "UD", "group": GROUP, "origin_topic": TOPIC, "origin_msg_id": None,
         "hops": 0, "retries": 0, "path": "", "final_topic": None, "final_state": "LOST",
         "first_store_ts": None, "last_store_ts": None, "total_delay_ms": None},
    ]
    attempts = [
        _attempt("UA", a, 1, "CONSUME_SUCCESS", "ACKED"),
        _attempt("UB", b, 11, "RECONSUME_LATER", "SENT_BACK"),
        _attempt("UB", b_retry, 10_021, "EXCEPTION", "SENT_BACK", consumer="c2", reconsume=1),
        _attempt("UC", c_deliver, 5_031, "CONSUME_SUCCESS", "ACKED"),
        _attempt("UC", c_deliver, 5_900, "CONSUME_SUCCESS", "ACKED", consumer="c2"),
    ]
    produced = [
        {"run_id": RUN, "uniq_key": k, "topic": TOPIC, "queue_id": 0, "delay_level": d, "send_ts": ts(s),
         "status": "SEND_OK", "msg_id": None, "phys_offset": None, "attempts": 1}
        for k, d, s in (("UA", 0, 0), ("UB", 0, 10), ("UC", 2, 30), ("UD", 0, 35))
    ]
    deliveries = [
        {"run_id": RUN, "delay_level": 3, "schedule_queue_offset": 0, "schedule_msg_id": b_sched["msg_id"],
         "delivered_msg_id": b_retry["msg_id"], "real_topic": RETRY, "scheduled_store_ts": ts(20),
         "due_ts": ts(10_020), "delivered_ts": ts(10_020), "lateness_ms": 0, "put_attempts": 1,
         "uniq_key": "UB"},
        {"run_id": RUN, "delay_level": 2, "schedule_queue_offset": 0, "schedule_msg_id": c_sched["msg_id"],
         "delivered_msg_id": c_deliver["msg_id"], "real_topic": TOPIC, "scheduled_store_ts": ts(30),
         "due_ts": ts(5_030), "delivered_ts": ts(5_030), "lateness_ms": 0, "put_attempts": 1,
         "uniq_key": "UC"},
    ]
    return {
        "commitlog": commitlog,
        "consume_attempts": attempts,
        "schedule_deliveries": deliveries,
        "consumer_offsets": [{"run_id": RUN, "broker": "broker-a", "group": GROUP, "topic": TOPIC,
                              "queue_id": 0, "offset": 3, "ts": ts(6_000), "event": "UPDATE"}],
        "faults": [{"run_id": RUN, "ts": ts(40), "kind": "broker_crash", "target": "broker-a",
                    "detail": "kill -9, flush=async"}],
        "runs": [{"run_id": RUN, "scenario": "tiny", "seed": 1, "sim_start_ts": ts(0),
                  "sim_end_ts": ts(20_000), "wall_seconds": 0.1, "messages_produced": 4,
                  "records_written": len(commitlog), "version": "test", "source": "simulation",
                  "broker": "broker-a", "msg_id_hosts": ["0A00000100002A9F"]}],
        "produced": produced,
        "delay_offsets": [],
        "store_problems": [],
        "message_hops": hops,
        "message_lineage": lineage,
        # The run manifest a simulation writes beside its Parquet (run.json).
        "run.json": {"run_id": RUN, "flush": "async", "semantics": "4.9", "end_reason": "terminal",
                     "horizon_ms": 20_000, "delay_levels_ms": [1_000, 5_000, 10_000],
                     "groups": [{"name": GROUP, "subscribe": [TOPIC], "model": "clustering",
                                 "mode": "concurrently", "consumers": 2, "max_reconsume_times": 1}]},
    }


def write_tiny_run(path: Path, change: Callable[[dict[str, list[dict]]], None] | None = None,
                   *, run_id: str = RUN) -> Path:
    """Write the tiny run (after ``change``) as a run directory at ``path``; return ``path``."""
    tables = tiny_tables()
    if change is not None:
        change(tables)
    manifest = tables.pop("run.json")
    Path(path).mkdir(parents=True, exist_ok=True)
    if manifest is not None:
        (Path(path) / "run.json").write_text(json.dumps(dict(manifest, run_id=run_id)))
    for rows in tables.values():
        for row in rows:
            row["run_id"] = run_id
    for table, rows in tables.items():
        folder = "lineage" if table in LINEAGE_TABLES else "parquet"
        schema = LINEAGE_TABLES.get(table) or RAW_TABLES[table]
        write_rows(Path(path) / folder, table, rows, schema)
    return Path(path)
