"""Stores whose oldest commit-log files retention deleted, on real bytes: import -> lineage -> warehouse.

RocketMQ's CleanCommitLogService deletes the oldest commit-log files once they are older than
fileReservedTime, so a production store's log starts past offset 0 and some messages' first hops
are gone. The 4.9.4 fixture stores (clean and crashed) and a simulated broker's store are imported
whole and without their oldest one and two files; the lineage runs once over all of them (and
over the simulation itself), on DuckDB from the same SQL as Spark's (tests/bench/test_duckdb_lineage.py
holds the two engines row-identical on these fixtures cut by retention), and the warehouse checks
judge each run. Three more runs are the
clean store without its oldest file and with one more record gone where retention cannot have
taken it: inside a chain, near its end, and the head of a chain whose head is past the cut.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from assets import checks as c
from broker_core.export.parquet import read_table
from tests.conftest import STORE_FIXTURES, drop_oldest_commitlog_files

MANIFEST = json.loads((STORE_FIXTURES / "manifest.json").read_text())
FIXTURE_FILE_SIZE = MANIFEST["storeConfig"]["mappedFileSizeCommitLog"]
CUTS = (1, 2)  # oldest commit-log files deleted
FIXTURES = {"clean": "store-clean", "crashed": "store-crashed"}
# A simulated broker whose 64 KiB commit-log files roll several times while messages still retry:
# a cut through its log leaves chains that lost their PUBLISH and some of their retries.
SIM_SCENARIO = """
name: retention
seed: 3
horizon: 20m
broker:
  commitlog_file_size: 64KiB
  cq_units_per_file: 64
  message_delay_level: "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"
topics:
  - {name: OrderTopic, queues: 2}
  - {name: PayTopic, queues: 2}
groups:
  - name: flaky
    subscribe: [OrderTopic]
    consumers: 2
    max_reconsume_times: 3
    behavior: {consume_time: 2ms, fail_probability: 0.3, poison_fraction: 0.15}
  - name: payer
    subscribe: [PayTopic]
    consumers: 1
    behavior: {consume_time: 2ms, fail_probability: 0.1}
producers:
  - {topic: OrderTopic, messages: 240, rate: 8/s, body_size: 64, delay_level: {0: 0.8, 2: 0.2}}
  - {topic: PayTopic, messages: 120, rate: 4/s, body_size: 64}
"""
SIM_RUN = "retention"  # the simulation itself (its run id is the scenario's name)
# Records that go missing in the clean store without its oldest file, beyond what retention took:
# run id -> (phys_offset, message, the check that must name it, a piece of its detail).
DLQ_KEY = "C00002027C225FFD2B276D1F615F0001"  # P 363 | S 24710, R 36492, S 42650, R 46787, DLQ 51417
PAY_KEY = "C00002027C225FFD2B276D1F61760032"  # P 23169, S 28847, R 40581: its head is past the cut
BROKEN = {
    "clean-cut1-middle": (36492, DLQ_KEY, c.HOP_GRAMMAR, "SCHEDULE > SCHEDULE > RETRY > DLQ is not"),
    "clean-cut1-end": (42650, DLQ_KEY, c.HOP_GRAMMAR, "SCHEDULE > RETRY > RETRY > DLQ is not"),
    "clean-cut1-head": (23169, PAY_KEY, c.ORIGIN_STABLE, "C0A8000100002A9F0000000000005A81 is neither"),
}


def _merge_into(run: Path, combined: Path) -> None:
    """Hard-link a run's Parquet files into ``combined``, one folder per table."""
    for part in (run / "parquet").glob("*/*.parquet"):
        target = combined / "parquet" / part.parent.name / f"{run.name}-{part.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.hardlink_to(part)


def _import(store: Path, runs: Path, run_id: str, count: int) -> Path:
    """Import a copy of ``store`` without its ``count`` oldest commit-log files as ``run_id``."""
    from broker_core.export.store_import import import_store

    copy = runs.parent / "stores" / run_id
    shutil.copytree(store, copy)
    drop_oldest_commitlog_files(copy, count)
    # A clean store stays clean without its oldest files: strict mode must accept it.
    import_store(copy, runs / run_id, strict="crashed" not in run_id)
    return runs / run_id


def _lose_record(run: Path, phys: int) -> None:
    """The record at ``phys`` is gone from the run's commit log (as if never stored)."""
    [part] = (run / "parquet" / "commitlog").glob("*.parquet")
    table = pq.read_table(part)
    kept = table.filter(pc.not_equal(table.column("phys_offset"), phys))
    assert kept.num_rows == table.num_rows - 1, f"no record at {phys}"
    pq.write_table(kept, part)


@pytest.fixture(scope="module")
def retained(tmp_path_factory):
    """The warehouse over every run, read only, and the run directories by run id."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse, open_read_only
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario_text

    root = tmp_path_factory.mktemp("retention")
    runs, combined = root / "runs", root / "all"
    dirs = {}
    for label, fixture in FIXTURES.items():
        for count in (0, *CUTS):
            run_id = label if count == 0 else f"{label}-cut{count}"
            dirs[run_id] = _import(STORE_FIXTURES / fixture, runs, run_id, count)
    for run_id, (phys, _key, _check, _detail) in BROKEN.items():
        dirs[run_id] = _import(STORE_FIXTURES / "store-clean", runs, run_id, 1)
        _lose_record(dirs[run_id], phys)
    dirs[SIM_RUN] = runs / SIM_RUN
    simulate(SIM_RUN, dirs[SIM_RUN], scenario=load_scenario_text(SIM_SCENARIO, source=SIM_RUN))
    for count in (0, *CUTS):
        run_id = "sim-store" if count == 0 else f"sim-store-cut{count}"
        dirs[run_id] = _import(dirs[SIM_RUN] / "store", runs, run_id, count)
    for run in dirs.values():
        _merge_into(run, combined)
    run_lineage_duckdb(combined)
    db = build_warehouse([combined], root / "warehouse.duckdb").db_path
    con = open_read_only(db)
    yield con, dirs
    con.close()


def _lineage(con, run_id: str) -> dict[tuple, dict]:
    rows = con.execute('SELECT message_key, "group", final_state, retries, origin_topic, truncated, path '
                       "FROM message_lineage WHERE run_id = ?", [run_id]).fetchall()
    return {(r[0], r[1]): dict(zip(("final_state", "retries", "origin_topic", "truncated", "path"), r[2:],
                                   strict=True)) for r in rows}


def _cut_runs(label: str) -> list[tuple[str, str]]:
    return [(f"{label}-cut{n}", label) for n in CUTS]


CUT_RUNS = [run for label in ("clean", "crashed", "sim-store") for run in _cut_runs(label)]
SOUND_RUNS = ["clean", "crashed", "sim-store", SIM_RUN] + [cut for cut, _whole in CUT_RUNS]


def test_every_invariant_passes_with_or_without_the_oldest_files(retained):
    """Whole or cut by retention, clean, crashed or simulated: no blocking check fails."""
    con, _dirs = retained
    verdicts = c.run_checks_per_run(con, SOUND_RUNS, c.INVARIANTS)
    failed = {run: {o.check.name: o.examples[:2] for o in outcomes if not o.passed}
              for run, outcomes in verdicts.items()}
    assert failed == {run: {} for run in SOUND_RUNS}


def test_first_offset_is_the_first_file_left(retained):
    """runs.first_offset is 0 for a whole store and the first file's name after retention."""
    con, _dirs = retained
    got = dict(con.execute("SELECT run_id, first_offset FROM runs").fetchall())
    for label in FIXTURES:
        assert [got[label], *(got[f"{label}-cut{n}"] for n in CUTS)] == [0, *(n * FIXTURE_FILE_SIZE for n in CUTS)]
    assert got[SIM_RUN] is None and got["sim-store"] == 0
    assert [got[f"sim-store-cut{n}"] for n in CUTS] == [n * 64 * 1024 for n in CUTS]


def _records_by_message(con, run_id: str) -> dict[str, list[int]]:
    rows = con.execute("SELECT uniq_key, list(phys_offset ORDER BY phys_offset) FROM commitlog "
                       "WHERE run_id = ? GROUP BY uniq_key", [run_id]).fetchall()
    return dict(rows)


@pytest.mark.parametrize("cut, whole", CUT_RUNS)
def test_truncated_marks_exactly_the_chains_that_started_before_the_log(retained, cut, whole):
    """A chain is truncated when its message has records on both sides of the first offset; whole
    runs and the simulation mark none."""
    con, _dirs = retained
    first = con.execute("SELECT first_offset FROM runs WHERE run_id = ?", [cut]).fetchone()[0]
    if whole in FIXTURES:
        # The fixture's manifest lists every message's records (the crashed store lost its last one).
        valid_end = 54903 if whole == "crashed" else MANIFEST["commitLogMaxPhysicalOffset"]
        records = {key: [p for p in spec["records"] if p < valid_end] for key, spec in MANIFEST["uniqKeys"].items()}
    else:
        records = _records_by_message(con, whole)
    expected = {key for key, offsets in records.items()
                if min(offsets) < first and any(p >= first for p in offsets)}
    marked = {key for (key, _group), row in _lineage(con, cut).items() if row["truncated"]}
    assert marked == expected and expected
    for run in (whole, SIM_RUN):
        assert not any(row["truncated"] for row in _lineage(con, run).values()), run


@pytest.mark.parametrize("cut, whole", CUT_RUNS)
def test_a_truncated_chain_keeps_its_final_state_retries_and_origin_topic(retained, cut, whole):
    """Every chain left after the cut has the final state, retries and origin topic of the whole
    store's chain (a truncated one counts retries its RETRY hops no longer show)."""
    con, _dirs = retained
    whole_rows, cut_rows = _lineage(con, whole), _lineage(con, cut)
    assert cut_rows and set(cut_rows) <= set(whole_rows)
    facts = ("final_state", "retries", "origin_topic")
    assert {k: [row[f] for f in facts] for k, row in cut_rows.items()} == \
        {k: [whole_rows[k][f] for f in facts] for k in cut_rows}
    if whole == "sim-store":
        # The simulated cut goes through retry sequences: retries the records count, not the hops.
        assert any(row["retries"] > row["path"].count("%RETRY%") for row in cut_rows.values() if row["truncated"])


def test_dlq_messages_keep_the_retries_the_manifest_records(retained):
    """Each DLQ message of the fixture shows the retries the manifest says, in every run its DLQ
    record is in (the crashed store tore the last one)."""
    con, _dirs = retained
    dlq = {key: int(re.search(r"after (\d+) retries", spec["finalState"]).group(1))
           for key, spec in MANIFEST["uniqKeys"].items() if spec["finalState"].startswith("DLQ")}
    assert len(dlq) == 8
    torn = {key for key, spec in MANIFEST["uniqKeys"].items() if 54903 in spec["records"]}
    assert len(torn) == 1 and torn <= set(dlq)
    for label in FIXTURES:
        for run in (label, *(f"{label}-cut{n}" for n in CUTS)):
            rows = {key: row for (key, _g), row in _lineage(con, run).items()
                    if key in dlq and not (label == "crashed" and key in torn)}
            assert len(rows) == (8 if label == "clean" else 7), run
            assert {key: (row["final_state"], row["retries"]) for key, row in rows.items()} == \
                {key: ("DLQ", dlq[key]) for key in rows}, run


@pytest.mark.parametrize("run_id", list(BROKEN))
def test_a_record_lost_where_retention_cannot_have_taken_it_fails(retained, run_id):
    """A record missing inside a truncated chain, near its end, or at the head of a chain that
    starts past the cut is named by the check that guards the rule it breaks."""
    con, _dirs = retained
    _phys, key, check, detail = BROKEN[run_id]
    outcome = c.run_check(con, c.CHECKS_BY_NAME[check], run_id)
    assert [e["message_key"] for e in outcome.examples] == [key], outcome.examples
    assert detail in outcome.examples[0]["detail"]


def test_the_cut_stores_import_only_what_is_left(retained):
    """Each cut import holds exactly the whole import's records at or after its first offset."""
    _con, dirs = retained
    for cut, whole in CUT_RUNS:
        first = read_table(dirs[cut], "runs").column("first_offset")[0].as_py()
        kept = [p for p in read_table(dirs[whole], "commitlog").column("phys_offset").to_pylist() if p >= first]
        assert read_table(dirs[cut], "commitlog").column("phys_offset").to_pylist() == kept, cut
