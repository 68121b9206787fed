"""What the real-broker gRPC tests share: the gRPC driver's class path, its receipt handles, and
the imported run (records, hops, lineage, POP checkpoints and acks) they compare it with.

The driver is ``conformance/driver/GrpcDriver.java`` (a SimpleConsumer mode and a PushConsumer
mode) run through a 5.x proxy; the comparison reads the run the audit built from the broker's store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from java_driver import compile_driver

GRPC_DRIVER = Path(__file__).resolve().parents[2] / "conformance" / "driver" / "GrpcDriver.java"


def grpc_driver_classpath(version: str, classes: Path) -> tuple[Path, Path, str]:
    """The broker's and the proxy's lib directories of RocketMQ ``version``, and the class path
    that runs the gRPC driver, compiled into ``classes``."""
    from conformance.jars import resolve, resolve_grpc_client, resolve_proxy

    lib, proxy_lib, client_lib = resolve(version), resolve_proxy(version), resolve_grpc_client()
    # The gRPC client first: the broker's jars carry an unshaded rocketmq-proto it must not see.
    return lib, proxy_lib, compile_driver(GRPC_DRIVER, f"{client_lib / '*'}:{lib / '*'}", classes)


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
            for e in evidence if e["kind"] == "ack" for o in e["offsets"]}
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
