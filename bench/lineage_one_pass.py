"""What a one-pass Spark lineage would cost at least: its round trip beside Spark's floor and today's lineage.

P4 asks the Spark lineage for at most 1.5x Spark's floor (read the commit log's columns, one range
shuffle by message, sort, write: ``bench.lineage_scale.spark_floor``). Today's lineage computes its
per-message facts as window operators over the hops (``assets/sql/lineage/``), and those, not the
shuffles, are its cost over the floor (``results/lineage_scale.md``). A one-pass design would gather
each message's records once and compute its facts from that list. This benchmark times, in one warm
``local[2]`` session, alternating, a run each in turn:

* ``floor``: Spark's floor, as ``bench.lineage_scale`` times it;
* ``round trip``: the floor's sorted records gathered per message by a streaming aggregate (the
  records arrive sorted by message, so it needs no sort of its own) and exploded back with their
  place in the message, then written: a one-pass lineage with no rule;
* ``round trip + 3 rules``: the same with three per-message facts computed by higher-order
  functions over the message's list (its first record's topic, its records in a retry topic, each
  record's previous record's topic), as a one-pass lineage would compute its rules;
* ``lineage``: today's ``run_lineage`` on the same run (both tables written).

No rule of the lineage is reimplemented here: the round trips say what the design's frame costs,
not what the rules would. Run: ``python -m bench.lineage_one_pass [--run-dir RUN] [--rounds 3]
[--data-dir var/bench] [--quick]``; the default run is the 1M-record set's (``bench.inputs``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from assets.lineage import RECORD_COLUMNS, run_lineage
from assets.lineage_engine import commitlog_parquet_bytes
from assets.spark import spark_session
from assets.warehouse import table_rows
from bench import common
from bench.audit_e2e import say
from bench.common import load_note, write_result
from bench.lineage_scale import FLOOR_KEY, floor_records, jvm_cpu_clock, spark_floor

ROUNDS_DEFAULT = 3
MILLION_SET = "set-1000000-m500000"
OBJECT_HASH_AGGREGATE = "spark.sql.execution.useObjectHashAggregateExec"
RULES = ("transform(m.recs, (x, i) -> named_struct("
         "'hop_index', i, 'first_topic', m.recs[0].topic, "
         "'retries', size(filter(m.recs, y -> y.topic LIKE '%RETRY%')), "
         "'prev_topic', CASE WHEN i > 0 THEN m.recs[i - 1].topic END, 'rec', x))")


def round_trip(spark, run_dir: Path, out: Path, rules: bool) -> None:
    """The floor's sorted records, gathered per message and exploded back (with ``rules``: three
    per-message facts beside each record), written as Parquet."""
    shutil.rmtree(out, ignore_errors=True)
    floor_records(spark, run_dir).createOrReplaceTempView("one_pass_records")
    fields = ", ".join(c for c in RECORD_COLUMNS if c not in FLOOR_KEY[:2])
    # collect_list's default plan is a hash aggregate that falls back to sorting the rows again;
    # the sort aggregate reads the records in the order they arrive, one message after another.
    spark.conf.set(OBJECT_HASH_AGGREGATE, "false")
    try:
        spark.sql(f"""SELECT run_id, uniq_key, collect_list(struct({fields})) AS recs
                      FROM one_pass_records GROUP BY run_id, uniq_key""").createOrReplaceTempView("one_pass")
        if rules:
            rows = spark.sql(f"""SELECT m.run_id, m.uniq_key, hop_index, first_topic, retries, prev_topic, rec.*
                                 FROM one_pass m LATERAL VIEW inline({RULES}) t""")
        else:
            rows = spark.sql("""SELECT run_id, uniq_key, pos AS hop_index, rec.*
                                FROM one_pass LATERAL VIEW posexplode(recs) t AS pos, rec""")
        rows.write.parquet(str(out))
    finally:
        spark.conf.unset(OBJECT_HASH_AGGREGATE)


LINEAGE_STEPS = ("lineage: hops step", "lineage: rows step")


def step_clock(steps: dict[str, float]):
    """A lineage progress callback that notes when each table's write ended (its
    ``lineage: <table> N rows`` line) in ``steps``."""
    def progress(message: str) -> None:
        for table in ("message_hops", "message_lineage"):
            if message.startswith(f"lineage: {table} "):
                steps[table] = time.perf_counter()
    return progress


def default_run(data_dir: Path, quick: bool) -> Path:
    if quick:
        from bench.first_run import small_run

        return small_run(data_dir)
    from bench.inputs import set_runs

    runs = set_runs(data_dir / MILLION_SET)
    if len(runs) != 1:
        raise SystemExit(f"{data_dir / MILLION_SET}: expected one run, found {len(runs)} "
                         "(python -m bench.inputs --records 1000000 makes it)")
    return runs[0]


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="a simulated or imported run (default: the 1M set's)")
    parser.add_argument("--rounds", type=int, default=ROUNDS_DEFAULT)
    parser.add_argument("--data-dir", type=Path, default=common.DATA_ROOT_DEFAULT)
    parser.add_argument("--quick", action="store_true", help="the small run, one round")
    args = parser.parse_args(argv)
    run = args.run_dir or default_run(common.bench_data_dir(args.data_dir, args.quick), args.quick)
    rounds = 1 if args.quick else args.rounds
    records = table_rows(run, ["commitlog"])["commitlog"]
    with tempfile.TemporaryDirectory(prefix="one-pass-") as scratch, \
            spark_session(input_bytes=commitlog_parquet_bytes(run), quiet=True) as spark:
        clock = jvm_cpu_clock(spark)
        steps: dict[str, float] = {}
        jobs = {"floor": lambda: spark_floor(spark, run, Path(scratch) / "floor"),
                "round trip": lambda: round_trip(spark, run, Path(scratch) / "rt", rules=False),
                "round trip + 3 rules": lambda: round_trip(spark, run, Path(scratch) / "rtr", rules=True),
                "lineage": lambda: run_lineage(run, spark, progress=step_clock(steps))}
        timings: dict[str, list[tuple[float, float | None]]] = {name: [] for name in jobs}
        for name in LINEAGE_STEPS:
            timings[name] = []
        for k in range(rounds + 1):  # the first round warms the JIT up and is not counted
            for name, job in jobs.items():
                cpu0, wall0 = clock() if clock else None, time.perf_counter()
                steps.clear()
                job()
                wall, cpu = time.perf_counter() - wall0, (clock() - cpu0) if clock else None
                say(f"{'warm-up' if k == 0 else f'round {k}'}, {name}: {wall:.2f} s wall"
                    + (f", {cpu:.1f} JVM CPU-s" if cpu is not None else ""))
                if k:
                    timings[name].append((wall, cpu))
                    if name == "lineage":
                        # The lineage's two writes: its hops (read, classify, the one shuffle,
                        # number the chains, pair the schedule's records) and its rows from them.
                        hops_at, rows_at = steps["message_hops"] - wall0, steps["message_lineage"] - wall0
                        timings[LINEAGE_STEPS[0]].append((hops_at, None))
                        timings[LINEAGE_STEPS[1]].append((rows_at - hops_at, None))
    floor = statistics.median(w for w, _ in timings["floor"])
    rows = []
    for name, got in timings.items():
        wall = statistics.median(w for w, _ in got)
        cpus = [c for _, c in got if c is not None]
        rows.append([run.name, f"{records:,}", name, f"{wall:.2f}", " / ".join(f"{w:.2f}" for w, _ in got),
                     f"{statistics.median(cpus):.1f}" if cpus else "", f"{wall / floor:.2f}x"])
    notes = (f"One warm `local[2]` session; a warm-up round, then {rounds} round(s), the four jobs in turn. "
             "Wall medians; JVM CPU from /proc (all the JVM's threads). The ratio is the median wall over "
             f"the floor's. The lineage's two steps are the times to its progress lines: `{LINEAGE_STEPS[0]}` "
             "from its start to the message_hops write's end (read, classify, the one shuffle, the chains, "
             f"the schedule pairing), `{LINEAGE_STEPS[1]}` from there to the message_lineage write's end "
             f"(from the kept hops). {load_note()} when the table was written.")
    return write_result(common.result_name("lineage_one_pass", args.quick),
                        "A one-pass Spark lineage's round trip, beside the floor and today's lineage",
                        ["run", "records", "job", "median wall s", "wall s each", "median JVM CPU s",
                         "over the floor"], rows, notes)


if __name__ == "__main__":
    main(sys.argv[1:])
