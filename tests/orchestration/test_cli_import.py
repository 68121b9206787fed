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


def test_a_log_cut_by_retention_imports_strictly_with_its_first_offset(retained_store_copy, tmp_path, capsys):
    """--strict accepts a store without its oldest files; --json and the text summary give first_offset."""
    store = retained_store_copy("store-clean", 2)
    assert main(["import-store", str(store), "--out", str(tmp_path / "j"), "--strict", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["first_offset"], summary["valid_end"], summary["records"]) == (32768, 55490, 43)
    assert summary["problems"] == []
    assert main(["import-store", str(store), "--out", str(tmp_path / "t"), "--strict"]) == 0
    text = capsys.readouterr().out
    assert "first offset 32768" in text and "problems: none" in text


def test_json_problems_name_kind_severity_file_and_offset(retained_store_copy, tmp_path, capsys):
    """Each --json problem has kind, severity, file and offset; a cut crashed store keeps its damage."""
    store = retained_store_copy("store-crashed", 1)
    assert main(["import-store", str(store), "--out", str(tmp_path / "c"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["first_offset"] == 16384 and summary["valid_end"] == 54903
    found = {(p["kind"], p["severity"], p["file"], p["offset"]) for p in summary["problems"]}
    assert ("torn-record", "error", "commitlog/00000000000000049152", 54903) in found
    assert ("cq-past-commitlog", "error", "consumequeue/%DLQ%GroupA/0/00000000000000000000", 140) in found
    assert main(["import-store", str(store), "--out", str(tmp_path / "s"), "--strict"]) == 2


def test_decoder_flag_picks_the_reference_decoder(store_fixtures, tmp_path, capsys):
    """--decoder reference imports with the per-record decoder into the same commitlog file as the
    default columnar one; an unknown decoder is a usage error (exit 2)."""
    store = str(store_fixtures / "store-crashed")
    for decoder in ("reference", "columnar"):
        args = ["import-store", store, "--out", str(tmp_path / decoder), "--name", "c", "--decoder", decoder]
        assert main(args) == 0
    part = "parquet/commitlog/part-c.parquet"  # an import names its files after its broker (the run id)
    assert (tmp_path / "reference" / part).read_bytes() == (tmp_path / "columnar" / part).read_bytes()
    capsys.readouterr()
    try:
        code = main(["import-store", store, "--out", str(tmp_path / "x"), "--decoder", "fast"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_broker_flag_adds_a_broker_to_the_run(store_fixtures, tmp_path, capsys):
    """--broker NAME adds that broker's store to the run (the summary and --json list the run's
    brokers); a bad broker name exits 2 with one error line and writes nothing."""
    out = tmp_path / "cluster"
    assert main(["import-store", str(store_fixtures / "store-clean"), "--out", str(out), "--broker", "broker-a"]) == 0
    assert "(run cluster, broker broker-a)" in capsys.readouterr().out
    assert main(["import-store", str(store_fixtures / "store-crashed"), "--out", str(out), "--broker", "broker-b",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["run_id"], summary["broker"], summary["brokers"]) == ("cluster", "broker-b", ["broker-a", "broker-b"])
    assert sorted(p.name for p in (out / "parquet" / "commitlog").iterdir()) == [
        "part-broker-a.parquet", "part-broker-b.parquet"]
    assert main(["import-store", str(store_fixtures / "store-clean"), "--out", str(tmp_path / "x"),
                 "--broker", "../evil"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("retry-audit: error:")]
    assert len(errors) == 1 and "broker name '../evil'" in errors[0]
    assert not (tmp_path / "x").exists()


def test_role_slave_merges_a_slave_into_its_master(store_fixtures, tmp_path, capsys):
    """--role slave imports a slave's store as its master's broker: the summary gives the merge
    (the crashed copy lacks the clean store's last record: 1 on the master only) and the broker's
    commitlog holds each record once; --role slave without --broker exits 2."""
    out = tmp_path / "cluster"
    assert main(["-q", "import-store", str(store_fixtures / "store-clean"), "--out", str(out), "--broker", "broker-a"]) == 0
    assert main(["import-store", str(store_fixtures / "store-crashed"), "--out", str(out), "--broker", "broker-a",
                 "--role", "slave"]) == 0
    text = capsys.readouterr().out
    assert "slave of broker-a, merged with its other side: 112 records, 1 on the master only, 0 on the slave " \
           "only, 0 offset(s) where they differ" in text
    assert "slave-behind" in text
    assert main(["import-store", str(store_fixtures / "store-crashed"), "--out", str(tmp_path / "x"),
                 "--role", "slave"]) == 2
    assert "--role slave" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_importing_again_reads_only_the_new_tail_and_says_when_it_reads_whole(
        store_fixtures, writable_store_copy, tmp_path, capsys):
    """--live --json: the torn last record of a store being written is in flight (exit 0, no
    error); once the file holds the whole record the next import goes on from its offset and
    reads only its bytes; another store imported as the same broker is read whole, said on stderr."""
    store = writable_store_copy("store-crashed")
    out = tmp_path / "run"
    args = ["import-store", str(store), "--out", str(out), "--broker", "broker-a", "--live", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["records"] == 111 and first["resumed_from"] is None and first["next_offset"] == 54903
    assert [p["kind"] for p in first["problems"] if p["severity"] == "error"] == []
    assert [p["offset"] for p in first["problems"] if p["kind"] == "in-flight"] == [54903]
    last = "00000000000000049152"
    (store / "commitlog" / last).write_bytes((store_fixtures / "store-clean" / "commitlog" / last).read_bytes())
    assert main([*args, "--strict"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (second["resumed_from"], second["records_added"], second["records"]) == (54903, 1, 112)
    assert second["bytes_read"] == second["valid_end"] - 54903 and second["full_import_reason"] is None
    assert main(["import-store", str(store_fixtures / "store-clean"), "--out", str(out), "--broker", "broker-a"]) == 0
    captured = capsys.readouterr()
    assert "read the store whole: the last import of broker broker-a read another store" in captured.out
    assert "is read whole: the last import of broker broker-a read another store" in captured.err
