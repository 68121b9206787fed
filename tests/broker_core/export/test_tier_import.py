"""import-store --tiered on a real RocketMQ 5.3.3 store whose local retention kept only its newest
commit-log file, and its POSIX tier (tests/data/rocketmq-5.3.3-tiered): the records retention
deleted come back from the tier, and the lineage (DuckDB) and every check read the chains whose
SCHEDULE hops only the deleted files held as truncated, never lost.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from assets import checks as c
from broker_core.errors import BadInputError
from broker_core.export.store_import import import_store
from broker_core.export.tier_import import tier_part_name
from orchestration.cli import main
from tests.testdata import data_path

DATA = data_path("rocketmq-5.3.3-tiered")
MANIFEST = json.loads((DATA / "manifest.json").read_text())
BROKER, TOPIC, GROUP = MANIFEST["broker"], MANIFEST["topic"], MANIFEST["group"]
SENDS = {e["uniq_key"]: e for e in MANIFEST["events"] if e["event"] == "send"}


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(DATA, tmp_path / "data")
    for path in (tmp_path / "data").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tmp_path / "data" / "store", tmp_path / "data" / "tier"


def _rows(run: Path) -> list[dict]:
    return pq.read_table(run / "parquet" / "commitlog").to_pylist()


def _lineage_and_checks(run: Path, tmp_path: Path):
    """The run's lineage (DuckDB) and every check's outcome on it, by check name."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse, open_read_only

    run_lineage_duckdb(run)
    summary = build_warehouse([run], tmp_path / "warehouse.duckdb")
    con = open_read_only(summary.db_path)
    try:
        [outcomes] = c.run_checks_per_run(con, summary.run_ids).values()
    finally:
        con.close()
    return pq.read_table(run / "lineage" / "message_lineage").to_pylist(), {o.check.name: o for o in outcomes}


@pytest.fixture(scope="module")
def tiered_run(tmp_path_factory):
    """The fixture imported with its tier (strict: a clean store stays clean), its lineage and checks."""
    tmp = tmp_path_factory.mktemp("tiered")
    run = tmp / "tiered"
    summary = import_store(DATA / "store", run, broker=BROKER, tiered=DATA / "tier", strict=True)
    lineage, outcomes = _lineage_and_checks(run, tmp)
    return summary, run, lineage, outcomes


def test_records_retention_deleted_come_back_with_their_original_offsets(tiered_run):
    """Every message the producer sent has its record again, from the local log or the tier; a
    tier record has the offset msgId the producer was told, read from the local consume queue."""
    summary, run, _lineage, _outcomes = tiered_run
    tier = summary.tiered
    assert summary.first_offset > 0 and tier.added > 0 and tier.offset_unknown == 0 and tier.problems == []
    rows = _rows(run)
    sent = {r["uniq_key"]: r for r in rows if r["topic"] == TOPIC}
    assert sorted(sent) == sorted(SENDS)
    for key, send in SENDS.items():
        assert sent[key]["msg_id"] == send["offset_msg_id"], key
    from_tier = [r for r in rows if r["file_name"].startswith("tier:")]
    assert len(from_tier) == tier.added and all(r["phys_offset"] < summary.first_offset for r in from_tier)
    assert len({(r["phys_offset"]) for r in rows}) == len(rows)
    assert not any(r["topic"] == "SCHEDULE_TOPIC_XXXX" for r in from_tier)
    assert (run / "parquet" / "commitlog" / tier_part_name(BROKER)).is_file()


def test_every_message_has_its_end_and_none_is_lost(tiered_run):
    """Each message's chain ends as its client saw it (DLQ after the maximum, consumed after one
    retry or none), chains whose SCHEDULE hops retention deleted are truncated, none is LOST."""
    _summary, _run, lineage, _outcomes = tiered_run
    rows = {r["message_key"]: r for r in lineage if r["group"] == GROUP}
    assert sorted(rows) == sorted(SENDS)
    want = {"dlq": ("DLQ", MANIFEST["max_reconsume_times"]), "retry": ("CONSUMED", 1), "ok": ("CONSUMED", 0)}
    for key, send in SENDS.items():
        assert (rows[key]["final_state"], rows[key]["retries"]) == want[send["kind"]], (key, rows[key])
    assert {r["final_state"] for r in lineage} <= {"DLQ", "CONSUMED"}
    gapped = [r for r in rows.values() if r["truncated"]]
    assert gapped and all("SCHEDULE" not in r["path"].split(" > ")[1] for r in gapped if r["retries"])
    assert not any(r["truncated"] for r in rows.values() if SENDS[r["message_key"]]["kind"] == "ok")


def test_no_check_fails_on_the_real_tiered_store(tiered_run):
    """The real store with its tier: every check passes or is not applicable."""
    _summary, _run, _lineage, outcomes = tiered_run
    failed = {name: o.examples[:2] for name, o in outcomes.items() if not o.passed}
    assert failed == {}


def test_without_the_tier_the_deleted_records_are_gone_and_the_metadata_is_named(tmp_path):
    """Imported without --tiered the same store lacks the records retention deleted, and the
    summary names the tier's metadata file."""
    summary = import_store(DATA / "store", tmp_path / "local", broker=BROKER)
    assert summary.tiered is None and "config/tieredStoreMetadata.json" in summary.store_items_5x
    assert not any(r["file_name"].startswith("tier:") for r in _rows(tmp_path / "local"))
    assert {r["uniq_key"] for r in _rows(tmp_path / "local") if r["topic"] == TOPIC} < set(SENDS)


def test_without_the_local_consume_queue_the_offset_is_unknown(tmp_path):
    """When no local consume-queue unit names a deleted record any more, its tier copy comes back
    with a negative phys_offset and no msg_id, each its own."""
    store, tier = _copy(tmp_path)
    shutil.rmtree(store / "consumequeue" / TOPIC)
    summary = import_store(store, tmp_path / "run", broker=BROKER, tiered=tier)
    rows = [r for r in _rows(tmp_path / "run") if r["phys_offset"] < 0]
    assert len(rows) == summary.tiered.offset_unknown > 0
    assert all(r["topic"] == TOPIC and r["msg_id"] is None for r in rows)
    assert sorted(r["phys_offset"] for r in rows) == list(range(-len(rows), 0))


def test_the_same_chains_in_a_log_said_to_be_whole_fail_the_grammar(tiered_run, tmp_path):
    """The SCHEDULE hops are forgiven only because retention deleted the files they were in: the
    same records with runs.first_offset set to 0 (a log from its start) fail hop_grammar_valid on
    every retried message whose SCHEDULE is missing, and nothing is truncated."""
    _summary, run, lineage, _outcomes = tiered_run
    broken = tmp_path / "broken"
    shutil.copytree(run / "parquet", broken / "parquet")
    [part] = (broken / "parquet" / "runs").iterdir()
    table = pq.read_table(part)
    column = table.schema.get_field_index("first_offset")
    pq.write_table(table.set_column(column, table.schema.field(column), pc.multiply(table.column(column), 0)), part)
    lineage_broken, outcomes = _lineage_and_checks(broken, tmp_path)
    grammar = outcomes[c.HOP_GRAMMAR]
    truncated = {r["message_key"] for r in lineage if r["truncated"]}
    assert truncated and not any(r["truncated"] for r in lineage_broken)
    assert not grammar.passed and {e["message_key"] for e in grammar.examples} <= truncated, grammar.examples


def test_bad_tiered_arguments_are_refused(tmp_path, capsys):
    """--tiered with a path that is no tier, or with --live: exit 2, one line naming it, no run."""
    assert main(["import-store", str(DATA / "store"), "--out", str(tmp_path / "a"), "--tiered",
                 str(tmp_path / "nowhere")]) == 2
    assert "tiered store directory does not exist" in capsys.readouterr().err
    assert main(["import-store", str(DATA / "store"), "--out", str(tmp_path / "b"), "--tiered",
                 str(DATA / "tier"), "--live"]) == 2
    assert "--tiered" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    with pytest.raises(BadInputError, match="--role slave"):
        import_store(DATA / "store", tmp_path / "c", broker=BROKER, role="slave", tiered=DATA / "tier")


def test_importing_again_without_the_tier_drops_its_rows(tmp_path, capsys):
    """The run is what the last import read: the broker imported with --tiered (--json gives the
    tier's counts), then without it, holds no tier row."""
    run = tmp_path / "run"
    assert main(["import-store", str(DATA / "store"), "--out", str(run), "--broker", BROKER, "--tiered",
                 str(DATA / "tier"), "--json", "-q"]) == 0
    tier = json.loads(capsys.readouterr().out)["tiered"]
    assert tier["added"] == sum(tier["added_by_topic"].values()) > 0 and tier["problems"] == 0
    assert any(r["file_name"].startswith("tier:") for r in _rows(run))
    import_store(DATA / "store", run, broker=BROKER)
    assert not any(r["file_name"].startswith("tier:") for r in _rows(run))
    assert not (run / "parquet" / "commitlog" / tier_part_name(BROKER)).exists()


def test_a_record_the_tier_copied_twice_is_one_row(tmp_path):
    """A queue's tier log holding a record twice (a crash between the broker's commit-log and
    consume-queue uploads makes it copy the record again) gives one row, counted as a duplicate."""
    store, tier = _copy(tmp_path)
    [log] = [p for p in tier.rglob("cfcd2084*") if p.parent.name == "COMMIT_LOG" and p.parent.parent.name == "0"
             and p.parent.parent.parent.name == TOPIC]
    data = log.read_bytes()
    size = int.from_bytes(data[:4], "big")
    # The copy, uploaded again, carries its own position as PHYSICALOFFSET (bytes 28-35).
    copy = data[:28] + len(data).to_bytes(8, "big") + data[36:size]
    log.write_bytes(data + copy)
    summary = import_store(store, tmp_path / "run", broker=BROKER, tiered=tier)
    clean = import_store(DATA / "store", tmp_path / "clean", broker=BROKER, tiered=DATA / "tier")
    assert summary.tiered.duplicates == 1 and summary.tiered.added == clean.tiered.added
    assert summary.tiered.problems == []
