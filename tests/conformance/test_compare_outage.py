"""The audit-vs-clients comparison of a message consumed before its broker was killed, without a
real broker: the store's committed offset lost the consume, so the audit's UNCONSUMED is what the
store says (explained, offset_lost_in_broker_crash), never a disagreement the store cannot show."""

from __future__ import annotations

from pathlib import Path

import pytest
from compare_rows import real_run

from broker_core.sim.scenario import load_scenario
from conformance import compare

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "conformance.yaml"
RUN = "conformance-real"
KEY = "0A0001014C8C3709DA29000000000000"
GROUP = "seq-service"


@pytest.mark.parametrize("committed, in_outage, explained", [
    (0, True, True),      # committed at the record: not past it
    (None, True, True),   # no offset of the group on that queue: the broker died before persisting any
    (1, True, False),     # committed past it: the store says consumed, so UNCONSUMED is the audit's error
    (None, False, False),  # no outage: nothing lost the commit
])
def test_a_consume_the_killed_broker_never_persisted_is_explained(committed, in_outage, explained):
    con, attempts = real_run(RUN, KEY, GROUP, [("PUBLISH", "SeqTopic", 0, 0)], 0,
                             ["CONSUME_SUCCESS"], ["ACKED"], final_state="UNCONSUMED")
    con.execute("""CREATE TABLE consumer_offsets (run_id VARCHAR, broker VARCHAR, "group" VARCHAR,
                   topic VARCHAR, queue_id INT, "offset" BIGINT)""")
    con.execute("INSERT INTO consumer_offsets VALUES (?, 'broker-a', 'other-service', 'SeqTopic', 0, 9)", [RUN])
    if committed is not None:
        con.execute("INSERT INTO consumer_offsets VALUES (?, 'broker-a', ?, 'SeqTopic', 0, ?)",
                    [RUN, GROUP, committed])
    result = compare.lineage_vs_clients(con, load_scenario(SCENARIO), attempts, [RUN],
                                        in_outage={KEY} if in_outage else set())
    if explained:
        assert (result["disagree"], result["explained"]) == (0, {"offset_lost_in_broker_crash": 1})
    else:
        assert [e["what"] for e in result["examples"]] == ["final_state"], result["examples"]


@pytest.mark.parametrize("committed, explained", [
    (None, True),   # the killed broker persisted no offset of the retry topic
    (2, False),     # committed past the retry: the store says consumed, so RETRYING is the audit's error
])
def test_a_retry_consumed_just_before_the_kill_is_explained_as_a_lost_offset(committed, explained):
    """order-service consumed its retry successfully 227 ms before broker-a was killed (a by-hand
    run, --broker-outage broker-a@1500ms, no restart): the broker had not yet persisted the commit, so
    its store holds the retry unconsumed and the chain is RETRYING, where the clients saw it CONSUMED."""
    key, group = "0A0001024C036A74CBCF000000640002", "order-service"
    con, attempts = real_run(RUN, key, group, [("PUBLISH", "OrderTopic", 0, 0),
                                               ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 1),
                                               ("RETRY", "%RETRY%order-service", 3, 1)], 1,
                             ["EXCEPTION", "CONSUME_SUCCESS"], ["SENT_BACK", "ACKED"], final_state="RETRYING")
    con.execute("""CREATE TABLE consumer_offsets (run_id VARCHAR, broker VARCHAR, "group" VARCHAR,
                   topic VARCHAR, queue_id INT, "offset" BIGINT)""")
    con.execute("INSERT INTO consumer_offsets VALUES (?, 'broker-a', ?, 'OrderTopic', 0, 1)", [RUN, group])
    if committed is not None:
        con.execute("INSERT INTO consumer_offsets VALUES (?, 'broker-a', ?, '%RETRY%order-service', 0, ?)",
                    [RUN, group, committed])
    result = compare.lineage_vs_clients(con, load_scenario(SCENARIO), attempts, [RUN], in_outage={key})
    if explained:
        assert (result["disagree"], result["explained"]) == (0, {compare.OFFSET_LOST: 1})
    else:
        assert [e["what"] for e in result["examples"]] == ["final_state"], result["examples"]


@pytest.mark.parametrize("stranded, in_outage, explained", [
    ({"broker-a"}, True, True),   # killed, never started again: its schedule record waits forever
    (set(), True, False),         # the broker came back: its schedule would have put the record out
    ({"broker-a"}, False, False),  # no outage touched the message
])
def test_a_schedule_record_stranded_on_a_killed_broker_is_explained(stranded, in_outage, explained):
    """notice-service's poison message failed its retry 10 ms before broker-a was killed; the client's
    own send of it (the broker's send-back failed) reached broker-a, which routed it to the schedule
    on its way to the DLQ and died. The store ends in that SCHEDULE (RETRYING); the clients' log
    says DLQ. Explained only where broker-a never came back and an outage touched the message."""
    key, group = "0A00010381C00797E7BE00000226000B", "notice-service"
    con, attempts = real_run(RUN, key, group, [("PUBLISH", "NoticeTopic", 0, 0),
                                               ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 1),
                                               ("RETRY", "%RETRY%notice-service", 3, 1),
                                               ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 4, 2)], 1,
                             ["RECONSUME_LATER", "RECONSUME_LATER"], ["SENT_BACK", "SENT_BACK_BY_CLIENT"],
                             final_state="RETRYING", client_built=frozenset({3}))
    result = compare.lineage_vs_clients(con, load_scenario(SCENARIO), attempts, [RUN],
                                        in_outage={key} if in_outage else set(), stranded=frozenset(stranded))
    if explained:
        assert (result["disagree"], result["explained"]) == (0, {compare.SCHEDULE_STRANDED: 1})
    else:
        assert [e["what"] for e in result["examples"]] == ["final_state"], result["examples"]


def test_only_a_broker_killed_for_good_with_no_replica_strands_its_records():
    """A plain kill without a restart strands a broker; a restarted one does not, nor a DLedger or
    controller-mode kill (the fault names the killed node: another node becomes the master)."""
    kill = {"kind": "broker_kill", "broker": "broker-a", "at_ms": 1500}
    assert compare.stranded_brokers([kill]) == {"broker-a"}
    assert compare.stranded_brokers([kill, {"kind": "broker_restart", "broker": "broker-a"}]) == set()
    assert compare.stranded_brokers([{**kill, "node": "broker-a-n0"}]) == set()
    assert compare.stranded_brokers([kill, {"kind": "broker_kill", "broker": "broker-b"},
                                     {"kind": "broker_restart", "broker": "broker-b"}]) == {"broker-a"}
