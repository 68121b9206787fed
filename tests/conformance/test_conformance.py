"""Real RocketMQ 4.9.4 (a name server, two brokers, real clients) against the audit and the model.

One short run of scenarios/conformance.yaml is shared by the tests of this module (about a minute
of real brokers). The machine needs java, javac and mvn with Maven Central; without javac or mvn
the module skips, as the browser test does without Chromium (.ci/run installs both).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from java_driver import needs_real_rocketmq

from broker_core.sim.scenario import load_scenario
from conformance import compare
from conformance.run import real_run_id, run_conformance
from orchestration.cmd_conformance import explain_failures, verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance.yaml"
VERSION = "4.9.4"
BROKERS = ("broker-a", "broker-b")

pytestmark = needs_real_rocketmq


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, spark):
    out = tmp_path_factory.mktemp("conformance") / "out"
    report = run_conformance(VERSION, SCENARIO, out, spark=spark)
    return out, report


def test_the_audit_agrees_with_the_real_clients_and_the_model_with_the_real_broker(real_run):
    """On real 4.9.4 brokers, every message's rebuilt hops match what the real clients saw, and the model's run differs from the real one only in documented ways."""
    out, report = real_run
    assert verdict_failures(report) == [], explain_failures(report)
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    produced = pq.read_table(out / "runs" / "model" / "parquet" / "produced").num_rows
    assert lvc["messages"] == produced == 86
    assert lvc["agree"] == produced and lvc["disagree"] == 0
    assert lvc["delayed_hops_checked"] > 0 and lvc["delayed_hops_early"] == 0
    assert mvr["messages"] == produced and mvr["unexplained"] == 0
    assert mvr["hops"]["real"] > produced and mvr["hops"]["model"] > produced
    assert report["faults"] == []
    # The broadcasting group is the one documented difference; every other message is identical.
    assert set(mvr["explained_kinds"]) <= set(compare.EXPLAINED)
    assert mvr["identical"] + mvr["explained"] == produced


def test_a_send_back_the_real_broker_refused_goes_through_the_clients_own_send(real_run):
    """The send-backs the model's broker refused (scenarios/conformance.yaml's send_back_failure)
    are refused by the real broker too; the real client then sends the retry itself, which carries
    no ORIGIN_MESSAGE_ID (4.9.4's client replaces the properties after setting it), and the audit
    still agrees with the clients on every such message."""
    out, report = real_run
    attempts = pq.read_table(out / "clients" / "consume_attempts").to_pylist()
    refused = {(a["uniq_key"], a["reconsume_times"]) for a in attempts if a["outcome"] == "SENT_BACK_BY_CLIENT"}
    model = pq.read_table(out / "runs" / "model" / "parquet" / "consume_attempts").to_pylist()
    assert refused and refused == {(a["uniq_key"], a["reconsume_times"]) for a in model
                                   if a["outcome"] == "SENT_BACK_BY_CLIENT"}
    real = pq.read_table(out / "runs" / "real" / "parquet" / "commitlog").to_pylist()
    for key, times in refused:
        # The client's copy goes through the schedule: its SCHEDULE record has reconsume times + 1.
        copies = [r for r in real if r["uniq_key"] == key and r["topic"] == "SCHEDULE_TOPIC_XXXX"
                  and r["reconsume_times"] == times + 1]
        assert copies, (key, times)
        if times == 0:
            assert all(r["origin_msg_id"] is None for r in copies), copies
    examples = {e["uniq_key"] for e in report["lineage_vs_clients"]["examples"]}
    assert not examples & {k for k, _ in refused}


def test_the_report_and_its_files_follow_the_contract(real_run):
    """report.json has the contract's keys, the real stores sit under stores/<broker>/ and the clients' tables under clients/<table>/."""
    out, report = real_run
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["rocketmq_version"] == VERSION and on_disk["scenario"] == "conformance"
    assert on_disk["brokers"] == list(BROKERS) and on_disk["messages"] == 86
    for key in ("messages", "agree", "disagree", "examples"):
        assert key in on_disk["lineage_vs_clients"]
    for key in ("messages", "identical", "explained", "unexplained", "differences"):
        assert key in on_disk["model_vs_real"]
    for broker in BROKERS:
        store = out / "stores" / broker
        assert sorted(p.name for p in (store / "commitlog").iterdir())[0] == "00000000000000000000"
        assert not (store / "abort").exists(), "a SIGTERM stop must leave no abort file"
    produced = pq.read_table(out / "clients" / "produced")
    attempts = pq.read_table(out / "clients" / "consume_attempts")
    assert {"uniq_key", "topic", "queue_id", "delay_level", "send_ts", "status", "msg_id"} <= set(produced.column_names)
    assert {"group", "consumer_id", "model", "queue_topic", "queue_offset", "uniq_key", "topic",
            "reconsume_times", "start_ts", "end_ts", "status", "outcome"} <= set(attempts.column_names)
    assert set(produced.column("status").to_pylist()) == {"SEND_OK"}
    # Both brokers took messages (the producers spread over the queues of the cluster), and both
    # are in the one run of the real stores, a part file per broker.
    real = out / "runs" / "real"
    brokers_seen = set(pq.read_table(real / "parquet" / "commitlog").column("broker").to_pylist())
    assert brokers_seen == set(BROKERS)
    assert sorted(p.name for p in (real / "parquet" / "commitlog").iterdir()) == [
        f"part-{b}.parquet" for b in BROKERS]
    assert set(report["checks"]) == {"conformance", real_run_id("conformance")}
    assert report["timings"]["real_clients_s"] > 0 and report["jvm_rss_mib"]["broker-a"] > 0


def test_the_real_listeners_replayed_the_models_verdicts(real_run):
    """Every failure status the model drew for a (group, message, attempt) is what the real listener returned for it."""
    out, _ = real_run
    model = pq.read_table(out / "runs" / "model" / "parquet" / "consume_attempts").to_pylist()
    real = pq.read_table(out / "clients" / "consume_attempts").to_pylist()
    def verdicts(rows):
        out = {}
        for r in rows:
            if r["model"] == "CLUSTERING":
                out.setdefault((r["group"], r["uniq_key"], r["reconsume_times"]), r["status"])
        return out
    # A crash's redeliveries differ between the runs (timing); every other attempt must match.
    skip = compare.redelivered(model) | compare.redelivered(real)
    m = {k: v for k, v in verdicts(model).items() if k[1] not in skip}
    r = {k: v for k, v in verdicts(real).items() if k[1] not in skip}
    assert m == r
    assert len(m) > 80 and len(skip) < 10
    assert {"RECONSUME_LATER", "EXCEPTION", "RETURN_NULL"} <= set(m.values())
    # The orderly group's failures were retried locally, as its client does.
    outcomes = {a["outcome"] for a in real if a["group"] == "seq-service" and a["status"] != "CONSUME_SUCCESS"}
    assert outcomes == {"LOCAL_RETRY"}


def test_the_client_comparison_fails_when_a_delivery_is_missing(real_run):
    """Dropping one delivery the clients saw makes the audit and the clients disagree on that message."""
    out, _ = real_run
    import duckdb
    attempts = compare._client_attempts(out)
    retried = next(a for a in attempts if a["queue_topic"].startswith("%RETRY%"))
    fewer = [a for a in attempts if a is not retried]
    con = duckdb.connect(str(out / "warehouse.duckdb"), read_only=True)
    try:
        scenario = load_scenario(SCENARIO)
        result = compare.lineage_vs_clients(con, scenario, fewer, [real_run_id("conformance")])
    finally:
        con.close()
    assert result["disagree"] >= 1
    assert retried["uniq_key"] in {e["uniq_key"] for e in result["examples"]}


def test_the_model_comparison_fails_when_the_model_retries_differently(real_run, tmp_path):
    """A model that dead-letters notice-service after 1 retry instead of 2 differs from the real run on exactly those messages, unexplained."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse
    from broker_core.sim.run import simulate

    out, report = real_run
    text = SCENARIO.read_text()
    assert text.count("max_reconsume_times: 2") == 1
    changed = tmp_path / "conformance.yaml"
    changed.write_text(text.replace("max_reconsume_times: 2", "max_reconsume_times: 1"))
    other = tmp_path / "other"
    simulate(changed, other)  # same name and seed: the same messages and UNIQ_KEYs
    run_lineage_duckdb(other)
    db = tmp_path / "w.duckdb"
    build_warehouse([other, out / "runs" / "real"], db)
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    try:
        result = compare.model_vs_real(con, load_scenario(SCENARIO), "conformance",
                                       [real_run_id("conformance")])
    finally:
        con.close()
    dead_lettered = report["model_vs_real"]
    assert result["unexplained"] > 0
    # The chains differ in length; a retry the client sent itself also carries the other max
    # (MAX_RECONSUME_TIMES), which the property comparison sees.
    kinds = {d["kind"] for d in result["differences"]}
    assert "hops" in kinds and kinds <= {"hops", "properties"}, kinds
    assert all("MAX_RECONSUME_TIMES" in json.dumps(d) for d in result["differences"] if d["kind"] == "properties")
    assert result["messages"] == dead_lettered["messages"]
    assert result["identical"] < dead_lettered["identical"]


def test_a_bad_release_number_is_refused_before_anything_starts(tmp_path):
    """`retry-audit conformance --rocketmq 4.9` exits 2 naming the flag, and writes nothing."""
    proc = subprocess.run([sys.executable, "-m", "orchestration.cli", "conformance", "--rocketmq", "4.9",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "--rocketmq" in proc.stderr and "4.9" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_two_runs_into_one_directory_are_refused(tmp_path):
    """While one conformance run holds an output directory, a second run into it stops with exit 2 and deletes nothing."""
    from conformance.run import _lock_output

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("the first run's file")
    held = _lock_output(out.absolute())
    try:
        proc = subprocess.run([sys.executable, "-m", "orchestration.cli", "conformance", "--out", str(out)],
                              capture_output=True, text=True, cwd=ROOT)
    finally:
        held.close()
    assert proc.returncode == 2, proc.stderr
    assert "another conformance run" in proc.stderr
    assert (out / "keep").read_text() == "the first run's file"


@pytest.mark.long  # a minute of real brokers, timed kills and restarts: in make test-long
def test_a_broker_killed_and_restarted_is_audited_as_its_clients_saw_it(tmp_path):
    """broker-a killed with SIGKILL 1.5 s into the sends and restarted at 16 s: the real broker's
    abnormal recovery re-puts schedule records and hands out records whose committed offsets it
    lost, and the audit of its store still agrees with the clients on every message, with every
    blocking check passing; the model (one broker, no outage) differs only where the outage explains it.
    The restart comes after the clients' idle time (8 s without a listener call): they wait for
    it (play.HOLD_FILE). Before they did, a restart at 4 s that took 12 s to boot (CI, on a loaded
    host) came after they had stopped, and the records the broker handed out then were consumed by
    no one; at 16 s the clients stopped before the restart was even played."""
    from conformance.play import Outage

    # The lineage on DuckDB, the same SQL as Spark's (the module's first run holds the Spark
    # lineage to the clients): what this run tests is the real broker's outage and its store.
    report = run_conformance(VERSION, SCENARIO, tmp_path / "out", lineage_engine="duckdb",
                             outages=(Outage.parse("broker-a@1500ms-16s"),))
    assert verdict_failures(report) == [], explain_failures(report)
    assert [f["kind"] for f in report["faults"]] == ["broker_kill", "broker_restart"]
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    assert lvc["messages"] == lvc["agree"] == 86 and lvc["delayed_hops_early"] == 0
    assert mvr["unexplained"] == 0 and mvr["explained_kinds"].get("real_broker_outage", {}).get("count", 0) > 0
    # The restarted broker handed records out again: the clients consumed some message twice.
    assert report["duplicates"]["real"] > report["duplicates"]["model"]
    assert all(c["passed"] for c in report["checks"][real_run_id("conformance")].values() if c["blocking"])
