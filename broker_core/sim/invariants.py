"""Invariants over a finished run, read back from its Parquet tables (kept apart from the model).

The checks here see only what a run directory holds (``parquet/<table>/`` and ``run.json``), never the
objects that produced it: the same truth is checked from the outside, as the warehouse's asset
checks do in SQL. Each ``check_*`` function returns a list of :class:`Violation`; :func:`check_run` runs all.

Rules (RocketMQ 4.9.4, docs/rocketmq-references.md §4-§6):

* terminal: every message a producer stored ends, for every clustering group subscribed to its
  topic, consumed, in ``%DLQ%group``, or still on its way when the run stopped at the horizon;
* hop grammar: a ``%RETRY%group`` record is always the delivery of a SCHEDULE_TOPIC_XXXX copy of
  the same message at level ``3 + k`` (or level 3 for an expired consume), and its reconsume count
  never exceeds the group's maximum;
* DLQ only at the max: a ``%DLQ%group`` record carries a reconsume count at or above the maximum,
  unless the group's listener asked for the DLQ (``DLQ_REQUESTED``, a send-back at delay level -1)
  on the delivery with one reconsume less;
* no early delivery: a schedule delivery happens at or after its due time;
* stable pointers: ORIGIN_MESSAGE_ID and RETRY_TOPIC do not change along a message's chain (a
  chain starts at a failed delivery of a real-topic record; a redelivery after a crash starts
  another);
* dense offsets: each consume queue's offsets, in commit-log order, are 0, 1, 2, ... without gaps;
* broadcasting: a broadcasting group's failures are dropped, never sent back;
* orderly: an orderly group delivers a queue's offset n+1 only after offset n is done;
* deliveries match the store: each delivery names the record stored in that queue slot, and
  begins after it was stored.

Faults that RocketMQ itself answers with loss or early delivery (a kill -9 with async flush, a
backward clock jump) relax exactly the rule they break, and nothing else.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core import names
from broker_core.constants import (
    CLEAN_EXPIRED_DELAY_LEVEL,
    ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED,
    RETRY_DELAY_LEVEL_BASE,
    RETRY_MAX_TIMES_DEFAULT,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
)
from broker_core.export.parquet import read_table

MANIFEST_NAME = "run.json"
VIOLATIONS_SHOWN_MAX = 20  # a report lists this many violations per checker, then counts the rest
LOSS_FAULTS = frozenset({"broker_crash", "torn_write"})  # kill -9 may lose the unflushed tail


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which rule, which message (or queue), and what was seen."""

    message: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.message} [{self.key}]: {self.detail}"


POP_MODE = "pop"  # a scenario group's mode for a 5.x POP group
# Outcomes after which a message is done for its group: the listener's success (ACKED; EXPIRED ran
# to success after the timeout), and a POP client's ack of a message it failed at its maximum.
TERMINAL_CONSUME_OUTCOMES = ("ACKED", "EXPIRED")
POP_ACKED_AT_MAX = "POP_ACKED_AT_MAX"
# A concurrent listener's setDelayLevelWhenNextConsume(-1): the broker's send-back (SENT_BACK) of
# that delivery goes to the DLQ at once, whatever the reconsume count.
DLQ_REQUESTED = "DLQ_REQUESTED"


def effective_max_reconsume(group: dict[str, Any]) -> int:
    """The group's max reconsume times: -1 means 16 (concurrently) or unlimited (orderly); a gRPC
    group's is the proxy's maxAttempts, retryMaxTimes + 1 (the run manifest records it so)."""
    value = int(group.get("max_reconsume_times", -1))
    if value >= 0:
        return value
    if group.get("mode") == "orderly":
        return ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED
    return RETRY_MAX_TIMES_DEFAULT


class RunData:
    """A finished run's tables as column lists, loaded once and shared by the checks."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.manifest: dict[str, Any] = json.loads((self.run_dir / MANIFEST_NAME).read_text())
        self.commitlog = self._columns("commitlog", [
            "phys_offset", "topic", "queue_id", "queue_offset", "msg_id", "uniq_key", "origin_msg_id",
            "real_topic", "retry_topic", "delay_level", "reconsume_times", "store_ts", "born_host",
            "store_host"])
        self.attempts = self._columns("consume_attempts", [
            "group", "consumer_id", "queue_topic", "queue_id", "queue_offset", "msg_id", "uniq_key",
            "reconsume_times", "status", "outcome", "start_ts", "end_ts"])
        self.deliveries = self._columns("schedule_deliveries", [
            "delay_level", "schedule_msg_id", "delivered_msg_id", "real_topic", "scheduled_store_ts",
            "due_ts", "delivered_ts"])
        self.produced = self._columns("produced", ["uniq_key", "topic", "status", "msg_id"])
        self.faults = self._columns("faults", ["ts", "kind", "target", "detail"])
        self.groups: list[dict[str, Any]] = self.manifest.get("groups", [])
        self.levels_ms: list[int] = self.manifest.get("delay_levels_ms", [])
        self.fault_kinds = set(self.faults["kind"])
        # A 5.x POP group's retry topic %RETRY%<group>_<topic> -> the group (the name alone does
        # not say where the group ends).
        self.pop_retry_owners: dict[str, str] = {
            names.pop_retry_topic(g["name"], t): g["name"]
            for g in self.groups if g.get("mode") == POP_MODE for t in g["subscribe"]}

    def _columns(self, table: str, cols: list[str]) -> dict[str, list]:
        data = read_table(self.run_dir, table).select(cols)
        out = data.to_pydict()
        for name in cols:
            if name.endswith("_ts") or name == "ts":
                # Epoch milliseconds: cheaper to compare than datetimes, and exact.
                out[name] = [None if v is None else int(v.timestamp() * 1000) for v in out[name]]
        return out

    @property
    def ended_at_horizon(self) -> bool:
        return self.manifest.get("end_reason") != "terminal"

    @property
    def loss_allowed(self) -> bool:
        return bool(self.fault_kinds & LOSS_FAULTS)

    @property
    def backward_clock_jump(self) -> bool:
        return any(k == "clock_jump" and d.startswith("delta=-")
                   for k, d in zip(self.faults["kind"], self.faults["detail"], strict=True))

    def records(self):
        """Commit-log rows as dicts, in physical-offset order."""
        cl = self.commitlog
        keys = list(cl)
        order = sorted(range(len(cl["phys_offset"])), key=cl["phys_offset"].__getitem__)
        for i in order:
            yield {k: cl[k][i] for k in keys}


def check_terminal(run: RunData) -> list[Violation]:
    """Every stored message ends consumed, dead-lettered or (at the horizon) in flight, per group."""
    out: list[Violation] = []
    stored_keys: set[str] = set(k for k in run.commitlog["uniq_key"] if k)
    dlq: set[tuple[str, str]] = set()
    for topic, key in zip(run.commitlog["topic"], run.commitlog["uniq_key"], strict=True):
        if names.is_dlq_topic(topic):
            dlq.add((names.group_of(topic), key))
    consumed: set[tuple[str, str]] = set()
    a = run.attempts
    for group, key, status, outcome in zip(a["group"], a["uniq_key"], a["status"], a["outcome"], strict=True):
        if (status == "CONSUME_SUCCESS" and outcome in TERMINAL_CONSUME_OUTCOMES) or outcome == POP_ACKED_AT_MAX:
            consumed.add((group, key))
    subscribers: dict[str, list[str]] = defaultdict(list)
    for g in run.groups:
        if g.get("model", "clustering") == "clustering" and int(g.get("consumers", 1)) > 0:
            for t in g["subscribe"]:
                subscribers[t].append(g["name"])
    # A transactional message reaches its topic only when committed: one rolled back or
    # discarded (TRANS_CHECK_MAX_TIME_TOPIC) is terminal with no consumer (docs/transactions.md).
    halves = {k for t, k in zip(run.commitlog["topic"], run.commitlog["uniq_key"], strict=True)
              if t == names.TRANS_HALF_TOPIC}
    in_topic = set(zip(run.commitlog["topic"], run.commitlog["uniq_key"], strict=True)) if halves else set()
    p = run.produced
    for key, topic, status in zip(p["uniq_key"], p["topic"], p["status"], strict=True):
        if status != "SEND_OK":
            continue
        if key in halves and (topic, key) not in in_topic:
            continue  # never committed
        if key not in stored_keys:
            if not run.loss_allowed:
                out.append(Violation("terminal: acknowledged send never stored", key,
                                     f"topic {topic}: SEND_OK but no commit-log record"))
            continue
        for group in subscribers.get(topic, ()):
            if (group, key) in consumed or (group, key) in dlq:
                continue
            if run.ended_at_horizon or run.loss_allowed:
                continue  # still retrying, delayed or queued when the clock stopped
            out.append(Violation("terminal: message neither consumed nor dead-lettered", key,
                                 f"group {group}, topic {topic}; the run ended with every message "
                                 "terminal"))
    return out


def check_hop_grammar(run: RunData) -> list[Violation]:
    """real -> (SCHEDULE[3+k] -> %RETRY%g)* -> %DLQ%g?: every retry record comes from a schedule copy."""
    out: list[Violation] = []
    max_by_group = {g["name"]: effective_max_reconsume(g) for g in run.groups}
    by_msg_id: dict[str, dict[str, Any]] = {}
    for rec in run.records():
        by_msg_id[rec["msg_id"]] = rec
    delivered_from = dict(zip(run.deliveries["delivered_msg_id"], run.deliveries["schedule_msg_id"],
                              strict=True))
    max_level = len(run.levels_ms)
    # (group, key, reconsume count of the DLQ record) of each send-back the listener asked to
    # dead-letter: the delivery's count plus one.
    a = run.attempts
    dlq_requested = {(g, k, rt + 1) for g, k, rt, status, outcome in zip(
        a["group"], a["uniq_key"], a["reconsume_times"], a["status"], a["outcome"], strict=True)
        if status == DLQ_REQUESTED and outcome == "SENT_BACK"}
    for rec in by_msg_id.values():
        topic = rec["topic"]
        key = rec["uniq_key"] or rec["msg_id"]
        if topic == SCHEDULE_TOPIC:
            target = rec["real_topic"]
            group = names.group_of(target or "")
            if group is None or not names.is_retry_topic(target):
                continue
            rt = rec["reconsume_times"]
            allowed = {min(RETRY_DELAY_LEVEL_BASE + rt - 1, max_level), CLEAN_EXPIRED_DELAY_LEVEL}
            if rec["delay_level"] not in allowed:
                out.append(Violation("hop grammar: retry scheduled at the wrong level", key,
                                     f"group {group}: reconsume_times {rt} at level {rec['delay_level']}, "
                                     f"expected one of {sorted(allowed)}"))
            continue
        pop_group = run.pop_retry_owners.get(topic)
        if pop_group is not None:
            # The revive service's retry: no schedule copy before it, born host = store host = the
            # broker, one reconsume more per revive, never past the client's maximum.
            if rec["born_host"] != rec["store_host"]:
                out.append(Violation("hop grammar: POP retry not born on the broker", key,
                                     f"{topic} born host {rec['born_host']}, store host {rec['store_host']}"))
            if not 1 <= rec["reconsume_times"] <= max_by_group[pop_group]:
                out.append(Violation("hop grammar: retry beyond the maximum", key,
                                     f"{topic} reconsume_times {rec['reconsume_times']} "
                                     f"(max {max_by_group[pop_group]})"))
            continue
        group = names.group_of(topic)
        if group is None:
            continue
        max_rt = max_by_group.get(group)
        if max_rt is None:
            out.append(Violation("hop grammar: retry/DLQ topic of an unknown group", key, topic))
            continue
        if names.is_retry_topic(topic):
            src = delivered_from.get(rec["msg_id"])
            sched = by_msg_id.get(src) if src else None
            if sched is None or sched["topic"] != SCHEDULE_TOPIC:
                out.append(Violation("hop grammar: %RETRY% record not delivered from the schedule", key,
                                     f"{topic} offset {rec['phys_offset']} has no SCHEDULE_TOPIC_XXXX source"))
            elif sched["uniq_key"] != rec["uniq_key"] or sched["real_topic"] != topic:
                out.append(Violation("hop grammar: schedule copy and delivery disagree", key,
                                     f"schedule {sched['msg_id']} -> {rec['msg_id']}"))
            if not 1 <= rec["reconsume_times"] <= max_rt:
                out.append(Violation("hop grammar: retry beyond the maximum", key,
                                     f"{topic} reconsume_times {rec['reconsume_times']} (max {max_rt})"))
        elif names.is_dlq_topic(topic):
            if rec["reconsume_times"] < max_rt and \
                    (group, rec["uniq_key"], rec["reconsume_times"]) not in dlq_requested:
                out.append(Violation("DLQ before the maximum", key,
                                     f"{topic} reconsume_times {rec['reconsume_times']} < max {max_rt}"))
    return out


def check_delivery_times(run: RunData) -> list[Violation]:
    """No delayed message is delivered before its due time (unless the clock was turned back)."""
    if run.backward_clock_jump:
        return []
    out = []
    d = run.deliveries
    levels = run.levels_ms
    for i in range(len(d["due_ts"])):
        due, got, stored, level = d["due_ts"][i], d["delivered_ts"][i], d["scheduled_store_ts"][i], d["delay_level"][i]
        if got < due:
            out.append(Violation("early delivery", d["schedule_msg_id"][i],
                                 f"level {level} due {due} delivered {got} ({due - got} ms early)"))
        if 1 <= level <= len(levels) and due != stored + levels[level - 1]:
            out.append(Violation("due time is not store time + level delay", d["schedule_msg_id"][i],
                                 f"level {level}: stored {stored}, due {due}"))
    return out


def check_stable_pointers(run: RunData) -> list[Violation]:
    """ORIGIN_MESSAGE_ID and RETRY_TOPIC stay the same along one message's chain in one group."""
    out = []
    real_ids: dict[str, set[str]] = defaultdict(set)  # key -> msg ids of its real-topic records
    real_topic_of: dict[str, str] = {}
    chains: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    pop_retry_ids: dict[tuple[str, str], set[str]] = defaultdict(set)  # (key, group) -> its POP retries
    for rec in run.records():
        key = rec["uniq_key"]
        if not key:
            continue
        topic = rec["topic"]
        if topic == TIMER_TOPIC:
            continue  # the wheel's copy of a 5.x timer message: its real topic's record follows
        if topic in run.pop_retry_owners:
            # A POP retry carries neither pointer (the revive service copies the message); the
            # proxy's DLQ record of one names it (ORIGIN_MESSAGE_ID) and its topic (RETRY_TOPIC).
            pop_retry_ids[(key, run.pop_retry_owners[topic])].add(rec["msg_id"])
            continue
        group = names.group_of(topic)
        if topic == SCHEDULE_TOPIC:
            group = names.group_of(rec["real_topic"] or "")
        if group is None and topic != SCHEDULE_TOPIC:
            real_ids[key].add(rec["msg_id"])
            real_topic_of.setdefault(key, topic)
        elif group is not None:
            chains[(key, group)].append(rec)
    # Each failed delivery of a real-topic record starts one chain. Normally there is one; a
    # redelivery after a crash (offsets persist every 5 s, delay offsets every 10 s) starts more.
    chain_starts: dict[tuple[str, str], int] = defaultdict(int)
    a = run.attempts
    # A delivery that ran past the consume timeout (EXPIRED) was sent back too, whatever it returned.
    for group, key, qtopic, status, outcome in zip(a["group"], a["uniq_key"], a["queue_topic"],
                                                   a["status"], a["outcome"], strict=True):
        if (status != "CONSUME_SUCCESS" or outcome == "EXPIRED") and names.group_of(qtopic) is None:
            chain_starts[(key, group)] += 1
    for (key, group), recs in chains.items():
        # A client's own send of a retry (the broker refused the send-back, or an orderly consumer
        # past its max) keeps the consumed message's properties, so a first one carries no
        # ORIGIN_MESSAGE_ID; the broker's next send-back then names that retry record.
        origins = {r["origin_msg_id"] for r in recs if r["origin_msg_id"]}
        retry_topics = {r["retry_topic"] for r in recs}
        expected = real_topic_of.get(key)
        if (key, group) in pop_retry_ids:
            pop_ids = pop_retry_ids[(key, group)]
            if not origins <= pop_ids:
                out.append(Violation("ORIGIN_MESSAGE_ID names no POP retry of the message", key,
                                     f"group {group}: {sorted(map(str, origins - pop_ids))}"))
            expected_retry = {names.pop_retry_topic(group, expected)} if expected is not None else None
            if len(retry_topics) != 1 or (expected_retry is not None and retry_topics != expected_retry):
                out.append(Violation("RETRY_TOPIC changed along a chain", key,
                                     f"group {group}: {sorted(map(str, retry_topics))}, "
                                     f"POP retry topic {expected_retry}"))
            continue
        unnamed_retries = {r["msg_id"] for r in recs
                           if r["topic"] != SCHEDULE_TOPIC and not r["origin_msg_id"]}
        starts = real_ids.get(key, set())
        allowed = max(1, chain_starts[(key, group)]) + len(origins & unnamed_retries)
        if len(origins) > allowed:
            out.append(Violation("ORIGIN_MESSAGE_ID changed along a chain", key,
                                 f"group {group}: {sorted(map(str, origins))} for "
                                 f"{chain_starts[(key, group)]} failed first-hop deliveries"))
        elif not origins <= (starts | {key} | unnamed_retries) and not run.loss_allowed:
            out.append(Violation("ORIGIN_MESSAGE_ID names no record of the message", key,
                                 f"group {group}: {sorted(origins - starts)}"))
        if len(retry_topics) != 1 or (expected is not None and retry_topics != {expected}):
            out.append(Violation("RETRY_TOPIC changed along a chain", key,
                                 f"group {group}: {sorted(map(str, retry_topics))}, real topic {expected}"))
    return out


def check_dense_offsets(run: RunData) -> list[Violation]:
    """Each consume queue's offsets, in commit-log order, run 0, 1, 2, ... with no gap or repeat."""
    out = []
    last: dict[tuple[str, int], int] = {}
    for rec in run.records():
        q = (rec["topic"], rec["queue_id"])
        expected = last.get(q, -1) + 1
        if rec["queue_offset"] != expected:
            out.append(Violation("consume-queue offsets not dense", f"{q[0]}/{q[1]}",
                                 f"offset {rec['queue_offset']} at phys {rec['phys_offset']}, "
                                 f"expected {expected}"))
        last[q] = rec["queue_offset"]
    return out


def check_broadcasting(run: RunData) -> list[Violation]:
    """A broadcasting group never retries: failures are dropped, no %RETRY%/%DLQ% record exists."""
    out = []
    broadcasting = {g["name"] for g in run.groups if g.get("model") == "broadcasting"}
    if not broadcasting:
        return out
    for topic, key in zip(run.commitlog["topic"], run.commitlog["uniq_key"], strict=True):
        if names.group_of(topic) in broadcasting:
            out.append(Violation("broadcasting group retried a message", key, f"record in {topic}"))
    a = run.attempts
    for group, key, status, outcome in zip(a["group"], a["uniq_key"], a["status"], a["outcome"], strict=True):
        if group in broadcasting and status != "CONSUME_SUCCESS" and outcome not in ("DROPPED", "LOST_IN_CRASH"):
            out.append(Violation("broadcasting failure not dropped", key,
                                 f"group {group}: {status} ended {outcome}"))
    return out


def check_deliveries_match_store(run: RunData) -> list[Violation]:
    """Every delivery names a stored record (same queue slot, same msg id) stored before it began."""
    cl = run.commitlog
    slot: dict[tuple[str, int, int], int] = {}
    for i in range(len(cl["msg_id"])):
        slot[(cl["topic"][i], cl["queue_id"][i], cl["queue_offset"][i])] = i
    out = []
    a = run.attempts
    for j in range(len(a["msg_id"])):
        where = (a["queue_topic"][j], a["queue_id"][j], a["queue_offset"][j])
        i = slot.get(where)
        same = i is not None and cl["msg_id"][i] == a["msg_id"][j] and cl["uniq_key"][i] == a["uniq_key"][j]
        stored_later = same and cl["store_ts"][i] > a["start_ts"][j]
        if run.loss_allowed and (not same or stored_later):
            # A kill -9 may drop a record a consumer had already read from the page cache; the
            # slot (and its offset msg id) is then reused by a later record, possibly even the same
            # message re-put by the schedule service. Only a run with such a fault may show it.
            continue
        if not same:
            out.append(Violation("delivery of a record the store does not hold", a["uniq_key"][j] or "-",
                                 f"group {a['group'][j]} {where[0]}/{where[1]}@{where[2]} "
                                 f"msg {a['msg_id'][j]}"))
        elif stored_later and not run.backward_clock_jump:
            out.append(Violation("delivery before the record was stored", a["uniq_key"][j],
                                 f"group {a['group'][j]}: stored {cl['store_ts'][i]}, "
                                 f"delivered {a['start_ts'][j]}"))
    return out


ORDERLY_DONE_OUTCOMES = ("ACKED", "SENT_BACK", "SENT_BACK_BY_CLIENT")


def check_orderly(run: RunData) -> list[Violation]:
    """An orderly group takes a queue's messages in offset order: offset n+1 is first delivered only
    after offset n was consumed or handed to the retry/DLQ path."""
    orderly = {g["name"] for g in run.groups
               if g.get("mode") == "orderly" and g.get("model", "clustering") == "clustering"}
    if not orderly:
        return []
    a = run.attempts
    by_queue: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for i, group in enumerate(a["group"]):
        if group in orderly:
            by_queue[(group, a["queue_topic"][i], a["queue_id"][i])].append(i)
    out = []
    for (group, topic, qid), rows in by_queue.items():
        done_at: dict[int, int] = {}
        for i in rows:
            if a["outcome"][i] in ORDERLY_DONE_OUTCOMES:
                off = a["queue_offset"][i]
                done_at[off] = min(done_at.get(off, a["start_ts"][i]), a["start_ts"][i])
        offsets = {a["queue_offset"][i] for i in rows}
        for i in rows:
            off = a["queue_offset"][i]
            prev = off - 1
            if prev in offsets and (prev not in done_at or done_at[prev] > a["start_ts"][i]):
                out.append(Violation("orderly delivery out of order", a["uniq_key"][i],
                                     f"group {group} {topic}/{qid}: offset {off} delivered at "
                                     f"{a['start_ts'][i]} before offset {prev} was done"))
    return out


CHECKERS = (check_terminal, check_hop_grammar, check_delivery_times, check_stable_pointers,
            check_dense_offsets, check_broadcasting, check_orderly, check_deliveries_match_store)


def check_run(run_dir: str | Path) -> list[Violation]:
    """Run every checker over a finished run directory and return all violations (empty = pass)."""
    run = RunData(run_dir)
    out: list[Violation] = []
    for checker in CHECKERS:
        out.extend(checker(run))
    return out


def format_violations(violations: list[Violation]) -> str:
    """A readable report: each rule's first few violations and a count of the rest."""
    by_rule: dict[str, list[Violation]] = defaultdict(list)
    for v in violations:
        by_rule[v.message].append(v)
    lines = []
    for rule, items in by_rule.items():
        lines.append(f"{rule}: {len(items)}")
        lines.extend(f"  {v.key}: {v.detail}" for v in items[:VIOLATIONS_SHOWN_MAX])
        if len(items) > VIOLATIONS_SHOWN_MAX:
            lines.append(f"  ... and {len(items) - VIOLATIONS_SHOWN_MAX} more")
    return "\n".join(lines)
