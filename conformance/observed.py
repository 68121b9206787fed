"""What the real clients observed, from the driver's JSON lines to the contract's tables.

``produced`` gets one row per send the real producer made, ``consume_attempts`` one row per call
of a real listener, ``transaction_calls`` one row per call of a real transactional producer's
listener (its execution and each check the broker sent). These are the ground truth the audit of
the real stores is held to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.client.pop_consumer import (
    ACKED,
    CLIENT_GRPC_FIFO,
    CLIENT_GRPC_SIMPLE,
    GRPC_CLIENTS,
    LOCAL_RETRY,
    POP_ACKED_AT_MAX,
    POP_DELAYED,
    POP_NOT_ACKED,
    SENT_BACK,
)
from broker_core.constants import RETRY_MAX_TIMES_DEFAULT
from broker_core.errors import RetryAuditError
from broker_core.export.parquet import write_rows
from broker_core.export.schema import CONSUME_ATTEMPTS, PRODUCED, TRANSACTION_CALLS

SUCCESS = "CONSUME_SUCCESS"
POP = "POP"
# ExtraInfoUtil's topic marks in a POP_CK handle: popped from the topic, or from the group's POP
# retry topic named the v1 or the v2 way.
POP_CK_TOPIC_MARKS = {"0": None, "1": "_", "2": "+"}


@dataclass
class Observed:
    sends: list[dict] = field(default_factory=list)
    consumes: list[dict] = field(default_factory=list)
    transactions: list[dict] = field(default_factory=list)  # a transaction listener's calls
    phases: dict[str, int] = field(default_factory=dict)
    done: dict | None = None


def parse_lines(lines) -> Observed:
    """Parse the driver's stdout; a line that is not one of its events is an error naming it."""
    seen = Observed()
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("{"):
            continue  # the client library's own chatter, if any reached stdout
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            raise RetryAuditError(f"driver output line {number} is not JSON: {e}: {line[:200]}") from e
        kind = event.get("ev")
        if kind == "send":
            seen.sends.append(event)
        elif kind == "consume":
            seen.consumes.append(event)
        elif kind == "txn":
            seen.transactions.append(event)
        elif kind == "phase":
            seen.phases[event["name"]] = event["elapsed_ms"]
        elif kind == "done":
            seen.done = event
    return seen


def pop_queue(call: dict) -> tuple[str, int]:
    """The queue a POP delivery was popped from: its topic and queue id, from its POP_CK handle.

    A POP consumer's listener context names the topic it subscribed to, with queue id -1 (the
    client pops every queue); the handle (ExtraInfoUtil: start offset, pop time, invisible time,
    revive queue, topic mark, broker, queue id, queue offset) says which queue and whether it was
    the group's POP retry topic.
    """
    fields = (call.get("pop_ck") or "").split()
    if len(fields) < 8 or fields[4] not in POP_CK_TOPIC_MARKS:
        raise RetryAuditError(f"a POP delivery without a readable POP_CK handle: {call.get('pop_ck')!r}",
                              where=f"driver consume line of {call.get('uniq_key')}")
    separator = POP_CK_TOPIC_MARKS[fields[4]]
    topic = call["topic"]
    if separator is not None and not topic.startswith("%RETRY%"):
        topic = f"%RETRY%{call['group']}{separator}{topic}"
    return topic, int(fields[6])


def outcome(model: str, status: str, mode: str | None = None, reconsume_times: int = 0,
            max_reconsume_times: int | None = None, send_back_refused: bool = False,
            client: str | None = None) -> str:
    """What happened after the listener returned, as the push consumer handles each status."""
    if mode == POP and client == CLIENT_GRPC_FIFO:
        # A FIFO consumer consumes a failed message again itself, and at maxAttempts (the group's
        # retryMaxTimes + 1; reconsume_times here is the client's attempt - 1) forwards it to the
        # DLQ: the names the model's FIFO consumers use.
        if status == SUCCESS:
            return ACKED
        return SENT_BACK if reconsume_times >= (max_reconsume_times or 0) else LOCAL_RETRY
    if mode == POP and client in GRPC_CLIENTS:
        # A gRPC consumer acks a success; a SimpleConsumer's failure is no ack, a PushConsumer's
        # changes the invisible time to its retry policy's delay; the proxy, not the client, ends a
        # message at its maximum (the DLQ): the names the model's gRPC consumers use.
        if status == SUCCESS:
            return ACKED
        return POP_NOT_ACKED if client == CLIENT_GRPC_SIMPLE else POP_DELAYED
    if mode == POP:
        # The remoting POP client acks a success, changes a failure's invisible time to its retry
        # delay, and acks a failure at its maximum (-1: 16): the names the model's POP client uses.
        if status == SUCCESS:
            return ACKED
        limit = RETRY_MAX_TIMES_DEFAULT if max_reconsume_times in (None, -1) else max_reconsume_times
        return POP_ACKED_AT_MAX if reconsume_times >= limit else POP_DELAYED
    if status == SUCCESS:
        return "ACKED"
    if send_back_refused:
        # The broker refused CONSUMER_SEND_MSG_BACK: the client sent the retry itself.
        return "SENT_BACK_BY_CLIENT"
    if mode == "ORDERLY":
        # An orderly client retries locally, and sends the message back itself once past the max
        # (ConsumeMessageOrderlyService.checkReconsumeTimes; -1 means no max).
        past_max = max_reconsume_times is not None and 0 <= max_reconsume_times <= reconsume_times
        return "SENT_BACK_BY_CLIENT" if past_max else "LOCAL_RETRY"
    # A broadcasting consumer drops a failed message; a clustering one sends it back (a DLQ request,
    # DLQ_REQUESTED, at delay level -1: the broker stores it in %DLQ%group, still a send-back).
    return "DROPPED" if model == "BROADCASTING" else "SENT_BACK"


def write_tables(seen: Observed, out_dir: Path, run_id: str,
                 max_reconsume_times: dict[str, int] | None = None) -> dict[str, int]:
    """Write ``out_dir/produced/``, ``out_dir/consume_attempts/`` and ``out_dir/transaction_calls/``
    (Parquet, contract columns)."""
    produced = [{
        "run_id": run_id, "uniq_key": s["uniq_key"], "topic": s["topic"], "queue_id": s.get("queue_id"),
        "delay_level": s["delay_level"], "send_ts": s["send_ts"], "status": s["status"],
        "msg_id": s.get("msg_id"), "phys_offset": _phys_offset(s.get("msg_id")), "attempts": 1,
    } for s in seen.sends]
    for c in seen.consumes:
        if c.get("mode") == POP:
            c["queue_topic"], c["queue_id"] = pop_queue(c)
    attempts = [{
        "run_id": run_id, "group": c["group"], "consumer_id": c["consumer_id"], "model": c["model"],
        "queue_topic": c["queue_topic"], "queue_id": c["queue_id"], "queue_offset": c["queue_offset"],
        "msg_id": c["offset_msg_id"], "uniq_key": c["uniq_key"], "topic": c["topic"],
        "reconsume_times": c["reconsume_times"], "start_ts": c["start_ts"], "end_ts": c["end_ts"],
        "status": c["status"],
        "outcome": outcome(c["model"], c["status"], c.get("mode"), c["reconsume_times"],
                           (max_reconsume_times or {}).get(c["group"]),
                           bool(c.get("send_back_refused")), c.get("client")),
        "phys_offset": c["commit_log_offset"],
    } for c in sorted(seen.consumes, key=lambda c: (c["start_ts"], c["group"], c["consumer_id"]))]
    calls = [{
        "run_id": run_id, "producer_group": t.get("producer_group"), "uniq_key": t["uniq_key"],
        "stage": t["stage"], "check_times": t["n"], "answer": t["answer"], "ts": t["ts"],
        "phys_offset": t.get("commit_log_offset"), "queue_offset": t.get("queue_offset"),
    } for t in sorted(seen.transactions, key=lambda t: (t["ts"], t["uniq_key"], t["n"]))]
    return {
        "produced": write_rows(out_dir, "produced", produced, PRODUCED),
        "consume_attempts": write_rows(out_dir, "consume_attempts", attempts, CONSUME_ATTEMPTS),
        "transaction_calls": write_rows(out_dir, "transaction_calls", calls, TRANSACTION_CALLS),
    }


def _phys_offset(offset_msg_id: str | None) -> int | None:
    # The offset msgId is the store host (4-byte IPv4 + 4-byte port) then the 8-byte physical offset.
    if not offset_msg_id or len(offset_msg_id) != 32:
        return None
    return int(offset_msg_id[16:], 16)
