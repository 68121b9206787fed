"""``make demo``: the whole pipeline on the default scenario, through Dagster, then a summary.

Materializes every asset of the ``default`` partition in-process (``dagster.materialize``, with
``DAGSTER_HOME`` under the data home so ``make ui`` shows the same runs and check results), then
prints messages by final state, DLQ counts by group and origin topic, the worst delay lateness,
which checks passed, the warehouse path and three queries to try. Exits 1 when a blocking check
failed (or a step did), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from orchestration import term

DEMO_PARTITION = "default"
# Dagster's console logger prints every engine event at DEBUG; the demo shows progress and problems.
DEMO_LOG_LEVEL = "INFO"
EXAMPLE_QUERIES = (
    'retry-audit sql "select \\"group\\", final_state, count(*) from message_lineage group by all order by all"',
    'retry-audit sql "select \\"group\\", origin_topic, retries, last_failure from dlq_messages limit 5"',
    'retry-audit sql "select * from delay_accuracy order by lateness_p99_ms desc limit 5"',
)


def _environment(home: Path) -> None:
    """DAGSTER_HOME under the data home, and the Spark settings the lineage needs on this machine."""
    from orchestration.partitions import HOME_ENV
    from orchestration.resources import dagster_home

    os.environ[HOME_ENV] = str(home)
    os.environ["DAGSTER_HOME"] = str(dagster_home(home))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def materialize_partition(partition: str, home: Path, scenarios: Path | None = None):
    """Materialize every asset of one run partition; return (result, defs).

    The instance's run partitions are brought up to date with the disk first (what the
    ``runs_on_disk`` sensor does in the UI), so the partition exists however new its run is."""
    import dagster as dg

    from broker_core.errors import BadInputError
    from orchestration.definitions import build_definitions
    from orchestration.partitions import sync_run_partitions

    defs = build_definitions(home, scenarios)
    sources = defs.resources["home"].sources()
    if partition not in sources:
        raise BadInputError(f"no run named {partition!r}", where=str(home),
                            hint="runs: " + (", ".join(sources) if sources else "(none: add scenarios/*.yaml)"))
    instance = dg.DagsterInstance.get()
    sync_run_partitions(instance, sources)
    result = dg.materialize(list(defs.assets), partition_key=partition, resources=defs.resources,
                            instance=instance, raise_on_error=False,
                            run_config={"loggers": {"console": {"config": {"log_level": DEMO_LOG_LEVEL}}}})
    return result, defs


def check_evaluations(result) -> list[tuple[str, str, bool, str]]:
    """(asset, check, passed, severity) for every check the run evaluated."""
    out = []
    for ev in result.get_asset_check_evaluations():
        out.append((ev.asset_key.to_user_string(), ev.check_name, ev.passed, ev.severity.value))
    return sorted(out)


def print_summary(db_path: Path, run_id: str, checks, seconds: float) -> None:
    from assets.warehouse import open_read_only

    con = open_read_only(db_path)
    try:
        print(f"\nretry-audit demo: run {run_id!r} materialized in {seconds:.1f} s\n")
        print("messages by final state (per consumer group):")
        for group, state, n in con.execute(
                'SELECT coalesce("group", \'(no group)\'), final_state, count(*) FROM message_lineage '
                "WHERE run_id = ? GROUP BY ALL ORDER BY 1, 2", [run_id]).fetchall():
            print(f"  {group:<28} {state:<11} {n:>9,}")
        print("\nDLQ messages by group and origin topic:")
        dlq = con.execute('SELECT "group", origin_topic, count(*) FROM dlq_messages WHERE run_id = ? '
                          "GROUP BY ALL ORDER BY 3 DESC, 1, 2", [run_id]).fetchall()
        for group, topic, n in dlq or [("(none)", "", 0)]:
            print(f"  {group:<28} {topic or '':<20} {n:>9,}")
        worst = con.execute("SELECT delay_level, deliveries, lateness_p99_ms, lateness_max_ms, early_count "
                            "FROM delay_accuracy WHERE run_id = ? ORDER BY lateness_max_ms DESC, delay_level "
                            "LIMIT 1", [run_id]).fetchone()
        print("\nworst delay lateness:")
        if worst:
            level, deliveries, p99, mx, early = worst
            print(f"  level {level}: max {mx:,} ms, p99 {p99:,} ms over {deliveries:,} deliveries; "
                  f"{early} early")
        else:
            print("  (no delayed deliveries)")
        anomalies = con.execute("SELECT kind, count(*) FROM anomalies WHERE run_id = ? GROUP BY 1 ORDER BY 1",
                                [run_id]).fetchall()
        if anomalies:
            print("\nanomalies: " + ", ".join(f"{k} {n:,}" for k, n in anomalies))
    finally:
        con.close()
    print("\nchecks:")
    for asset, name, passed, severity in checks:
        verdict = "passed" if passed else f"FAILED ({severity})"
        print(f"  {verdict:<16} {name:<34} on {asset}")
    print(f"\nwarehouse: {db_path}")
    print("try:")
    for q in EXAMPLE_QUERIES:
        print(f"  {q} --db {db_path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=DEMO_PARTITION, help="partition (scenario or store) to materialize")
    args = parser.parse_args(argv)

    from broker_core.errors import RetryAuditError
    from orchestration.partitions import WAREHOUSE_FILE, data_home

    home = data_home()
    _environment(home)
    started = time.perf_counter()
    try:
        result, _defs = materialize_partition(args.run, home)
    except RetryAuditError as exc:
        print(f"demo: error: {exc}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return exc.exit_code
    seconds = time.perf_counter() - started
    checks = check_evaluations(result)
    blocking_failed = [c for c in checks if not c[2] and c[3] == "ERROR"]
    db_path = home / WAREHOUSE_FILE
    if db_path.exists() and result.success:
        from assets.warehouse import run_id_of

        print_summary(db_path, run_id_of(home / "runs" / args.run), checks, seconds)
    else:
        print("\nchecks:")
        for asset, name, passed, severity in checks:
            text = term.pad("passed" if passed else f"FAILED ({severity})", 16)
            print(f"  {term.verdict(passed, text)} {term.pad(name, 34)} on {asset}")
    if not result.success or blocking_failed:
        failed_steps = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        print(f"\ndemo FAILED: steps {failed_steps or '-'}; blocking checks failed: "
              f"{[c[1] for c in blocking_failed] or '-'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
