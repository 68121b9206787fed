"""What the real-broker gRPC tests share: the gRPC driver's class path, its receipt handles, and
the imported run (records, hops, lineage, POP checkpoints and acks) they compare it with.

The driver is ``tests/conformance/GrpcDriver.java`` (a SimpleConsumer mode and a PushConsumer
mode) run through a 5.x proxy; the comparison reads the run the audit built from the broker's store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from java_driver import compile_driver

from broker_core.constants import PROP_FIRST_POP_TIME

GRPC_DRIVER = Path(__file__).resolve().with_name("GrpcDriver.java")
# The product's gRPC driver, compiled with it: it owns the group retry policy's parser.
GRPC_PLAN_DRIVER = Path(__file__).resolve().parents[2] / "conformance" / "driver" / "GrpcPlanDriver.java"


def grpc_driver_classpath(version: str, classes: Path) -> tuple[Path, Path, str]:
    """The broker's and the proxy's lib directories of RocketMQ ``version``, and the class path
    that runs the gRPC driver, compiled into ``classes``."""
    from conformance.jars import resolve, resolve_grpc_client, resolve_proxy

    lib, proxy_lib, client_lib = resolve(version), resolve_proxy(version), resolve_grpc_client()
    # The gRPC client first: the broker's jars carry an unshaded rocketmq-proto it must not see.
    return lib, proxy_lib, compile_driver(GRPC_DRIVER, f"{client_lib / '*'}:{lib / '*'}", classes,
                                             also=(GRPC_PLAN_DRIVER,))


@dataclass(frozen=True)
class ReceiptHandle:
    """A delivery's receipt handle: the broker's POP_CK (``<startOffset> <popTime> <invisibleTime>
    <reviveQid> <topicType> <brokerName> <queueId> <queueOffset>``) plus the record's commit log
    offset, which the proxy appends."""

    start_offset: int
    pop_ms: int
    invisible_ms: int
    revive_qid: int
    topic_type: int  # 0 the topic, 1 the group's POP retry topic
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int


def receipt_handle(call: dict) -> ReceiptHandle:
    """The receipt handle of a driver's "consume" event."""
    start, pop, invisible, qid, kind, broker, queue, offset, phys = call["receipt_handle"].split()
    return ReceiptHandle(int(start), int(pop), int(invisible), int(qid), int(kind), broker, int(queue), int(offset),
                         int(phys))


def epoch_ms(ts) -> int:
    return round(ts.timestamp() * 1000)


@dataclass
class ImportedRun:
    """An imported run with its lineage: records by physical offset (properties as a dict), hops,
    lineage rows, and the POP checkpoints (one per checkpoint, whichever stage held it) and acks."""

    records: dict[int, dict]
    hops: list[dict]
    lineage: list[dict]
    evidence: list[dict]
    checkpoints: list[dict]
    # (topic, queue id, checkpoint start offset, checkpoint pop time in ms, acked queue offset)
    acks: set[tuple[str, int, int, int, int]]

    def chain(self, message_key: str) -> list[dict]:
        """A message's hops in order."""
        return sorted((h for h in self.hops if h["message_key"] == message_key), key=lambda h: h["hop_index"])

    def rows(self, message_key: str) -> list[dict]:
        return [r for r in self.lineage if r["message_key"] == message_key]

    def checkpoints_of(self, topic: str, queue_id: int, queue_offset: int) -> list[dict]:
        """The checkpoints that popped one record (by its topic, queue and queue offset), by pop time."""
        return sorted((c for c in self.checkpoints
                       if (c["topic"], c["queue_id"]) == (topic, queue_id) and queue_offset in c["offsets"]),
                      key=lambda c: c["pop_ts"])

    def acked(self, checkpoint: dict, queue_offset: int) -> bool:
        """Whether the store holds an ack of ``queue_offset`` under ``checkpoint``."""
        return (checkpoint["topic"], checkpoint["queue_id"], checkpoint["start_offset"],
                epoch_ms(checkpoint["pop_ts"]), queue_offset) in self.acks


def import_with_lineage(store: Path, run: Path, spark, *, broker: str = "broker-a") -> ImportedRun:
    """Import ``store`` into ``run``, build its lineage, and read both back; the import must
    report no error and decode every POP body."""
    from assets.lineage import run_lineage
    from broker_core.export.store_import import import_store

    summary = import_store(store, run, broker=broker)
    assert summary.errors == [] and not [p for p in summary.problems if p.kind == "pop-body-undecodable"], \
        summary.problems
    run_lineage(run, spark)
    records = {r["phys_offset"]: {**r, "properties": dict(r["properties"])}
               for r in pq.read_table(run / "parquet" / "commitlog").to_pylist()}
    evidence = pq.read_table(run / "parquet" / "pop_evidence").to_pylist()
    # Each stage (the timer, then the revive topic) holds a copy of every checkpoint that reached it.
    checkpoints = list({(e["topic"], e["queue_id"], e["start_offset"], e["pop_ts"]): e
                        for e in evidence if e["kind"] == "ck"}.values())
    acks = {(e["topic"], e["queue_id"], e["start_offset"], epoch_ms(e["pop_ts"]), o)
            for e in evidence if e["kind"] in ("ack", "bAck") for o in e["offsets"]}
    return ImportedRun(records, pq.read_table(run / "lineage" / "message_hops").to_pylist(),
                       pq.read_table(run / "lineage" / "message_lineage").to_pylist(), evidence, checkpoints, acks)


def retry_topic_owners(run: Path) -> set[tuple[str, str, str, str]]:
    """(retry topic, group, origin topic, resolution) of every %RETRY% topic the import knows."""
    return {(o["retry_topic"], o["group"], o["origin_topic"], o["resolution"])
            for o in pq.read_table(run / "parquet" / "retry_topics").to_pylist()}


def failed_blocking_checks(run: Path, db: Path) -> dict:
    """The warehouse's blocking checks that fail on ``run`` (empty when all pass)."""
    from conformance.run import _warehouse

    verdicts = _warehouse([run], db)
    return {name: v for outcomes in verdicts.values() for name, v in outcomes.items()
            if v["blocking"] and not v["passed"]}


@dataclass(frozen=True)
class GrpcGroup:
    """A consumer group of a gRPC run: its topic, its POP retry topic (the v1 name:
    ``enableRetryTopicV2`` is false by default) and the proxy's maxAttempts (retryMaxTimes + 1)."""

    topic: str
    group: str
    max_attempts: int

    @property
    def retry_topic(self) -> str:
        return f"%RETRY%{self.group}_{self.topic}"

    @property
    def dlq_topic(self) -> str:
        return f"%DLQ%{self.group}"


def check_message(imported: ImportedRun, g: GrpcGroup, uniq: str, seen: list[dict], failures: int, *,
                  statuses: tuple[str, str]) -> list[dict]:
    """Check one message against what the consumer got; its chain of hops.

    The consumer got ``failures`` failed deliveries (``statuses[0]``) then a successful one
    (``statuses[1]``), or, when ``failures`` reaches maxAttempts, exactly maxAttempts failed ones
    (the proxy keeps the next one from it). The chain is the PUBLISH then one RETRY of the group
    per redelivery, the records the consumer was handed in order, each written by the revive
    service; a message that always failed has one more RETRY and the DLQ. Its lineage row is
    CONSUMED, or DLQ of the group, with the origin topic and the published record's msgId."""
    always = failures >= g.max_attempts
    calls = g.max_attempts if always else failures + 1
    fail, ok = statuses
    assert [c["status"] for c in seen] == ([fail] * calls if always else [fail] * failures + [ok]), seen
    assert [c["delivery_attempt"] for c in seen] == list(range(1, calls + 1)), seen
    assert {c["uniq_key"] for c in seen} == {uniq} and {c["topic"] for c in seen} == {g.topic}, seen

    chain = imported.chain(uniq)
    expected = ([(None, "PUBLISH")] + [(g.group, "RETRY")] * (calls - 1)
                + ([(g.group, "RETRY"), (g.group, "DLQ")] if always else []))
    assert [(h["group"], h["hop_kind"]) for h in chain] == expected, chain
    assert [h["phys_offset"] for h in chain[:calls]] == [receipt_handle(c).commit_log_offset for c in seen], \
        (chain, seen)
    for reconsumes, hop in enumerate(chain[1:len(chain) - (1 if always else 0)], 1):
        record = imported.records[hop["phys_offset"]]
        assert (record["topic"], record["reconsume_times"], hop["reconsume_times"]) == (
            g.retry_topic, reconsumes, reconsumes), hop
        # The revive service's record: bornHost is the broker, 1ST_POP_TIME is set, and none of
        # a push send-back's pointers.
        assert record["born_host"] == record["store_host"] and PROP_FIRST_POP_TIME in record["properties"]
        assert record["retry_topic"] is None and record["origin_msg_id"] is None
    rows = imported.rows(uniq)
    # The origin msgId is the published record's (not the retry record the DLQ record names).
    assert [(r["group"], r["final_state"], r["retries"], r["origin_topic"], r["origin_msg_id"]) for r in rows] == [
        (g.group, "DLQ" if always else "CONSUMED", len(chain) - 2 if always else calls - 1, g.topic,
         imported.records[chain[0]["phys_offset"]]["msg_id"])], rows
    return chain


def check_proxy_dead_letter(imported: ImportedRun, g: GrpcGroup, chain: list[dict], seen: list[dict]) -> dict:
    """Check that the proxy popped the retry record at reconsume times maxAttempts, never handed
    it out, sent it back to the DLQ and acked that pop; its checkpoint."""
    from broker_core.message import decode_message_id

    last_retry, dead = imported.records[chain[-2]["phys_offset"]], imported.records[chain[-1]["phys_offset"]]
    assert (last_retry["topic"], last_retry["reconsume_times"]) == (g.retry_topic, g.max_attempts)
    assert last_retry["phys_offset"] not in {receipt_handle(c).commit_log_offset for c in seen}
    cks = imported.checkpoints_of(g.retry_topic, last_retry["queue_id"], last_retry["queue_offset"])
    assert len(cks) == 1 and imported.acked(cks[0], last_retry["queue_offset"]), cks
    assert cks[0]["pop_ts"] <= dead["store_ts"]
    assert (dead["topic"], dead["reconsume_times"]) == (g.dlq_topic, g.max_attempts + 1)
    # RETRY_TOPIC names the POP retry topic, ORIGIN_MESSAGE_ID the retry record it came from.
    assert dead["retry_topic"] == g.retry_topic
    assert decode_message_id(dead["origin_msg_id"])[1] == last_retry["phys_offset"]
    assert "DELAY" in dead["properties"]
    return cks[0]
