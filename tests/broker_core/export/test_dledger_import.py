"""import-store of DLedger stores: a real three-node 4.9.4 group's replicas
(tests/data/rocketmq-dledger-4.9.4/README.md), one at a time and merged with --role replica."""

from __future__ import annotations

import json

import pytest
from testdata import DLEDGER_FIXTURES, DLEDGER_MANIFEST, DLEDGER_REPLICAS

from broker_core.errors import BadInputError
from broker_core.export.parquet import read_table
from broker_core.export.schema import RAW_TABLES
from broker_core.export.store_import import DECODERS, import_store
from orchestration.cli import main

MANIFEST = json.loads(DLEDGER_MANIFEST.read_text())
SENT_OK = {e["keys"]: e for e in MANIFEST["events"] if e["ev"] == "send" and e["status"] == "SEND_OK"}
RUN = "dledger"


def _import_group(out, decoder: str = DECODERS[0], replicas=DLEDGER_REPLICAS):
    summaries = [import_store(DLEDGER_FIXTURES / node, out, name=RUN, broker="broker-a", role="replica",
                              decoder=decoder) for node in replicas]
    return summaries[-1]


def _rows(run, table):
    names = [c for c in RAW_TABLES[table].names if c != "wall_seconds"]
    return sorted(map(repr, read_table(run, table).select(names).to_pylist()))


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    out = tmp_path_factory.mktemp("dledger") / "run"
    return out, _import_group(out)


def test_both_decoders_write_the_same_tables(group, tmp_path):
    """The reference decoder and the columnar one write identical rows for every table of the
    merged broker and of each replica."""
    out, _ = group
    reference = tmp_path / "run"
    _import_group(reference, "reference")
    for table in RAW_TABLES:
        assert _rows(out, table) == _rows(reference, table), table
    for node in DLEDGER_REPLICAS:
        side = f"replicas/broker-a/dledger-{node.rsplit('-', 1)[1]}"
        for table in RAW_TABLES:
            assert _rows(out / side, table) == _rows(reference / side, table), (node, table)


def test_every_send_ok_message_is_one_committed_record_at_its_msgid_offset(group):
    """Each message a producer got SEND_OK for is one commitlog row whose offset msgId is the one
    the client got: the message's offset (entry + 48), which the consume queue names too."""
    out, summary = group
    published = {}
    for r in read_table(out, "commitlog").to_pylist():
        if r["topic"] == MANIFEST["topic"]:
            assert r["keys"] not in published, r["keys"]
            published[r["keys"]] = r
    assert set(published) == set(SENT_OK)
    for keys, sent in SENT_OK.items():
        row = published[keys]
        assert row["msg_id"] == sent["msg_id"] and row["uniq_key"] == sent["uniq_key"]
        assert int(row["msg_id"][-16:], 16) == row["phys_offset"]
        assert (row["queue_id"], row["queue_offset"]) == (sent["queue_id"], sent["queue_offset"])
    assert summary.dledger["merged"]["records"] == read_table(out, "commitlog").num_rows == 122


def test_the_old_leaders_tail_is_divergent_and_not_imported(group):
    """n2's uncommitted entries 102-103 (term 1) sit where n0 and n1 committed term-2 entries:
    divergent, in dledger_entries only, listed in the summary with their records."""
    out, summary = group
    entries = read_table(out, "dledger_entries").to_pylist()
    by_key = {(e["raft_index"], e["term"]): e for e in entries}
    assert len(entries) == 124
    for index in (102, 103):
        old, new = by_key[(index, 1)], by_key[(index, 2)]
        assert (old["state"], old["replicas"]) == ("divergent", ["n2"])
        assert (new["state"], new["replicas"]) == ("committed", ["n0", "n1"])
    # The first entries of the two tails start where entry 101 ends; later ones overlap other records.
    assert by_key[(102, 1)]["phys_offset"] == by_key[(102, 2)]["phys_offset"]
    committed = [e for e in entries if e["state"] == "committed"]
    assert len(committed) == 122 and {tuple(e["replicas"]) for e in committed if e["term"] == 1} == {("n0", "n1", "n2")}
    merged = summary.dledger["merged"]
    assert (merged["committed"], merged["uncommitted"], merged["divergent"]) == (122, 0, 2)
    assert merged["committed_through"] == 121 and merged["replicas"] == ["n0", "n1", "n2"]
    assert [(e["raft_index"], e["term"], e["replicas"]) for e in merged["divergent_entries"]] == [
        (102, 1, ["n2"]), (103, 1, ["n2"])]
    # Not records: the keys of the sends that failed are in no commitlog row.
    keys = {r["keys"] for r in read_table(out, "commitlog").to_pylist()}
    assert keys.isdisjoint({"b-0", "b-1", "b-2"})
    assert not [p for p in summary.problems if p.severity == "error"]
    assert read_table(out, "store_problems").num_rows == 0


def test_one_replica_alone_reports_its_uncommitted_tail(tmp_path):
    """The old leader imported on its own: 102 records, its 2 uncommitted entries in dledger_entries
    and the summary, no problem; --strict passes (an uncommitted tail is not damage)."""
    out = tmp_path / "run"
    summary = import_store(DLEDGER_FIXTURES / "broker-a-n2", out, strict=True)
    assert summary.records == read_table(out, "commitlog").num_rows == 102
    assert (summary.dledger["uncommitted"], summary.dledger["first_uncommitted_index"]) == (2, 102)
    states = [(e["raft_index"], e["state"]) for e in read_table(out, "dledger_entries").to_pylist()
              if e["state"] != "committed"]
    assert states == [(102, "uncommitted"), (103, "uncommitted")]
    assert summary.problems == []


def test_a_replica_imported_again_replaces_its_side(group, tmp_path):
    """Importing a replica of the group again replaces that replica's side; the merge is the same."""
    out, _ = group
    again = tmp_path / "run"
    _import_group(again)
    import_store(DLEDGER_FIXTURES / "broker-a-n1", again, name=RUN, broker="broker-a", role="replica")
    for table in RAW_TABLES:
        assert _rows(out, table) == _rows(again, table), table


def test_dledger_roles_are_refused_where_they_do_not_fit(tmp_path):
    """--role replica needs a DLedger store and a broker; a DLedger store is no slave."""
    with pytest.raises(BadInputError, match="--role replica"):
        import_store(DLEDGER_FIXTURES / "broker-a-n0", tmp_path / "a", role="replica")
    with pytest.raises(BadInputError, match="not a slave"):
        import_store(DLEDGER_FIXTURES / "broker-a-n0", tmp_path / "b", broker="broker-a", role="slave")
    with pytest.raises(BadInputError, match="at rest"):
        import_store(DLEDGER_FIXTURES / "broker-a-n0", tmp_path / "c", live=True)


def test_the_cli_summary_names_the_uncommitted_and_divergent_entries(tmp_path, capsys):
    """import-store recognizes a DLedger store by itself and says what it did not import."""
    out = tmp_path / "run"
    for node in DLEDGER_REPLICAS:
        assert main(["import-store", str(DLEDGER_FIXTURES / node), "--out", str(out), "--broker", "broker-a",
                     "--role", "replica", "--quiet"]) == 0
    assert main(["import-store", str(DLEDGER_FIXTURES / "broker-a-n2"), "--out", str(out), "--broker", "broker-a",
                 "--role", "replica"]) == 0
    text = capsys.readouterr().out
    assert "uncommitted: 2 entr(ies) from index 102" in text
    assert "2 divergent" in text and "divergent: index 102 term 1 only on n2" in text
