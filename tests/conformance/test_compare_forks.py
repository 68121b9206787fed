"""The audit-vs-clients comparison of a forked chain, without a real broker: a real DuckDB holding
the few columns the comparison reads, with the rows a real 4.9.4 store gives for a message whose
broker was killed while it waited in the schedule: a restarted schedule put its first retry again,
each copy failed and was sent back, so every later attempt was handed out twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from compare_rows import real_run

from broker_core.sim.scenario import load_scenario
from conformance import compare

ROOT = Path(__file__).resolve().parents[2]
LONG = ROOT / "scenarios" / "conformance-long.yaml"
REAL = "conformance-long-real"
KEY = "0A0001024C036A74CBCF0000000000F0"
GROUP = "dlq-service"  # at most 4 retries
RETRY, SCHED = f"%RETRY%{GROUP}", "SCHEDULE_TOPIC_XXXX"
# PUBLISH; its send-back and retry 1, and the retry's copy; from then on two of everything.
HOPS = [("PUBLISH", "DlqTopic", 0, 0), ("SCHEDULE", SCHED, 3, 1), ("RETRY", RETRY, 3, 1), ("RETRY", RETRY, 3, 1),
        *[hop for n in (2, 3, 4) for hop in (("SCHEDULE", SCHED, n + 2, n),) * 2 + (("RETRY", RETRY, n + 2, n),) * 2],
        ("DLQ", f"%DLQ%{GROUP}", 0, 5), ("DLQ", f"%DLQ%{GROUP}", 0, 5)]
# 1 RETRY copy at count 1; at counts 2..4 a SCHEDULE and a RETRY copy each; one DLQ copy.
FORKS = 1 + 2 * 3 + 1
HANDED = 1 + 2 * 4  # the PUBLISH, and every retry record


@pytest.mark.parametrize("retries, forks, disagree", [
    (4, FORKS, []),
    (8, FORKS, ["retries"]),  # the RETRY records counted, not the depth
    (4, 0, ["forks"]),  # the copies not seen
])
def test_a_forked_chain_agrees_by_its_depth_and_its_copies(retries, forks, disagree):
    """The clients saw 4 attempts from the retry topic (each handed out twice from count 2 on) and
    sent 9 failures back: the audit agrees when its retries are the chain's depth, 4, and its forks
    the copies those deliveries and send-backs made, 8."""
    con, attempts = real_run(REAL, KEY, GROUP, HOPS, retries, ["RECONSUME_LATER"] * HANDED,
                             ["SENT_BACK"] * HANDED, forks=forks)
    result = compare.lineage_vs_clients(con, load_scenario(LONG), attempts, [REAL])
    assert result["messages"] == 1
    assert [e["what"] for e in result["examples"]] == disagree, result["examples"]
    if not disagree:
        assert (result["forked_messages"], result["fork_copies"], result["deepest_forked_retries"]) == (1, FORKS, 4)


SHORT = ROOT / "scenarios" / "conformance.yaml"
NOTICE = "notice-service"  # at most 2 retries
N_RETRY = f"%RETRY%{NOTICE}"


@pytest.mark.parametrize("reset_count, what, explained", [
    (0, [], {"retry_count_lost_on_resend": 1}),
    (3, ["retries"], {}),  # the same repeat with no record at count 0: nothing explains it
])
def test_a_retry_whose_count_a_resend_lost_is_explained_not_agreed(reset_count, what, explained):
    """A real 4.9.4 run's chain (broker-a killed mid-run): retried at count 1, the client's own send
    of the next retry stored at count 0 (its producer's second try carried no count), then 1 and
    2, consumed at 2. The audit's depth (2, the deepest count) and copies (2) cannot match what
    the clients saw (counts 1, 0, 1, 2 handed out; 3 and 3): with the record at count 0 the
    difference is explained; the same chain without it disagrees."""
    hops = [("PUBLISH", "NoticeTopic", 0, 0), ("SCHEDULE", SCHED, 3, 1), ("RETRY", N_RETRY, 3, 1),
            ("SCHEDULE", SCHED, 4, reset_count), ("RETRY", N_RETRY, 4, reset_count),
            ("SCHEDULE", SCHED, 3, 1), ("RETRY", N_RETRY, 3, 1), ("SCHEDULE", SCHED, 4, 2), ("RETRY", N_RETRY, 4, 2)]
    con, attempts = real_run("conformance-real", KEY, NOTICE, hops, 2,
                             ["RECONSUME_LATER"] * 4 + ["CONSUME_SUCCESS"],
                             ["SENT_BACK", "SENT_BACK_BY_CLIENT", "SENT_BACK", "SENT_BACK", "ACKED"],
                             forks=2, final_state="CONSUMED")
    result = compare.lineage_vs_clients(con, load_scenario(SHORT), attempts, ["conformance-real"])
    assert [e["what"] for e in result["examples"]] == what, result["examples"]
    assert result["explained"] == explained


ORDER = "order-service"
O_RETRY = f"%RETRY%{ORDER}"


@pytest.mark.parametrize("client_built, in_outage, what, explained", [
    ({2, 4}, True, [], {"send_back_reply_lost_in_outage": 1}),
    ({2, 4}, False, ["forks"], {}),  # no outage: no reply was lost, the copy is unexplained
    (set(), True, ["forks"], {}),  # no retry the client built: nothing in the store explains it
])
def test_a_copy_the_client_sent_after_a_lost_send_back_reply_is_explained(client_built, in_outage, what, explained):
    """A real 4.9.4 DLedger run: a send-back stored by the master 23 ms before it was killed; its
    reply died with it, so the client sent the retry again itself 5 s later (the record carries
    its CONSUME_START_TIME), and both retries were consumed. The clients' log shows one send-back
    and two records at count 1 (1 copy); the lineage counts the SCHEDULE and RETRY copies (2)."""
    hops = [("PUBLISH", "OrderTopic", 0, 0), ("SCHEDULE", SCHED, 3, 1), ("SCHEDULE", SCHED, 3, 1),
            ("RETRY", O_RETRY, 3, 1), ("RETRY", O_RETRY, 3, 1)]
    con, attempts = real_run("conformance-real", KEY, ORDER, hops, 1,
                             ["RECONSUME_LATER", "CONSUME_SUCCESS", "CONSUME_SUCCESS"],
                             ["SENT_BACK", "ACKED", "ACKED"], forks=2, final_state="CONSUMED",
                             client_built=frozenset(client_built))
    result = compare.lineage_vs_clients(con, load_scenario(SHORT), attempts, ["conformance-real"],
                                        in_outage={KEY} if in_outage else set())
    assert [e["what"] for e in result["examples"]] == what, result["examples"]
    assert result["explained"] == explained


@pytest.mark.parametrize("in_outage, stored_twice, what, explained", [
    (True, True, [], {"send_back_reply_lost_in_outage": 1}),
    (False, True, ["forks"], {}),  # no outage: no broker died before its reply
    (True, False, [], {}),  # an audit of 4 copies agrees: a failed send-back is no copy of the log's
])
def test_send_backs_that_failed_as_the_client_saw_them_are_unsettled_not_copies(in_outage, stored_twice,
                                                                                 what, explained):
    """A real 5.3.3 DLedger run (the master killed at 4 s): a poison message's send-back from its
    first delivery failed as the client saw it (the master died), so the client consumed the same
    record again itself at counts 1 and 2 (ConsumeMessageConcurrentlyService's msgBackFailed); the
    second of those was sent back to the new master. The master had stored the first send-back
    before it died, so both chains ran: SCHEDULE, RETRY, SCHEDULE, RETRY, DLQ twice (5 copies).
    The clients' log counts 4 copies it can settle (the second chain's retries and send-backs) and
    2 send-backs it cannot (the failed ones): 5 lies within, and only an outage explains it."""
    one = [("SCHEDULE", SCHED, 3, 1), ("RETRY", N_RETRY, 3, 1), ("SCHEDULE", SCHED, 4, 2), ("RETRY", N_RETRY, 4, 2),
           ("DLQ", f"%DLQ%{NOTICE}", 0, 3)]
    hops = [("PUBLISH", "NoticeTopic", 0, 0), *one, *one]
    con, attempts = real_run("conformance-real", KEY, NOTICE, hops, 2, ["RECONSUME_LATER"] * 5, ["SENT_BACK"] * 5,
                             forks=5 if stored_twice else 4)
    # The first delivery's record, consumed again by its client at counts 1 and 2.
    attempts += [{**attempts[0], "reconsume_times": n} for n in (1, 2)]
    result = compare.lineage_vs_clients(con, load_scenario(SHORT), attempts, ["conformance-real"],
                                        in_outage={KEY} if in_outage else set())
    assert [e["what"] for e in result["examples"]] == what, result["examples"]
    assert result["explained"] == explained


@pytest.mark.parametrize("in_outage, forks, what, explained", [
    (True, 7, [], {"client_send_lost_in_outage": 1}),
    (False, 7, ["forks"], {}),  # no outage: the client's own send had no reason to fail
    (True, 6, ["forks"], {}),  # two copies short, the log has one own send that could have failed
    (True, 8, [], {}),  # the own send stored: the audit agrees
])
def test_a_clients_own_send_at_a_broker_kill_may_be_no_copy(in_outage, forks, what, explained):
    """A real 4.9.4 run (`broker-a@1500ms-16s`, make test-long): broker-a refused a retry's send-back
    (the scenario's send_back_failure) 9 ms before it was killed, so the client sent the retry
    itself; that send met the dead broker, and the local retry the client queued instead was dropped
    with broker-a's queue. After the restart broker-a had lost the committed offsets: it handed the
    message and the retry out again, and its schedule re-put the first send-back. The store holds
    7 copies; the clients' log, which records the refusal and not the send's result, implies 8."""
    hops = [("PUBLISH", "NoticeTopic", 0, 0), ("SCHEDULE", SCHED, 3, 1), ("RETRY", N_RETRY, 3, 1),
            ("RETRY", N_RETRY, 3, 1), ("SCHEDULE", SCHED, 4, 2), ("SCHEDULE", SCHED, 4, 2), ("SCHEDULE", SCHED, 3, 1),
            ("RETRY", N_RETRY, 3, 1), ("SCHEDULE", SCHED, 4, 2), ("RETRY", N_RETRY, 4, 2), ("RETRY", N_RETRY, 4, 2),
            ("RETRY", N_RETRY, 4, 2)]
    con, _ = real_run("conformance-real", KEY, NOTICE, hops, 2, ["CONSUME_SUCCESS"] * 7, ["ACKED"] * 7,
                      forks=forks, final_state="CONSUMED")

    def call(hop: int, times: int, status: str, outcome: str) -> dict:
        topic = hops[hop][1]
        return {"uniq_key": KEY, "group": NOTICE, "model": "CLUSTERING", "queue_topic": topic, "queue_id": 0,
                "queue_offset": hop, "phys_offset": hop * 100, "reconsume_times": times, "status": status,
                "outcome": outcome, "start_ts": len(calls), "consumer_id": "c0", "msg_id": f"M{hop}"}

    calls: list[dict] = []
    for hop, times, status, outcome in [
            (0, 0, "RECONSUME_LATER", "SENT_BACK"), (2, 1, "RECONSUME_LATER", "SENT_BACK_BY_CLIENT"),
            (3, 1, "RECONSUME_LATER", "SENT_BACK"), (2, 1, "RECONSUME_LATER", "SENT_BACK"),
            (0, 0, "RECONSUME_LATER", "SENT_BACK"), (7, 1, "RECONSUME_LATER", "SENT_BACK"),
            (9, 2, "CONSUME_SUCCESS", "ACKED"), (10, 2, "CONSUME_SUCCESS", "ACKED"),
            (11, 2, "CONSUME_SUCCESS", "ACKED")]:
        calls.append(call(hop, times, status, outcome))
    result = compare.lineage_vs_clients(con, load_scenario(SHORT), calls, ["conformance-real"],
                                        in_outage={KEY} if in_outage else set())
    assert [e["what"] for e in result["examples"]] == what, result["examples"]
    assert result["explained"] == explained


SEQ = "seq-service"  # orderly: a failure is retried locally


@pytest.mark.parametrize("group, outcome, in_outage, stored_for, what, explained", [
    (SEQ, "LOCAL_RETRY", True, None, [], {"retry_held_by_client_in_outage": 1}),
    (SEQ, "LOCAL_RETRY", False, None, ["final_state"], {}),  # no outage: the client had its queue
    # A schedule record bound for the group's retry topic that the lineage did not chain: a retry
    # was stored, so the audit's UNCONSUMED is not the store's word.
    (SEQ, "LOCAL_RETRY", True, SEQ, ["final_state"], {}),
    (SEQ, "LOCAL_RETRY", True, NOTICE, [], {"retry_held_by_client_in_outage": 1}),  # another group's retry
    (NOTICE, "SENT_BACK", True, None, [], {"retry_held_by_client_in_outage": 1}),
    (NOTICE, "SENT_BACK", True, NOTICE, ["final_state"], {}),
    # A listener that asked for the DLQ (delay level -1): no DLQ record reached a store either.
    (NOTICE, "DLQ_REQUESTED", True, None, [], {"retry_held_by_client_in_outage": 1}),
    (NOTICE, "DLQ_REQUESTED", False, None, ["final_state"], {}),
])
def test_a_failure_whose_retry_no_store_holds_is_unconsumed_in_an_outage(group, outcome, in_outage, stored_for,
                                                                         what, explained):
    """A real 4.9.4 run (`broker-a@1500ms-16s`, make test-long): an orderly client failed a message
    of broker-a's queue as broker-a was killed and retried it locally; its rebalance dropped the
    queue, with the local retry, and the run ended before the restarted broker handed the message
    out again. The store holds the message's record unconsumed and no retry of it: the audit says
    UNCONSUMED where the clients' log, ending in a failure, says RETRYING. A concurrent client whose
    send-back (to the retry topic, or to the DLQ a listener asked for) and own send both met the
    killed broker leaves the same. Only in an outage, and only where no store holds a retry or DLQ
    record of the message for the group, is it explained."""
    topic = "SeqTopic" if group == SEQ else "NoticeTopic"
    status = ("SUSPEND_CURRENT_QUEUE_A_MOMENT" if group == SEQ else
              "DLQ_REQUESTED" if outcome == "DLQ_REQUESTED" else "RECONSUME_LATER")
    con, attempts = real_run("conformance-real", KEY, group, [("PUBLISH", topic, 0, 0)], 0, [status],
                             ["SENT_BACK" if outcome == "DLQ_REQUESTED" else outcome], final_state="UNCONSUMED")
    if stored_for:
        con.execute("INSERT INTO commitlog VALUES ('conformance-real', 'broker-b', 0, MAP(['REAL_TOPIC'], [?]), "
                    "'B0', ?, ?, 100)", [f"%RETRY%{stored_for}", SCHED, KEY])
    result = compare.lineage_vs_clients(con, load_scenario(SHORT), attempts, ["conformance-real"],
                                        in_outage={KEY} if in_outage else set())
    assert [e["what"] for e in result["examples"]] == what, result["examples"]
    assert result["explained"] == explained
    if what:
        # The disagreement carries both sides, for a failure read from a log alone.
        assert result["examples"][0]["trail"] == {
            "store": [f"PUBLISH {topic}@broker-a q0 r0"],
            "clients": [f"0 c0 {topic} q0#0 r0 {status} {attempts[0]['outcome']}"]}


def test_a_failed_checks_first_violation_carries_its_trail():
    """A blocking check that fails on a real run names a message; the report gives that message's
    trail, as the store (with each hop's level, store time and branch) and the clients' log hold
    it, so a failure is read from a CI log alone. A check that passed, or does not block, has none."""
    con, attempts = real_run(REAL, KEY, GROUP, HOPS[:3], 1, ["RECONSUME_LATER"] * 2, ["SENT_BACK"] * 2)
    con.execute("UPDATE message_hops SET store_ts = make_timestamp(1000000 + phys_offset * 1000)")
    con.execute("UPDATE commitlog SET properties = map_concat(properties, MAP(['ORIGIN_MESSAGE_ID'], ['7F00AB0001'])) "
                "WHERE phys_offset > 0")
    first = {"message_key": KEY, "group": GROUP}
    checks = {REAL: {"hop_grammar_valid": {"blocking": True, "passed": False, "first_message": first},
                     "duplicate_rate_below_max": {"blocking": False, "passed": False, "first_message": first},
                     "lineage_matches_commitlog": {"blocking": True, "passed": True, "first_message": None}}}
    compare.check_trails(con, attempts, checks, [REAL])
    assert checks[REAL]["hop_grammar_valid"]["trail"] == {
        "store": ["PUBLISH DlqTopic@broker-a q0 r0 t1000", f"SCHEDULE {SCHED}@broker-a q0 r1 L3 t1100 oAB0001",
                  f"RETRY {RETRY}@broker-a q0 r1 L3 t1200 oAB0001"],
        "clients": ["0 c0 DlqTopic q0#0 r0 RECONSUME_LATER SENT_BACK",
                    f"1 c0 {RETRY} q0#1 r1 RECONSUME_LATER SENT_BACK"]}
    assert [name for name, c in checks[REAL].items() if "trail" in c] == ["hop_grammar_valid"]


@pytest.mark.parametrize("in_outage, killed, what, explained", [
    (True, {"broker-a"}, [], {"schedule_reput_after_broker_crash": 1}),
    (True, set(), ["forks"], {}),  # no broker of its chain was killed
    (False, {"broker-a"}, ["forks"], {}),
])
def test_a_dlq_the_restarted_schedule_put_again_is_a_copy_no_client_sees(in_outage, killed, what, explained):
    """A real 4.9.4 run (`broker-a@6s-20s`): a poison message's client sent its second retry
    itself (its send-back refused), at count 2, the maximum, so the broker stored it as a schedule
    record bound for the DLQ; the schedule put it into %DLQ% 3 s later. broker-a was killed 2 s
    after that and restarted; its schedule resumed from the delay offsets it had persisted before
    and put the record into %DLQ% again. The lineage counts the second DLQ record as a copy (1
    fork); the clients, who are never handed a DLQ record, saw none. Only in an outage of the
    chain's broker is it explained."""
    dlq = ("DLQ", f"%DLQ%{NOTICE}", 4, 2)
    hops = [("PUBLISH", "NoticeTopic", 0, 0), ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 1), ("RETRY", N_RETRY, 3, 1),
            ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 4, 2), dlq, dlq]
    con, attempts = real_run("conformance-real", KEY, NOTICE, hops, 1, ["RECONSUME_LATER"] * 2,
                             ["SENT_BACK", "SENT_BACK_BY_CLIENT"], forks=1, final_state="DLQ")
    result = compare.lineage_vs_clients(con, load_scenario(SHORT), attempts, ["conformance-real"],
                                        in_outage={KEY} if in_outage else set(), killed=frozenset(killed))
    assert [e["what"] for e in result["examples"]] == what, result["examples"]
    assert result["explained"] == explained
