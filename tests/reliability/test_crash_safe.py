"""Crash-safe pipeline: a command killed with SIGKILL at any point, then run again, gives the output
of an uninterrupted run, and a half-written output is never visible under its final name.

Each command runs as a real subprocess in its own process group, so a kill takes the Spark JVM
with it. A killed run is started through ``kill_point_child.py``, which stops the command at one
named point (a function call: the temporary directory made, a table half written, the rename
not yet done), writes a marker file there and waits; the watcher kills the group as soon as the
marker appears, so every kill point is reached on every run, however fast or loaded the machine.
Every time the final path exists the watcher checks that it looks complete. After the kills the
same command runs to the end, and its tables are compared with a reference run's, rows sorted, so
a duplicate or missing row shows as a difference.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from assets.warehouse import WAREHOUSE_TABLES
from broker_core.export.schema import RAW_TABLES

ROOT = Path(__file__).parents[2]
SCRIPT = Path(sys.executable).parent / "retry-audit"
CHILD = Path(__file__).parent / "kill_point_child.py"
POLL_S = 0.002  # the watcher's poll period: short enough to see a marker before the next write
COMMAND_TIMEOUT_S = 900  # a lineage run starts a JVM; on a loaded 2-core machine that takes minutes
# Columns measured on the wall clock: the only values two runs of one input may differ in.
VOLATILE_COLUMNS = {"wall_seconds"}
# small.yaml with more messages: a run of a few seconds, long enough to be killed at several points.
CRASH_SCENARIO = (ROOT / "scenarios" / "small.yaml").read_text().replace(
    "name: small", "name: crash").replace("messages: 250", "messages: 1500").replace(
    "messages: 150", "messages: 600")


# --- running and killing --------------------------------------------------------------------------

@dataclass
class Kill:
    """Kill the command at the ``nth`` call of ``target`` (``module:Qual.name``) that matches,
    ``when`` "before" the call or "after" it returns.

    A call matches when its positional argument ``arg`` (0 is ``self`` of a method), or that
    argument's attribute ``attr``, contains the text ``contains``; with ``arg`` None every call does.
    """

    label: str
    target: str
    when: str = "before"
    nth: int = 1
    arg: int | None = None
    attr: str | None = None
    contains: str | None = None


@dataclass
class Outcome:
    killed: bool
    returncode: int | None
    seen_final: int = 0  # polls that found the final path
    incomplete: list[str] = field(default_factory=list)  # what a poll found wrong under the final name


def _still_incomplete(final: Path, looks_complete: Callable[[Path], str | None]) -> str | None:
    """What is wrong with ``final``, seen on two looks in a row.

    A rerun swaps its output in with renames (old aside, new in), so one look can land in the
    microseconds between them and find the path gone; output that is really incomplete stays so.
    """
    problem = looks_complete(final)
    if problem is None or not final.exists():
        return None
    return looks_complete(final)


def run_watched(argv: list[str], cwd: Path, final: Path, looks_complete: Callable[[Path], str | None],
                kill: Kill | None = None) -> Outcome:
    """Run ``retry-audit argv`` in ``cwd``; kill it at ``kill``'s point; check ``final`` on every poll."""
    env = {**os.environ, "RETRY_AUDIT_SPARK_MASTER": "local[2]"}
    marker = cwd.parent / f"{cwd.name}.kill-point"
    marker.unlink(missing_ok=True)
    command = [str(SCRIPT), "-q", *argv]
    if kill is not None:
        command = [sys.executable, str(CHILD), json.dumps(dataclasses.asdict(kill)), str(marker), "-q", *argv]
    proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started = time.monotonic()
    outcome = Outcome(killed=False, returncode=None)
    try:
        while True:
            done = proc.poll() is not None
            if final.exists():
                outcome.seen_final += 1
                problem = _still_incomplete(final, looks_complete)
                if problem:
                    outcome.incomplete.append(problem)
            if done:
                break
            if kill is not None and marker.exists():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                outcome.killed = True
                break
            assert time.monotonic() - started < COMMAND_TIMEOUT_S, f"{argv} ran past {COMMAND_TIMEOUT_S} s"
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stderr = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    outcome.returncode = proc.returncode
    if final.exists():
        problem = looks_complete(final)
        if problem:
            outcome.incomplete.append(problem)
    if kill is not None:
        assert outcome.killed, f"{argv} ended (exit {proc.returncode}) before its kill point {kill.label!r}: {stderr}"
    else:
        assert proc.returncode == 0, f"{argv} failed: {stderr}"
    return outcome


def killed_then_rerun(argv: list[str], cwd: Path, final: Path, looks_complete, kills: list[Kill]) -> None:
    """Kill the command at each point in turn (run_watched fails if one is not reached), then run
    it to the end."""
    for kill in kills:
        outcome = run_watched(argv, cwd, final, looks_complete, kill)
        assert not outcome.incomplete, (kill.label, outcome.incomplete[:3])
    outcome = run_watched(argv, cwd, final, looks_complete)
    assert not outcome.incomplete, outcome.incomplete[:3]
    assert final.exists()


# --- completeness and comparison ------------------------------------------------------------------

def run_dir_complete(path: Path) -> str | None:
    """A run directory looks complete when every raw table has a part file."""
    try:
        tables = {p.name for p in (path / "parquet").iterdir()}
    except FileNotFoundError:
        return f"{path}: no parquet/"
    missing = set(RAW_TABLES) - tables
    if missing:
        return f"{path}: tables missing: {sorted(missing)}"
    empty = [t for t in RAW_TABLES if not any((path / "parquet" / t).glob("*.parquet"))]
    if empty:
        return f"{path}: tables without a part file: {empty}"
    return None


def lineage_complete(path: Path) -> str | None:
    for table in ("message_hops", "message_lineage"):
        if not any((path / table).glob("*.parquet")):
            return f"{path}/{table}: no part file"
    return None


def warehouse_complete(path: Path) -> str | None:
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        return f"{path}: does not open: {exc}"
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    finally:
        con.close()
    missing = set(WAREHOUSE_TABLES) - names
    return f"{path}: tables missing: {sorted(missing)}" if missing else None


def sorted_rows(table) -> list[tuple]:
    table = table.drop_columns([c for c in table.column_names if c in VOLATILE_COLUMNS])
    rows = [tuple(repr(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(rows)


def parquet_tables(directory: Path) -> dict[str, list[tuple]]:
    return {p.name: sorted_rows(pq.read_table(p)) for p in sorted(directory.iterdir()) if p.is_dir()}


def assert_same_tables(got: dict[str, list[tuple]], want: dict[str, list[tuple]]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert len(got[name]) == len(want[name]), (name, len(got[name]), len(want[name]))
        assert got[name] == want[name], name


def warehouse_tables(path: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for table in WAREHOUSE_TABLES:
            cur = con.execute(f'SELECT * FROM "{table}"')
            names = [d[0] for d in cur.description]
            keep = [i for i, n in enumerate(names) if n not in VOLATILE_COLUMNS]
            out[table] = sorted(tuple(repr(row[i]) for i in keep) for row in cur.fetchall())
        return out
    finally:
        con.close()


def no_leftovers(cwd: Path, prefix: str) -> list[str]:
    return [p.name for p in cwd.iterdir() if p.name.startswith(prefix)]


# --- the commands ---------------------------------------------------------------------------------

def _workdirs(tmp_path: Path) -> tuple[Path, Path]:
    ref, test = tmp_path / "ref", tmp_path / "test"
    for d in (ref, test):
        d.mkdir()
        (d / "crash.yaml").write_text(CRASH_SCENARIO)
    return ref, test


# The point where a command's output is renamed into place (atomic_dir's last step).
def _renaming(tmp_prefix: str, label: str) -> Kill:
    return Kill(label, "os:rename", arg=0, contains=tmp_prefix)


SIM_KILLS = [
    Kill("temporary run directory made, simulation not started", "broker_core.sim.world:World.run"),
    Kill("commit log being written (500th put)", "broker_core.store.message_store:MessageStore.put_message",
         nth=500),
    Kill("commitlog table half written (a row group, no footer)", "broker_core.export.parquet:TableWriter._flush",
         when="after", arg=0, attr="table", contains="commitlog"),
    Kill("run.json written, runs table not", "broker_core.sim.run:_count"),
    _renaming("/.sim.tmp-", "every table written, not yet renamed into place"),
]


def test_simulate_killed_anywhere_then_rerun_matches(tmp_path):
    """A simulate killed at any point leaves no run dir under its name; the rerun equals an uninterrupted run."""
    ref, test = _workdirs(tmp_path)
    argv = ["simulate", "crash.yaml", "--out", "sim"]
    assert run_watched(argv, ref, ref / "sim", run_dir_complete).returncode == 0
    killed_then_rerun(argv, test, test / "sim", run_dir_complete, SIM_KILLS)
    assert_same_tables(parquet_tables(test / "sim" / "parquet"), parquet_tables(ref / "sim" / "parquet"))
    assert (test / "sim" / "run.json").read_text() == (ref / "sim" / "run.json").read_text()
    assert no_leftovers(test, ".sim.") == []
    # Killed while replacing a complete run: the complete one stays (or the new one is complete).
    outcome = run_watched(argv, test, test / "sim", run_dir_complete,
                          dataclasses.replace(SIM_KILLS[2], label="rerun over a complete run"))
    assert not outcome.incomplete and (test / "sim").exists()
    assert_same_tables(parquet_tables(test / "sim" / "parquet"), parquet_tables(ref / "sim" / "parquet"))


IMPORT_KILLS = [
    Kill("temporary run directory made, nothing read", "broker_core.export.store_import:link_parts"),
    Kill("commitlog table half written (one slice)", "broker_core.export.columnar:CommitlogWriter.write",
         when="after"),
    Kill("store_problems written", "broker_core.export.parquet:TableWriter.close", when="after", arg=0,
         attr="table", contains="store_problems"),
    _renaming("/.imp.tmp-", "every table written, not yet renamed into place"),
]


def test_import_store_killed_anywhere_then_rerun_matches(tmp_path):
    """An import-store killed at any point leaves no run dir under its name; the rerun equals an uninterrupted one."""
    ref, test = _workdirs(tmp_path)
    assert run_watched(["simulate", "crash.yaml", "--out", "sim"], ref, ref / "sim",
                       run_dir_complete).returncode == 0
    store = ref / "sim" / "store"
    argv = ["import-store", str(store), "--out", "imp"]
    assert run_watched(argv, ref, ref / "imp", run_dir_complete).returncode == 0
    killed_then_rerun(argv, test, test / "imp", run_dir_complete, IMPORT_KILLS)
    assert_same_tables(parquet_tables(test / "imp" / "parquet"), parquet_tables(ref / "imp" / "parquet"))
    assert no_leftovers(test, ".imp.") == []


LINEAGE_KILLS = [
    Kill("Spark started, nothing written", "assets.lineage:_build_into"),
    Kill("message_hops written, message_lineage not", "assets.lineage:_write", when="after", arg=1,
         contains="/message_hops"),
    _renaming("/.lineage.tmp-", "both tables written, not yet renamed into place"),
]
WAREHOUSE_KILLS = [
    Kill("build file made, nothing loaded", "assets.warehouse:load_runs"),
    Kill("every table built, not checkpointed", "assets.warehouse:finish_build"),
    Kill("build file closed, not yet swapped into place", "assets.warehouse:swap_into_place"),
]


def _small_run(where: Path) -> None:
    shutil.copy(ROOT / "scenarios" / "small.yaml", where / "small.yaml")
    assert run_watched(["simulate", "small.yaml", "--out", "run"], where, where / "run",
                       run_dir_complete).returncode == 0


@pytest.mark.long  # a dozen Spark processes started and killed: minutes
def test_lineage_and_warehouse_killed_anywhere_then_rerun_match(tmp_path):
    """lineage and warehouse killed at any point never show half an output; their reruns equal uninterrupted runs."""
    ref, test = _workdirs(tmp_path)
    _small_run(ref)
    shutil.copytree(ref / "run", test / "run")
    shutil.copy(ref / "small.yaml", test / "small.yaml")

    argv = ["lineage", "run"]
    assert run_watched(argv, ref, ref / "run" / "lineage", lineage_complete).returncode == 0
    killed_then_rerun(argv, test, test / "run" / "lineage", lineage_complete, LINEAGE_KILLS)
    assert_same_tables(parquet_tables(test / "run" / "lineage"), parquet_tables(ref / "run" / "lineage"))
    assert no_leftovers(test / "run", ".lineage.") == []

    argv = ["warehouse", "run", "--db", "w.duckdb"]
    assert run_watched(argv, ref, ref / "w.duckdb", warehouse_complete).returncode == 0
    killed_then_rerun(argv, test, test / "w.duckdb", warehouse_complete, WAREHOUSE_KILLS)
    assert warehouse_tables(test / "w.duckdb") == warehouse_tables(ref / "w.duckdb")
    assert no_leftovers(test, ".w.duckdb.") == [], "build files of the killed builds were left"
    # Killed while replacing a complete warehouse: readers still find a complete one.
    outcome = run_watched(argv, test, test / "w.duckdb", warehouse_complete,
                          dataclasses.replace(WAREHOUSE_KILLS[1], label="rebuild over a complete warehouse"))
    assert not outcome.incomplete and outcome.seen_final > 0
    assert warehouse_tables(test / "w.duckdb") == warehouse_tables(ref / "w.duckdb")


def test_warehouse_rebuild_removes_build_files_of_killed_builds(tmp_path):
    """A warehouse build removes the build files that killed builds left beside the warehouse."""
    sys.path.insert(0, str(ROOT / "tests" / "assets"))
    from tiny_runs import write_tiny_run

    run = write_tiny_run(tmp_path / "tiny")
    dead_pid = 2**22 + 1  # above Linux's pid_max default: no live process owns it
    stale = tmp_path / f".w.duckdb.building-{dead_pid}"
    stale.write_bytes(b"\0" * 4096)
    Path(f"{stale}.wal").write_bytes(b"\0" * 4096)
    assert run_watched(["warehouse", str(run), "--db", "w.duckdb"], tmp_path, tmp_path / "w.duckdb",
                       warehouse_complete).returncode == 0
    assert no_leftovers(tmp_path, ".w.duckdb.") == []
