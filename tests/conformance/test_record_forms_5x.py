"""The record forms only a 5.x broker writes, made by a real RocketMQ 5.3.3 broker and imported:
the v2 magic of a topic over 127 bytes, the ``__CRC32#`` property trailer, an inner batch and a
recalled timer message. Both decoders give identical Parquet, the inner batch is unwrapped into
the messages the consumer saw, the lineage reads each form right, and every blocking check passes.

Needs java, javac and mvn (the jars come from the conformance cache); skips without them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import QUICK_REBALANCE_FLAGS, compile_driver, needs_real_rocketmq, run_driver

from broker_core.codec import property_crc_matches
from broker_core.constants import (
    PROP_INNER_BASE,
    PROP_INNER_NUM,
    PROP_TIMER_DEL_UNIQKEY,
    SYSFLAG_INNER_BATCH,
    SYSFLAG_NEED_UNWRAP,
    TIMER_TOPIC,
)
from broker_core.message import PROP_CRC32

pytestmark = needs_real_rocketmq

# 5.3.3's client takes consumer groups of up to 255 characters, so a push consumer's send-back
# makes a %RETRY% topic over 127 bytes; 5.5.0's client refuses groups over 120 characters, so there
# the longest push retry topic is 127 bytes, still v1 (docs/rocketmq-5x.md). 5.5.1 runs with 5.5.0's
# client (conformance/jars.py PARTIAL_RELEASES), so its groups are limited as 5.5.0's.
GROUP_CHARS = {"5.3.3": 200, "5.5.0": 120, "5.5.1": 120}
# 5.3.3's run (about 2 minutes of a real broker and Spark) is in make test-long, which CI runs.
VERSIONS = (pytest.param("5.3.3", marks=pytest.mark.long), pytest.param("5.5.0", marks=pytest.mark.slow),
            pytest.param("5.5.1", marks=pytest.mark.slow))
DRIVER = Path(__file__).resolve().with_name("RecordFormsDriver.java")
TOPIC, BATCH_TOPIC = "FormsTopic", "BatchTopic"
GROUP_PREFIX = "forms-long-group-"
TOPIC_V1_BYTES_MAX = 127  # a topic longer than this needs the v2 magic (2-byte length)
MAGIC_V1, MAGIC_V2 = "0xDAA320A7", "0xDAA320AB"
BATCH_SIZE = 3
RECALL_DELAY_SEC = 4  # the recalled timer's delay: the driver waits past it before it stops
RECALL_TAG = "_RECALL_TAG_"
# The recall record's TIMER_DEL_UNIQKEY: 5.3.3 writes <topic>+<uniqKey>, 5.5.0 the bare UNIQ_KEY.
DELETE_KEY = {"5.3.3": "{topic}+{uniq}", "5.5.0": "{uniq}", "5.5.1": "{uniq}"}
# The broker's delay levels: the driver's failed consume asks for level 1 (1 s).
DELAY_LEVELS = "1s 5s 10s"
DRIVER_TIMEOUT_MS = 60_000  # a limit: a broker that never delivers fails the test
DRIVER_TIMEOUT_S = 120


def _import_with_both_decoders(store: Path, root: Path):
    """Import ``store`` with each decoder; assert identical summaries and Parquet files."""
    from broker_core.export.store_import import import_store

    summaries = {}
    for decoder in ("reference", "columnar"):
        summary = import_store(store, root / decoder, name="forms", broker="broker-a", decoder=decoder)
        assert summary.errors == [], summary.errors
        # Every record's __CRC32# tail matches its bytes: no property-crc-mismatch warning.
        assert [p for p in summary.problems if p.kind == "property-crc-mismatch"] == []
        summaries[decoder] = {k: v for k, v in summary.to_json().items() if k != "out_dir"}
    assert summaries["columnar"] == summaries["reference"]
    files = sorted(p.relative_to(root / "reference") for p in (root / "reference").rglob("*.parquet"))
    assert files and files == sorted(p.relative_to(root / "columnar") for p in (root / "columnar").rglob("*.parquet"))
    for rel in files:
        assert (root / "columnar" / rel).read_bytes() == (root / "reference" / rel).read_bytes(), rel
    return root / "columnar"


def _record_bytes(store: Path, phys_offset: int, size: int) -> bytes:
    """A record's bytes from the commit-log file that holds ``phys_offset``."""
    files = sorted((store / "commitlog").iterdir())
    start = max(int(f.name) for f in files if int(f.name) <= phys_offset)
    with open(store / "commitlog" / f"{start:020d}", "rb") as fh:
        fh.seek(phys_offset - start)
        return fh.read(size)


@pytest.mark.parametrize("version", VERSIONS)
def test_5x_record_forms_from_a_real_broker_import_alike_and_lineage_right(version, tmp_path, spark):
    """A real 5.x broker with enabledAppendPropCRC writes a CRC trailer on every record, a v2
    record for a %RETRY% topic over 127 bytes (v1 up to 127), one INNER_NUM record for a batch to a
    BatchCQ topic, and a recall record for a recalled timer; both decoders import them alike, the
    lineage ends the recalled timer RECALLED (never delivered) and every consumed message
    CONSUMED, and every blocking check passes."""
    from assets.lineage import run_lineage
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve
    from conformance.run import _warehouse

    group = GROUP_PREFIX + "x" * (GROUP_CHARS[version] - len(GROUP_PREFIX))
    lib = resolve(version)
    classpath = compile_driver(DRIVER, str(lib / "*"), tmp_path / "classes")
    spec = BrokerSpec("broker-a", DELAY_LEVELS,
                      extra={"enabledAppendPropCRC": "true", "recallMessageEnable": "true"})
    with Cluster(tmp_path / "cluster", lib, [spec]) as cluster:
        store = cluster.procs["broker-a"].store
        events = run_driver(classpath, "RecordFormsDriver",
                            [cluster.namesrv_addr, cluster.broker_addrs["broker-a"], TOPIC, BATCH_TOPIC, group,
                             BATCH_SIZE, RECALL_DELAY_SEC, DRIVER_TIMEOUT_MS],
                            cwd=tmp_path, timeout_s=DRIVER_TIMEOUT_S, flags=QUICK_REBALANCE_FLAGS)
        cluster.stop_all()
    sent = {e["keys"]: e for e in events if e["event"] == "send"}
    (batch,) = [e for e in events if e["event"] == "batch_send"]
    (recall,) = [e for e in events if e["event"] == "recall"]
    consumed = [e for e in events if e["event"] == "consume"]
    batch_keys = [f"batch-{i}" for i in range(BATCH_SIZE)]
    assert sorted({e["keys"] for e in consumed}) == sorted(["plain-0", "retry-0", "timer-0", *batch_keys])
    assert [e["status"] for e in consumed if e["keys"] == "retry-0"] == ["LATER", "OK"]
    # The recall names the message it recalled; the consumer never saw it.
    assert recall["recalled_id"] == sent["recall-0"]["uniq_key"]

    run = _import_with_both_decoders(store, tmp_path / "runs")
    rows = pq.read_table(run / "parquet" / "commitlog").to_pylist()
    for r in rows:
        r["properties"] = dict(r["properties"])
        # Every record ends in the __CRC32# property, and its value is the CRC of the bytes before it.
        assert PROP_CRC32 in r["properties"], r
        assert property_crc_matches(_record_bytes(store, r["phys_offset"], r["total_size"])) is True, r

    # The v2 magic: the retry record of a group whose %RETRY% topic is over 127 bytes, and only it.
    retry_topic = "%RETRY%" + group
    long_topic = len(retry_topic.encode()) > TOPIC_V1_BYTES_MAX
    assert long_topic == (version == "5.3.3")
    magics = {(r["topic"], r["magic"]) for r in rows}
    assert (retry_topic, MAGIC_V2 if long_topic else MAGIC_V1) in magics
    assert {m for t, m in magics if t != retry_topic} == {MAGIC_V1}

    # The inner batch: one record with the batch's UNIQ_KEY; the consumer got its messages from it.
    (inner,) = [r for r in rows if r["topic"] == BATCH_TOPIC]
    assert inner["sys_flag"] & (SYSFLAG_INNER_BATCH | SYSFLAG_NEED_UNWRAP) == SYSFLAG_INNER_BATCH | SYSFLAG_NEED_UNWRAP
    assert (inner["uniq_key"], inner["properties"][PROP_INNER_NUM], inner["properties"][PROP_INNER_BASE]) == (
        batch["uniq_key"], str(BATCH_SIZE), "0")
    from_batch = sorted((e["queue_offset"], e["commit_log_offset"]) for e in consumed if e["keys"] in batch_keys)
    assert from_batch == [(i, inner["phys_offset"]) for i in range(BATCH_SIZE)]
    # The import unwrapped it into the messages the consumer saw: the same UNIQ_KEYs (the client's
    # getMsgId), KEYS, tags, queue offsets, queue and commit-log offset, in the order sent.
    unwrapped = pq.read_table(run / "parquet" / "inner_messages").to_pylist()
    saw = sorted((e["queue_offset"], e["uniq_key"], e["keys"], e["topic"], e["queue_id"], e["commit_log_offset"])
                 for e in consumed if e["keys"] in batch_keys)
    assert [(m["queue_offset"], m["uniq_key"], m["keys"], m["topic"], m["queue_id"], m["phys_offset"])
            for m in unwrapped] == saw
    assert [m["keys"] for m in unwrapped] == batch_keys  # the order of the list the producer sent
    assert {(m["tags"], m["inner_index"] + int(inner["properties"][PROP_INNER_BASE])) for m in unwrapped} == {
        ("batch", i) for i in range(BATCH_SIZE)}
    assert batch["uniq_key"] not in {m["uniq_key"] for m in unwrapped}

    # The recall: a second record in the wheel with the message's UNIQ_KEY; none in the real topic.
    doomed = sent["recall-0"]["uniq_key"]
    doomed_rows = [r for r in rows if r["uniq_key"] == doomed]
    assert [r["topic"] for r in doomed_rows] == [TIMER_TOPIC, TIMER_TOPIC]
    assert doomed_rows[1]["properties"][PROP_TIMER_DEL_UNIQKEY] == DELETE_KEY[version].format(topic=TOPIC, uniq=doomed)
    assert doomed_rows[1]["tags"] == RECALL_TAG

    run_lineage(run, spark)
    hops = pq.read_table(run / "lineage" / "message_hops").to_pylist()
    lineage = pq.read_table(run / "lineage" / "message_lineage").to_pylist()

    def journey(uniq):
        kinds = [h["hop_kind"] for h in sorted((h for h in hops if h["message_key"] == uniq),
                                                key=lambda h: h["hop_index"])]
        states = [(r["group"], r["final_state"]) for r in lineage if r["message_key"] == uniq]
        return kinds, states

    assert journey(sent["plain-0"]["uniq_key"]) == (["PUBLISH"], [(group, "CONSUMED")])
    assert journey(sent["retry-0"]["uniq_key"]) == (["PUBLISH", "SCHEDULE", "RETRY"], [(group, "CONSUMED")])
    assert journey(sent["timer-0"]["uniq_key"]) == (["TIMER", "DELIVER"], [(group, "CONSUMED")])
    # The batch record is no message of its own; each message the consumer saw is, and was consumed.
    assert journey(batch["uniq_key"]) == ([], [])
    for e in consumed:
        if e["keys"] in batch_keys:
            assert journey(e["uniq_key"]) == (["PUBLISH"], [(group, "CONSUMED")]), e
    assert journey(doomed) == (["TIMER", "TIMER"], [(group, "RECALLED")])

    verdicts = _warehouse([run], tmp_path / "warehouse.duckdb")
    failed = {name: v for outcomes in verdicts.values() for name, v in outcomes.items()
              if v["blocking"] and not v["passed"]}
    assert failed == {}, failed

    # An operator's `retry-audit trace` of the id the consumer saw finds that message; the batch's
    # own id (which no consumer saw) leads to the messages of its record.
    from assets.warehouse import open_read_only
    from orchestration.cmd_pipeline import trace_messages

    con = open_read_only(tmp_path / "warehouse.duckdb")
    try:
        for e in consumed:
            if e["keys"] in batch_keys:
                (found,) = trace_messages(con, e["uniq_key"])
                assert ([h["hop_kind"] for h in found["hops"]], [(c["group"], c["final_state"]) for c in found["groups"]]
                        ) == (["PUBLISH"], [(group, "CONSUMED")])
        by_batch_id = trace_messages(con, batch["uniq_key"])
    finally:
        con.close()
    assert sorted(m["message_key"] for m in by_batch_id) == sorted(
        e["uniq_key"] for e in consumed if e["keys"] in batch_keys)
