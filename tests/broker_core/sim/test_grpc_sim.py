"""scenarios/grpc-small.yaml: gRPC consumers through the 5.x proxy in the model, simulated, read
back by the lineage and the warehouse, and compared message by message with the model's own
consume attempts; and the scenario keys of a gRPC group, refused at their line when misused."""

from __future__ import annotations

import json
import shutil

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from simruns import SCENARIOS, assert_run_passes, assert_same_seed_same_rows, scenario_error

from assets.checks import INVARIANTS, run_checks
from broker_core.client.retry_policy import CUSTOMIZED, EXPONENTIAL, RetryPolicy
from broker_core.export.parquet import read_table
from broker_core.sim import invariants
from broker_core.sim.run import simulate
from broker_core.sim.scenario import load_scenario, load_scenario_text
from orchestration.cli import main as cli_main

GRPC_SMALL = SCENARIOS / "grpc-small.yaml"
PUSH, SIMPLE = "push-service", "simple-service"
RETRY_MAX_TIMES = {PUSH: 2, SIMPLE: 1}  # the scenario's retry_max_times
PUSH_DELAYS_MS = {1: 1000, 2: 2000, 3: 3000}  # exponential 1s x 2, capped at 3s, by delivery attempt
# The model's ground truth: a (group, message) ends in the state its last listener call left it,
# unless the proxy dead-lettered it (no listener call: read from the store).
STATE_OF_LAST_OUTCOME = {"ACKED": "CONSUMED", "POP_DELAYED": "RETRYING", "POP_NOT_ACKED": "RETRYING"}


@pytest.fixture(scope="module")
def grpc_run(tmp_path_factory):
    """grpc-small to its end: simulated, lineage built, loaded into a warehouse."""
    base = tmp_path_factory.mktemp("grpc")
    run = base / "run"
    summary = simulate(GRPC_SMALL, run)
    assert cli_main(["-q", "lineage", str(run)]) == 0
    db = base / "wh.duckdb"
    assert cli_main(["-q", "warehouse", str(run), "--db", str(db)]) == 0
    return run, db, summary


def test_the_grpc_run_passes_the_models_invariants(grpc_run):
    """Every run-level invariant holds: POP retries up to retryMaxTimes + 1, DLQ records past it
    whose ORIGIN_MESSAGE_ID names a POP retry of the message and whose RETRY_TOPIC is the POP retry
    topic; every message consumed or dead-lettered."""
    run, _, summary = grpc_run
    assert_run_passes(run, GRPC_SMALL, load_scenario(GRPC_SMALL).seed)
    assert summary.end_reason == "terminal" and summary.in_flight == 0
    assert summary.dlq > 0 and summary.consumed + summary.dlq == summary.produced


def test_the_proxy_dead_letters_at_retry_max_times_plus_one_without_a_listener_call(grpc_run):
    """Each DLQ record comes from a POP retry of reconsume times retryMaxTimes + 1 that no listener
    was handed; the listener saw the message retryMaxTimes + 1 times (attempts 1 to maxAttempts);
    the groups' retryMaxTimes are in the broker's subscriptionGroup.json, where the proxy reads them."""
    run, _, _ = grpc_run
    table = json.loads((run / "store" / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert {g: table[g]["retryMaxTimes"] for g in RETRY_MAX_TIMES} == RETRY_MAX_TIMES
    records = read_table(run, "commitlog").to_pylist()
    by_msg_id = {r["msg_id"]: r for r in records}
    attempts = read_table(run, "consume_attempts").to_pylist()
    for group, max_times in RETRY_MAX_TIMES.items():
        dlq = [r for r in records if r["topic"] == f"%DLQ%{group}"]
        assert dlq, group
        for rec in dlq:
            origin = by_msg_id[rec["origin_msg_id"]]
            assert origin["topic"] == rec["retry_topic"]
            assert origin["topic"].startswith(f"%RETRY%{group}_")
            assert origin["reconsume_times"] == max_times + 1 and rec["reconsume_times"] == max_times + 2
            seen = [a for a in attempts if a["group"] == group and a["uniq_key"] == rec["uniq_key"]]
            assert [a["reconsume_times"] for a in seen] == list(range(max_times + 1))
            assert all(a["status"] != "CONSUME_SUCCESS" for a in seen)
            assert origin["msg_id"] not in {a["msg_id"] for a in seen}


def test_each_client_writes_its_own_failure(grpc_run):
    """A push consumer's failure is a one-offset checkpoint whose invisible time is the policy's
    delay for that attempt (a 1 s one only in the revive topic), its receive 60 s; a
    SimpleConsumer's failure writes nothing (POP_NOT_ACKED) and its receive uses its own 5 s."""
    run, _, _ = grpc_run
    evidence = read_table(run, "pop_evidence").to_pylist()
    attempts = read_table(run, "consume_attempts").to_pylist()
    outcomes = {(a["group"], a["outcome"]) for a in attempts}
    assert outcomes == {(PUSH, "ACKED"), (PUSH, "POP_DELAYED"), (SIMPLE, "ACKED"), (SIMPLE, "POP_NOT_ACKED")}
    push_cks = [e for e in evidence if e["group"] == PUSH and e["kind"] == "ck"]
    receive = {e["invisible_ms"] for e in push_cks if len(e["offsets"]) > 1}
    assert receive == {60_000}
    delayed = sorted(a["reconsume_times"] for a in attempts if a["group"] == PUSH and a["outcome"] == "POP_DELAYED")
    failure_cks = sorted((e["pop_ts"], e["invisible_ms"]) for e in push_cks
                         if e["stage"] == "revive" and e["invisible_ms"] != 60_000)
    assert sorted(i for _, i in failure_cks) == sorted(PUSH_DELAYS_MS[rt + 1] for rt in delayed)
    assert {e["stage"] for e in push_cks if e["invisible_ms"] == 1000} == {"revive"}
    assert {e["invisible_ms"] for e in evidence if e["group"] == SIMPLE and e["kind"] == "ck"} == {5000}


def test_every_blocking_check_passes_and_final_states_equal_the_models(grpc_run):
    """Every blocking warehouse check passes; each message's final_state is the model's (CONSUMED
    after an ack, DLQ when the proxy dead-lettered it), a dead-lettered message's origin topic is
    its real topic and its msgId the published record's (in message_lineage and dlq_messages), and its path ends in the group's DLQ."""
    run, db, _ = grpc_run
    dlq_keys = {(r["topic"][len("%DLQ%"):], r["uniq_key"]) for r in read_table(run, "commitlog").to_pylist()
                if r["topic"].startswith("%DLQ%")}
    con = duckdb.connect(str(db), read_only=True)
    try:
        outcomes = run_checks(con, INVARIANTS, run_id="grpc-small")
        assert all(o.passed for o in outcomes), {o.check.name: o.examples for o in outcomes if not o.passed}
        truth = {}
        for group, key, outcome in con.execute(
                'SELECT "group", uniq_key, outcome FROM consume_attempts ORDER BY end_ts, start_ts').fetchall():
            truth[(group, key)] = STATE_OF_LAST_OUTCOME[outcome]
        truth.update(dict.fromkeys(dlq_keys, "DLQ"))
        lineage = {(g, k): (s, t, f) for g, k, s, t, f in con.execute(
            'SELECT "group", message_key, final_state, origin_topic, final_topic FROM message_lineage').fetchall()}
        dlq_origins = set(con.execute('SELECT "group", origin_topic FROM dlq_messages').fetchall())
        published = con.execute(
            'SELECT count(*) FROM dlq_messages d JOIN commitlog c ON c.msg_id = d.origin_msg_id '
            'WHERE c.topic = d.origin_topic AND c.uniq_key = d.uniq_key').fetchone()[0]
    finally:
        con.close()
    assert {s for (g, _), (s, _, _) in lineage.items() if g == PUSH} == {"CONSUMED", "DLQ"}
    assert {s for (g, _), (s, _, _) in lineage.items() if g == SIMPLE} == {"CONSUMED", "DLQ"}
    differ = {k: (truth.get(k, "UNCONSUMED"), s) for k, (s, _, _) in lineage.items() if truth.get(k) != s}
    assert differ == {}
    for (group, _), (state, origin, final) in lineage.items():
        assert origin == {PUSH: "PushTopic", SIMPLE: "SimpleTopic"}[group]
        if state == "DLQ":
            assert final == f"%DLQ%{group}"
    assert len(lineage) == 90
    # dlq_messages (and so resend-plan) reads the POP retry topic in RETRY_TOPIC back to its origin.
    assert dlq_origins == {(PUSH, "PushTopic"), (SIMPLE, "SimpleTopic")}
    assert published == 7  # each origin msgId is the published record's, as in message_lineage


def test_the_same_seed_gives_the_same_grpc_run(grpc_run, tmp_path):
    """Simulating again with the same seed gives the same rows in every table; another seed differs."""
    run, _, _ = grpc_run
    assert_same_seed_same_rows(run, GRPC_SMALL, tmp_path, 8)


GRPC_GROUP = """name: t
broker: {semantics: "5.x"}
topics:
  - {name: T, queues: 1}
groups:
  - name: g
    subscribe: [T]
    mode: pop
    client: grpc-push
    retry_max_times: 3
producers:
  - {topic: T, messages: 10}
"""


def test_a_grpc_groups_keys_load_with_their_defaults():
    """client, retry_max_times and retry_policy load; a push group without a policy gets the
    customized delay-level table, an exponential one its three values."""
    g = load_scenario_text(GRPC_GROUP, source="s.yaml").groups[0]
    assert (g.client, g.retry_max_times, g.retry_policy) == ("grpc-push", 3, RetryPolicy())
    text = GRPC_GROUP + "    retry_policy: {type: exponential, initial: 1s, max: 3s, multiplier: 2}\n"
    text = text.replace("producers:\n  - {topic: T, messages: 10}\n", "") + "producers:\n  - {topic: T}\n"
    assert load_scenario_text(text, source="s.yaml").groups[0].retry_policy == RetryPolicy(
        EXPONENTIAL, initial_ms=1000, max_ms=3000, multiplier=2.0)
    text = GRPC_GROUP.replace("    retry_max_times: 3\n", "    retry_policy: {type: customized, delays: [2s, 1s]}\n")
    assert load_scenario_text(text, source="s.yaml").groups[0].retry_policy == RetryPolicy(
        CUSTOMIZED, delays_ms=(2000, 1000))
    simple = GRPC_GROUP.replace("grpc-push", "grpc-simple").replace("retry_max_times: 3\n", "invisible_time: 5s\n")
    g = load_scenario_text(simple, source="s.yaml").groups[0]
    assert (g.client, g.retry_max_times, g.invisible_ms) == ("grpc-simple", 16, 5000)


@pytest.mark.parametrize(("old", "new", "where", "says"), [
    ("    mode: pop\n", "", "s.yaml:8: groups[0].client: ", "is a POP group's setting"),
    ('broker: {semantics: "5.x"}\n', "", "s.yaml:7: groups[0].mode: ", "needs broker semantics '5.x'"),
    ("client: grpc-push", "client: grpc", "s.yaml:9: groups[0].client: ", "must be one of remoting"),
    ("    client: grpc-push\n", "", "s.yaml:9: groups[0].retry_max_times: ", "is a gRPC group's setting"),
    ("    retry_max_times: 3\n", "    max_reconsume_times: 3\n", "s.yaml:10: groups[0].max_reconsume_times: ",
     "a gRPC group has retry_max_times"),
    ("    retry_max_times: 3\n", "    retry_delays: [1s]\n", "s.yaml:10: groups[0].retry_delays: ",
     "a gRPC group has retry_policy"),
    ("    retry_max_times: 3\n", "    invisible_time: 5s\n", "s.yaml:10: groups[0].invisible_time: ",
     "the proxy's 60 s"),
    ("client: grpc-push\n    retry_max_times: 3\n", "client: grpc-simple\n    retry_policy: {type: customized}\n",
     "s.yaml:10: groups[0].retry_policy: ", "a gRPC push consumer's setting"),
    ("    retry_max_times: 3\n", "    retry_policy: {type: linear}\n", "s.yaml:10: groups[0].retry_policy.type: ",
     "must be one of customized"),
    ("    retry_max_times: 3\n", "    retry_policy: {type: exponential, initial: 1s, max: 3s}\n",
     "s.yaml:10: groups[0].retry_policy.multiplier: ", "is required for an exponential policy"),
    ("    retry_max_times: 3\n", "    retry_policy: {type: customized, initial: 1s}\n",
     "s.yaml:10: groups[0].retry_policy.initial: ", "unknown key"),
    ("    retry_max_times: 3\n", "    retry_policy: {type: exponential, initial: 5s, max: 3s, multiplier: 2}\n",
     "s.yaml:10: groups[0].retry_policy.max: ", "must not be less than initial"),
    ("    retry_max_times: 3\n", "    retry_policy: {type: exponential, initial: 1s, max: 3s, multiplier: 0.5}\n",
     "s.yaml:10: groups[0].retry_policy.multiplier: ", "is outside 1..100"),
    ("    retry_max_times: 3\n", "    retry_policy: {type: customized, delays: []}\n",
     "s.yaml:10: groups[0].retry_policy.delays: ", "needs at least one delay"),
    ("retry_max_times: 3", "retry_max_times: -1", "s.yaml:10: groups[0].retry_max_times: ", ""),
])
def test_a_misused_grpc_key_is_refused_at_its_line(old, new, where, says):
    """Each misuse of a gRPC group's keys is refused at load, naming the file, the line and the key."""
    assert old in GRPC_GROUP
    err = str(scenario_error(GRPC_GROUP.replace(old, new)))
    assert err.startswith(where), err
    assert says in err, err


def _rewrite_dlq(run_dir, change) -> None:
    """Apply ``change(row)`` to the first DLQ record of a run directory's commit-log table."""
    path = next((run_dir / "parquet" / "commitlog").glob("*.parquet"))
    data = pq.read_table(path)
    rows = data.to_pylist()
    i = next(i for i, r in enumerate(rows) if r["topic"].startswith("%DLQ%"))
    rows[i] = change(dict(rows[i]))
    pq.write_table(pa.Table.from_pylist(rows, schema=data.schema), path)


@pytest.mark.parametrize(("field", "says"), [
    ("origin_msg_id", "ORIGIN_MESSAGE_ID names no POP retry of the message"),
    ("retry_topic", "RETRY_TOPIC changed along a chain"),
])
def test_a_proxy_dlq_record_pointing_elsewhere_breaks_the_stable_pointers(grpc_run, tmp_path, field, says):
    """A gRPC group's DLQ record must name a POP retry of its message and the POP retry topic: one
    naming the published record or the real topic instead is a violation."""
    run, _, _ = grpc_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    records = read_table(run, "commitlog").to_pylist()
    dlq = next(r for r in records if r["topic"].startswith("%DLQ%"))
    real = next(r for r in records if r["uniq_key"] == dlq["uniq_key"] and r["retry_topic"] is None
                and not r["topic"].startswith("%"))
    value = real["msg_id"] if field == "origin_msg_id" else real["topic"]
    _rewrite_dlq(copy, lambda row: dict(row, **{field: value}))
    found = invariants.check_stable_pointers(invariants.RunData(copy))
    assert [(v.message, v.key) for v in found] == [(says, dlq["uniq_key"])]
