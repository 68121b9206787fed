"""The lineage's first run in a fresh process: what every `retry-audit lineage` call pays.

Each run is the CLI as a user runs it, a fresh process: ``retry-audit lineage RUN --engine E``.
Per input, the JVM's two settings alternate, a run each in turn:

* ``spark, C1 only``: the default for one small job (``assets/spark.py``,
  ``SMALL_JOB_INPUT_BYTES``): the driver's JVM compiles with C1 only;
* ``spark, tiered``: the same with the JVM's tiered compilation (C1 then C2), what every run used
  before, forced through ``RETRY_AUDIT_SPARK_CONF``;

and DuckDB once per round as the reference (``--engine duckdb``, no JVM). Per run: wall seconds,
CPU seconds of the process tree (the CLI by ``wait4``, Spark's JVM sampled from ``/proc``:
``bench.audit_e2e.run_step``), and the seconds from the start to the session being up (the
``lineage: reading`` line) and to each table written. The inputs: ``scenarios/small.yaml``
simulated (667 records) and the benchmarks' base run (``retry-heavy.yaml``, 50,000 messages,
98,310 records), both under the data directory.

Run: ``python -m bench.first_run [--repeats 3] [--data-dir var/bench] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from assets.lineage_engine import commitlog_parquet_bytes
from assets.spark import JVM_OPTIONS, SMALL_JOB_INPUT_BYTES, SPARK_CONF_OVERRIDES_ENV
from assets.warehouse import table_rows
from bench import common
from bench.audit_e2e import run_step, say
from bench.common import load_note, write_result

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SMALL_SCENARIO = PROJECT_ROOT / "scenarios" / "small.yaml"
BASE_MESSAGES = 50_000
REPEATS_DEFAULT = 3
TIERED = f"spark.driver.extraJavaOptions={JVM_OPTIONS}"
SETTINGS = (("spark, C1 only (default below the threshold)", "spark", None),
            ("spark, tiered (C1 then C2)", "spark", TIERED),
            ("duckdb", "duckdb", None))


def small_run(data_dir: Path) -> Path:
    """scenarios/small.yaml simulated into the data directory (reused when there)."""
    from broker_core.sim.run import simulate

    out = data_dir / "first-run-small"
    if not (out / "run.json").is_file():
        say(f"simulating {SMALL_SCENARIO.name} into {out}")
        simulate(SMALL_SCENARIO, out)
    return out


def _seconds_to(lines: list[tuple[float, str]], prefix: str) -> float | None:
    return next((t for t, text in lines if text.startswith(prefix)), None)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS_DEFAULT)
    parser.add_argument("--data-dir", type=Path, default=common.DATA_ROOT_DEFAULT)
    parser.add_argument("--quick", action="store_true", help="the small run only, one round")
    args = parser.parse_args(argv)
    data_dir = common.bench_data_dir(args.data_dir, args.quick)
    inputs = [small_run(data_dir)]
    if not args.quick:
        from bench.lineage_scale import base_run

        inputs.append(base_run(data_dir, BASE_MESSAGES))
    repeats = 1 if args.quick else args.repeats
    cli = str(Path(sys.executable).parent / "retry-audit")
    base_env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                    RETRY_AUDIT_SPARK_MASTER="local[2]")
    base_env.pop(SPARK_CONF_OVERRIDES_ENV, None)
    rows = []
    for run in inputs:
        records = table_rows(run, ["commitlog"])["commitlog"]
        size = commitlog_parquet_bytes(run)
        got: dict[str, list[dict]] = {label: [] for label, _, _ in SETTINGS}
        for k in range(repeats):
            for label, engine, conf in SETTINGS:
                env = dict(base_env, **({SPARK_CONF_OVERRIDES_ENV: conf} if conf else {}))
                result = run_step([cli, "lineage", str(run), "--engine", engine], env)
                if result["code"] != 0:
                    raise SystemExit(f"lineage of {run} ({label}) failed (exit {result['code']}):\n"
                                     + "\n".join(text for _, text in result["lines"][-20:]))
                got[label].append(result)
                say(f"{run.name} round {k + 1}, {label}: {result['wall']:.1f} s wall, {result['cpu']:.1f} CPU-s")
        for label, _, _ in SETTINGS:
            results = got[label]

            def median(values: list[float | None]) -> str:
                values = [v for v in values if v is not None]
                return f"{statistics.median(values):.1f}" if values else ""

            rows.append([run.name, f"{records:,}", f"{size / 2**20:.2f}", label,
                         median([r["wall"] for r in results]), " / ".join(f"{r['wall']:.1f}" for r in results),
                         median([r["cpu"] for r in results]),
                         median([_seconds_to(r["lines"], "lineage: reading") for r in results]),
                         median([_seconds_to(r["lines"], "lineage: message_hops") for r in results]),
                         median([_seconds_to(r["lines"], "lineage: message_lineage") for r in results])])
    notes = (f"Each run a fresh `retry-audit lineage RUN --engine E` process (Spark `local[2]`); per input the "
             f"settings alternate, {repeats} round(s). C1 only is the default for a job whose commit-log "
             f"Parquet is below {SMALL_JOB_INPUT_BYTES / 2**20:.0f} MiB (`assets/spark.py`, "
             f"`SMALL_JOB_INPUT_BYTES`); tiered is forced with `{SPARK_CONF_OVERRIDES_ENV}={TIERED}`. "
             "CPU: the process tree, Spark's JVM included. Session up: seconds to the `lineage: reading` "
             "line (the JVM started and the session built); hops and lineage: seconds to each table "
             f"written. {load_note()} when the table was written.")
    name = common.result_name("first_run", args.quick)
    return write_result(name, "The lineage's first run in a fresh process",
                        ["input", "records", "commit-log MiB", "engine", "median wall s", "wall s each",
                         "median CPU s", "session up s", "hops written s", "lineage written s"], rows, notes)


if __name__ == "__main__":
    main(sys.argv[1:])
