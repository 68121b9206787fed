"""P6: the DuckDB audit warehouse build plus every check, on a 10M-record run.

The input is simulated: the P4 set of the same size (``bench/inputs.py``: runs of
``bench/scenarios/retry-heavy.yaml``, one seed each, simulated in parallel processes), loaded as
the several runs it is. Its lineage comes from one Spark job over the whole set
(``bench.lineage_scale.ensure_lineage``), split per run; it is built once and kept on disk.

Timed: ``assets.audit.build_warehouse`` (load every contract table, build the audit tables, swap
the file into place) and then ``assets.checks.run_checks`` with every check on the built file.
Target: build + checks <= 30 s at 10M records.

Run: ``python -m bench.warehouse_build [--quick] [--records N] [--data-dir DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from bench import common
from bench.common import Stats, load_note, write_result
from bench.inputs import SHARD_MESSAGES, set_runs, simulated_set
from bench.lineage_scale import DATA_DIR_DEFAULT, commitlog_rows, ensure_lineage

TARGET_SECONDS = 30.0
RECORDS_FULL = 10_000_000
RECORDS_QUICK = 20_000
RUNS_FULL = 3
RUNS_QUICK = 2
MESSAGES_PER_RUN_QUICK = 5_000  # about 10k records a run: the quick set is two runs


def build_and_check(run_dirs: list[Path], db_path: Path) -> tuple[float, float, dict[str, int], list]:
    """(build seconds, checks seconds, rows per table, check outcomes) of one fresh build."""
    from assets.audit import build_warehouse
    from assets.checks import ALL_CHECKS, run_checks
    from assets.warehouse import open_read_only

    for stale in db_path.parent.glob(db_path.name + "*"):
        stale.unlink()
    start = time.perf_counter()
    summary = build_warehouse(run_dirs, db_path)
    built = time.perf_counter()
    con = open_read_only(db_path)
    try:
        outcomes = run_checks(con, ALL_CHECKS)
    finally:
        con.close()
    return built - start, time.perf_counter() - built, summary.rows, outcomes


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run, fewer repeats")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--messages", type=int, default=None, help="messages per simulated run")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR_DEFAULT)
    args = parser.parse_args(argv)
    records = args.records or (RECORDS_QUICK if args.quick else RECORDS_FULL)
    runs = args.runs or (RUNS_QUICK if args.quick else RUNS_FULL)
    data_dir = args.data_dir / ("quick" if args.quick else "full")
    data_dir.mkdir(parents=True, exist_ok=True)
    messages = args.messages or (MESSAGES_PER_RUN_QUICK if args.quick else SHARD_MESSAGES)
    set_dir = simulated_set(data_dir, records, messages=messages)
    ensure_lineage(set_dir)  # Spark once over the set, then each run's own rows
    run_dirs = set_runs(set_dir)
    rows_in = commitlog_rows(set_dir)
    db_dir = data_dir / "warehouse"
    db_dir.mkdir(exist_ok=True)
    builds, checks, totals = [], [], []
    rows, outcomes = {}, []
    # The table is written after every build, so a long run leaves its numbers even if stopped.
    def report() -> Path:
        table = []
        for label, samples in (("build_warehouse", builds), ("run_checks (all)", checks),
                               ("build + checks", totals)):
            st = Stats(samples)
            table.append([label, f"{st.median:.2f}", f"{st.p90:.2f}", f"{st.max:.2f}",
                          f"{rows_in / st.median:,.0f}"])
        total = Stats(totals)
        met = total.median <= TARGET_SECONDS
        failing = [f"{o.check.name} ({o.violations:,})" for o in outcomes if o.violations]
        notes = (
            f"Input: {set_dir.name}, {rows_in:,} commit-log records in {len(run_dirs)} simulated "
            f"runs of {messages:,} messages (bench/inputs.py); {runs} builds, each into a fresh "
            "file. Warehouse rows: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(rows.items()))
            + f". {load_note()} when the table was written (wall times; the machine is shared).\n\n"
            + (f"Measured {len(totals)} of {runs} planned builds so far.\n\n"
               if len(totals) < runs else "")
            + f"Target: build + checks <= {TARGET_SECONDS:.0f} s at {RECORDS_FULL:,} records: "
            f"{'met' if met else 'MISSED'} ({total.median:.1f} s median). Checks with violations: "
            + (", ".join(failing) if failing else "none") + ".")
        name = "warehouse_build"
        if args.quick:  # quick tables never overwrite the committed full-size ones
            (common.RESULTS / "quick").mkdir(parents=True, exist_ok=True)
            name = "quick/warehouse_build"
        path = write_result(name, "P6 warehouse build + all checks", ["step", "median s", "p90 s",
                            "max s", "commit-log records/s at median"], table, notes)
        return path

    path = None
    for _ in range(runs):
        b, c, rows, outcomes = build_and_check(run_dirs, db_dir / "bench.duckdb")
        builds.append(b)
        checks.append(c)
        totals.append(b + c)
        path = report()
    shutil.rmtree(db_dir, ignore_errors=True)
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
