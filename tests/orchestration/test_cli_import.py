"""``retry-audit import-store``: exit codes, the summary, and one-line errors."""

from __future__ import annotations

import json

from orchestration.cli import main


def test_clean_store_exit_0_and_summary(store_fixtures, tmp_path, capsys):
    """Importing store-clean exits 0 and prints records by topic, blanks and the output path."""
    out = tmp_path / "broker-a"
    assert main(["import-store", str(store_fixtures / "store-clean"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "112 records, 3 blanks" in text
    assert "SCHEDULE_TOPIC_XXXX  30" in text
    assert str(out) in text and "problems: none" in text
    assert (out / "parquet" / "commitlog").is_dir()


def test_json_summary(store_fixtures, tmp_path, capsys):
    """--json prints a machine-readable summary with the counts and the problems."""
    assert main(["import-store", str(store_fixtures / "store-crashed"), "--out", str(tmp_path / "c"),
                 "--json", "--name", "crashed-1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run_id"] == "crashed-1" and summary["records"] == 111
    assert any(p["file"] == "commitlog/00000000000000049152" and p["offset"] == 54903
               for p in summary["problems"])


def test_crashed_lists_problems_without_strict(store_fixtures, tmp_path, capsys):
    """Without --strict a damaged store still exits 0 and names the damaged file and offset."""
    assert main(["import-store", str(store_fixtures / "store-crashed"), "--out", str(tmp_path / "c")]) == 0
    assert "commitlog/00000000000000049152@54903" in capsys.readouterr().out


def test_strict_damage_exit_2_one_line(store_fixtures, tmp_path, capsys):
    """--strict on a damaged store exits 2 with one error line naming file and offset, and writes nothing."""
    out = tmp_path / "c"
    assert main(["import-store", str(store_fixtures / "store-crashed"), "--out", str(out), "--strict"]) == 2
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if line.startswith("retry-audit: error:")]
    assert len(errors) == 1 and "commitlog/00000000000000049152@54903" in errors[0]
    assert not out.exists()


def test_missing_store_and_not_a_store(tmp_path, capsys):
    """A missing store directory or one without commitlog/ exits 2 with a hint."""
    assert main(["import-store", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "hint:" in err
    assert main(["import-store", str(tmp_path), "--out", str(tmp_path.parent / "o2")]) == 2
    err = capsys.readouterr().err
    assert "no commitlog/ directory" in err and "hint:" in err


def test_quiet_prints_nothing(store_fixtures, tmp_path, capsys):
    """--quiet imports without printing a summary or progress."""
    assert main(["--quiet", "import-store", str(store_fixtures / "store-clean"), "--out", str(tmp_path / "q")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
