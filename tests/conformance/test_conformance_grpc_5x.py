"""The model's gRPC consumers against real 5.x ones through a real proxy, message by message:
scenarios/conformance-grpc.yaml played by `retry-audit conformance` (a name server, two brokers, a
proxy in cluster mode; a PushConsumer, a SimpleConsumer and a FIFO PushConsumer of
rocketmq-client-java run by conformance/driver/GrpcPlanDriver.java, replaying the model's listener
verdicts).

The 5.3.3 case is in `make test` (about three minutes); 5.5.1 (its broker side, with 5.5.0's
proxy and clients) is marked slow. Without java, javac and mvn the real-broker test skips; the
plan's, the client lines' and the comparison's rules run everywhere.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from java_driver import needs_real_rocketmq

from broker_core.client.retry_policy import RetryPolicy
from broker_core.errors import BadInputError
from broker_core.sim.scenario import load_scenario
from conformance.compare import _consumable
from conformance.observed import outcome, pop_queue
from conformance.plan import build_plan, check_groups
from conformance.run import real_run_id, run_conformance
from orchestration.cmd_conformance import explain_failures, verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-grpc.yaml"
PUSH, SIMPLE, FIFO = "push-service", "simple-service", "fifo-service"
RETRY_TOPICS = {PUSH: "%RETRY%push-service_PushTopic", SIMPLE: "%RETRY%simple-service_SimpleTopic"}
DLQ_TOPICS = {PUSH: "%DLQ%push-service", SIMPLE: "%DLQ%simple-service", FIFO: "%DLQ%fifo-service"}
MESSAGES = 62


@needs_real_rocketmq
@pytest.mark.long
@pytest.mark.parametrize("version", ["5.3.3", pytest.param("5.5.1", marks=pytest.mark.slow)])
def test_the_models_grpc_consumers_match_real_ones_through_a_proxy(version, tmp_path, spark):
    """Every message's hops (the publish, each revive into the group's POP retry topic, the retry
    the proxy pops at maxAttempts and the DLQ record it sends instead of handing it out; a FIFO
    message's DLQ record straight after its PUBLISH) and their properties are the same in the
    model's run and the real one; the audit agrees with what the real gRPC consumers were handed;
    a message whose every attempt failed is DLQ on both sides."""
    out = tmp_path / "out"
    report = run_conformance(version, SCENARIO, out, spark=spark)
    assert verdict_failures(report) == [], explain_failures(report)
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    assert lvc["messages"] == lvc["agree"] == MESSAGES and lvc["disagree"] == 0
    assert mvr["messages"] == mvr["identical"] == MESSAGES and mvr["unexplained"] == 0
    assert mvr["hops"]["model"] == mvr["hops"]["real"] > MESSAGES
    # The proxy's heartbeat broadcast is stored on the brokers, and left out of the comparison.
    assert mvr["proxy_records"] > 0
    assert report["driver"]["end"]["reason"] == "complete", report["driver"]

    clients = pq.read_table(out / "clients" / "consume_attempts").to_pylist()
    model = pq.read_table(out / "runs" / "model" / "parquet" / "consume_attempts").to_pylist()
    # The real consumers were handed the same attempts from the same queues (the retries from the
    # groups' POP retry topics; a FIFO consumer's again from its one record) with the model's
    # outcomes: acked, not acked (a SimpleConsumer), invisible time changed (a PushConsumer),
    # consumed again and forwarded to the DLQ (a FIFO consumer).
    assert sorted((a["group"], a["uniq_key"], a["queue_topic"], a["reconsume_times"], a["outcome"])
                  for a in clients) == sorted(
        (a["group"], a["uniq_key"], a["queue_topic"], a["reconsume_times"], a["outcome"]) for a in model)
    assert {a["queue_topic"] for a in clients} >= set(RETRY_TOPICS.values())
    assert {a["outcome"] for a in clients} == {"ACKED", "POP_NOT_ACKED", "POP_DELAYED", "LOCAL_RETRY", "SENT_BACK"}
    assert {a["queue_topic"] for a in clients if a["group"] == FIFO} == {"FifoTopic"}

    con = duckdb.connect(str(out / "warehouse.duckdb"), read_only=True)
    try:
        def dead(run_id: str) -> set[tuple[str, str]]:
            return set(con.execute("""SELECT message_key, "group" FROM message_lineage
                                      WHERE run_id = ? AND final_state = 'DLQ'""", [run_id]).fetchall())

        real_dlq, model_dlq = dead(real_run_id("conformance-grpc")), dead("conformance-grpc")
        dlq_topics = {t for (t,) in con.execute(
            "SELECT DISTINCT topic FROM commitlog WHERE run_id = ? AND starts_with(topic, '%DLQ%')",
            [real_run_id("conformance-grpc")]).fetchall()}
    finally:
        con.close()
    # Every group dead-letters some message, on both sides alike: maxAttempts failed deliveries each.
    assert real_dlq == model_dlq and {g for _, g in real_dlq} == {PUSH, SIMPLE, FIFO}
    assert dlq_topics == set(DLQ_TOPICS.values())
    failed = {(a["group"], a["uniq_key"]) for a in clients if a["status"] != "CONSUME_SUCCESS"}
    ok = {(a["group"], a["uniq_key"]) for a in clients if a["status"] == "CONSUME_SUCCESS"}
    assert {(u, g) for g, u in failed - ok} == real_dlq

    # The gRPC driver set each group's retryMaxTimes (and the push group's policy) on both brokers.
    groups = [json.loads(line) for line in (out / "side" / "grpc.out").read_text().splitlines()
              if line.startswith('{"ev":"group"')]
    assert sorted((g["group"], g["retry_max_times"]) for g in groups) == [
        (FIFO, 2), (FIFO, 2), (PUSH, 2), (PUSH, 2), (SIMPLE, 1), (SIMPLE, 1)]
    assert all("EXPONENTIAL" in g["group_retry_policy"] for g in groups if g["group"] == PUSH)


def _plan(tmp_path: Path, scenario=None):
    from broker_core.sim.run import simulate

    scenario = scenario or load_scenario(SCENARIO)
    simulate(SCENARIO, tmp_path / "model", scenario=scenario)
    return build_plan(scenario, tmp_path / "model", namesrv="127.0.0.1:9876",
                      brokers={"broker-a": "127.0.0.1:10911"}, side_dir=tmp_path / "side")


def test_a_grpc_groups_plan_line_names_its_client_retry_max_times_and_policy(tmp_path):
    """A gRPC group's line holds its retryMaxTimes where a remoting group's holds maxReconsumeTimes,
    its receive's invisible time (the proxy's 60 s for a push consumer), no delay table, its client
    and its retry policy; the driver waits for the longest return (a SimpleConsumer's 5 s) twice,
    plus the long polling."""
    plan = _plan(tmp_path)
    lines = {f[1]: f[3:] for f in (line.split("\t") for line in plan.text.splitlines()) if f[0] == "group"}
    assert lines[PUSH] == ["POP", "1", "2", "1", "PushTopic", "60000", "-", "grpc-push", "exponential:1000,3000,2"]
    assert lines[SIMPLE] == ["POP", "1", "1", "1", "SimpleTopic", "5000", "-", "grpc-simple", "-"]
    assert lines[FIFO] == ["POP", "1", "2", "1", "FifoTopic", "60000", "-", "grpc-fifo", "exponential:1000,1000,1"]
    settings = dict(line.split("\t")[1:] for line in plan.text.splitlines() if line.startswith("setting\t"))
    assert int(settings["idle_ms"]) == 2 * 5_000 + 15_000
    # Verdicts are keyed by the reconsume times, which a gRPC consumer reads as delivery attempt - 1.
    assert any(line.startswith(f"verdict\t{SIMPLE}\t") and line.split("\t")[2].endswith("/1/0")
               for line in plan.text.splitlines())


def test_a_push_groups_retry_policy_is_written_as_the_broker_takes_it():
    """The broker's exponential policy takes a whole multiplier; a customized one its table in ms."""
    scenario = load_scenario(SCENARIO)
    push = next(g for g in scenario.groups if g.name == PUSH)
    check_groups(replace(scenario, groups=(replace(push, retry_policy=RetryPolicy("customized", (1000, 4000))),)))
    with pytest.raises(BadInputError, match="whole multiplier"):
        check_groups(replace(scenario, groups=(replace(push, retry_policy=RetryPolicy(
            "exponential", initial_ms=1000, max_ms=3000, multiplier=1.5)),)))


def test_a_grpc_delivery_reads_its_queue_and_outcome_from_the_receipt_handle():
    """A gRPC consumer names the message's topic for a retry too; its receipt handle (POP_CK plus
    the commit log offset, as a real 5.3.3 proxy handed it) says the queue, and the outcome of a
    failure is the client's: no ack (simple), a change of invisible time (push), consumed again
    below maxAttempts and forwarded to the DLQ at it (FIFO: the reconsume times is the client's
    attempt - 1, the maximum the group's retryMaxTimes)."""
    call = {"group": SIMPLE, "topic": "SimpleTopic", "uniq_key": "U"}
    assert pop_queue({**call, "pop_ck": "0 1795687826944 5000 5 0 broker-b 0 0 298"}) == ("SimpleTopic", 0)
    assert pop_queue({**call, "pop_ck": "2 1795687833000 5000 6 1 broker-a 0 2 9120"}) == (RETRY_TOPICS[SIMPLE], 0)
    assert outcome("CLUSTERING", "RECONSUME_LATER", "POP", 1, 1, client="grpc-simple") == "POP_NOT_ACKED"
    assert outcome("CLUSTERING", "RECONSUME_LATER", "POP", 2, 2, client="grpc-push") == "POP_DELAYED"
    assert outcome("CLUSTERING", "CONSUME_SUCCESS", "POP", 0, 2, client="grpc-push") == "ACKED"
    assert outcome("CLUSTERING", "RECONSUME_LATER", "POP", 1, 2, client="grpc-fifo") == "LOCAL_RETRY"
    assert outcome("CLUSTERING", "RECONSUME_LATER", "POP", 2, 2, client="grpc-fifo") == "SENT_BACK"
    assert outcome("CLUSTERING", "CONSUME_SUCCESS", "POP", 2, 2, client="grpc-fifo") == "ACKED"
    # The remoting POP client acks a failure at its maximum.
    assert outcome("CLUSTERING", "RECONSUME_LATER", "POP", 2, 2) == "POP_ACKED_AT_MAX"


def test_a_grpc_consumer_is_never_handed_the_retry_the_proxy_dead_letters():
    """The proxy pops the retry whose reconsume times reached maxAttempts and sends it to the DLQ:
    of a gRPC group's hops, the consumer was handed those below maxAttempts."""
    hops = [{"group": None, "hop_kind": "PUBLISH", "topic": "SimpleTopic", "reconsume_times": 0}] + [
        {"group": SIMPLE, "hop_kind": "RETRY", "topic": RETRY_TOPICS[SIMPLE], "reconsume_times": n} for n in (1, 2)] + [
        {"group": SIMPLE, "hop_kind": "DLQ", "topic": DLQ_TOPICS[SIMPLE], "reconsume_times": 3}]
    assert _consumable(hops, SIMPLE, 2) == [("SimpleTopic", 0), (RETRY_TOPICS[SIMPLE], 1)]
    assert _consumable(hops, SIMPLE) == [("SimpleTopic", 0), (RETRY_TOPICS[SIMPLE], 1), (RETRY_TOPICS[SIMPLE], 2)]
