"""The lineage command as a user runs it: beside a warehouse built before it, inside a process
that already runs Spark, and quietly.

The scenario is tests/golden/tiny.yaml (a few dozen records): enough for real part files and a
real warehouse, small enough that each lineage takes seconds on the test run's shared session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "golden" / "tiny.yaml"
SCRIPT = Path(sys.executable).parent / "retry-audit"
# A lineage subprocess starts its own JVM: tens of seconds on a busy two-core machine.
LINEAGE_SUBPROCESS_S_MAX = 300


@pytest.fixture
def tiny_run(tmp_path) -> Path:
    run_dir = tmp_path / "runs" / "tiny"
    assert main(["-q", "simulate", str(TINY), "--out", str(run_dir)]) == 0
    return run_dir


def test_lineage_leaves_a_spark_session_it_did_not_start_running(spark, tiny_run, capsys):
    """The lineage command run inside a process that already has a SparkSession does not stop it."""
    assert main(["-q", "lineage", str(tiny_run)]) == 0
    capsys.readouterr()
    assert spark.range(5).count() == 5
    from assets.spark import get_spark

    assert get_spark() is spark


def test_a_new_lineage_shows_through_a_warehouse_built_before_it(spark, tiny_run, tmp_path, capsys):
    """lineage, warehouse, lineage again: the warehouse's views read the new lineage's files."""
    db = tmp_path / "warehouse.duckdb"
    assert main(["-q", "lineage", str(tiny_run)]) == 0
    assert main(["-q", "warehouse", str(tiny_run), "--db", str(db)]) == 0
    first = sorted((tiny_run / "lineage" / "message_hops").glob("*.parquet"))
    assert main(["-q", "lineage", str(tiny_run)]) == 0
    assert sorted((tiny_run / "lineage" / "message_hops").glob("*.parquet")) != first, \
        "the rerun was meant to write new part files"
    capsys.readouterr()
    for table in ("message_hops", "message_lineage"):
        code = main(["sql", "--db", str(db), f"select count(*) as n from {table}"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert int(captured.out.splitlines()[1]) > 0


@pytest.mark.long  # a JVM of its own started and warmed: about 1.5 minutes on 2 cores
def test_quiet_lineage_prints_nothing_on_stderr(tiny_run):
    """`retry-audit -q lineage RUN` starting its own JVM writes nothing to stderr when it succeeds."""
    proc = subprocess.run([str(SCRIPT), "-q", "lineage", str(tiny_run)], capture_output=True, text=True,
                          timeout=LINEAGE_SUBPROCESS_S_MAX, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith(f"lineage {tiny_run}: message_hops ")


def _tables(run_dir: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return {table: pa.concat_tables([pq.read_table(p) for p in sorted((run_dir / "lineage" / table).glob("part-*"))])
            for table in ("message_hops", "message_lineage")}


def test_the_duckdb_engine_writes_the_spark_engines_tables(spark, tiny_run, capsys):
    """`lineage --engine duckdb` replaces the lineage with the same rows, order and types as Spark's,
    and says the same progress and summary lines."""
    assert main(["lineage", str(tiny_run)]) == 0
    on_spark = _tables(tiny_run)
    spark_out = capsys.readouterr()
    assert main(["lineage", str(tiny_run), "--engine", "duckdb"]) == 0
    duck_out = capsys.readouterr()
    on_duckdb = _tables(tiny_run)
    for table, rows in on_spark.items():
        assert on_duckdb[table].schema == rows.schema and on_duckdb[table].equals(rows), table
    assert not list(tiny_run.glob(".lineage.*")), "the lineage directory is replaced whole"

    def shape(out):  # the lines, without the engine's name and the timing
        return [line.split(" in ")[0] for line in (out.err + out.out).splitlines() if "engine" not in line]
    assert shape(duck_out) == shape(spark_out)


def test_auto_picks_duckdb_for_a_small_local_run_and_spark_otherwise(tiny_run, monkeypatch):
    """auto: DuckDB below the commit-log size threshold, Spark at or above it and for a URI."""
    from assets import lineage_engine as e

    assert e.pick_engine(tiny_run, "auto") == "duckdb"
    assert e.pick_engine(tiny_run, "spark") == "spark" and e.pick_engine(tiny_run, "duckdb") == "duckdb"
    assert e.pick_engine("hdfs://nn/runs/x", "auto") == "spark"
    monkeypatch.setattr(e, "AUTO_DUCKDB_COMMITLOG_BYTES_MAX", e.commitlog_parquet_bytes(tiny_run))
    assert e.pick_engine(tiny_run, "auto") == "spark"


def test_lineage_auto_builds_a_small_run_without_a_jvm(tiny_run):
    """`retry-audit -q lineage RUN --engine auto` on a small run takes DuckDB: no JVM is started,
    nothing is written on stderr, the summary line is the same."""
    proc = subprocess.run([str(SCRIPT), "-q", "lineage", str(tiny_run), "--engine", "auto"], capture_output=True,
                          text=True, timeout=LINEAGE_SUBPROCESS_S_MAX, cwd=ROOT,
                          env={**os.environ, "JAVA_HOME": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith(f"lineage {tiny_run}: message_hops ")


def test_a_duckdb_memory_limit_reaches_duckdb_and_a_bad_one_is_refused_before_anything_changes(tiny_run, capsys):
    """`--memory-limit SIZE` is DuckDB's: a lineage written under it has the rows of one written
    without, the progress line names it, and DuckDB's setting holds it; a size that is none, or the
    option with --engine spark, exits 2 naming the option, with the lineage as it was."""
    from assets.lineage_duckdb import duckdb_connection

    assert main(["lineage", str(tiny_run), "--engine", "duckdb"]) == 0
    unlimited = _tables(tiny_run)
    capsys.readouterr()
    assert main(["lineage", str(tiny_run), "--engine", "duckdb", "--memory-limit", "1GB"]) == 0
    assert "lineage: engine duckdb (--engine duckdb, memory limit 1GB)" in capsys.readouterr().err
    limited = _tables(tiny_run)
    for table, rows in unlimited.items():
        assert limited[table].equals(rows), table
    con = duckdb_connection(memory_limit="1GB")
    try:
        # DuckDB reports 1GB (10^9 bytes) in binary units.
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "953.6 MiB"
    finally:
        con.close()

    before = {p: p.stat().st_mtime_ns for p in (tiny_run / "lineage").rglob("*.parquet")}
    for argv, said in ((["--engine", "duckdb", "--memory-limit", "lots"], "not a memory size: 'lots'"),
                       (["--engine", "spark", "--memory-limit", "1GB"], "--engine spark does not use it")):
        assert main(["lineage", str(tiny_run), *argv]) == 2
        err = capsys.readouterr().err
        assert "--memory-limit" in err and said in err, err
    assert {p: p.stat().st_mtime_ns for p in (tiny_run / "lineage").rglob("*.parquet")} == before
