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
