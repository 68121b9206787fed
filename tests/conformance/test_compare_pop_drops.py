"""A remoting POP group's records its client popped and never handed to a listener, without a real
broker: the clients' own log lines (kept from a real 5.5.1 run of scenarios/conformance-5x.yaml with
broker-a killed at 3 s and restarted at 12 s) are read, matched to the store's popped records, and a
chain whose extra deliveries, retries and end are those records is explained
(pop_dropped_by_client); a chain with one record more than the log names still disagrees."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from compare_rows import real_run

from broker_core.sim.scenario import load_scenario
from conformance import compare
from conformance.client_logs import read_pop_evidence

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "conformance-5x.yaml"
RUN = "conformance-5x-real"
GROUP = "pop-service"
RETRY = "%RETRY%pop-service_PopTopic"
# Lines as the 5.5.1 client wrote them (GMT+8), the acked message's body cut short.
DROPPED = ("2026-11-29 12:50:20 INFO ConsumeMessageThread_2 - the message queue not be able to consume, "
           "because it's dropped(pop). group=pop-service MessageQueue [topic=PopTopic, brokerName=broker-a, "
           "queueId=-1]\n")
ACKED = ("2026-11-29 12:50:27 INFO NettyClientPublicExecutor_2 - Reconsume times has reached 3, so ack "
         "msg=MessageExt [brokerName=broker-a, queueId=0, storeSize=395, queueOffset=22, sysFlag=0, "
         "bornTimestamp=1795927790331, storeTimestamp=1795927827213, storeHost=/127.0.0.1:21311, "
         "msgId=7F0000010000533F0000000000032C6E, commitLogOffset=207982, reconsumeTimes=3, "
         "toString()=Message{topic='PopTopic', flag=0, properties={ORIGIN_GROUP=pop-service}, body=[112]}]\n")
TIMED_OUT = ("2026-11-29 12:50:31,004 INFO ConsumeMessageThread_1 - the pop message time out so abort consume. "
             "popTime=1795927830500 invisibleTime=5000, group=pop-service MessageQueue [topic=PopTopic, "
             "brokerName=broker-b, queueId=-1]\n")
DROP_MS = int(datetime(2026, 11, 29, 4, 50, 20, tzinfo=UTC).timestamp() * 1000)


def test_the_clients_log_lines_are_read_at_gmt8(tmp_path):
    (tmp_path / "driver-client-broker_default.log").write_text(DROPPED + ACKED + TIMED_OUT + "unrelated\n")
    (tmp_path / "broker-a-broker.log").write_text(DROPPED)  # a broker's own log: not a client's
    evidence = read_pop_evidence(tmp_path)
    assert evidence.dropped == {(GROUP, "broker-a"): [(DROP_MS, 1000)]}
    assert evidence.acked_past_max == {"7F0000010000533F0000000000032C6E"}
    assert evidence.timed_out == {(GROUP, "broker-b", 1795927830500)}
    assert not read_pop_evidence(tmp_path / "missing")


def _store(records: list[tuple[str, str, int, int, int]]) -> duckdb.DuckDBPyConnection:
    """records: (msgId, broker, queue offset, pop ms, revive ms), each popped once by GROUP."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, topic VARCHAR, queue_id INT,
                   queue_offset BIGINT, msg_id VARCHAR)""")
    con.execute("""CREATE TABLE pop_evidence (run_id VARCHAR, broker VARCHAR, "group" VARCHAR, topic VARCHAR,
                   queue_id INT, offsets BIGINT[], kind VARCHAR, pop_ts TIMESTAMPTZ, revive_ts TIMESTAMPTZ)""")
    for msg, broker, offset, pop_ms, revive_ms in records:
        con.execute("INSERT INTO commitlog VALUES (?, ?, ?, 0, ?, ?)", [RUN, broker, RETRY, offset, msg])
        for kind in ("ck", "ck"):  # each checkpoint is in the store twice (timer, then revive topic)
            con.execute("INSERT INTO pop_evidence VALUES (?, ?, ?, ?, 0, [?], ?, make_timestamptz(? * 1000), "
                        "make_timestamptz(? * 1000))", [RUN, broker, GROUP, RETRY, offset, kind, pop_ms, revive_ms])
    return con


def test_a_dropped_line_names_one_record_popped_before_it_and_revived_after(tmp_path):
    (tmp_path / "driver-client-broker_default.log").write_text(DROPPED + ACKED + TIMED_OUT)
    evidence = read_pop_evidence(tmp_path)
    con = _store([
        ("A", "broker-a", 1, DROP_MS - 2000, DROP_MS - 500),  # revived before the line: not it
        ("B", "broker-a", 2, DROP_MS + 115, DROP_MS + 5115),  # popped in the line's second: it
        ("C", "broker-a", 3, DROP_MS + 300, DROP_MS + 5300),  # also fits, but the line is B's
        ("D", "broker-b", 4, DROP_MS + 100, DROP_MS + 5100),  # another broker
        ("7F0000010000533F0000000000032C6E", "broker-a", 5, DROP_MS + 7000, DROP_MS + 12000),  # acked past max
        ("E", "broker-b", 6, 1795927830500, 1795927835500),  # the request aborted past its invisible time
        ("F", "broker-a", 7, DROP_MS + 200, DROP_MS + 5200),  # a listener got it
    ])
    attempts = [{"group": GROUP, "msg_id": "F"}]
    assert compare.unheard_pops(con, [RUN], attempts, evidence, {GROUP}) == {
        (GROUP, "B"), (GROUP, "7F0000010000533F0000000000032C6E"), (GROUP, "E")}
    assert compare.unheard_pops(con, [RUN], attempts, evidence, set()) == frozenset()


@pytest.mark.parametrize("unheard, explained", [
    ({"M2", "M3"}, True),   # the count-2 retry dropped, the count-3 one acked past the maximum
    ({"M3"}, False),        # the log names the last one only: the count-2 retry is the audit's alone
    (set(), False),         # no log
])
def test_a_pop_chain_longer_by_the_records_its_client_dropped_is_explained(unheard, explained):
    key = "0A000106474F31752FD9000000C80004"
    con, attempts = real_run(RUN, key, GROUP, [("PUBLISH", "PopTopic", 0, 0), ("RETRY", RETRY, 0, 1),
                                               ("RETRY", RETRY, 0, 2), ("RETRY", RETRY, 0, 3)], 3,
                             ["RECONSUME_LATER"] * 4, ["POP_DELAYED"] * 4, final_state="CONSUMED")
    attempts = attempts[:2]  # the listeners got the publish and the first retry
    result = compare.lineage_vs_clients(con, load_scenario(SCENARIO), attempts, [RUN],
                                        unheard=frozenset((GROUP, m) for m in unheard))
    if explained:
        assert (result["disagree"], result["explained"]) == (0, {compare.POP_UNHEARD: 1}), result["examples"]
    else:
        assert {e["what"] for e in result["examples"]} >= {"deliveries", "retries"}, result["examples"]
