"""A real RocketMQ 5.3.3 broker with the tiered store (POSIX backend) whose local retention deleted
all but its newest commit-log file (tiered_run.py says how): imported with its tier, every message
the clients sent is in the lineage (Spark) with the end the clients saw, the chains whose SCHEDULE
hops went with the deleted files are truncated, none is LOST, and every check passes.

Needs java, javac and mvn (the jars come from the conformance cache); skips without them. About
three minutes, most of it waiting for the tier's dispatcher (20 s rounds) and the broker's clean
service (10 s rounds): a long test.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from java_driver import needs_real_rocketmq
from tiered_run import BROKER, GROUP, MAX_RECONSUME, TOPIC, play_tiered

pytestmark = [needs_real_rocketmq, pytest.mark.long]


def test_a_tiered_store_gives_back_what_retention_deleted(tmp_path, spark):
    """The records retention deleted come back from the tier with the msgIds the producer was
    told; each message ends as its client saw it (DLQ, consumed after one retry, consumed); the
    retried ones whose SCHEDULE hops were deleted are truncated; no message is LOST; no check fails."""
    from assets.lineage import run_lineage
    from broker_core.export.store_import import import_store
    from conformance.run import _warehouse

    played = play_tiered(tmp_path / "work")
    sends = {e["uniq_key"]: e for e in played.events if e["event"] == "send"}
    calls: dict[str, int] = {}
    for e in played.events:
        if e["event"] == "consume":
            calls[e["uniq_key"]] = calls.get(e["uniq_key"], 0) + 1

    run = tmp_path / "runs" / "tiered"
    summary = import_store(played.store, run, broker=BROKER, tiered=played.tier, strict=True)
    assert summary.first_offset > 0 and summary.tiered.added > 0 and summary.tiered.problems == []
    records = pq.read_table(run / "parquet" / "commitlog").to_pylist()
    by_key = {r["uniq_key"]: r for r in records if r["topic"] == TOPIC}
    assert {k: by_key[k]["msg_id"] for k in sends} == {k: s["offset_msg_id"] for k, s in sends.items()}

    run_lineage(run, spark)
    lineage = {r["message_key"]: r for r in pq.read_table(run / "lineage" / "message_lineage").to_pylist()
               if r["group"] == GROUP}
    assert sorted(lineage) == sorted(sends)
    ends = {"dlq": ("DLQ", MAX_RECONSUME), "retry": ("CONSUMED", 1), "ok": ("CONSUMED", 0)}
    for key, send in sends.items():
        row = lineage[key]
        assert (row["final_state"], row["retries"]) == ends[send["kind"]], (key, row)
        assert calls[key] == ends[send["kind"]][1] + 1, (key, calls[key])
    truncated = [r for r in lineage.values() if r["truncated"]]
    assert truncated and all(sends[r["message_key"]]["kind"] != "ok" for r in truncated)

    verdicts = _warehouse([run], tmp_path / "warehouse.duckdb")
    failed = {name: v for outcomes in verdicts.values() for name, v in outcomes.items() if not v["passed"]}
    assert failed == {}, failed
    print(f"tier: {summary.tiered.to_json()}; {len(truncated)} of {len(lineage)} chains truncated; "
          f"steps {played.steps}")
