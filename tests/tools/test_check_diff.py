"""tools.check_diff: it sees damage, finds no difference between a query and itself, and does find
one when a rewrite drops what the query reported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from assets import checks
from tools.check_diff import checks_at, compare

sys.path.insert(0, str(Path(__file__).parents[1] / "assets"))
from tiny_runs import write_tiny_run  # noqa: E402

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(40)
NAMES = [c.name for c in checks.INVARIANTS]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    return write_tiny_run(tmp_path_factory.mktemp("check-diff") / "tiny")


def test_the_same_queries_never_differ_and_the_damage_is_seen(tiny_run):
    summary = compare([tiny_run], checks, checks, NAMES, SEEDS)
    assert summary.differences == []
    # Not vacuous: the damage broke invariants on many seeds (the undamaged run passes every check).
    assert summary.verdicts >= 10, summary.verdicts


def test_a_rewrite_that_loses_rows_is_reported_with_its_seed(tiny_run):
    blind = replace(checks.CHECKS_BY_NAME[checks.HOP_GRAMMAR],
                    sql='SELECT NULL AS run_id, NULL AS message_key, NULL AS "group", NULL AS detail WHERE false')
    rewrite = SimpleNamespace(CHECKS_BY_NAME={**checks.CHECKS_BY_NAME, checks.HOP_GRAMMAR: blind})
    seen = []
    summary = compare([tiny_run], checks, rewrite, [checks.HOP_GRAMMAR], SEEDS, report=seen.append)
    assert summary.differences and summary.differences == seen
    first = summary.differences[0]
    assert first.check == checks.HOP_GRAMMAR and first.base_only and not first.working_only
    # The same seed alone gives the same difference (what the printed replay command runs).
    again = compare([tiny_run], checks, rewrite, [checks.HOP_GRAMMAR], range(first.seed, first.seed + 1))
    assert [(d.seed, d.damage, d.base_only) for d in again.differences] == \
        [(first.seed, first.damage, first.base_only)]


@pytest.mark.skipif(shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists(),
                    reason="needs the project's git checkout")
def test_the_base_revision_is_read_from_git(tiny_run):
    base = checks_at("HEAD", PROJECT_ROOT)
    assert set(base.CHECKS_BY_NAME) >= {checks.HOP_GRAMMAR, checks.ORIGIN_STABLE}
    out = subprocess.run([sys.executable, "-m", "tools.check_diff", "--base", "nosuchrev", str(tiny_run)],
                         cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert out.returncode != 0 and "nosuchrev" in out.stderr
    missing = tiny_run.parent / "no-such-run"
    out = subprocess.run([sys.executable, "-m", "tools.check_diff", "--base", "HEAD", str(missing)],
                         cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and f"{missing}: no such run directory" in out.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_base_revision_reads_its_own_sql_files(tmp_path):
    """A revision's checks read that revision's SQL files, not the working tree's."""
    repo = tmp_path / "repo"
    shutil.copytree(PROJECT_ROOT / "assets", repo / "assets", ignore=shutil.ignore_patterns("__pycache__"))
    sql = repo / "assets" / "sql" / "checks" / f"{checks.NO_EARLY_DELIVERY}.sql"
    working = sql.read_text(encoding="utf-8")
    sql.write_text(working + "-- as committed\n", encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "assets"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    sql.write_text(working, encoding="utf-8")
    base = checks_at("HEAD", repo)
    assert base.CHECKS_BY_NAME[checks.NO_EARLY_DELIVERY].sql.endswith("-- as committed\n")
    assert not checks.CHECKS_BY_NAME[checks.NO_EARLY_DELIVERY].sql.endswith("-- as committed\n")
