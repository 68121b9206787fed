"""``import-store --engine spark`` writes what the local engine writes, on the test run's session.

Each store is imported twice, by the local engine and by Spark tasks (one per commit-log file),
and every Parquet file of the two run directories must be byte-identical (the rows sorted or not,
the row groups, the problems), but for the runs table's wall_seconds.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from assets.spark_import import SparkStoreReader, local_path
from broker_core.errors import BadInputError
from broker_core.export.store_import import import_store
from broker_core.sim.run import simulate
from orchestration.cli import main

ROOT = Path(__file__).resolve().parents[2]
FILE_SIZE = "64KiB"  # the scenarios' commit logs roll over into several files of this size


def spark_import(store: Path, out: Path, spark, **kwargs):
    return import_store(store, out, reader_factory=lambda root, **kw: SparkStoreReader(
        root, spark, stage_parent=out.absolute().parent, **kw), **kwargs)


def assert_same_run(local: Path, other: Path) -> None:
    files = sorted(p.relative_to(local) for p in local.rglob("*.parquet"))
    assert files and files == sorted(p.relative_to(other) for p in other.rglob("*.parquet"))
    for rel in files:
        if rel.parts[1] == "runs":
            a, b = (pq.read_table(d / rel).drop_columns(["wall_seconds"]) for d in (local, other))
            assert a.equals(b), rel
            continue
        assert (other / rel).read_bytes() == (local / rel).read_bytes(), rel
    for table in ("commitlog", "store_problems"):
        a, b = (pq.read_table(d / "parquet" / table) for d in (local, other))
        keys = [("phys_offset", "ascending")] if table == "commitlog" else [("offset", "ascending")]
        assert a.sort_by(keys).to_pylist() == b.sort_by(keys).to_pylist()


def summary_facts(summary) -> dict:
    # store_bytes_read counts the reads each engine made (Spark tasks read their slices with margins).
    return {k: v for k, v in summary.to_json().items() if k not in ("out_dir", "wall_seconds", "store_bytes_read")}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict[str, Path]:
    """Simulated stores of several small commit-log files: clean, a torn write, a broker crash."""
    stores = {}
    for scenario in ("small", "fault-torn-write", "fault-broker-crash"):
        base = tmp_path_factory.mktemp("sim")
        text = (ROOT / "scenarios" / f"{scenario}.yaml").read_text()
        assert "commitlog_file_size: 1MiB" in text
        (base / "scenario.yaml").write_text(text.replace("commitlog_file_size: 1MiB", f"commitlog_file_size: {FILE_SIZE}"))
        simulate(base / "scenario.yaml", base / scenario)
        stores[scenario] = base / scenario / "store"
    return stores


@pytest.mark.parametrize("name", ["store-clean", "store-crashed"])
def test_real_4_9_4_stores_import_alike_on_spark(spark, store_fixtures, tmp_path, name):
    """A real 4.9.4 store (four 16 KiB files, clean or after a crash) imported by Spark tasks gives
    the local engine's files, rows and problems."""
    store = store_fixtures / name
    local = import_store(store, tmp_path / "local", name="run")
    remote = spark_import(store, tmp_path / "spark", spark, name="run")
    assert summary_facts(remote) == summary_facts(local)
    assert_same_run(tmp_path / "local", tmp_path / "spark")
    assert remote.commitlog_files == 4 and remote.records > 100


@pytest.mark.parametrize("scenario", ["small", "fault-torn-write", "fault-broker-crash"])
def test_simulated_multi_file_stores_import_alike_on_spark(spark, simulated, tmp_path, scenario):
    """A simulated store of several commit-log files, damaged or not, gives the same tables from
    the Spark tasks as from the local engine."""
    store = simulated[scenario]
    assert len(list((store / "commitlog").iterdir())) > 1
    local = import_store(store, tmp_path / "local", name="run", broker="broker-a")
    remote = spark_import(store, tmp_path / "spark", spark, name="run", broker="broker-a")
    assert summary_facts(remote) == summary_facts(local)
    assert_same_run(tmp_path / "local", tmp_path / "spark")
    assert not list(tmp_path.glob(".import-stage-*")), "the staged batches are removed"


def test_damage_before_the_last_file_stops_the_spark_import_where_the_local_one_stops(
        spark, writable_store_copy, tmp_path):
    """A file in the recovery window cut short: the later files' tasks run, but their records are
    dropped and reported as the local engine drops and reports them."""
    store = writable_store_copy("store-clean")
    second = sorted((store / "commitlog").iterdir())[2]
    data = bytearray(second.read_bytes())
    data[200:] = bytes(len(data) - 200)
    second.write_bytes(bytes(data))
    local = import_store(store, tmp_path / "local", name="run")
    remote = spark_import(store, tmp_path / "spark", spark, name="run")
    assert summary_facts(remote) == summary_facts(local)
    assert "unreachable-data" in {p.kind for p in remote.problems}
    assert_same_run(tmp_path / "local", tmp_path / "spark")


def test_cli_engine_spark_keeps_the_session_it_did_not_start(spark, store_fixtures, tmp_path, capsys):
    """`import-store --engine spark` inside a process with a session uses it and leaves it running;
    the run directory is the local engine's."""
    store = str(store_fixtures / "store-crashed")
    assert main(["-q", "import-store", store, "--out", str(tmp_path / "local"), "--name", "run"]) == 0
    assert main(["-q", "import-store", f"file://{store}", "--out", str(tmp_path / "spark"), "--name", "run",
                 "--engine", "spark"]) == 0
    capsys.readouterr()
    assert spark.range(3).count() == 3
    assert_same_run(tmp_path / "local", tmp_path / "spark")


def test_cli_refuses_engine_options_that_do_not_go_together(store_fixtures, tmp_path, capsys):
    """--spark-master without --engine spark, and --engine spark with the reference decoder, are bad
    input (exit 2) and write nothing."""
    store = str(store_fixtures / "store-clean")
    assert main(["import-store", store, "--out", str(tmp_path / "a"), "--spark-master", "local[2]"]) == 2
    assert main(["import-store", store, "--out", str(tmp_path / "b"), "--engine", "spark",
                 "--decoder", "reference"]) == 2
    assert "--engine spark" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_only_file_system_paths_are_accepted():
    """A store or run directory is a path or a file:// URI; an object-store URI is bad input."""
    assert local_path("file:///data/store") == Path("/data/store")
    assert local_path("/data/store") == Path("/data/store")
    with pytest.raises(BadInputError, match="s3a://"):
        local_path("s3a://bucket/store")
