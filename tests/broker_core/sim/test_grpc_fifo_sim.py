"""A gRPC FIFO consumer group in the model (``client: grpc-fifo``), simulated, read back by the
lineage and the warehouse: what a real 5.3.3 broker and proxy wrote for one (docs/rocketmq-5x.md,
"FIFO consumers and batch acks: confirmed"; tests/conformance/test_grpc_fifo_5x.py), and the
same scenario against real brokers in scenarios/conformance-grpc.yaml."""

from __future__ import annotations

import itertools
from collections import defaultdict

import duckdb
import pytest
from simruns import assert_run_passes, assert_same_seed_same_rows, run_rows, scenario_error

from assets.checks import INVARIANTS, run_checks
from broker_core.sim.run import simulate
from orchestration.cli import main as cli_main

GROUP, TOPIC = "fifo-service", "FifoTopic"
RETRY_MAX_TIMES = 2  # maxAttempts 3
SEED = 11
SCENARIO = f"""name: fifo-small
seed: {SEED}
horizon: 10m
broker: {{store_host: 10.0.0.1:10911, commitlog_file_size: 1MiB, semantics: "5.x"}}
topics:
  - {{name: {TOPIC}, queues: 2}}
groups:
  - name: {GROUP}
    subscribe: [{TOPIC}]
    mode: pop
    client: grpc-fifo
    consumers: 2
    retry_max_times: {RETRY_MAX_TIMES}
    retry_policy: {{type: exponential, initial: 1s, max: 2s, multiplier: 2}}
    behavior: {{consume_time: 2ms, fail_probability: 0.2, poison_fraction: 0.1}}
producers:
  - {{topic: {TOPIC}, messages: 60, rate: 40/s, body_size: 64, tags: [fifo]}}
"""


@pytest.fixture(scope="module")
def fifo_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("fifo")
    path = base / "fifo-small.yaml"
    path.write_text(SCENARIO)
    run = base / "run"
    summary = simulate(path, run)
    assert cli_main(["-q", "lineage", str(run)]) == 0
    db = base / "wh.duckdb"
    assert cli_main(["-q", "warehouse", str(run), "--db", str(db)]) == 0
    return path, run, db, summary


def test_a_fifo_consumer_retries_from_its_one_record_in_order_and_forwards_to_the_dlq(fifo_run):
    """Each message's listener calls are of its one PUBLISH record, attempt after attempt
    (reconsume times 0, 1, 2 as the client counts), the next call after the policy's delay; the
    queue's next message only after the one before is done; at maxAttempts the message is
    forwarded: a DLQ record straight after the PUBLISH, reconsume times 1, RETRY_TOPIC the topic,
    ORIGIN_MESSAGE_ID the PUBLISH record. No checkpoint, no ack record, no retry record."""
    path, run, _, summary = fifo_run
    assert_run_passes(run, path, SEED)
    assert summary.dlq > 0 and summary.consumed + summary.dlq == summary.produced
    records = run_rows(run, "commitlog")
    by_msg_id = {r["msg_id"]: r for r in records}
    assert not [r for r in records if r["topic"].startswith("%RETRY%")]
    assert not [e for e in run_rows(run, "pop_evidence") if e["group"] == GROUP]
    calls = defaultdict(list)
    for a in sorted(run_rows(run, "consume_attempts"), key=lambda a: a["start_ts"]):
        calls[a["uniq_key"]].append(a)
    dead = {r["uniq_key"]: r for r in records if r["topic"] == f"%DLQ%{GROUP}"}
    assert len(dead) == summary.dlq
    for key, seen in calls.items():
        assert len({a["phys_offset"] for a in seen}) == 1, seen
        assert [a["reconsume_times"] for a in seen] == list(range(len(seen)))
        for before, after in itertools.pairwise(seen):
            delay_ms = (after["start_ts"] - before["end_ts"]).total_seconds() * 1000
            assert delay_ms == pytest.approx(min(2000, 1000 * 2 ** before["reconsume_times"]), abs=1)
        if key in dead:
            assert [a["outcome"] for a in seen] == ["LOCAL_RETRY"] * RETRY_MAX_TIMES + ["SENT_BACK"]
            record, published = dead[key], by_msg_id[dead[key]["origin_msg_id"]]
            assert (published["topic"], published["phys_offset"]) == (TOPIC, seen[0]["phys_offset"])
            assert (record["reconsume_times"], record["retry_topic"]) == (1, TOPIC)
        else:
            assert [a["outcome"] for a in seen] == ["LOCAL_RETRY"] * (len(seen) - 1) + ["ACKED"]
    # In order: per queue, a message's first call starts after the one before it is done.
    last_done = {}
    for seen in sorted(calls.values(), key=lambda s: (s[0]["queue_id"], s[0]["queue_offset"])):
        q = seen[0]["queue_id"]
        if q in last_done:
            assert seen[0]["start_ts"] >= last_done[q]
        last_done[q] = seen[-1]["end_ts"]


def test_every_blocking_check_passes_and_the_lineage_says_dlq_or_consumed(fifo_run):
    """The chain of a forwarded message is its topic then the DLQ (final state DLQ); every other is
    its topic alone, CONSUMED; every blocking check passes (the manifest's maximum for the group is the forward's 0)."""
    _, run, db, summary = fifo_run
    con = duckdb.connect(str(db), read_only=True)
    try:
        outcomes = run_checks(con, INVARIANTS, run_id="fifo-small")
        paths = dict(con.execute("SELECT path, count(*) FROM message_lineage GROUP BY 1").fetchall())
        states = dict(con.execute("SELECT final_state, count(*) FROM message_lineage GROUP BY 1").fetchall())
    finally:
        con.close()
    assert all(o.passed for o in outcomes), {o.check.name: o.examples for o in outcomes if not o.passed}
    assert states == {"CONSUMED": summary.consumed, "DLQ": summary.dlq}
    assert paths == {TOPIC: summary.consumed, f"{TOPIC} > %DLQ%{GROUP}": summary.dlq}


def test_the_same_seed_gives_the_same_fifo_run(fifo_run, tmp_path):
    path, run, _, _ = fifo_run
    assert_same_seed_same_rows(run, path, tmp_path, SEED + 1)


def test_a_fifo_group_refuses_an_invisible_time_at_its_line():
    """A FIFO consumer receives with the proxy's 60 s, as a push consumer: invisible_time is refused."""
    err = scenario_error(SCENARIO.replace("    retry_max_times:", "    invisible_time: 5s\n    retry_max_times:"))
    assert "invisible_time" in str(err) and "60 s" in str(err)
