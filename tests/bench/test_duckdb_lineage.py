"""The lineage's SQL files write the same rows, in the same order and types, on DuckDB as on Spark.

``assets/sql/lineage/`` is the one text of the lineage's rules; Spark (``run_lineage``) and DuckDB
(``assets.lineage_duckdb``, the ``--engine duckdb`` lineage and P4's baseline) run it. What can
still differ is each engine's reading of the text (NULL order, a function's edge cases) and what
each runner does between the steps. One run directory holds several runs side by
side (their run ids differ): simulated runs with faults and several groups, the real 4.9.4 store
fixtures imported (committed offsets, no deliveries), whole and without their oldest commit-log
files (truncated chains), and the lineage tests' hand-built journeys (records without UNIQ_KEY, a
crash-reused offset, LOST sends, a message without groups, heads deleted by retention, POP records
in flight at the snapshot, past their revive time without a retry, and acked, 5.x inner batches
unwrapped and not), and the transactional stores real 4.9.4 and 5.3.3 brokers wrote (half copies,
commits, rollbacks decided by op records, a discard).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.lineage_duckdb import write_lineage
from bench.lineage_scale import _duck
from broker_core.export.parquet import write_rows
from broker_core.export.schema import FINAL_STATES, LINEAGE_TABLES
from tests.conftest import drop_oldest_commitlog_files

TESTS = Path(__file__).resolve().parents[1]
SCENARIOS = TESTS.parent / "scenarios"
sys.path.insert(0, str(TESTS / "assets"))
import test_lineage as hand  # noqa: E402  (the hand-built journeys of the Spark lineage tests)
import test_lineage_5x as hand5  # noqa: E402  (5.x: timer messages, bookkeeping, POP retry topics)
import test_lineage_pop as hand_pop  # noqa: E402  (5.x POP: retry_topics and pop_evidence)

SIMULATED = ("small", "fault-broker-crash", "story-delay-offset-not-persisted")
SWARM_SCENARIOS = 3  # random scenarios, seeds seed .. seed + 2
IMPORTED = ("store-clean", "store-crashed")
# Imported again without their oldest commit-log files: (fixture, files retention deleted).
RETAINED = (("store-clean", 1), ("store-crashed", 2))
# Real transactional stores (tests/data).
TRANSACTIONAL = ("rocketmq-4.9.4-transactions", "rocketmq-5.3.3-transactions")


def _restored_old_client() -> list[dict]:
    """In the cut run (its log starts at 1000), an old client's message (no UNIQ_KEY) whose PUBLISH
    at 900 a tiered store's import brought back below the first offset, and its send-back naming
    it: the record is restored, so the chain is not truncated. Written in slices, the restored
    record must reach every slice's records, whatever its (null) key."""
    publish = hand._cut(900, "Cut", 900, None, born_at=895, crc=33)
    publish["msg_id"] = hand.offset_id(900)
    retry = dict(origin=hand.offset_id(900), delay=3, reconsume=1, born_at=895, crc=33, **hand._RETRY_GC)
    return [publish, hand._cut(2500, "SCHEDULE_TOPIC_XXXX", 2500, None, queue_id=2, **retry),
            hand._cut(2600, "%RETRY%Gc", 12600, None, **retry)]


def _merge_into(run: Path, combined: Path) -> None:
    """Hard-link a run's Parquet files into ``combined``, one folder per table."""
    for part in (run / "parquet").glob("*/*.parquet"):
        target = combined / "parquet" / part.parent.name / f"{run.name}-{part.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.hardlink_to(part)


def swarm_seeds(seed: int) -> list[int]:
    return list(range(seed, seed + SWARM_SCENARIOS))


@pytest.fixture
def runs(tmp_path, store_fixtures, seed) -> Path:
    """One run directory holding every run above."""
    from broker_core.export.store_import import import_store
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario_text
    from broker_core.sim.swarm import random_scenario_yaml

    root = tmp_path / "runs"
    combined = root / "all"
    for name in SIMULATED:
        simulate(SCENARIOS / f"{name}.yaml", root / name)
        _merge_into(root / name, combined)
    for k in swarm_seeds(seed):
        name = f"swarm-{k}"
        simulate(name, root / name, scenario=load_scenario_text(random_scenario_yaml(k), source=name))
        _merge_into(root / name, combined)
    for name in IMPORTED:
        import_store(store_fixtures / name, root / name)
        _merge_into(root / name, combined)
    for name in TRANSACTIONAL:
        run_name = name.replace(".", "")
        import_store(TESTS / "data" / name, root / run_name)
        _merge_into(root / run_name, combined)
    # A real 5.3.3 store imported with its tiered store: records below the first offset, chains
    # whose SCHEDULE hops retention deleted.
    tiered = TESTS / "data" / "rocketmq-5.3.3-tiered"
    import_store(tiered / "store", root / "tiered-533", tiered=tiered / "tier")
    _merge_into(root / "tiered-533", combined)
    for name, count in RETAINED:
        cut = f"{name}-cut{count}"
        shutil.copytree(store_fixtures / name, root / "stores" / cut)
        drop_oldest_commitlog_files(root / "stores" / cut, count)
        import_store(root / "stores" / cut, root / cut)
        _merge_into(root / cut, combined)
    built = root / "hand-built" / "parquet"
    write_rows(built, "commitlog", hand.PLAIN + hand.DELAYED + hand.TWO_GROUPS + hand.NO_UNIQ
               + hand.STATES + hand.IMPORTED + hand.manifest_commitlog() + hand.TRUNCATED + hand.HEADLESS
               + hand.CROSS_BROKER + hand5.TIMER_ROLLED + hand5.TIMER_WAITING + hand5.TIMER_PAST
               + hand5.BOOKKEEPING + hand5.POP_V2 + hand5.RECALLED + hand5.INNER_BATCHES + [hand5.UNWRAPPED_BATCH]
               + hand_pop.COMMITLOG_ROWS
               + hand.INTERLEAVED + hand.OUTAGE_REPUT + _restored_old_client())
    write_rows(built, "retry_topics", hand_pop.OWNERS)
    write_rows(built, "inner_messages", hand5.INNER_MESSAGES)
    write_rows(built, "pop_evidence", hand_pop.EVIDENCE)
    write_rows(built, "runs", hand.CUT_RUNS + hand.TWO_BROKER_RUNS + hand.OUTAGE_RUNS + hand_pop.RUNS_ROWS)
    write_rows(built, "consume_attempts", hand.DELAYED_ATTEMPTS + hand.TWO_GROUPS_ATTEMPTS
               + hand.NO_UNIQ_ATTEMPTS + hand.STATES_ATTEMPTS)
    write_rows(built, "consumer_offsets", hand.IMPORTED_OFFSETS + hand5.OFFSETS + hand5.FORMS_OFFSETS + hand5.INNER_OFFSETS
               + hand_pop.OFFSETS)
    write_rows(built, "produced", hand.STATES_PRODUCED)
    _merge_into(root / "hand-built", combined)
    return combined


def _read_parts(folder: Path) -> pa.Table:
    """An output table: its part files concatenated in name order (run_id order, by run)."""
    return pa.concat_tables([pq.read_table(part) for part in sorted(folder.glob("part-*.parquet"))])


# Slices of at most this many hops (write_lineage's slice_hops), small enough that every run of
# more than a few messages is written in several: keys, LOST sends and lookups cut at slice bounds.
SMALL_SLICE_HOPS = 40


@pytest.mark.parametrize(("by_run", "slice_hops"), [(False, None), (True, None), (True, SMALL_SLICE_HOPS)],
                         ids=["whole", "by-run", "by-run-sliced"])
def test_duckdb_writes_the_spark_lineage_rows_in_order(spark, runs, tmp_path, seed, by_run, slice_hops):
    """The lineage SQL on DuckDB writes Spark's rows, in Spark's order and contract types."""
    from assets.lineage import run_lineage

    counts = run_lineage(runs, spark)
    out = tmp_path / "duckdb"
    out.mkdir()
    con = _duck()
    try:
        done = []
        sliced = {} if slice_hops is None else {"slice_hops": slice_hops}
        duck_counts = write_lineage(con, runs, out, by_run=by_run, progress=lambda k, n: done.append((k, n)),
                                    **sliced)
        if by_run:
            assert len(done) >= len(SIMULATED) + SWARM_SCENARIOS + len(IMPORTED) + len(RETAINED) + 1
            assert done[-1] == (len(done), len(done))
        assert duck_counts == counts
        if slice_hops is not None:
            # Runs above the slice size were written in slices, a part file each.
            parts = sorted(p.name for p in (out / "message_hops").glob("part-*.parquet"))
            assert len(parts) > len(done) and any(name.count("-") == 2 for name in parts), parts
    finally:
        con.close()
    for name, schema in LINEAGE_TABLES.items():
        expected = _read_parts(runs / "lineage" / name)
        got = _read_parts(out / name)
        # Both in the contract's types as written (DuckDB's times in ms, every column nullable).
        assert expected.schema == got.schema == schema, (expected.schema, got.schema)
        assert got.num_rows == counts[name] > 0, name
        # Every journey kind is present, so a rule the baseline skipped would show.
        if name == "message_lineage":
            states = set(expected.column("final_state").to_pylist())
            assert states == set(FINAL_STATES), states
            # POP: in flight at the snapshot, revive pending, acked (hand_pop.STATES).
            assert set(expected.column("invisible_until").to_pylist()) > {None}
            assert set(expected.column("truncated").to_pylist()) == {True, False}
            # An unwrapped inner batch: its messages are there, the batch record's UNIQ_KEY is not.
            keys = set(expected.column("message_key").to_pylist())
            assert {m["uniq_key"] for m in hand5.INNER_MESSAGES} <= keys and "U18" not in keys
            # Transactions: every outcome a real broker left.
            assert set(expected.column("transaction_state").to_pylist()) == {
                None, "COMMITTED", "ROLLED_BACK", "DISCARDED"}
            runs_built = (len(SIMULATED) + SWARM_SCENARIOS + len(IMPORTED) + len(RETAINED) + len(TRANSACTIONAL)
                          + 1)
            assert len(set(expected.column("run_id").to_pylist())) >= runs_built
        if not got.equals(expected):
            diff = [(i, a, b) for i, (a, b) in enumerate(zip(got.to_pylist(), expected.to_pylist(), strict=True))
                    if a != b][:3]
            pytest.fail(f"{name}: DuckDB and Spark rows differ (row, duckdb, spark): {diff}; swarm "
                        f"seeds {swarm_seeds(seed)}; reproduce: SEED={seed} python -m pytest "
                        "tests/bench/test_duckdb_lineage.py")


def test_the_hand_built_runs_in_slices_of_two_hops_are_their_rows_in_one_piece(runs, tmp_path):
    """The hand-built journeys (small runs, below the Spark comparison's slice size) written in
    slices of two hops, against the same runs written whole: the same rows in the same order. Among
    them, in the cut run, an old client's record restored below the first offset, which its
    send-back names (``_restored_old_client``)."""
    built = runs.parent / "hand-built"
    tables = {}
    for name, slice_hops in (("whole", 10**9), ("sliced", 2)):
        out = tmp_path / name
        out.mkdir()
        con = _duck()
        try:
            write_lineage(con, built, out, slice_hops=slice_hops)
        finally:
            con.close()
        tables[name] = {table: _read_parts(out / table) for table in LINEAGE_TABLES}
        parts = list((out / "message_hops").glob("part-*.parquet"))
        assert (len(parts) > 20) == (name == "sliced"), (name, len(parts))
    for table in LINEAGE_TABLES:
        whole, sliced = tables["whole"][table], tables["sliced"][table]
        assert whole.num_rows > 0, table
        if not sliced.equals(whole):
            diff = [(i, a, b) for i, (a, b) in enumerate(zip(sliced.to_pylist(), whole.to_pylist(), strict=True))
                    if a != b][:3]
            pytest.fail(f"{table}: rows written in slices differ from the whole run's (row, sliced, whole): {diff}")
    restored = [r for r in tables["whole"]["message_lineage"].to_pylist()
                if r["message_key"] == hand.offset_id(900)]
    assert [(r["group"], r["truncated"], r["hops"]) for r in restored] == [("Gc", False, 3)], restored
