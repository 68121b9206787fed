"""Each benchmark runs in its quick mode at a tiny size and writes its result table.

No timing is asserted: benchmarks measure speed, tests only check that they still run and that
each verdict a table states (met or missed, within or over, not judged) is the one its own numbers
give, so a flipped comparison or a wrong threshold shows. Each one runs in its own interpreter (as ``bench.run_all`` runs them) with the results directory pointed
at a temp dir, so the committed tables under bench/results/ are never touched and a benchmark's
Spark session never meets the test suite's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BENCH_TIMEOUT_S = 900  # a Spark start on a busy two-core machine can take minutes

# Run a benchmark's main() with bench.common.RESULTS replaced by argv[1].
RUNNER = (
    "import sys\n"
    "from pathlib import Path\n"
    "from bench import common\n"
    "common.RESULTS = Path(sys.argv[1])\n"
    "module = __import__('bench.' + sys.argv[2], fromlist=['main'])\n"
    "module.main(sys.argv[3:])\n"
)


def run_bench(module: str, results: Path, *args: str) -> str:
    """Run ``bench.<module>`` with ``args``; return the text of the table it wrote."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(results), module, *args],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=BENCH_TIMEOUT_S)
    assert proc.returncode == 0, f"bench.{module} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    tables = list((results / "quick").glob(f"{module}.md"))
    assert tables, f"bench.{module} wrote no table under {results / 'quick'}"
    return tables[0].read_text()


def assert_table(text: str, title: str, columns: list[str], rows_min: int) -> None:
    lines = text.splitlines()
    assert lines[0].startswith("# " + title), lines[0]
    assert any(line.startswith("Machine: cores ") for line in lines), "no machine line"
    header = next(line for line in lines if line.startswith("| "))
    for column in columns:
        assert f" {column} " in header, f"column {column!r} missing from {header}"
    body = [line for line in lines if line.startswith("| ") and line != header]
    assert len(body) >= rows_min, f"expected >= {rows_min} table rows, got {body}"


def number(text: str) -> float:
    """A number as a table prints it (thousands separators, an x or % after it)."""
    return float(text.replace(",", "").rstrip("x%"))


def table_row(text: str, label: str) -> list[str]:
    """The cells of the table row whose first cell is ``label``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in the table")


def found(pattern: str, text: str) -> re.Match:
    match = re.search(pattern, text, re.S)
    assert match, f"{pattern!r} not in:\n{text}"
    return match


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-results")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-data")


def test_store_append_writes_its_table(results):
    """The store-append benchmark writes the put, floor and raw rows for both body sizes."""
    text = run_bench("store_append", results, "--records", "2000", "--runs", "1", "--no-instructions")
    assert_table(text, "Store append", ["median rec/s", "CPU rec/s", "bytes/record"], 6)
    assert "Instruction counts: not taken (--no-instructions)." in text
    target = number(found(r"Target: ([\d,]+) records/s at 256 B", text)[1])
    verdicts = re.findall(r"put_messages? ([\d,]+)/s CPU \((meets|misses) the target", text)
    assert len(verdicts) == 4, verdicts  # put_message and put_messages at both body sizes
    for rate, verdict in verdicts:
        assert verdict == ("meets" if number(rate) >= target else "misses"), (rate, verdict)


def test_schedule_drain_writes_its_table(results):
    """The schedule-drain benchmark writes the drain, fill and floor rows with CPU and wall columns."""
    text = run_bench("schedule_drain", results, "--quick", "--messages", "200", "--runs", "1")
    assert_table(text, "P2 schedule drain", ["CPU median s", "wall median s", "msgs/s (CPU median)"], 3)
    m = found(r"Target >= ([\d,]+) deliveries/s, [\d.]+ us of CPU a delivery: (met|MISSED)(, out of reach "
              r"in CPython|, and within CPython's reach)?.*The drain does ([\d,]+)/s", text)
    target, verdict, why, drain = number(m[1]), m[2], m[3], number(m[4])
    assert verdict == ("met" if drain >= target else "MISSED")
    if verdict == "MISSED":
        # Out of CPython's reach when even the barest delivery with its row is slower than the target.
        bare_row = number(table_row(text, "floor: barest CPython delivery + its delivery row (same run)")[5])
        assert why == (", out of reach in CPython" if bare_row < target else ", and within CPython's reach")


def test_scenario_e2e_writes_its_table(results):
    """The end-to-end benchmark writes wall and CPU rows with the speed-up over simulated time."""
    text = run_bench("scenario_e2e", results, "--quick", "--runs", "1")
    assert_table(text, "P3 default scenario end to end", ["speed-up at median", "rows/s at median"], 2)
    m = found(r"Target >= (\d+)x real time: (met|MISSED) on wall time, (met|MISSED) on CPU time", text)
    target = number(m[1])
    for clock, verdict in (("wall", m[2]), ("CPU", m[3])):
        speedup = number(table_row(text, clock)[4])  # the speed-up at the median time
        assert verdict == ("met" if speedup >= target else "MISSED"), (clock, speedup, verdict)


def test_memory_writes_its_table(results, data_dir):
    """The memory benchmark writes one peak-RSS row per simulate and import size."""
    text = run_bench("memory", results, "--quick", "--messages", "100,200", "--data-dir", str(data_dir))
    assert_table(text, "P5 peak memory vs run size", ["peak RSS MiB (process)", "commit-log records"], 4)
    verdicts = re.findall(r"(?:extrapolates to|records:) ([\d.]+) GiB .*?\((within|OVER) the 2 GiB target\)", text)
    assert len(verdicts) >= 2, verdicts  # simulate and import at least
    for gib, verdict in verdicts:
        assert verdict == ("within" if number(gib) <= 2 else "OVER"), (gib, verdict)


def test_inputs_go_where_the_benchmarks_look(data_dir):
    """``bench.inputs --data-dir D --quick`` simulates into the place ``--data-dir D --quick`` reads.

    The lineage test below then finds this set on disk. A ``--data-dir`` that is a level of the
    root (it holds runs/ itself) is refused with the root it probably meant, nothing simulated.
    """
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    made = subprocess.run([sys.executable, "-m", "bench.inputs", "--records", "400", "--messages", "100",
                           "--data-dir", str(data_dir), "--quick", "--workers", "1"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    assert made.returncode == 0, made.stderr[-3000:]
    assert Path(made.stdout.strip()) == data_dir / "quick" / "set-400-m100"
    assert (data_dir / "quick" / "set-400-m100" / "set.json").is_file()
    before = sorted(p.name for p in (data_dir / "quick").iterdir())
    refused = subprocess.run([sys.executable, "-m", "bench.inputs", "--records", "400", "--messages", "100",
                              "--data-dir", str(data_dir / "quick")],
                             cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    assert refused.returncode != 0
    assert f"--data-dir {data_dir / 'quick'}: this directory holds benchmark inputs itself" in refused.stderr
    assert f"(here probably {data_dir})" in refused.stderr
    assert sorted(p.name for p in (data_dir / "quick").iterdir()) == before
    assert not (data_dir / "quick" / "quick").exists()


@pytest.mark.slow  # about a minute each on 2 cores: the lineage benchmark starts its own Spark
def test_lineage_scale_writes_its_table(results, data_dir):
    """The lineage benchmark writes Spark and DuckDB timings for the base run and a set of runs."""
    text = run_bench("lineage_scale", results, "--quick", "--base-messages", "100",
                     "--sizes", "400", "--messages-per-run", "100", "--data-dir", str(data_dir))
    assert_table(text, "P4 lineage scale", ["Spark median s", "DuckDB median s", "Spark / DuckDB"], 2)
    assert "simulated: 2 runs of 100 messages" in text
    assert "the lineage one run_id at a time (--duckdb-mode by-run)" in text
    # The verdict is over the sized inputs (the set), the base run reported beside it.
    assert re.search(r"Target, on the sized inputs \([\d,]+ records\)", text)
    m = found(r"Spark <= (\d+)x DuckDB's time -- worst ratio ([\d.]+)x: (met|MISSED)", text)
    assert m[3] == ("met" if number(m[2]) <= number(m[1]) else "MISSED"), m.group(0)
    flat_max = number(found(r"largest / smallest Spark us/record <= ([\d.]+)\)", text)[1])
    m = found(r"us/record, spread (\d+\.\d+): (met|MISSED)", text)
    assert m[2] == ("met" if number(m[1]) <= flat_max else "MISSED"), m.group(0)
    m = found(r"Spark <= ([\d.]+)x Spark's floor \(wall\) -- worst ([\d.]+)x: (met|MISSED)", text)
    assert m[3] == ("met" if number(m[2]) <= number(m[1]) else "MISSED"), m.group(0)
    # The plan's full shuffles of the records, per input: the range shuffle by message, and the
    # hash shuffle of the records without a UNIQ_KEY.
    assert text.count("| 2: range by (run_id, message_key), hash by (run_id, fallback_key) |") == 2, text


@pytest.mark.slow
def test_lineage_scale_reports_duckdb_out_of_memory(results, data_dir):
    """A DuckDB out-of-memory (as its whole lineage hit at 50M records) is a row, not a crash."""
    text = run_bench("lineage_scale", results, "--quick", "--base-messages", "100", "--sizes", "",
                     "--duckdb-memory-limit", "1MB", "--data-dir", str(data_dir))
    assert "a memory limit of 1MB" in text
    row = next(line for line in text.splitlines() if line.startswith("| simulated (100 messages)"))
    assert "| out of memory after " in row
    assert "no ratio: DuckDB finished none of them" in text  # no sized input: the base is judged


@pytest.mark.long  # builds the warehouse of the benchmark's own run: over a minute
def test_warehouse_build_writes_its_table(results, data_dir):
    """The warehouse benchmark writes build, checks and total rows (after the lineage test's Spark run)."""
    # The same set of two 100-message runs as the lineage test: its lineage exists when that
    # test ran first, else ensure_lineage builds it with Spark; each run gets its own rows.
    text = run_bench("warehouse_build", results, "--quick", "--records", "400", "--runs", "1",
                     "--messages", "100", "--data-dir", str(data_dir))
    assert "in 2 simulated runs of 100 messages" in text
    assert_table(text, "P6 warehouse build + all checks", ["median s", "commit-log records/s at median"], 3)
    # A few hundred records are far below the size the target speaks of: no verdict either way.
    m = found(r"Target: build \+ checks <= \d+ s at ([\d,]+) records: (\w+)", text)
    assert m[2] == "not", m.group(0)
    assert found(r"records: not judged on ([\d,]+) records", text)


def test_import_scale_writes_its_table(results, data_dir):
    """The import benchmark writes both decoders' imports, the decode alone and the two floors,
    each with its CPU ratio to the Parquet-write floor, and a profile."""
    text = run_bench("import_scale", results, "--quick", "--messages", "300", "--runs", "1",
                     "--data-dir", str(data_dir))
    assert_table(text, "P7 import-store", ["CPU rec/s", "CPU MB/s", "CPU / write floor"], 5)
    m = found(r"Columnar import: ([\d.]+)x the write floor's CPU \(target <= (\d+)x: (met|missed)\)", text)
    assert m[3] == ("met" if number(m[1]) <= number(m[2]) else "missed"), m.group(0)
    assert "floor: write the commitlog table to Parquet | " in text and "cProfile" in text


# A 2-shard store's import, Spark and DuckDB lineages and warehouse: 1-2 minutes of both cores,
# kept out of make test-long, whose real-broker tests count on their timing (make test-all runs it).
@pytest.mark.slow
def test_audit_e2e_writes_its_table(results, data_dir):
    """The end-to-end benchmark times each CLI step and states the P8 verdict its totals give."""
    text = run_bench("audit_e2e", results, "--quick", "--data-dir", str(data_dir))
    assert_table(text, "P8: an audit end to end", ["wall s", "CPU s", "exit"], 6)
    m = found(r"<= (\d+) s on 2 cores\. With the Spark lineage (\d+) s: (met|MISSED); "
              r"with the DuckDB lineage (\d+) s: (met|MISSED)", text)
    assert m[3] == ("met" if number(m[2]) <= number(m[1]) else "MISSED"), m.group(0)
    assert m[5] == ("met" if number(m[4]) <= number(m[1]) else "MISSED"), m.group(0)
    assert "lineage: engine spark" in text and "lineage: engine duckdb" in text


# Two fresh Spark processes and a DuckDB one on a small run: about a minute of both cores (make test-all).
@pytest.mark.slow
def test_first_run_writes_its_table(results, data_dir):
    """The first-run benchmark times the CLI's lineage in fresh processes, C1 only against tiered
    and DuckDB, with each run's session and table milestones in the order they happen."""
    text = run_bench("first_run", results, "--quick", "--data-dir", str(data_dir))
    assert_table(text, "The lineage's first run in a fresh process",
                 ["median wall s", "median CPU s", "session up s", "hops written s"], 3)
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()
            if line.startswith("| first-run-small ")]
    assert [r[3] for r in rows] == ["spark, C1 only (default below the threshold)", "spark, tiered (C1 then C2)",
                                    "duckdb"]
    for r in rows:
        session, hops, lineage = number(r[7]), number(r[8]), number(r[9])
        assert 0 < session <= hops <= lineage <= number(r[4]), r


# A Spark session on a small run, four jobs twice: about a minute of both cores (make test-all).
@pytest.mark.slow
def test_lineage_one_pass_writes_its_table(results, data_dir):
    """The one-pass benchmark times the floor, both round trips and today's lineage in one session,
    each against the floor's median wall time."""
    text = run_bench("lineage_one_pass", results, "--quick", "--data-dir", str(data_dir))
    assert_table(text, "A one-pass Spark lineage's round trip",
                 ["job", "median wall s", "median JVM CPU s", "over the floor"], 6)
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()
            if line.startswith("| first-run-small ")]
    assert [r[2] for r in rows] == ["floor", "round trip", "round trip + 3 rules", "lineage",
                                    "lineage: hops step", "lineage: rows step"]
    floor = number(rows[0][3])
    for r in rows:
        assert number(r[6]) == pytest.approx(number(r[3]) / floor, rel=0.05, abs=0.01), r  # rounded walls
    # The lineage's two steps are parts of its wall time (one round: no median mixes rounds).
    lineage, hops, rest = (number(r[3]) for r in rows[3:])
    assert 0 < hops < lineage and 0 < rest < lineage and hops + rest <= lineage + 0.02, rows
