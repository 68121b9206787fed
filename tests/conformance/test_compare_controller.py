"""The audit of a real 5.3.3 controller-mode pair against what its real clients saw, on the stores and
client tables of tests/data/rocketmq-controller-5.3.3 (no broker runs): the one message whose
send-back the failover cut is explained by anomaly FAILOVER_CUT; without the epoch files it is not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from compare_rows import real_run
from testdata import CONTROLLER_FIXTURES, CONTROLLER_NEW_MASTER, CONTROLLER_OLD_MASTER

from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store
from broker_core.sim.scenario import load_scenario
from broker_core.store.controller_files import EPOCH_FILE, IDENTITY_FILE
from conformance import compare
from conformance.broker_logs import cut_bytes_by_broker, rejoin_cuts

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = load_scenario(ROOT / "scenarios" / "conformance-controller.yaml").with_semantics("5.x")
RUN = "conformance-controller-real"


def _audit(tmp_path: Path, new: Path, old: Path) -> dict:
    run = tmp_path / "run"
    import_store(old, run, name=RUN, broker="broker-a", role="slave")
    import_store(new, run, name=RUN, broker="broker-a", role="master")
    run_lineage_duckdb(run)
    db = build_warehouse([run], tmp_path / "w.duckdb").db_path
    attempts = compare._client_attempts(CONTROLLER_FIXTURES)
    con = open_read_only(db)
    try:
        return compare.lineage_vs_clients(con, SCENARIO, attempts, [RUN])
    finally:
        con.close()


@pytest.fixture
def copies(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, new)
    shutil.copytree(CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER, old)
    return new, old


def test_the_send_back_the_failover_cut_is_the_one_explained_difference(tmp_path):
    result = _audit(tmp_path, CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER)
    assert result["disagree"] == 0, result["examples"]
    assert result["explained"] == {"send_back_cut_at_failover": 1}
    assert result["messages"] == 283 and result["agree"] == 283


def test_without_the_epochs_the_cut_send_back_is_a_disagreement(tmp_path, copies):
    """The same stores without epoch files: nothing names the cut record, and the audit disagrees."""
    new, old = copies
    for store in copies:
        for name in (EPOCH_FILE, EPOCH_FILE + ".bak", IDENTITY_FILE):
            (store / name).unlink(missing_ok=True)
    result = _audit(tmp_path, new, old)
    assert result["disagree"] == 1 and result["explained"] == {}
    assert result["examples"][0]["group"] == "notice-service"


# The lines a real 5.3.3 old master wrote to its store log when it was started again 12 s after the
# kill (scenarios/conformance-controller.yaml, --controller-nodes 2 --broker-outage broker-a@8s-20s).
REJOIN_CUT = """2026-11-29 14:50:34 INFO AutoSwitchHAClient - local epoch entries is [EpochEntry{epoch=1, startOffset=0, endOffset=43969}]
2026-11-29 14:50:34 INFO AutoSwitchHAClient - truncateOffset is 43470
2026-11-29 14:50:34 INFO AutoSwitchHAClient - truncate dirty files to 43470
"""
# A rejoin that found no tail of its own (docs/decisions.md, "Controller-mode stores").
REJOIN_CLEAN = """2026-11-28 10:02:11 INFO AutoSwitchHAClient - local epoch entries is [EpochEntry{epoch=1, startOffset=0, endOffset=109859}]
2026-11-28 10:02:11 INFO AutoSwitchHAClient - truncateOffset is 109859
"""


def test_a_rejoining_old_masters_cut_is_read_from_its_store_log(tmp_path):
    (tmp_path / "broker-a-n0-store.log").write_text("2026-11-29 14:49:54 INFO main - TruncateOffset is -1\n"
                                                    + REJOIN_CUT)
    (tmp_path / "broker-a-n1-store.log").write_text(REJOIN_CLEAN)
    assert rejoin_cuts(tmp_path) == [("broker-a-n0", 43470, 43969)]
    assert rejoin_cuts(tmp_path / "missing") == []


# The least a send-back of a 100-byte body takes (conformance.compare._least_send_back_bytes):
# 88 fixed bytes, the topic's length byte, %DLQ% + order-service (18 bytes), the properties' length,
# the properties: the record's UNIQ_KEY (8 + 32 + 2), RETRY_TOPIC=OrderTopic (11 + 10 + 2), DELAY=0
# (5 + 1 + 2), less the last separator 4.9.4 leaves out; and the body.
LEAST_SEND_BACK = 88 + 1 + 18 + 2 + (8 + 32 + 2) + (11 + 10 + 2) + (5 + 1 + 2) - 1 + 100


@pytest.mark.parametrize("cut_bytes, in_outage, hops, explained", [
    (499, True, [("PUBLISH", "OrderTopic", 0, 0)], True),
    (LEAST_SEND_BACK, True, [("PUBLISH", "OrderTopic", 0, 0)], True),   # the cut holds just the send-back
    (LEAST_SEND_BACK - 1, True, [("PUBLISH", "OrderTopic", 0, 0)], False),  # too short to have held it
    (0, True, [("PUBLISH", "OrderTopic", 0, 0)], False),   # no tail cut: the store lost nothing
    (499, False, [("PUBLISH", "OrderTopic", 0, 0)], False),   # the message was not in the outage
    # the store holds the send-back: the cut was not it
    (499, True, [("PUBLISH", "OrderTopic", 0, 0), ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 1)], False),
])
def test_a_send_back_a_rejoining_old_master_truncated_is_explained(cut_bytes, in_outage, hops, explained):
    """order-service's listener failed a message 90 ms before its controller-mode master was killed;
    the client's send-back was acknowledged and never replicated, and the old master cut it from its
    log when it rejoined, so no store holds it: the chain is CONSUMED (the offset moved past the
    message), where the clients' log ends in the failure. The cut must be long enough to have held a
    record with the message's body."""
    key, group = "0A0001013A39415EBB5700001F400040", "order-service"
    con, attempts = real_run(RUN, key, group, hops, 0, ["RECONSUME_LATER"], ["SENT_BACK"], final_state="CONSUMED")
    result = compare.lineage_vs_clients(con, SCENARIO, attempts, [RUN], in_outage={key} if in_outage else set(),
                                        rejoin_cut={"broker-a": cut_bytes} if cut_bytes else {})
    if explained:
        assert (result["disagree"], result["explained"]) == (0, {"send_back_cut_at_failover": 1})
    else:
        assert [e["what"] for e in result["examples"]] == ["final_state"], result["examples"]


def test_a_send_back_counts_the_properties_it_certainly_copies():
    """A send-back copies the delivered record's stored properties, but for those it may rewrite
    (DELAY, WAIT, the counts, RETRY_TOPIC, TRAN_MSG), and carries RETRY_TOPIC and a DELAY."""
    base = {"topic": "OrderTopic", "body_size": 100, "properties": {}}
    bare = compare._least_send_back_bytes(base, "order-service")
    assert bare == 88 + 1 + 18 + 2 + (11 + 10 + 2) + (5 + 1 + 2) - 1 + 100  # no separator after the last
    kept = {**base, "properties": {"UNIQ_KEY": "K" * 32, "KEYS": "k1", "TAGS": "TagA"}}
    assert compare._least_send_back_bytes(kept, "order-service") == bare + (8 + 32 + 2) + (4 + 2 + 2) + (4 + 4 + 2)
    rewritten = {**base, "properties": {"DELAY": "18", "WAIT": "true", "RECONSUME_TIME": "3",
                                        "MAX_RECONSUME_TIMES": "16", "TRAN_MSG": "true"}}
    assert compare._least_send_back_bytes(rewritten, "order-service") == bare
    retried = {**base, "topic": "%RETRY%order-service", "properties": {"RETRY_TOPIC": "OrderTopic"}}
    assert compare._least_send_back_bytes(retried, "order-service") == bare


def test_a_cut_explains_no_more_send_backs_than_it_could_hold():
    """Two messages of the same shape and one cut with room for one send-back: the first is
    explained, the second still disagrees; a cut on another broker explains neither."""
    group = "order-service"
    keys = ["0A0001013A39415EBB5700001F400040", "0A0001013A39415EBB5700001F400041"]
    rows = [real_run(RUN, key, group, [("PUBLISH", "OrderTopic", 0, 0)], 0, ["RECONSUME_LATER"], ["SENT_BACK"],
                     final_state="CONSUMED") for key in keys]
    con = rows[0][0]
    for table in ("message_hops", "commitlog", "message_lineage"):
        # The second message's records after the first's in the log.
        con.register(f"second_{table}", rows[1][0].table(table).arrow())
        moved = "* REPLACE (phys_offset + 10000 AS phys_offset)" if table != "message_lineage" else "*"
        con.execute(f"INSERT INTO {table} SELECT {moved} FROM second_{table}")
    attempts = rows[0][1] + rows[1][1]
    one = compare.lineage_vs_clients(con, SCENARIO, attempts, [RUN], in_outage=set(keys),
                                     rejoin_cut={"broker-a": LEAST_SEND_BACK + 10})
    assert (one["explained"], one["disagree"]) == ({"send_back_cut_at_failover": 1}, 1)
    assert [e["uniq_key"] for e in one["examples"]] == [keys[1]]
    other = compare.lineage_vs_clients(con, SCENARIO, attempts, [RUN], in_outage=set(keys),
                                       rejoin_cut={"broker-b": 10_000})
    assert (other["explained"], other["disagree"]) == ({}, 2)


def test_a_rejoining_nodes_cut_counts_for_its_broker():
    assert cut_bytes_by_broker([("broker-a-n0", 43470, 43969), ("broker-a-n1", 100, 200),
                                ("broker-b", 0, 50)]) == {"broker-a": 599, "broker-b": 50}
