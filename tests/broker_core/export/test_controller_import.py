"""import-store of a 5.3.3 controller-mode master and slave (tests/data/rocketmq-controller-5.3.3):
the master killed, the slave promoted; both copies merged by their epoch files."""

from __future__ import annotations

import json
import shutil

import pytest
from testdata import CONTROLLER_FIXTURES, CONTROLLER_MANIFEST, CONTROLLER_NEW_MASTER, CONTROLLER_OLD_MASTER

from broker_core.export.controller_epochs import (
    KIND_EPOCHS_DISJOINT,
    KIND_FAILOVER_TRUNCATED,
    KIND_IDENTITY_MISMATCH,
)
from broker_core.export.parquet import read_table
from broker_core.export.replicas import KIND_DIFFER
from broker_core.export.store_import import import_store
from broker_core.store.controller_files import EPOCH_FILE, IDENTITY_FILE

MANIFEST = json.loads(CONTROLLER_MANIFEST.read_text())
RUN = "controller"


def _import_pair(out, new=CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, old=CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER):
    """The promoted slave as the master, the killed master as its slave (the roles at the end)."""
    import_store(old, out, name=RUN, broker="broker-a", role="slave")
    return import_store(new, out, name=RUN, broker="broker-a", role="master")


def _copies(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, new)
    shutil.copytree(CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER, old)
    return new, old


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("controller") / "run"
    return out, _import_pair(out)


def test_every_send_ok_message_is_one_record_at_its_msgid_offset(pair):
    """Each message a producer got SEND_OK for, before the kill and after the promotion, is one
    commitlog row of the merged broker at the offset its offset msgId names; no error."""
    out, summary = pair
    assert summary.errors == []
    rows = read_table(out, "commitlog").to_pylist()
    by_offset = {r["phys_offset"]: r for r in rows}
    assert len(by_offset) == len(rows)
    sent = [s for s in MANIFEST["sends"] if s["status"] == "SEND_OK"]
    assert len(sent) > 100
    for s in sent:
        record = by_offset.get(int(s["msg_id"][-16:], 16))
        assert record is not None and record["uniq_key"] == s["uniq_key"] and record["topic"] == s["topic"], s
    stored = {r["uniq_key"] for r in rows}
    assert set(MANIFEST["consumed_uniq_keys"]) - stored == set(), "a message a listener got is missing"


def test_the_epochs_attribute_each_range_to_the_master_that_wrote_it(pair):
    """Epoch 1 (from 0) was written by n0, the promoted slave's epoch by n1: the store hosts of the
    records in each range name them."""
    out, summary = pair
    epochs = read_table(out, "replica_epochs").to_pylist()
    master = sorted((e for e in epochs if e["role"] == "master"), key=lambda e: e["epoch"])
    slave = [e for e in epochs if e["role"] == "slave"]
    addrs = MANIFEST["node_addrs"]
    assert [e["epoch"] for e in slave] == [1]
    assert master[0]["epoch"] == 1 and master[0]["store_hosts"] == [addrs[CONTROLLER_OLD_MASTER]]
    assert master[1]["store_hosts"] == [addrs[CONTROLLER_NEW_MASTER]]
    assert master[0]["end_offset"] == master[1]["start_offset"]
    assert sum(e["records"] for e in master) == read_table(out / "replicas/broker-a/master", "commitlog").num_rows
    assert summary.merged["epochs"]["history"] == "master"
    assert summary.controller["identity"]["broker"] == "broker-a"


def test_the_killed_masters_tail_past_the_promotion_is_cut_not_a_difference(pair):
    """The old master's records past where the new master's epoch starts are the failover's cut:
    left out of commitlog and counted, one warning; no replicas-differ error."""
    out, summary = pair
    epochs = summary.merged["epochs"]
    problems = read_table(out, "store_problems").to_pylist()
    assert not [p for p in problems if p["kind"] == KIND_DIFFER]
    cut = [p for p in problems if p["kind"] == KIND_FAILOVER_TRUNCATED]
    slave_rows = read_table(out / "replicas/broker-a/slave", "commitlog").to_pylist()
    past = [r for r in slave_rows if r["phys_offset"] >= epochs["cut_offset"]]
    assert epochs["cut_role"] == "slave" and epochs["truncated_records"] == len(past)
    assert len(cut) == (1 if past else 0)
    (row,) = [e for e in read_table(out, "replica_epochs").to_pylist() if e["role"] == "slave"]
    assert row["truncated_records"] == len(past)
    merged = {r["phys_offset"]: r for r in read_table(out, "commitlog").to_pylist()}
    for r in past:
        assert merged.get(r["phys_offset"], {}).get("uniq_key") != r["uniq_key"] or r["uniq_key"] is None


def test_without_the_epoch_files_the_pair_differs_where_the_failover_cut(tmp_path):
    """The same stores without their epoch files merge as before: where the old master's tail and
    the new master's records share offsets they are replicas-differ errors (when the kill left a
    tail), and nothing is cut."""
    new, old = _copies(tmp_path)
    with_epochs = _import_pair(tmp_path / "with", new, old)
    for store in (new, old):
        for name in (EPOCH_FILE, EPOCH_FILE + ".bak", IDENTITY_FILE):
            (store / name).unlink(missing_ok=True)
    summary = _import_pair(tmp_path / "run", new, old)
    assert "epochs" not in summary.merged and summary.controller is None
    kinds = {p.kind for p in summary.problems}
    assert KIND_FAILOVER_TRUNCATED not in kinds
    if with_epochs.merged["epochs"]["truncated_records"]:
        assert KIND_DIFFER in kinds


def test_copies_of_no_common_epoch_are_an_error_and_merged_without_the_epochs(tmp_path):
    """The old master's epoch 1 made to start elsewhere: the two files share no epoch at one start
    offset (RocketMQ finds no consistent point and refuses the slave): epochs-disjoint, nothing cut."""
    new, old = _copies(tmp_path)
    (old / EPOCH_FILE).write_text("1\n0\n1-64\n")
    (old / (EPOCH_FILE + ".bak")).unlink(missing_ok=True)
    summary = _import_pair(tmp_path / "run", new, old)
    assert [p.kind for p in summary.errors if p.kind == KIND_EPOCHS_DISJOINT] == [KIND_EPOCHS_DISJOINT]
    assert summary.merged["epochs"]["cut_offset"] is None
    assert KIND_FAILOVER_TRUNCATED not in {p.kind for p in summary.problems}


def test_two_copies_of_one_broker_id_are_a_warning(tmp_path):
    new, old = _copies(tmp_path)
    shutil.copyfile(new / IDENTITY_FILE, old / IDENTITY_FILE)
    summary = _import_pair(tmp_path / "run", new, old)
    assert [p.severity for p in summary.problems if p.kind == KIND_IDENTITY_MISMATCH] == ["warning"]


def test_the_clean_pair_has_no_epoch_problem(pair):
    """No false alarm on the real stores: no epoch or identity problem, no error."""
    _out, summary = pair
    kinds = {p.kind for p in summary.problems}
    assert not kinds & {"epoch-file-bad", "epoch-order", "epoch-past-log-end", "broker-identity-bad",
                        KIND_EPOCHS_DISJOINT, KIND_IDENTITY_MISMATCH}


def test_the_warehouse_names_the_message_whose_send_back_the_failover_cut(pair, tmp_path):
    """The old master's cut record is a send-back of a notice-service message it acknowledged 36 ms
    before it was killed (a send-back waits for no replica): anomaly FAILOVER_CUT names the message and
    the group; the new master's copy imported alone has none."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse, open_read_only

    out, summary = pair
    (cut,) = summary.merged["epochs"]["truncated"]
    run = tmp_path / "run"
    shutil.copytree(out, run)
    # The new master's copy alone: nothing was cut, and no anomaly says so.
    alone = tmp_path / "alone"
    import_store(CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER, alone, name="alone", broker="broker-a")
    for r in (run, alone):
        run_lineage_duckdb(r)
    db = build_warehouse([run, alone], tmp_path / "w.duckdb").db_path
    con = open_read_only(db)
    try:
        rows = con.execute("SELECT message_key, \"group\", detail FROM anomalies WHERE kind = 'FAILOVER_CUT' "
                           "AND run_id = ?", [RUN]).fetchall()
        (others,) = con.execute("SELECT count(*) FROM anomalies WHERE kind = 'FAILOVER_CUT' AND run_id = 'alone'"
                                ).fetchone()
        (state,) = con.execute("SELECT final_state FROM message_lineage WHERE message_key = ? AND \"group\" = ?",
                               [cut["uniq_key"], "notice-service"]).fetchone()
    finally:
        con.close()
    assert [(k, g) for k, g, _ in rows] == [(cut["uniq_key"], "notice-service")]
    assert others == 0
    assert "SCHEDULE_TOPIC_XXXX" in rows[0][2] and f"at offset {cut['phys_offset']}" in rows[0][2]
    # The group's offset is past the message and its retry is gone: the chain reads CONSUMED, and the
    # anomaly is what says otherwise.
    assert state == "CONSUMED"
    sends = {s["uniq_key"]: s for s in MANIFEST["sends"]}
    assert sends[cut["uniq_key"]]["status"] == "SEND_OK" and sends[cut["uniq_key"]]["topic"] == "NoticeTopic"


def test_copies_of_one_epoch_merge_as_any_pair(tmp_path):
    """The killed master's copy against itself with a shorter epoch file (one epoch on both): no
    failover between them, so nothing is cut and no epoch decision is made."""
    new, old = _copies(tmp_path)
    shutil.copyfile(old / EPOCH_FILE, new / EPOCH_FILE)
    (new / (EPOCH_FILE + ".bak")).unlink()
    summary = _import_pair(tmp_path / "run", new, old)
    kinds = {p.kind for p in summary.problems}
    assert KIND_FAILOVER_TRUNCATED not in kinds and KIND_EPOCHS_DISJOINT not in kinds
    assert summary.merged["epochs"]["cut_offset"] is None
    assert "failover" not in " ".join(p.reason for p in summary.problems)
