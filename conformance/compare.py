"""The two comparisons of a conformance run, message by message.

**The audit vs the real clients.** For every (message, group) a real listener saw, the deliveries
the clients observed (queue topic and reconsume times, in order, duplicates of one record counted
once) must equal the consumable hops the audit rebuilt from the real stores (the records in the
real topic and in ``%RETRY%group``), the final state must agree (a success seen means CONSUMED;
``max + 1`` failures mean DLQ after ``max`` retries, a listener's DLQ request (``DLQ_REQUESTED``)
the DLQ after the retries before it; for a gRPC group the proxy pops one retry more, which no
client is handed, and dead-letters it) and every delayed or retried hop must have
waited at least its level's delay.

**The model vs the real broker.** For every message, the model's run and the real run must have
the same hops per group (kind, topic, delay level, reconsume times; the queue of the schedule,
retry and DLQ topics), the same final state per group, the same properties on every hop (keys,
values and order; ids, hosts, queue placement and timestamps aside; a roll's ``TIMER_ROLL_TIMES``
is compared), schedule waits within :data:`SCHEDULE_DWELL_TOLERANCE_MS` of each other and waits
in the timer wheel (each TIMER hop, until the roll or delivery that follows it) within
:data:`TIMER_DWELL_TOLERANCE_MS`. A difference is *explained* when its kind is in
:data:`EXPLAINED` (each has its reason in docs/decisions.md), else *unexplained*.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import duckdb

from broker_core.broker.proxy import max_attempts
from broker_core.broker.semantics import semantics_for
from broker_core.client.behavior import DLQ_REQUESTED
from broker_core.client.pop_consumer import CLIENT_GRPC_FIFO, POP_MODE
from broker_core.codec import PROPERTIES_LENGTH_FIELD_BYTES, RECORD_FIXED_V4_BYTES
from broker_core.constants import RETRY_MAX_TIMES_DEFAULT, TIMER_PRECISION_MS
from broker_core.delay_levels import parse_delay_levels
from broker_core.message import (
    PROP_DELAY,
    PROP_MAX_RECONSUME_TIMES,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
    PROP_TRAN_MSG,
    PROP_WAIT,
    properties_to_string,
)
from broker_core.names import (
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    dlq_topic,
    is_retry_topic,
    retry_topic,
)
from broker_core.sim.scenario import Scenario
from conformance.broker_logs import cut_bytes_by_broker, rejoin_cuts
from conformance.client_logs import PopClientEvidence, read_pop_evidence
from conformance.plan import is_grpc

# The real scheduler re-checks a level every 100 ms and each put costs a few ms; the model runs
# on a poll grid of its own. Beyond this the two disagree about when a delayed hop came out.
SCHEDULE_DWELL_TOLERANCE_MS = 1000
# A record's wait in the 5.x timer wheel (a TIMER hop: until its roll or its delivery) is decided by
# whole slots counted from the second the wheel took it: the model and the real run store at
# different points of a second and the real put takes some ms, so they may differ by one slot and
# a bit. Parked half a window instead of a whole one (or not rolled) differs by more.
TIMER_DWELL_TOLERANCE_MS = 2 * TIMER_PRECISION_MS
EXAMPLES_MAX = 20
DIFFERENCES_MAX = 50
SUCCESS = "CONSUME_SUCCESS"
# Properties that name where or when a record was stored, not what it is: the offset msgId of the
# first record (host and offset), the real topic's queue (two brokers vs the model's one), and the
# bounds of that queue when the message was pulled (an orderly client's send-back copies them).
PLACEMENT_PROPERTIES = frozenset({"ORIGIN_MESSAGE_ID", "REAL_QID", "MIN_OFFSET", "MAX_OFFSET"})
# Times a client stamps on a message (the push consumer's CONSUME_START_TIME, copied into a retry
# the client sends itself), the times a 5.x timer wheel stamps (its due slot, when it took the
# record, when it put the delivery), a POP retry's first pop time, and a recall record's due
# time and time of the recall: each run's own clock.
CLOCK_PROPERTIES = frozenset({"CONSUME_START_TIME", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
                              "1ST_POP_TIME", "TIMER_DELIVER_MS", "BORN_TIMESTAMP"})
MASKED = "*"
# The proxy's own records: its heartbeat broadcast to the cluster's other proxies
# (ProxyConfig.heartbeatSyncerTopicName), stored when a client connects and about every 10 s. No
# message of the scenario, and the model plays no proxy cluster: left out of the model comparison
# and counted apart (docs/conformance.md).
PROXY_TOPICS = frozenset({"DefaultHeartBeatSyncerTopic"})
SENT_BACK_BY_CLIENT = "SENT_BACK_BY_CLIENT"
SENT_BACK = "SENT_BACK"
# The transaction_state a producer's listener answers lead to (docs/transactions.md): its first
# answer that is not UNKNOW decides; a message never decided is discarded after the broker's last
# check, or still undecided when the store was taken.
DECIDED_BY_ANSWER = {"COMMIT_MESSAGE": "COMMITTED", "ROLLBACK_MESSAGE": "ROLLED_BACK"}
NEVER_DECIDED = frozenset({"DISCARDED", "UNDECIDED"})
# Topics whose queue number means something (the delay level's queue, the one retry/DLQ queue).
_SYSTEM_PREFIXES = ("SCHEDULE_TOPIC_XXXX", "%RETRY%", "%DLQ%")
# A send-back a controller-mode failover cut (anomaly FAILOVER_CUT, or a rejoining master's log).
CUT_AT_FAILOVER = "send_back_cut_at_failover"

# lineage_vs_clients.explained: a chain whose retry count a producer's resend lost; a chain with
# a copy its client sent after a send-back whose reply a killed broker never gave.
RETRY_COUNT_LOST = "retry_count_lost_on_resend"
SEND_BACK_REPLY_LOST = "send_back_reply_lost_in_outage"
# A chain short of a retry its client sent itself after the broker refused a send-back: the send
# met a killed broker and failed, and the local retry the client then queued was dropped with the
# broker's queue (the log records the refusal, not the send's result).
CLIENT_SEND_LOST = "client_send_lost_in_outage"
# A chain whose last hop is a schedule record on a broker that was killed and never started again
# (and that no replica took over): the record waits in a store no scheduler reads, so the chain
# stays RETRYING where the clients, who went on without it, saw it end.
SCHEDULE_STRANDED = "schedule_stranded_on_killed_broker"
# A message its client failed while its broker was down, of which no retry reached any store: an
# orderly client retries locally (its retries are its own until past the maximum), and a concurrent
# one's send-back (to the retry topic, or the DLQ its listener asked for) and own send can both meet
# the killed broker. The client's local retry went with the queue it lost with the broker, and it
# was not handed the message again before the run ended: the clients' log ends in a failure. The
# store holds the message unconsumed, its committed offset not past it: the broker will hand it
# out again.
RETRY_HELD_BY_CLIENT = "retry_held_by_client_in_outage"
OFFSET_LOST = "offset_lost_in_broker_crash"
# A chain with copies its broker's schedule put again after a crash: a killed broker restarts its
# schedule from the delay offsets it last persisted (every 10 s) and re-puts records it had already
# delivered, and a re-put no client was handed (a DLQ, or a retry the run ended before) is a copy
# the clients' log cannot see.
SCHEDULE_REPUT = "schedule_reput_after_broker_crash"
# A POP group's records its client popped and never handed to a listener, each named by the client's
# own log (conformance.client_logs): a request whose process queue a rebalance had dropped (after a
# broker's return), one aborted past its invisible time, a record acked past the maximum. The
# broker revived the dropped ones at the next count, so the store holds deliveries, retries and an
# end the listeners' log cannot show.
POP_UNHEARD = "pop_dropped_by_client"

# Difference kinds the real broker and the model are known and documented to differ in.
EXPLAINED = {
    "after_redelivery":
        "the message was handed again after a consumer crash, in the model's run or the real one; "
        "which messages a crash redelivers depends on when the client last persisted its offsets "
        "(docs/decisions.md, 'Redeliveries after a consumer crash are timing')",
    "real_broker_outage":
        "a real broker was killed and restarted (or, a DLedger group's master, replaced by an election) "
        "while the message was sent, stored or consumed; the model has one broker and plays no such "
        "outage, so only the audit and the clients are compared for it (docs/conformance.md, 'Broker outages')",
    "broadcast_group_absent_from_store":
        "a broadcasting group keeps its offsets in the client and drops failures: its store holds "
        "nothing of it (docs/decisions.md, 'Broadcasting groups leave no trace in a store')",
}


def _rows(con, sql: str, params: list | None = None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _has_table(con, name: str) -> bool:
    """Whether the warehouse has ``name`` (one built from the lineage alone has fewer tables)."""
    return bool(_rows(con, "SELECT 1 FROM information_schema.tables WHERE table_name = ?", [name]))


def _max_reconsume(scenario: Scenario) -> dict[str, int]:
    """Each group's retry maximum: a gRPC group's ``retryMaxTimes`` (the proxy's), else its
    client's maxReconsumeTimes."""
    return {g.name: (g.retry_max_times if is_grpc(g) else
                     RETRY_MAX_TIMES_DEFAULT if g.max_reconsume_times < 0 else g.max_reconsume_times)
            for g in scenario.groups}


def compare_all(work: Path, scenario: Scenario, *, model_run_id: str, real_run_ids: list[str],
                outage_windows: list[tuple[int, int]] = (), stranded: frozenset[str] = frozenset(),
                killed: frozenset[str] = frozenset(), checks: dict | None = None) -> dict:
    """``checks``: the runs' check verdicts (run_id -> name -> verdict); each failed blocking one of
    the real runs gets its first violation's trail (:func:`check_trails`)."""
    con = duckdb.connect(str(work / "warehouse.duckdb"), read_only=True)
    try:
        attempts = _client_attempts(work)
        import pyarrow.parquet as pq
        model_attempts = pq.read_table(work / "runs" / "model" / "parquet" / "consume_attempts").to_pylist()
        touched = in_outage(con, work, real_run_ids, attempts, outage_windows)
        check_trails(con, attempts, checks or {}, real_run_ids)
        cuts = rejoin_cuts(work / "logs")
        unheard = unheard_pops(con, real_run_ids, attempts, read_pop_evidence(work / "logs"),
                               {g.name for g in scenario.groups if g.mode == POP_MODE and not is_grpc(g)})
        return {
            "lineage_vs_clients": lineage_vs_clients(
                con, scenario, attempts, real_run_ids, in_outage=touched, stranded=stranded, killed=killed,
                unheard=unheard, rejoin_cut=cut_bytes_by_broker(cuts)),
            # What a controller-mode old master cut from its own log as it rejoined (its store log).
            "rejoin_cuts": [{"node": node, "from_offset": lo, "to_offset": hi} for node, lo, hi in cuts],
            "transactions_vs_producers": transactions_vs_producers(con, real_run_ids, _client_calls(work)),
            "model_vs_real": model_vs_real(con, scenario, model_run_id, real_run_ids,
                                           redelivered=redelivered(model_attempts) | redelivered(attempts),
                                           in_outage=touched),
            "duplicates": {"model": duplicate_consumes(model_attempts), "real": duplicate_consumes(attempts),
                           "note": "successful consumes of a message a clustering group had already "
                                   "consumed (a crashed consumer's unpersisted offsets); when they happen "
                                   "depends on timing, so the counts are reported, not required to match"},
        }
    finally:
        con.close()


def in_outage(con, work: Path, real_run_ids: list[str], attempts: list[dict],
              windows: list[tuple[int, int]]) -> set[str]:
    """Messages sent, stored or handed to a listener while a real broker was down (or just after)."""
    if not windows:
        return set()
    import pyarrow.parquet as pq

    def inside(ts) -> bool:
        ms = int(ts.timestamp() * 1000)
        return any(lo <= ms <= hi for lo, hi in windows)

    out = {a["uniq_key"] for a in attempts if inside(a["start_ts"])}
    out |= {p["uniq_key"] for p in pq.read_table(work / "clients" / "produced").to_pylist() if inside(p["send_ts"])}
    marks = ", ".join("?" for _ in real_run_ids)
    for key, ts in con.execute(f"SELECT uniq_key, store_ts FROM commitlog WHERE run_id IN ({marks})",
                               real_run_ids).fetchall():
        if key is not None and inside(ts):
            out.add(key)
    return out


def redelivered(attempts: list[dict]) -> set[str]:
    """Messages a clustering group was handed twice at the same reconsume count (a crash's redelivery)."""
    seen = Counter((a["group"], a["uniq_key"], a["reconsume_times"]) for a in attempts
                   if a["model"] == "CLUSTERING")
    return {uniq for (_, uniq, _), n in seen.items() if n > 1}


def duplicate_consumes(attempts: list[dict]) -> int:
    """Successful consumes beyond the first of each (group, message) in clustering groups."""
    ok = Counter((a["group"], a["uniq_key"]) for a in attempts
                 if a["model"] == "CLUSTERING" and a["status"] == SUCCESS)
    return sum(n - 1 for n in ok.values())


def unheard_pops(con, real_run_ids: list[str], attempts: list[dict], evidence: PopClientEvidence,
                 pop_groups: set[str]) -> frozenset[tuple[str, str]]:
    """(group, msgId) of the records a remoting POP group's clients popped and never handed to a
    listener, as their logs say (:mod:`conformance.client_logs`): a record acked past the maximum
    (its msgId in the log), a request aborted past its invisible time (its pop time in the log and in
    the record's checkpoint), and a request whose process queue was dropped. A dropped request's
    line names its group, broker and time only: each line stands for one record of that group and
    broker that no listener got, popped (its checkpoint's pop time) at or before the line and
    revived no earlier, matched in pop-time order."""
    if not evidence or not pop_groups:
        return frozenset()
    if not _has_table(con, "pop_evidence"):
        return frozenset()
    heard = {(a["group"], a["msg_id"]) for a in attempts}
    run_marks = ", ".join("?" for _ in real_run_ids)
    group_marks = ", ".join("?" for _ in pop_groups)
    popped = _rows(con, f"""
        SELECT DISTINCT p."group", c.broker, c.msg_id, epoch_ms(p.pop_ts) AS pop_ms, epoch_ms(p.revive_ts) AS revive_ms
        FROM pop_evidence p
        JOIN commitlog c ON c.run_id = p.run_id AND c.broker = p.broker AND c.topic = p.topic
                        AND c.queue_id = p.queue_id AND list_contains(p.offsets, c.queue_offset)
        WHERE p.kind = 'ck' AND p.run_id IN ({run_marks}) AND p."group" IN ({group_marks})
        ORDER BY pop_ms, c.msg_id""", [*real_run_ids, *sorted(pop_groups)])
    out = set()
    for r in popped:
        record = (r["group"], r["msg_id"])
        if record in heard:
            continue
        if r["msg_id"].upper() in evidence.acked_past_max or (
                (r["group"], r["broker"], r["pop_ms"]) in evidence.timed_out):
            out.add(record)
    lines = {k: list(v) for k, v in evidence.dropped.items()}
    for r in popped:
        record = (r["group"], r["msg_id"])
        stamps = lines.get((r["group"], r["broker"]))
        if record in heard or record in out or not stamps:
            continue
        # The line is at or after the pop (its stamp is the start of a span of stamp_ms) and no later
        # than the revive that followed.
        for i, (ms, width) in enumerate(stamps):
            if ms + width > r["pop_ms"] and (r["revive_ms"] is None or ms <= r["revive_ms"]):
                out.add(record)
                del stamps[i]
                break
    return frozenset(out)


def _client_attempts(work: Path) -> list[dict]:
    import pyarrow.parquet as pq
    rows = pq.read_table(work / "clients" / "consume_attempts").to_pylist()
    rows.sort(key=lambda r: (r["start_ts"], r["consumer_id"]))
    return rows


def _client_calls(work: Path) -> list[dict]:
    """The real transactional producers' listener calls (none when the scenario has none)."""
    import pyarrow.parquet as pq
    folder = work / "clients" / "transaction_calls"
    return pq.read_table(folder).to_pylist() if folder.is_dir() and any(folder.glob("*.parquet")) else []


def _hops(con, run_ids: list[str]) -> dict[str, list[dict]]:
    """Every hop of the given runs, per message, in (group, hop index) order."""
    marks = ", ".join("?" for _ in run_ids)
    out: dict[str, list[dict]] = defaultdict(list)
    for h in _rows(con, f"""
            SELECT h.run_id, h.message_key, h."group", h.hop_index, h.hop_kind, h.topic, h.queue_id,
                   h.delay_level, h.reconsume_times, h.dwell_ms, h.broker, h.store_ts, c.properties, c.msg_id,
                   c.body_size
            FROM message_hops h
            JOIN commitlog c ON c.run_id = h.run_id AND c.broker = h.broker AND c.phys_offset = h.phys_offset
            WHERE h.run_id IN ({marks})
            ORDER BY h.message_key, h."group" NULLS FIRST, h.hop_index""", run_ids):
        out[h["message_key"]].append(h)
    return out


def _failover_cut(con, run_ids: list[str]) -> set[tuple[str, str]]:
    """(message, group) of every record a controller-mode failover cut (anomaly FAILOVER_CUT); none
    where the warehouse has no anomalies table (one built from the lineage alone)."""
    if not _has_table(con, "anomalies"):
        return set()
    marks = ", ".join("?" for _ in run_ids)
    return {(r["message_key"], r["group"]) for r in _rows(con, f"""
        SELECT message_key, "group" FROM anomalies WHERE kind = 'FAILOVER_CUT' AND run_id IN ({marks})""", run_ids)}


def _lineage(con, run_ids: list[str]) -> dict[tuple[str, str], dict]:
    marks = ", ".join("?" for _ in run_ids)
    return {(r["message_key"], r["group"]): r for r in _rows(con, f"""
        SELECT message_key, "group", final_state, retries, path, forks FROM message_lineage
        WHERE run_id IN ({marks})""", run_ids)}


def _consumable(hops: list[dict], group: str, handed_below: int | None = None) -> list[tuple[str, int]]:
    """The records a consumer of ``group`` is handed: in the real topic, or in its retry topic.

    ``handed_below`` is a gRPC group's maxAttempts: the proxy pops a retry whose reconsume times
    reached it and sends it to the DLQ without handing it out."""
    return [(h["topic"], h["reconsume_times"]) for h in _consumables(hops, group)
            if not (handed_below is not None and h["hop_kind"] == "RETRY" and h["reconsume_times"] >= handed_below)]


def _clients_depth(delivered: list[tuple[str, int]]) -> int:
    """How many retries deep the clients saw a chain: the reconsume counts they were handed from
    a %RETRY% topic, each once (a count handed out twice is one attempt)."""
    return len({times for topic, times in delivered if is_retry_topic(topic)})


def _record(call: dict) -> tuple:
    """The record a client was handed: its queue, queue offset and commit-log offset."""
    return call["queue_topic"], call["queue_id"], call["queue_offset"], call["phys_offset"]


def _clients_copies(calls: list[dict], hops: list[dict]) -> tuple[int, int, int]:
    """The copies the clients' log implies in a concurrent group's chain (docs/lineage.md "forks"),
    how many of its send-backs the log cannot settle, and how many of those it counts are the
    client's own sends after a refused send-back (their result is not in the log).

    Copies: send-backs beyond one per attempt (a count handed out twice and failed twice is sent
    back twice), and records handed out beyond one per count, from the retry topic or, for a
    delayed publish, its DELIVER records (a producer's second send of a key is no copy).

    A record handed to the listener again at the next count, with no new record (the same queue
    offset and commit-log offset), is the client consuming it again itself: its send-back failed
    (ConsumeMessageConcurrentlyService.processConsumeResult's msgBackFailed, when both the broker's
    send-back and the client's own send fail). Such a failed send-back is no copy the log can
    count, yet a killed broker may have stored it and died before it replied: the second number
    counts them. The broker makes a send-back's attempt from the count of the record it stored, not
    from the client's local count, so a send-back counts at the count its record was first handed
    out with."""
    first = {}
    for c in calls:
        r = _record(c)
        first[r] = min(first.get(r, c["reconsume_times"]), c["reconsume_times"])
    handed = {(_record(c), c["reconsume_times"]) for c in calls}
    failed = [c for c in calls
              if c["status"] != SUCCESS and c["outcome"] in (SENT_BACK, SENT_BACK_BY_CLIENT)]
    resent_locally = [c for c in failed if (_record(c), c["reconsume_times"] + 1) in handed]
    sent_back = Counter(first[_record(c)] if c["outcome"] == SENT_BACK else c["reconsume_times"]
                        for c in failed if (_record(c), c["reconsume_times"] + 1) not in handed)
    delivers = {h["msg_id"] for h in hops if h["hop_kind"] == "DELIVER" and h["group"] is None}
    records: dict[int, set] = defaultdict(set)
    for c in calls:
        if is_retry_topic(c["queue_topic"]) or c["msg_id"] in delivers:
            records[first[_record(c)]].add(_record(c))
    copies = (sum(n - 1 for n in sent_back.values() if n > 1)
              + sum(len(r) - 1 for r in records.values() if len(r) > 1))
    own_sends = sum(1 for c in failed if c["outcome"] == SENT_BACK_BY_CLIENT
                    and (_record(c), c["reconsume_times"] + 1) not in handed)
    return copies, len(resent_locally), own_sends


def _committed_behind(con, run_ids: list[str], group: str, calls: list[dict]) -> bool:
    """Whether the store's committed offset of ``group`` is at or before a record the clients consumed.

    Then the store says the message is not consumed yet, and the broker will hand it again: after a
    broker crash the offsets committed since its last persist are gone. A queue the store holds no
    offset of for the group is behind too: a broker killed before its first persist of the
    group's commits (every 5 s) keeps none, and its clients may not route to it again before the
    run ends.
    """
    marks = ", ".join("?" for _ in run_ids)
    offset_columns = {r[0] for r in con.execute("DESCRIBE consumer_offsets").fetchall()}
    for c in calls:
        if c["status"] != SUCCESS:
            continue
        # The record's offset msgId names its store host, so it names the broker (and its run).
        where = con.execute(f"SELECT run_id, broker FROM commitlog WHERE run_id IN ({marks}) AND msg_id = ?",
                            [*run_ids, c["msg_id"]]).fetchall()
        if not where:
            continue
        run_id, broker = where[0]
        by_broker = ' AND broker = ?' if "broker" in offset_columns else ''
        rows = con.execute(f"""
            SELECT max("offset") FROM consumer_offsets
            WHERE run_id = ? AND "group" = ? AND topic = ? AND queue_id = ?{by_broker}""",
            [run_id, group, c["queue_topic"], c["queue_id"]] + ([broker] if by_broker else [])).fetchall()
        committed = rows[0][0] if rows else None
        if committed is None or committed <= c["queue_offset"]:
            return True
    return False


def lineage_vs_clients(con, scenario: Scenario, attempts: list[dict], real_run_ids: list[str],
                       in_outage: set[str] = frozenset(), stranded: frozenset[str] = frozenset(),
                       killed: frozenset[str] = frozenset(),
                       unheard: frozenset[tuple[str, str]] = frozenset(),
                       rejoin_cut: dict[str, int] | None = None) -> dict:
    """``in_outage``: the messages an outage touched; ``stranded``: the brokers killed and never
    started again, whose role no replica took over (:func:`stranded_brokers`); ``killed``: every
    broker an outage killed (:func:`killed_brokers`); ``unheard``: (group, msgId) of the records a
    POP group's clients popped and, as their logs say, never handed to a listener
    (:func:`unheard_pops`); ``rejoin_cut``: the bytes, per broker, that its killed controller-mode
    master, started again, truncated from its own log: records its slave never had, which no store
    holds (:func:`conformance.broker_logs.cut_bytes_by_broker`). The send-backs it explains must fit
    in them, each at least the size of a record with the message's body (:func:`_least_send_back_bytes`)."""
    models = {g.name: g.model for g in scenario.groups}
    modes = {g.name: g.mode for g in scenario.groups}
    semantics = semantics_for(scenario.broker.semantics)
    max_by_group = _max_reconsume(scenario)
    grpc = {g.name for g in scenario.groups if is_grpc(g)}
    # A gRPC FIFO consumer retries from its one record and forwards it to the DLQ itself: no retry
    # record, no popped retry the proxy dead-letters (docs/rocketmq-5x.md, "FIFO consumers").
    fifo = {g.name for g in scenario.groups if is_grpc(g) and g.client == CLIENT_GRPC_FIFO}
    levels_ms = parse_delay_levels(scenario.broker.message_delay_level)
    hops = _hops(con, real_run_ids)
    lineage = _lineage(con, real_run_ids)
    cut = _failover_cut(con, real_run_ids)
    cut_left = dict(rejoin_cut or {})  # the truncated bytes not yet taken by an explained send-back

    by_pair: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for a in attempts:
        by_pair[(a["uniq_key"], a["group"])].append(a)
    not_auditable: Counter[str] = Counter()
    explained: dict[str, str] = {}
    bad_messages: set[str] = set()
    compared: set[str] = set()
    examples: list[dict] = []
    forked: dict[str, int] = {}
    deepest_forked = 0

    def disagree(key: str, group: str | None, what: str, audit, clients) -> None:
        bad_messages.add(key)
        if len(examples) < EXAMPLES_MAX:
            examples.append({"uniq_key": key, "group": group, "what": what, "audit": audit, "clients": clients,
                             "trail": _trail(hops.get(key, []), by_pair.get((key, group), []), group)})

    for (key, group), calls in sorted(by_pair.items()):
        if models.get(group) == "broadcasting":
            not_auditable[group] += 1  # the store keeps nothing of a broadcasting group
            continue
        compared.add(key)
        delivered = _delivered(calls)
        handed_below = max_attempts(max_by_group[group]) if group in grpc else None
        audit = _consumable(hops.get(key, []), group, handed_below)
        # A POP group's records its clients' logs say no listener got (POP_UNHEARD): what the
        # listeners could have seen of the store is the rest.
        skipped = {h["msg_id"] for h in hops.get(key, []) if (group, h["msg_id"]) in unheard}
        heard = (_consumable([h for h in hops.get(key, []) if h["msg_id"] not in skipped], group, handed_below)
                 if skipped else audit)
        if not _same_deliveries(audit, delivered):
            if skipped and _same_deliveries(heard, delivered):
                explained[key] = POP_UNHEARD
            else:
                disagree(key, group, "deliveries", audit, delivered)
        # Attempts that failed (a redelivered attempt counts once): max + 1 of them mean the DLQ.
        failures = len({c["reconsume_times"] for c in calls if c["status"] != SUCCESS})
        # A retry the client sent itself (the broker refused the send-back) carries RECONSUME_TIME
        # = reconsume times + 1, and the broker routes a send to %RETRY% whose count has reached the
        # max to the DLQ at once (handleRetryAndDLQ): one retry fewer than the send-back path.
        # 5.x compares with > there (one retry more than 4.9.4): the broker's semantics decide.
        client_dlq_at = [c["reconsume_times"] for c in calls
                         if modes.get(group) != "orderly" and c["outcome"] == SENT_BACK_BY_CLIENT
                         and semantics.dlq_on_retry_topic_send(c["reconsume_times"] + 1, max_by_group[group])]
        client_dlq = bool(client_dlq_at)
        # A concurrent listener that set delay level -1 (DLQ_REQUESTED): the broker's send-back
        # stores the message in the DLQ at once, after however many retries it had. A refused
        # send-back's fallback asks for no level, so that one is a retry like any other.
        requested_dlq_at = [c["reconsume_times"] for c in calls
                            if c["status"] == DLQ_REQUESTED and c["outcome"] == SENT_BACK]
        dead_lettered = failures >= max_by_group[group] + 1 or client_dlq or bool(requested_dlq_at)
        if any(c["status"] == SUCCESS for c in calls):
            expected_state = "CONSUMED"
        elif group in grpc:
            # maxAttempts failed deliveries: the proxy pops the next retry and sends it to the DLQ.
            expected_state = "DLQ" if dead_lettered else "RETRYING"
        elif modes.get(group) == POP_MODE:
            # The remoting POP client acks a message that failed at its maximum (no DLQ): to the
            # store that is a consumed message (docs/rocketmq-5x.md, "The give-up").
            expected_state = "CONSUMED" if failures >= max_by_group[group] + 1 else "RETRYING"
        elif dead_lettered:
            expected_state = "DLQ"
        else:
            expected_state = "RETRYING"
        # A message handed out more than once (a crash) can be consumed by one delivery while
        # another's retries run into the DLQ: the store holds both ends, and the chain's last
        # hop says which came last.
        accepted = {expected_state} | ({"DLQ"} if expected_state == "CONSUMED" and dead_lettered else set())
        chain = lineage.get((key, group))
        state = chain["final_state"] if chain else None
        if state not in accepted:
            # A send-back a rejoining old master truncated: no anomaly names it, its log's cut does.
            rejoined = ((key, group) not in cut and key in in_outage and state == "CONSUMED"
                        and _send_back_absent(hops.get(key, []), group, calls))
            why = _end_explained(con, real_run_ids, key, group, calls, (state, expected_state), hops.get(key, []),
                                 outage=key in in_outage, stranded=stranded, skipped=skipped,
                                 cut=(key, group) in cut or rejoined)
            if why == CUT_AT_FAILOVER and rejoined and not _fits_in_cut(cut_left, hops.get(key, []), group):
                why = None
            if why:
                explained[key] = why
            else:
                disagree(key, group, "final_state", state, expected_state)
        # The chain's depth: the deepest attempt, however many times it was handed out.
        retries_seen = _clients_depth(delivered)
        if group in grpc and group not in fifo and expected_state == "DLQ":
            retries_seen += 1  # the retry the proxy popped and dead-lettered, which no client saw
        # A retry record at count 0: the client's fallback send was retried by its producer, which
        # had cleared RECONSUME_TIME on the first try, so the broker counts the retries from 0
        # again (anomaly RETRY_COUNT_LOST). The chain's counts then repeat without any copy, and
        # its depth and copies cannot be read from them; the audit names the message instead.
        count_lost = _retry_count_lost(hops.get(key, []), group)
        if chain is not None and chain["retries"] != retries_seen:
            if count_lost:
                explained[key] = RETRY_COUNT_LOST
            elif skipped and _clients_depth(heard) == retries_seen:
                explained[key] = POP_UNHEARD
            else:
                disagree(key, group, "retries", chain["retries"], retries_seen)
        # A concurrent remoting group's copies: what the lineage counts as forks against what the
        # clients' deliveries and send-backs imply (POP, gRPC and orderly groups send nothing back
        # per failure).
        if (chain is not None and group not in grpc and modes.get(group) not in ("orderly", POP_MODE)):
            copies, unsettled, own_sends = _clients_copies(calls, hops.get(key, []))
            forks = chain.get("forks") or 0
            if forks:
                forked[key] = max(forked.get(key, 0), forks)
                deepest_forked = max(deepest_forked, chain["retries"])
            if forks != copies:
                why = RETRY_COUNT_LOST if count_lost else (
                    _forks_in_outage(forks, (copies, unsettled, own_sends), calls, hops.get(key, []), group,
                                     killed)
                    if key in in_outage else None)
                if why:
                    explained[key] = why
                else:
                    disagree(key, group, "forks", forks, copies)
        # A concurrent listener's failures go through %RETRY% (max retries, then the DLQ); an orderly
        # one retries locally and its client sends the message to the DLQ once past the max.
        # The deepest retry the audit found, by reconsume count: a message handed out twice from
        # one record (a crash lost the committed offset) runs its retries twice, so the count of
        # RETRY hops can be twice the max while each sequence stopped at the max.
        early_dlq_at = client_dlq_at + requested_dlq_at
        dlq_retries = min(early_dlq_at) if early_dlq_at else max_by_group[group]
        if group in grpc:
            dlq_retries = max_attempts(max_by_group[group])  # the proxy's: reconsume times maxAttempts
        deepest = max((h["reconsume_times"] for h in hops.get(key, [])
                       if h["group"] == group and h["hop_kind"] == "RETRY"), default=0)
        if expected_state == "DLQ" and chain is not None and modes.get(group) != "orderly" \
                and group not in fifo and deepest != dlq_retries:
            disagree(key, group, "dlq_after_max", deepest, dlq_retries)

    early = 0
    for key, hs in hops.items():
        for h in hs:
            if h["hop_kind"] == "SCHEDULE" and h["dwell_ms"] is not None:
                due_ms = levels_ms[h["delay_level"] - 1]
                if h["dwell_ms"] < due_ms:
                    early += 1
                    disagree(key, h["group"], "waited_less_than_its_level",
                             h["dwell_ms"], f">= {due_ms} (level {h['delay_level']})")
    explained_ok = {k: v for k, v in explained.items() if k not in bad_messages}
    return {"messages": len(compared), "agree": len(compared - bad_messages),
            "disagree": len(bad_messages), "examples": examples,
            "explained": dict(Counter(explained_ok.values())),
            "pairs_compared": sum(1 for (_, g) in by_pair if models.get(g) != "broadcasting"),
            # Messages whose chain forked (copies of an attempt), their copies, and the deepest
            # forked chain's retries: each compared with the clients' log above.
            "forked_messages": len(forked), "fork_copies": sum(forked.values()),
            "deepest_forked_retries": deepest_forked,
            "delayed_hops_checked": sum(1 for hs in hops.values() for h in hs if h["hop_kind"] == "SCHEDULE"),
            "delayed_hops_early": early,
            "not_auditable": {g: {"pairs": n, "reason": EXPLAINED["broadcast_group_absent_from_store"]}
                              for g, n in sorted(not_auditable.items())}}


def stranded_brokers(faults: list[dict]) -> frozenset[str]:
    """Brokers killed and never started again whose role no other node took over: a DLedger or
    controller-mode kill (a fault naming the killed ``node``) is followed by another master."""
    restarted = {f["broker"] for f in faults if f["kind"] == "broker_restart"}
    return frozenset(f["broker"] for f in faults
                     if f["kind"] == "broker_kill" and "node" not in f and f["broker"] not in restarted)


def killed_brokers(faults: list[dict]) -> frozenset[str]:
    """Every broker (a DLedger or controller-mode group: its name) an outage killed."""
    return frozenset(f["broker"] for f in faults if f["kind"] == "broker_kill")


def _last_hop_stranded(hops: list[dict], group: str, stranded: frozenset[str]) -> bool:
    """Whether the group's last hop (``hops`` is in hop order, :func:`_hops`) is a SCHEDULE record
    on a stranded broker."""
    mine = [h for h in hops if h["group"] == group]
    return bool(mine) and mine[-1]["hop_kind"] == "SCHEDULE" and mine[-1]["broker"] in stranded


def _forks_in_outage(forks: int, implied: tuple[int, int, int], calls: list[dict], hops: list[dict],
                     group: str, killed: frozenset[str] = frozenset()) -> str | None:
    """Why a chain an outage touched may hold ``forks`` copies where the clients' log implies
    another number (``implied``: :func:`_clients_copies`; docs/conformance.md, "Broker
    outages"), or None."""
    copies, unsettled, own_sends = implied
    if _unlogged_client_sends(calls, hops, group):
        return SEND_BACK_REPLY_LOST
    if copies < forks <= copies + unsettled:
        # Send-backs that failed as the client saw them (it consumed the record again itself), of
        # which a killed broker stored some before it could reply.
        return SEND_BACK_REPLY_LOST
    if copies - own_sends <= forks < copies:
        # The client's own sends after refused send-backs, which the log counts as stored: one
        # that met the killed broker failed, and its local retry was dropped with the broker's queue.
        return CLIENT_SEND_LOST
    if copies < forks <= copies + _reput_copies(hops, group, killed):
        return SCHEDULE_REPUT
    return None


def _reput_copies(hops: list[dict], group: str, killed: frozenset[str]) -> int:
    """How many of the group's records on a killed broker its schedule put out beyond one per
    schedule record: per broker and reconsume count, the RETRY and DLQ records that keep a DELAY
    (the schedule put them: a send-back's or a client's own send's schedule record, delivered) past
    the SCHEDULE records of that count there. Each schedule record is put out once by a broker that
    never crashed; a restarted one resumes from the delay offsets it last persisted and puts some
    again (a real 4.9.4 run, broker-a killed at 6 s and restarted at 20 s: one schedule record at
    count 2 put into %DLQ% 3 s after it was stored, and again as the restarted broker came up)."""
    scheduled: Counter[tuple[str, int]] = Counter()
    put: Counter[tuple[str, int]] = Counter()
    for h in hops:
        if h["group"] != group or h["broker"] not in killed:
            continue
        where = (h["broker"], h["reconsume_times"])
        if h["hop_kind"] == "SCHEDULE":
            scheduled[where] += 1
        elif h["hop_kind"] in ("RETRY", "DLQ") and (h["delay_level"] or 0) > 0:
            put[where] += 1
    return sum(max(0, n - scheduled[where]) for where, n in put.items())


def _unlogged_client_sends(calls: list[dict], hops: list[dict], group: str) -> set[int]:
    """The reconsume counts at which the group's chain holds a retry its client built itself (it
    carries the client's CONSUME_START_TIME) while the clients' log shows no own send there: a
    send-back the broker stored whose reply died with a killed broker, after which the client
    sent the retry again itself (DefaultMQPushConsumerImpl.sendMessageBack's fallback), a copy
    the listener's log cannot see."""
    built = set()
    for h in hops:
        props = h["properties"] or {}
        props = props if isinstance(props, dict) else dict(props)
        if h["group"] == group and h["hop_kind"] in ("SCHEDULE", "RETRY") and "CONSUME_START_TIME" in props:
            built.add(h["reconsume_times"])
    logged = {c["reconsume_times"] + 1 for c in calls if c["outcome"] == SENT_BACK_BY_CLIENT}
    return built - logged


def _trail(hops: list[dict], calls: list[dict], group: str | None) -> dict[str, list[str]]:
    """A disagreeing message as both sides saw it, short enough for a test's failure message: the
    store's hops of its shared chain and of ``group``, in hop order, and the group's calls in the
    clients' log, in call order, timed in epoch ms (a fault's ``wall_ts_ms`` is on the same clock)."""
    def ms(ts) -> int:
        return int(ts.timestamp() * 1000) if hasattr(ts, "timestamp") else int(ts)

    def hop(h) -> str:
        # Where its branch and its time tell what the kind alone cannot (hop_grammar_valid judges a
        # branch: the group's hops of one ORIGIN_MESSAGE_ID, here its last six characters).
        props = h["properties"] or {}
        props = props if isinstance(props, dict) else dict(props)
        origin = props.get(PROP_ORIGIN_MESSAGE_ID)
        return (f"{h['hop_kind']} {h['topic']}@{h['broker']} q{h['queue_id']} r{h['reconsume_times']}"
                + (f" L{h['delay_level']}" if h["delay_level"] else "")
                + (f" t{ms(h['store_ts'])}" if h["store_ts"] is not None else "")
                + (f" o{origin[-6:]}" if origin else ""))

    return {
        "store": [hop(h) for h in hops if h["group"] in (None, group)],
        "clients": [f"{ms(c['start_ts'])} {c['consumer_id']} {c['queue_topic']} q{c['queue_id']}#{c['queue_offset']} "
                    f"r{c['reconsume_times']} {c['status']} {c['outcome']}" for c in calls],
    }


def check_trails(con, attempts: list[dict], checks: dict, run_ids: list[str]) -> None:
    """Give each failed blocking check of ``run_ids`` whose first violation names a message the
    trail of that message's chain (:func:`_trail`), under ``trail``: what the store and the clients'
    log hold of it, for a failure read from a log alone."""
    failed = [c for run in run_ids for c in (checks.get(run) or {}).values()
              if c["blocking"] and not c["passed"] and (c.get("first_message") or {}).get("message_key")]
    if not failed:
        return
    hops = _hops(con, run_ids)
    for c in failed:
        key, group = c["first_message"]["message_key"], c["first_message"]["group"]
        calls = [a for a in attempts if a["uniq_key"] == key and (group is None or a["group"] == group)]
        c["trail"] = _trail(hops.get(key, []), calls, group)


def _retries_stored(con, run_ids: list[str], key: str, group: str) -> bool:
    """Whether any store of the runs holds a record of message ``key`` in ``group``'s retry or DLQ
    topic, or on its way there through the schedule (its REAL_TOPIC): read from the commit log, not
    the lineage, so that a retry the lineage failed to chain to its message still counts. (A
    group whose name starts another's counts that one's too: the explanation errs towards none.)"""
    marks = ", ".join("?" for _ in run_ids)
    return bool(con.execute(f"""
        SELECT count(*)
        FROM (SELECT CASE WHEN topic = ? THEN properties[?] ELSE topic END AS bound_for
              FROM commitlog WHERE run_id IN ({marks}) AND uniq_key = ?)
        WHERE starts_with(bound_for, ?) OR starts_with(bound_for, ?)""",
        [SCHEDULE_TOPIC, PROP_REAL_TOPIC, *run_ids, key, retry_topic(group), dlq_topic(group)]).fetchone()[0])


def _retry_count_lost(hops: list[dict], group: str) -> bool:
    """Whether the group's chain holds a retry record whose reconsume count is 0: no broker
    send-back and no first client send writes one (docs/conformance.md, "Broker outages")."""
    return any(h["group"] == group and h["hop_kind"] == "RETRY" and h["reconsume_times"] == 0 for h in hops)


def _end_explained(con, real_run_ids: list[str], key: str, group: str, calls: list[dict],
                   states: tuple[str | None, str], hops: list[dict], *, outage: bool, stranded: frozenset[str],
                   skipped: set[str], cut: bool) -> str | None:
    """Why a chain may end in the store (``states``: the audit's final state, the clients') where the
    clients saw it end otherwise, or None. ``hops``: the message's, in hop order; ``outage``: an outage
    touched it; ``skipped``: its records the group's clients popped and never handed to a listener;
    ``cut``: a failover cut a record of the chain (anomaly FAILOVER_CUT names it, or a rejoining old master
    truncated a tail of its log and the chain lacks the send-back its clients made)."""
    state, expected_state = states
    if (outage and state in ("UNCONSUMED", "RETRYING") and expected_state == "CONSUMED"
            and _committed_behind(con, real_run_ids, group, calls)):
        # The store is right from where it stands: its committed offset lost the consume
        # (of the message, or of its last retry) with the broker's crash, and the broker
        # will deliver the record again.
        return OFFSET_LOST
    if (outage and state == "RETRYING" and expected_state in ("CONSUMED", "DLQ")
            and _last_hop_stranded(hops, group, stranded)):
        # The broker stored a send-back (or a client's own send) and died before its
        # schedule put the retry out; it never came back, and the clients went on
        # without it (their fallback send, their own re-consume, the DLQ through another broker).
        return SCHEDULE_STRANDED
    if (outage and state == "UNCONSUMED" and expected_state in ("RETRYING", "DLQ")
            and not _retries_stored(con, real_run_ids, key, group)):
        # The clients' retries of it were their own and died with the queue they dropped;
        # the store's unconsumed record is what the broker will hand out again.
        return RETRY_HELD_BY_CLIENT
    if _last_consumable_in(hops, group, skipped):
        # The store's end is a record no listener got: acked by the client past the
        # maximum (CONSUMED), or dropped and revived (RETRYING).
        return POP_UNHEARD
    if cut and expected_state != "CONSUMED":
        # The client's send-back was acknowledged by a controller-mode master that died
        # before its slave had the record (a send-back does not wait for replicas): the
        # failover cut it, the group's offset is past the message, and the audit names it
        # (anomaly FAILOVER_CUT) where the chain ends; or, the old master started again and
        # truncated it as it rejoined, its own store log says so.
        return CUT_AT_FAILOVER
    return None


def _send_back_absent(hops: list[dict], group: str, calls: list[dict]) -> bool:
    """Whether the group's last call of a message failed and was sent back, and the store holds no
    record of that send-back (a group record at a higher count than the call's)."""
    last = calls[-1]
    return (last["status"] != SUCCESS and last["outcome"] == SENT_BACK
            and not any(h["group"] == group and h["hop_kind"] in ("SCHEDULE", "RETRY", "DLQ")
                        and h["reconsume_times"] > last["reconsume_times"] for h in hops))


# The properties a send-back may store with another value, or not at all: the broker's sets WAIT and
# DELAY (and RETRY_TOPIC where it is missing); a client's fallback send after a refused send-back
# sets RETRY_TOPIC, RECONSUME_TIME, MAX_RECONSUME_TIMES and DELAY and clears TRAN_MSG.
_SEND_BACK_REWRITES = frozenset({PROP_WAIT, PROP_DELAY, PROP_RETRY_TOPIC, PROP_RECONSUME_TIME,
                                 PROP_MAX_RECONSUME_TIMES, PROP_TRAN_MSG})


def _least_send_back_bytes(record: dict, group: str) -> int:
    """The fewest bytes the record a send-back of ``record`` (a hop with the commit log's body_size
    and properties) takes in the log: the fixed fields with IPv4 hosts, the shortest topic it can go
    to (the schedule's, the group's %RETRY% or %DLQ%), the record's body (a send-back copies the
    stored body), and the properties it certainly carries. Both ways a send-back is written copy the
    delivered record's properties (the broker's ``consumerSendMsgBack`` the stored ones, a client's
    fallback send the message it was handed), so every stored property of ``record`` but those a
    send-back rewrites (``_SEND_BACK_REWRITES``) is there; so are RETRY_TOPIC (the record's own, or
    its topic where it has none: the origin topic either way) and a DELAY of at least one digit,
    written as 4.9.4 writes them (without 5.x's last separator: the shorter)."""
    topic = min(len(t.encode()) for t in (SCHEDULE_TOPIC, retry_topic(group), dlq_topic(group)))
    stored = record.get("properties") or {}
    certain = {k: v for k, v in stored.items() if k not in _SEND_BACK_REWRITES}
    certain[PROP_RETRY_TOPIC] = stored.get(PROP_RETRY_TOPIC) or record["topic"] or ""
    certain[PROP_DELAY] = "0"
    properties = len(properties_to_string(certain).encode())
    return (RECORD_FIXED_V4_BYTES + 1 + topic + PROPERTIES_LENGTH_FIELD_BYTES + properties
            + (record["body_size"] or 0))


def _fits_in_cut(cut_left: dict[str, int], hops: list[dict], group: str) -> bool:
    """Whether the send-back of the last record of ``group``'s chain a consumer was handed fits in
    what a rejoining master of that record's broker truncated and earlier send-backs did not take;
    if it does, it takes its bytes from ``cut_left``."""
    mine = _consumables(hops, group)
    if not mine:
        return False
    broker, size = mine[-1]["broker"], _least_send_back_bytes(mine[-1], group)
    if cut_left.get(broker, 0) < size:
        return False
    cut_left[broker] -= size
    return True


def _same_deliveries(audit: list[tuple[str, int]], delivered: list[tuple[str, int]]) -> bool:
    """One sequence of deliveries has one order. Where the clients were handed the same attempt
    more than once (a crash lost a committed offset, or a restarted broker re-put schedule
    records), several sequences run at once over different queues and brokers, and the order in
    which their records were stored is not the order the consumers pulled them: there the
    deliveries are compared as a multiset."""
    if len(set(delivered)) == len(delivered):
        return audit == delivered
    return Counter(audit) == Counter(delivered)


def _last_consumable_in(hops: list[dict], group: str, records: set[str]) -> bool:
    """Whether the last record of ``group``'s chain a consumer is handed is one of ``records``
    (msgIds); ``hops`` is in hop order (:func:`_hops`)."""
    mine = _consumables(hops, group)
    return bool(records) and bool(mine) and mine[-1]["msg_id"] in records


def _consumables(hops: list[dict], group: str) -> list[dict]:
    """The records of ``group``'s chain a consumer is handed (PUBLISH, DELIVER, RETRY), in hop order."""
    return [h for h in hops if h["group"] in (None, group) and h["hop_kind"] in ("PUBLISH", "DELIVER", "RETRY")]


def _delivered(calls: list[dict]) -> list[tuple[str, int]]:
    """The (queue topic, reconsume times) of each record the clients were handed, in order, once each."""
    seen, delivered = set(), []
    for c in calls:
        record = _record(c)
        if record not in seen:
            seen.add(record)
            delivered.append((c["queue_topic"], c["reconsume_times"]))
    return delivered


def producer_decision(calls: list[dict]) -> str | None:
    """What a producer's listener decided for one message (its calls: the execution, then each
    check): COMMITTED or ROLLED_BACK at its first answer that is not UNKNOW, else None."""
    for call in sorted(calls, key=lambda c: (c["check_times"], c["ts"])):
        if call["answer"] in DECIDED_BY_ANSWER:
            return DECIDED_BY_ANSWER[call["answer"]]
    return None


def transactions_vs_producers(con, real_run_ids: list[str], calls: list[dict]) -> dict:
    """The audit's transaction_state of each transactional message against what its producer's
    listener answered (the real clients' ``transaction_calls``), message by message: COMMITTED and
    ROLLED_BACK as answered, DISCARDED or UNDECIDED for a message never decided."""
    marks = ", ".join("?" for _ in real_run_ids)
    audit = dict(con.execute(f"""
        SELECT message_key, any_value(transaction_state) FROM message_lineage
        WHERE run_id IN ({marks}) AND transaction_state IS NOT NULL GROUP BY message_key""",
        real_run_ids).fetchall())
    by_key: dict[str, list[dict]] = defaultdict(list)
    for call in calls:
        by_key[call["uniq_key"]].append(call)
    examples: list[dict] = []
    agree = 0
    for key in sorted(set(audit) | set(by_key)):
        decided = producer_decision(by_key[key]) if key in by_key else None
        state = audit.get(key)
        expected = {decided} if decided else set(NEVER_DECIDED) if key in by_key else {"(no listener call)"}
        if state in expected:
            agree += 1
        elif len(examples) < EXAMPLES_MAX:
            examples.append({"uniq_key": key, "audit": state, "producer": sorted(expected)})
    messages = len(set(audit) | set(by_key))
    return {"messages": messages, "agree": agree, "disagree": messages - agree,
            "audit_states": dict(sorted(Counter(audit.values()).items())), "examples": examples}


def transaction_decisions(con, run_ids: list[str]) -> dict[str, Counter]:
    """Per message, the half copies its op records decided: (TRANSACTION_CHECK_TIMES of the copy,
    absent for the half itself) counted, from ``transaction_ops`` joined to the half queue."""
    marks = ", ".join("?" for _ in run_ids)
    out: dict[str, Counter] = defaultdict(Counter)
    for key, times in con.execute(f"""
            WITH decided AS (
                SELECT o.run_id, o.broker, o.queue_id, unnest(o.half_queue_offsets) AS half_offset
                FROM transaction_ops o WHERE o.run_id IN ({marks}))
            SELECT c.uniq_key, element_at(c.properties, 'TRANSACTION_CHECK_TIMES')[1]
            FROM decided d JOIN commitlog c
              ON c.run_id = d.run_id AND c.broker = d.broker AND c.topic = ?
             AND c.queue_id = d.queue_id AND c.queue_offset = d.half_offset""",
            [*run_ids, TRANS_HALF_TOPIC]).fetchall():
        out[key][times] += 1
    return out


def _count_op_records(con, run_ids: list[str]) -> int:
    marks = ", ".join("?" for _ in run_ids)
    return con.execute(f"SELECT count(*) FROM transaction_ops WHERE run_id IN ({marks})", run_ids).fetchone()[0]


def _hop_shape(h: dict) -> tuple:
    system = h["topic"].startswith(_SYSTEM_PREFIXES)
    return (h["group"], h["hop_kind"], h["topic"], h["queue_id"] if system else None,
            h["delay_level"], h["reconsume_times"])


def _properties(h: dict) -> list[tuple[str, str]]:
    """A hop's properties in order, with the values of placement and clock properties masked: that
    a record carries them (and where) is behaviour, their values are not."""
    props = h["properties"] or {}
    items = props.items() if isinstance(props, dict) else props
    return [(k, MASKED if k in PLACEMENT_PROPERTIES or k in CLOCK_PROPERTIES else v) for k, v in items]


def model_vs_real(con, scenario: Scenario, model_run_id: str, real_run_ids: list[str],
                  redelivered: set[str] = frozenset(), in_outage: set[str] = frozenset()) -> dict:
    models = {g.name: g.model for g in scenario.groups}
    model_hops = _hops(con, [model_run_id])
    real_hops = _hops(con, real_run_ids)
    model_lineage = _lineage(con, [model_run_id])
    real_lineage = _lineage(con, real_run_ids)
    proxy_records = {k for k, hs in real_hops.items()
                     if k not in model_hops and all(h["topic"] in PROXY_TOPICS for h in hs)}
    # Op records name no message and are no hops: compared as the copies they decided
    # (transaction_decisions), and counted.
    op_records = {side: _count_op_records(con, runs)
                  for side, runs in (("model", [model_run_id]), ("real", real_run_ids))}
    keys = sorted((set(model_hops) | set(real_hops)) - proxy_records)
    model_decided = transaction_decisions(con, [model_run_id])
    real_decided = transaction_decisions(con, real_run_ids)
    differences: list[dict] = []
    kinds_by_message: dict[str, set[str]] = defaultdict(set)
    explained_kinds: Counter[str] = Counter()
    unexplained_kinds: Counter[str] = Counter()

    def differ(key: str, group: str | None, kind: str, model, real) -> None:
        if key in in_outage:
            kind = "real_broker_outage"
        elif key in redelivered and kind != "message_missing":
            kind = "after_redelivery"
        kinds_by_message[key].add(kind)
        (explained_kinds if kind in EXPLAINED else unexplained_kinds)[kind] += 1
        if len(differences) < DIFFERENCES_MAX and kind not in EXPLAINED:
            differences.append({"uniq_key": key, "group": group, "kind": kind, "model": model, "real": real})

    for key in keys:
        m, r = model_hops.get(key, []), real_hops.get(key, [])
        if not m or not r:
            differ(key, None, "message_missing", bool(m), bool(r))
            continue
        m_shape, r_shape = [_hop_shape(h) for h in m], [_hop_shape(h) for h in r]
        if m_shape != r_shape:
            differ(key, None, "hops", [list(s) for s in m_shape], [list(s) for s in r_shape])
        else:
            for mh, rh in zip(m, r, strict=True):
                if _properties(mh) != _properties(rh):
                    differ(key, mh["group"], "properties", _properties(mh), _properties(rh))
                if mh["hop_kind"] == "SCHEDULE" and mh["dwell_ms"] is not None and rh["dwell_ms"] is not None \
                        and abs(mh["dwell_ms"] - rh["dwell_ms"]) > SCHEDULE_DWELL_TOLERANCE_MS:
                    differ(key, mh["group"], "schedule_dwell", mh["dwell_ms"], rh["dwell_ms"])
                if mh["hop_kind"] == "TIMER" and mh["dwell_ms"] is not None and rh["dwell_ms"] is not None \
                        and abs(mh["dwell_ms"] - rh["dwell_ms"]) > TIMER_DWELL_TOLERANCE_MS:
                    differ(key, mh["group"], "timer_dwell", mh["dwell_ms"], rh["dwell_ms"])
        if model_decided.get(key, Counter()) != real_decided.get(key, Counter()):
            differ(key, None, "transaction_decisions", dict(model_decided.get(key, {})),
                   dict(real_decided.get(key, {})))
        groups = {g for (k, g) in model_lineage if k == key} | {g for (k, g) in real_lineage if k == key}
        for group in sorted(g for g in groups if g is not None):
            ms = model_lineage.get((key, group), {}).get("final_state")
            rs = real_lineage.get((key, group), {}).get("final_state")
            if ms == rs:
                continue
            if rs is None and models.get(group) == "broadcasting":
                differ(key, group, "broadcast_group_absent_from_store", ms, rs)
            else:
                differ(key, group, "final_state", ms, rs)

    identical = sum(1 for k in keys if not kinds_by_message.get(k))
    unexplained = sum(1 for k in keys if any(kind not in EXPLAINED for kind in kinds_by_message.get(k, ())))
    return {"messages": len(keys), "identical": identical,
            "explained": len(keys) - identical - unexplained, "unexplained": unexplained,
            "explained_kinds": {k: {"count": n, "reason": EXPLAINED[k]} for k, n in sorted(explained_kinds.items())},
            "unexplained_kinds": dict(sorted(unexplained_kinds.items())),
            "differences": differences,
            "hops": {"model": sum(len(v) for v in model_hops.values()),
                     "real": sum(len(v) for k, v in real_hops.items() if k not in proxy_records)},
            "proxy_records": len(proxy_records),
            "transaction_op_records": op_records,
            "transaction_decisions": {"model": sum(sum(c.values()) for c in model_decided.values()),
                                      "real": sum(sum(c.values()) for c in real_decided.values())},
            "timer_hops": {"model": sum(h["hop_kind"] == "TIMER" for v in model_hops.values() for h in v),
                           "real": sum(h["hop_kind"] == "TIMER" for v in real_hops.values() for h in v)},
            "timer_rolls": {"model": _rolls(model_hops), "real": _rolls(real_hops)},
            "schedule_dwell_tolerance_ms": SCHEDULE_DWELL_TOLERANCE_MS,
            "timer_dwell_tolerance_ms": TIMER_DWELL_TOLERANCE_MS}


def _rolls(hops: dict[str, list[dict]]) -> int:
    """Roll records in the wheel: TIMER hops that carry TIMER_ROLL_TIMES."""
    def props(h):
        p = h["properties"] or {}
        return dict(p) if not isinstance(p, dict) else p
    return sum(1 for v in hops.values() for h in v
               if h["hop_kind"] == "TIMER" and "TIMER_ROLL_TIMES" in props(h))
