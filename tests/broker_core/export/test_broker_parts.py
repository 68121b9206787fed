"""import_store with broker=: several brokers' stores in one run directory, one broker replaced at a time."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from broker_core.errors import BadInputError, CorruptStoreError
from broker_core.export.broker_parts import part_name
from broker_core.export.parquet import read_table
from broker_core.export.schema import RAW_TABLES
from broker_core.export.store_import import import_store
from broker_core.store.config_files import save_consumer_offsets

BROKER_TABLES = [t for t, schema in RAW_TABLES.items() if "broker" in schema.names]


def _rows_by_broker(run, table):
    out: dict[str, int] = {}
    for row in read_table(run, table).to_pylist():
        out[row["broker"]] = out.get(row["broker"], 0) + 1
    return out


def test_two_brokers_share_one_run_each_in_its_own_files(store_fixtures, writable_store_copy, tmp_path):
    """Two stores imported with --broker into one run keep both brokers' rows, each table in one
    part-<broker>.parquet per broker, a runs row per broker, the broker on every row."""
    other = writable_store_copy("store-clean")
    save_consumer_offsets(other / "config", {"OrderTopic@GroupA": {0: 3}})
    run = tmp_path / "cluster"
    first = import_store(store_fixtures / "store-clean", run, broker="broker-a")
    second = import_store(other, run, broker="broker-b")
    assert (first.brokers, second.brokers) == (["broker-a"], ["broker-a", "broker-b"])
    for table in RAW_TABLES:
        assert sorted(p.name for p in (run / "parquet" / table).iterdir()) == \
            [part_name("broker-a"), part_name("broker-b")], table
    assert _rows_by_broker(run, "commitlog") == {"broker-a": 112, "broker-b": 112}
    assert _rows_by_broker(run, "consumer_offsets") == {"broker-b": 1}
    assert _rows_by_broker(run, "delay_offsets") == {"broker-a": 2, "broker-b": 2}
    runs = sorted(read_table(run, "runs").to_pylist(), key=lambda r: r["broker"])
    assert [(r["run_id"], r["broker"], r["records_written"], r["msg_id_hosts"]) for r in runs] == [
        ("cluster", "broker-a", 112, ["C0A8000100002A9F"]), ("cluster", "broker-b", 112, ["C0A8000100002A9F"])]
    for table in BROKER_TABLES:
        assert None not in _rows_by_broker(run, table), table


def test_importing_a_broker_again_replaces_only_its_rows(store_fixtures, tmp_path):
    """Re-importing broker-a (another store) replaces broker-a's rows; broker-b's files are the same
    bytes as before."""
    run = tmp_path / "cluster"
    import_store(store_fixtures / "store-clean", run, broker="broker-a")
    import_store(store_fixtures / "store-clean", run, broker="broker-b")
    kept = {t: (run / "parquet" / t / part_name("broker-b")).read_bytes() for t in RAW_TABLES}
    import_store(store_fixtures / "store-crashed", run, broker="broker-a")
    assert _rows_by_broker(run, "commitlog") == {"broker-a": 111, "broker-b": 112}
    assert _rows_by_broker(run, "store_problems") == {"broker-a": 4}
    for table, data in kept.items():
        assert (run / "parquet" / table / part_name("broker-b")).read_bytes() == data, table
    assert len(read_table(run, "runs")) == 2


def test_a_failed_import_of_one_broker_leaves_the_run_as_it_was(store_fixtures, tmp_path):
    """A broker import that fails (damage under strict) leaves every file of the run untouched and
    nothing temporary beside it."""
    run = tmp_path / "cluster"
    import_store(store_fixtures / "store-clean", run, broker="broker-a")
    import_store(store_fixtures / "store-clean", run, broker="broker-b")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")}
    with pytest.raises(CorruptStoreError):
        import_store(store_fixtures / "store-crashed", run, broker="broker-b", strict=True)
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster"]


def test_without_broker_the_whole_run_is_replaced(store_fixtures, tmp_path):
    """An import without broker= replaces a run of several brokers whole (broker = the run id)."""
    run = tmp_path / "cluster"
    import_store(store_fixtures / "store-clean", run, broker="broker-a")
    import_store(store_fixtures / "store-clean", run, broker="broker-b")
    summary = import_store(store_fixtures / "store-crashed", run)
    assert summary.brokers == ["cluster"]
    assert _rows_by_broker(run, "commitlog") == {"cluster": 111}
    assert [p.name for p in (run / "parquet" / "commitlog").iterdir()] == [part_name("cluster")]


def test_a_broker_is_added_only_to_a_run_of_imported_brokers(store_fixtures, tmp_path):
    """Adding a broker is refused, leaving the directory alone, when it holds a simulation, another
    run id, files without a broker column, or is not a run; a bad broker name is refused first."""
    from broker_core.sim.run import simulate

    sim = tmp_path / "sim"
    simulate(Path(__file__).parents[2] / "golden" / "tiny.yaml", sim)
    with pytest.raises(BadInputError, match="holds a simulation run"):
        import_store(store_fixtures / "store-clean", sim, broker="broker-b")
    assert pq.read_table(sim / "parquet" / "runs").column("source").to_pylist() == ["simulation"]

    run = tmp_path / "cluster"
    import_store(store_fixtures / "store-clean", run, broker="broker-a")
    with pytest.raises(BadInputError, match="holds run 'cluster', not 'other'"):
        import_store(store_fixtures / "store-clean", run, name="other", broker="broker-b")

    legacy = tmp_path / "legacy"
    import_store(store_fixtures / "store-clean", legacy, broker="broker-a")
    offsets = legacy / "parquet" / "consumer_offsets" / part_name("broker-a")
    pq.write_table(pq.read_table(offsets).drop_columns(["broker"]), legacy / "parquet" / "consumer_offsets"
                   / "part-00000.parquet")
    with pytest.raises(BadInputError, match="no broker column"):
        import_store(store_fixtures / "store-clean", legacy, broker="broker-b")
    commitlog = legacy / "parquet" / "commitlog"
    (commitlog / part_name("broker-a")).rename(commitlog / "part-00000.parquet")
    (offsets.parent / "part-00000.parquet").unlink()
    with pytest.raises(BadInputError, match="holds rows of broker 'broker-a'"):
        import_store(store_fixtures / "store-clean", legacy, broker="broker-a")

    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(BadInputError, match="not a run directory"):
        import_store(store_fixtures / "store-clean", stray, broker="broker-a")
    assert (stray / "notes.txt").read_text() == "mine"
    for bad in ("", ".hidden", "a/b", "broker a"):
        with pytest.raises(BadInputError, match="broker name"):
            import_store(store_fixtures / "store-clean", tmp_path / "x", broker=bad)
    assert not (tmp_path / "x").exists()
