"""import-store of the DLedger stores of a real three-node 5.3.3 group (dledger 0.3.1.2;
tests/data/rocketmq-dledger-5.3.3/README.md): the entries 5.3.3 writes read as 4.9.4's do."""

from __future__ import annotations

import json

import pytest
from testdata import DLEDGER_5X_FIXTURES, DLEDGER_5X_MANIFEST, DLEDGER_REPLICAS

from broker_core.export.parquet import read_table
from broker_core.export.store_import import import_store
from broker_core.store.dledger import ENTRY_HEADER_BYTES, parse_checkpoint, read_header
from broker_core.store.reader import StoreReader

MANIFEST = json.loads(DLEDGER_5X_MANIFEST.read_text())
SENT_OK = {e["keys"]: e for e in MANIFEST["events"] if e["ev"] == "send" and e["status"] == "SEND_OK"}


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    out = tmp_path_factory.mktemp("dledger-5x") / "run"
    summaries = [import_store(DLEDGER_5X_FIXTURES / node, out, name="dledger-5x", broker="broker-a",
                              role="replica") for node in DLEDGER_REPLICAS]
    return out, summaries


@pytest.mark.parametrize("node", DLEDGER_REPLICAS)
def test_each_entry_header_and_consume_queue_unit_matches_its_message(node):
    """Each consume-queue unit names a committed record at its entry's pos + 48, and each entry's
    48-byte header (dledger 0.3.1.2) holds the index, term and size the scan read; the checkpoint is
    the one the manifest recorded."""
    store = DLEDGER_5X_FIXTURES / node
    reader = StoreReader(store)
    records = {e.phys_offset: e for e in reader.entries() if e.record is not None}
    units = [unit for _t, _q, files in reader.consume_queues() for _p, _pos, unit in reader.cq_units(files)]
    assert len(units) > 90
    for unit in units:
        entry = records[unit.phys_offset]
        assert entry.size == unit.size == entry.record.total_size and entry.raft.committed
    data = next(store.glob("dledger-*")) / "data"
    for entry in records.values():
        blob = (data / entry.file_name).read_bytes()
        header = read_header(blob, entry.phys_offset - int(entry.file_name) - ENTRY_HEADER_BYTES)
        assert (header.index, header.term, header.size) == (entry.raft.index, entry.raft.term, entry.size + 48)
    assert reader.dledger_checkpoint == parse_checkpoint(MANIFEST["replicas"][node]["checkpoint"])
    assert reader.blank_count == 1 and reader.problems == []


def test_every_send_ok_message_is_one_committed_record_at_its_msgid_offset(group):
    """The merged replicas: each SEND_OK message is one commitlog row with the msgId, queue and
    offset its client got, before and after the election; each listener call's message is a record."""
    out, _ = group
    rows = read_table(out, "commitlog").to_pylist()
    published = {r["keys"]: r for r in rows if r["topic"] == MANIFEST["topic"]}
    assert len(published) == sum(r["topic"] == MANIFEST["topic"] for r in rows)
    assert set(published) == set(SENT_OK)
    for keys, sent in SENT_OK.items():
        row = published[keys]
        assert (row["msg_id"], row["uniq_key"]) == (sent["msg_id"], sent["uniq_key"])
        assert (row["queue_id"], row["queue_offset"]) == (sent["queue_id"], sent["queue_offset"])
        assert int(row["msg_id"][-16:], 16) == row["phys_offset"]
    offsets = {r["phys_offset"] for r in rows}
    consumed = [e for e in MANIFEST["events"] if e["ev"] == "consume"]
    assert consumed and all(e["phys_offset"] in offsets for e in consumed)


def test_the_replicas_merge_into_two_terms_all_committed(group):
    """0-101 of term 1 on every replica, 102-114 of term 2 on the two that elected the new master:
    115 committed entries, none uncommitted or divergent, no problem."""
    out, summaries = group
    merged = summaries[-1].dledger["merged"]
    assert (merged["committed"], merged["uncommitted"], merged["divergent"]) == (115, 0, 0)
    assert merged["replicas"] == ["n0", "n1", "n2"]
    entries = read_table(out, "dledger_entries").to_pylist()
    spans = {}
    for e in entries:
        assert e["state"] == "committed"
        spans.setdefault((e["term"], tuple(e["replicas"])), []).append(e["raft_index"])
    assert {k: (min(v), max(v)) for k, v in spans.items()} == {(1, ("n0", "n1", "n2")): (0, 101),
                                                               (2, ("n1", "n2")): (102, 114)}
    assert read_table(out, "commitlog").num_rows == 115
    assert all(s.problems == [] for s in summaries)
