"""Differential test of the check SQL: a git revision's queries against the working tree's.

A check's SQL is rewritten for speed, never for meaning: the rewrite must return the same rows as
the query before it on every input, broken ones above all. This tool runs both on run directories
(Parquet plus lineage) after random damage of the kinds the checks exist to catch, and reports
every seed where the two disagree.

    python -m tools.check_diff --base REV RUN_DIR [RUN_DIR ...] [--checks NAME,...]
                               [--seeds N] [--seed0 S] [--max-damage K]

Seed ``s`` damages run ``RUN_DIR[s % len(RUN_DIR)]`` with 0..K changes drawn from
``random.Random(s)``: changed hop kinds, indexes, groups and message keys, deleted and duplicated
hop and lineage rows, changed ORIGIN_MESSAGE_IDs, RETRY_TOPICs and offsets in the commit log,
deleted records, lineage rows marked LOST or with a wrong hop count, and NULL run ids, offsets,
message keys, hop indexes and store times. A difference prints the seed, the damage and the
command that replays it alone; the exit code is 1 when any seed differs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import duckdb

from assets import checks as working_checks
from assets.warehouse import run_views
from broker_core.export.schema import HOP_KINDS

# The tables the damage touches become real tables (the run's views cannot be updated).
DAMAGED_TABLES = ("message_hops", "commitlog", "message_lineage")
NULLABLE = (("message_hops", "phys_offset"), ("commitlog", "phys_offset"), ("message_hops", "run_id"),
            ("message_hops", "message_key"), ("message_lineage", "message_key"),
            ("message_hops", "hop_index"), ("message_hops", "store_ts"))


def _git_show(repo: Path, rev: str, path: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"],
                              check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"check_diff: cannot read {path} at {rev!r}: {exc.stderr.strip()}") from None


def checks_at(rev: str, repo: Path) -> ModuleType:
    """``assets/checks.py`` as it was at git revision ``rev``, imported as its own module.

    Its check SQL files (``assets/sql/checks/`` and the lineage fragments they share,
    ``assets/sql/lineage/shared/``, where the revision has them) are copied beside it into a
    package of its own, so that it reads the revision's SQL and not the working tree's.
    """
    text = _git_show(repo, rev, "assets/checks.py")
    name = "checks_at_" + re.sub(r"\W", "_", rev)
    package = Path(tempfile.mkdtemp(prefix="check-diff-")) / name
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "checks.py").write_text(text, encoding="utf-8")
    listed = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", rev, "--", "assets/sql/checks",
                             "assets/sql/lineage/shared"],
                            check=True, capture_output=True, text=True).stdout.split()
    for path in listed:
        target = package / Path(path).relative_to("assets")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_git_show(repo, rev, path), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    sys.modules.pop(f"{name}.checks", None)  # a second call reads the revision again
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    # Imported by name, so that dataclasses and importlib.resources find the module and its package.
    return importlib.import_module(f"{name}.checks")


def _materialize(con: duckdb.DuckDBPyConnection) -> None:
    for table in DAMAGED_TABLES:
        con.execute(f"CREATE TABLE _d_{table} AS SELECT * FROM {table}")
        con.execute(f"DROP VIEW {table}")
        con.execute(f"ALTER TABLE _d_{table} RENAME TO {table}")


def _row(con, rng: random.Random, table: str, where: str = "true") -> int | None:
    n = con.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]
    if n == 0:
        return None
    return con.execute(f"SELECT rowid FROM {table} WHERE {where} ORDER BY rowid LIMIT 1 OFFSET ?",
                       [rng.randrange(n)]).fetchone()[0]


def _value(con, rng: random.Random, table: str, column: str):
    rowid = _row(con, rng, table, f'"{column}" IS NOT NULL')
    if rowid is None:
        return None
    return con.execute(f'SELECT "{column}" FROM {table} WHERE rowid = ?', [rowid]).fetchone()[0]


def _set(con, table: str, column: str, value, rowid: int) -> None:
    con.execute(f'UPDATE {table} SET "{column}" = ? WHERE rowid = ?', [value, rowid])


def _delete(con, table: str, rowid: int) -> None:
    con.execute(f"DELETE FROM {table} WHERE rowid = ?", [rowid])


def _duplicate(con, table: str, rowid: int) -> None:
    con.execute(f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid = ?", [rowid])


def damage(con: duckdb.DuckDBPyConnection, rng: random.Random) -> str:
    """One random change to the hops, the commit log or the lineage; says what it did."""
    kind = rng.randrange(14 + len(NULLABLE))
    if kind >= 14:
        table, column = NULLABLE[kind - 14]
        rowid = _row(con, rng, table)
        if rowid is None:
            return "nothing"
        _set(con, table, column, None, rowid)
        return f"{table}.{column} of row {rowid} set NULL"
    if kind < 6:
        h = _row(con, rng, "message_hops")
        if h is None:
            return "nothing"
        if kind == 0:
            value = rng.choice(HOP_KINDS)
            _set(con, "message_hops", "hop_kind", value, h)
            return f"hop {h} kind {value}"
        if kind == 1:
            value = rng.randrange(-1, 6)
            _set(con, "message_hops", "hop_index", value, h)
            return f"hop {h} index {value}"
        if kind == 2:
            _delete(con, "message_hops", h)
            return f"hop {h} deleted"
        if kind == 3:
            _duplicate(con, "message_hops", h)
            return f"hop {h} duplicated"
        if kind == 4:
            value = rng.choice([None, _value(con, rng, "message_hops", "group")])
            _set(con, "message_hops", "group", value, h)
            return f"hop {h} group {value}"
        value = _value(con, rng, "message_hops", "message_key")
        _set(con, "message_hops", "message_key", value, h)
        return f"hop {h} message key {value}"
    if kind < 10:
        c = _row(con, rng, "commitlog")
        if c is None:
            return "nothing"
        if kind == 6:
            value = rng.choice([None, _value(con, rng, "commitlog", "msg_id"),
                                _value(con, rng, "commitlog", "uniq_key"),
                                _value(con, rng, "commitlog", "origin_msg_id")])
            _set(con, "commitlog", "origin_msg_id", value, c)
            return f"record {c} ORIGIN_MESSAGE_ID {value}"
        if kind == 7:
            value = rng.choice([None, "%RETRY%other", _value(con, rng, "commitlog", "retry_topic")])
            _set(con, "commitlog", "retry_topic", value, c)
            return f"record {c} RETRY_TOPIC {value}"
        if kind == 8:
            _delete(con, "commitlog", c)
            return f"record {c} deleted"
        con.execute("UPDATE commitlog SET phys_offset = phys_offset + 1 WHERE rowid = ?", [c])
        return f"record {c} offset shifted"
    lin = _row(con, rng, "message_lineage")
    if lin is None:
        return "nothing"
    if kind == 10:
        _duplicate(con, "message_lineage", lin)
        return f"lineage {lin} duplicated"
    if kind == 11:
        _delete(con, "message_lineage", lin)
        return f"lineage {lin} deleted"
    if kind == 12:
        step = rng.choice([-1, 1])
        con.execute("UPDATE message_lineage SET hops = hops + ? WHERE rowid = ?", [step, lin])
        return f"lineage {lin} hops {step:+d}"
    _set(con, "message_lineage", "final_state", "LOST", lin)
    return f"lineage {lin} LOST"


def _verdict_rows(con, module: ModuleType, names: Sequence[str]) -> dict[str, list[tuple]]:
    """The rows each check in ``names`` of ``module`` reports, inside the tables that module stages
    (a revision before ``staged_inputs`` stages none), built once from the damaged tables."""
    staged = getattr(module, "staged_inputs", lambda c: contextlib.nullcontext(c))
    with staged(con):
        return {name: sorted(con.execute(f'SELECT run_id, message_key, "group", detail '
                                         f'FROM ({module.CHECKS_BY_NAME[name].sql})').fetchall(), key=repr)
                for name in names}


@dataclass
class Difference:
    seed: int
    run_dir: Path
    check: str
    damage: list[str]
    base_only: list[tuple]
    working_only: list[tuple]


@dataclass
class Summary:
    seeds: int
    verdicts: int  # (seed, check) pairs where the base query returned rows: the damage was seen
    differences: list[Difference]


def compare(run_dirs: Sequence[Path], base: ModuleType, working: ModuleType, names: Sequence[str],
            seeds: range, max_damage: int = 5,
            report: Callable[[Difference], None] | None = None) -> Summary:
    """Run every check in ``names`` from both modules on each seed's damaged run; collect differences."""
    differences, verdicts = [], 0
    for seed in seeds:
        rng = random.Random(seed)
        run_dir = run_dirs[seed % len(run_dirs)]
        con = run_views(run_dir)
        try:
            _materialize(con)
            done = [damage(con, rng) for _ in range(rng.randint(0, max_damage))]
            base_rows, working_rows = _verdict_rows(con, base, names), _verdict_rows(con, working, names)
            for name in names:
                a, b = base_rows[name], working_rows[name]
                verdicts += bool(a)
                if a != b:
                    diff = Difference(seed, run_dir, name, done, [r for r in a if r not in b],
                                      [r for r in b if r not in a])
                    differences.append(diff)
                    if report:
                        report(diff)
        finally:
            con.close()
    return Summary(len(seeds), verdicts, differences)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.check_diff", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="run directories with parquet/ and lineage/")
    parser.add_argument("--base", required=True, help="git revision whose assets/checks.py is the reference")
    parser.add_argument("--checks", default=None,
                        help="comma-separated check names (default: every invariant)")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--seed0", type=int, default=0)
    parser.add_argument("--max-damage", type=int, default=5)
    args = parser.parse_args(argv)
    for run_dir in args.run_dirs:
        if not run_dir.is_dir():
            parser.error(f"{run_dir}: no such run directory")
        if not (run_dir / "lineage").is_dir():
            parser.error(f"{run_dir}: no lineage/ (run `retry-audit lineage` on it first)")
    base = checks_at(args.base, Path(__file__).resolve().parent.parent)
    names = args.checks.split(",") if args.checks else [c.name for c in working_checks.INVARIANTS]
    unknown = [n for n in names if n not in working_checks.CHECKS_BY_NAME or n not in base.CHECKS_BY_NAME]
    if unknown:
        parser.error(f"unknown check(s) here or at {args.base}: {', '.join(unknown)}")
    runs = " ".join(str(d) for d in args.run_dirs)

    def report(d: Difference) -> None:
        print(f"DIFF seed={d.seed} run={d.run_dir.name} check={d.check} damage={d.damage}\n"
              f"  only at {args.base}: {d.base_only[:3]}\n  only in the working tree: {d.working_only[:3]}\n"
              f"  replay: python -m tools.check_diff --base {args.base} --checks {d.check} "
              f"--seed0 {d.seed} --seeds 1 --max-damage {args.max_damage} {runs}", flush=True)

    summary = compare(args.run_dirs, base, working_checks, names,
                      range(args.seed0, args.seed0 + args.seeds), args.max_damage, report)
    print(f"{summary.seeds} seeds x {len(names)} checks: {len(summary.differences)} differ; "
          f"the base query found damage in {summary.verdicts} of {summary.seeds * len(names)}")
    return 1 if summary.differences else 0


if __name__ == "__main__":
    sys.exit(main())
