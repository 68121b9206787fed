"""The warehouse, trace, resend-plan and sql commands, end to end through the CLI."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import duckdb
import pytest

from orchestration.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "assets"))
from tiny_runs import ts, write_tiny_run  # noqa: E402


@pytest.fixture
def db(tmp_path, capsys):
    run = write_tiny_run(tmp_path / "runs" / "tiny")
    path = tmp_path / "warehouse.duckdb"
    assert main(["-q", "warehouse", str(run), "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "dlq_messages" in out and "1 run(s)" in out
    assert "passed           hop_grammar_valid" in out
    assert "FAILED (WARN)    duplicate_rate_below_max  1 violation(s); first: g1" in out
    return path


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_trace_by_uniq_key_shows_hops_state_and_consumes(db, capsys):
    """trace prints every hop, then the group's final state and its consume outcomes."""
    code, out, _ = run_cli(capsys, "trace", "UB", "--db", str(db))
    assert code == 0
    kinds = re.findall(r"^\s+\d+\s+([A-Z]+)\s", out, flags=re.MULTILINE)
    assert kinds == ["PUBLISH", "SCHEDULE", "RETRY", "DLQ"]
    assert "group g1: DLQ after 1 retries" in out
    assert "EXCEPTION -> SENT_BACK" in out


def test_trace_of_a_pop_message_in_flight_says_until_when_it_is_invisible(tmp_path, capsys):
    """A chain IN_FLIGHT (a 5.x POP record popped and not acked at the snapshot) is traced with its
    invisible_until, in the timeline and in --json."""
    def in_flight(tables):
        row = next(r for r in tables["message_lineage"] if r["message_key"] == "UA")
        row["final_state"], row["invisible_until"] = "IN_FLIGHT", ts(25_000)

    run = write_tiny_run(tmp_path / "runs" / "tiny", in_flight)
    db = tmp_path / "w.duckdb"
    assert main(["-q", "warehouse", str(run), "--db", str(db)]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "trace", "UA", "--db", str(db))
    assert code == 0
    assert "group g1: IN_FLIGHT after 0 retries" in out
    assert "popped, not acked: still invisible until 2026-01-01 00:00:25.000" in out
    code, out, _ = run_cli(capsys, "trace", "UA", "--db", str(db), "--json")
    chain = json.loads(out)["messages"][0]["groups"][0]
    assert (chain["final_state"], chain["invisible_until"]) == ("IN_FLIGHT", "2026-01-01T00:00:25+00:00")


def test_trace_by_offset_msg_id_and_origin_msg_id(db, capsys):
    """An offset msgId of any hop, or the ORIGIN_MESSAGE_ID, finds the same message."""
    dlq_msg_id = "0A00000100002A9F0000000000000190"
    origin = "0A00000100002A9F0000000000000064"
    for key in (dlq_msg_id, origin):
        code, out, _ = run_cli(capsys, "trace", key, "--db", str(db), "--json")
        assert code == 0
        doc = json.loads(out)
        assert [m["message_key"] for m in doc["messages"]] == ["UB"]


def test_warehouse_exits_1_when_a_blocking_check_fails(tmp_path, capsys):
    """A run that breaks an invariant (a delivery before its due time) makes warehouse exit 1."""
    def early(tables):
        row = tables["schedule_deliveries"][0]
        row["delivered_ts"], row["lateness_ms"] = ts(10_015), -5

    run = write_tiny_run(tmp_path / "runs" / "tiny", early)
    db = tmp_path / "w.duckdb"
    code, out, err = run_cli(capsys, "-q", "warehouse", str(run), "--db", str(db))
    assert code == 1
    assert "FAILED (ERROR)   no_delivery_before_due_time" in out
    assert err.startswith("retry-audit: error: ") and "tiny: no_delivery_before_due_time" in err
    assert db.is_file(), "the warehouse is kept to look into the failure"


def test_trace_of_an_unknown_key_exits_1(db, capsys):
    """A key no message has is a failed lookup (exit 1, one line naming the key), not bad input."""
    code, out, err = run_cli(capsys, "trace", "NO-SUCH-KEY", "--db", str(db))
    assert code == 1 and out == ""
    assert "no message has UNIQ_KEY, msgId or ORIGIN_MESSAGE_ID 'NO-SUCH-KEY'" in err


def test_trace_key_with_quotes_and_semicolons_is_only_data(db, capsys):
    """A key full of SQL is a parameter: it finds nothing and harms nothing."""
    hostile = "x'; DROP TABLE message_hops; --\"; select 1;"
    code, _, err = run_cli(capsys, "trace", hostile, "--db", str(db))
    assert code == 1 and "no message has" in err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM message_hops").fetchone()[0] == 7


def test_trace_finds_a_key_that_contains_quotes(tmp_path, capsys):
    """A UNIQ_KEY with quotes and semicolons is traced exactly (parameterized, not pasted)."""
    odd = "it's;\"odd\""
    def rename(tables):
        for table in ("commitlog", "consume_attempts", "produced"):
            for row in tables[table]:
                if row.get("uniq_key") == "UA":
                    row["uniq_key"] = odd
        for table in ("message_hops", "message_lineage"):
            for row in tables[table]:
                if row["message_key"] == "UA":
                    row["message_key"] = odd
    run = write_tiny_run(tmp_path / "r", rename)
    db = tmp_path / "w.duckdb"
    assert main(["-q", "warehouse", str(run), "--db", str(db)]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "trace", odd, "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["messages"][0]["message_key"] == odd


def test_resend_plan_keeps_user_properties_and_targets_the_retry_topic(db, capsys):
    """Each DLQ message goes back to its RETRY_TOPIC with its user properties, without broker plumbing."""
    code, out, _ = run_cli(capsys, "-q", "resend-plan", "--db", str(db), "--group", "g1")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1
    row = rows[0]
    assert row["resend_topic"] == "OrderTopic" and row["dlq_msg_id"].endswith("0190")
    props = json.loads(row["user_properties"])
    assert props == {"KEYS": "order-UB", "TAGS": "TagA", "color": "blue"}


def test_resend_plan_filters_by_origin_topic_and_prints_json(db, capsys):
    """--origin-topic narrows the plan; --json prints a list."""
    code, out, _ = run_cli(capsys, "-q", "resend-plan", "--db", str(db), "--group", "g1",
                           "--origin-topic", "OtherTopic", "--json")
    assert code == 0 and json.loads(out) == []


def test_resend_plan_for_an_unknown_group_lists_the_known_ones(db, capsys):
    """An unknown group is bad input (exit 2) and the hint names the groups there are."""
    code, _, err = run_cli(capsys, "resend-plan", "--db", str(db), "--group", "nope")
    assert code == 2 and "groups: g1" in err


def test_sql_prints_csv_and_json(db, capsys):
    """sql prints a header and rows as CSV, or a JSON list of objects."""
    code, out, _ = run_cli(capsys, "sql", "--db", str(db),
                           "select kind, message_key from anomalies order by kind")
    assert code == 0 and out.splitlines() == ["kind,message_key", "DUPLICATE_CONSUME,UC", "LOST,UD"]
    code, out, _ = run_cli(capsys, "sql", "--db", str(db), "--json", "select 1 as one, 'a' as letter")
    assert json.loads(out) == [{"one": 1, "letter": "a"}]


def test_sql_is_read_only(db, capsys):
    """A write through sql fails as bad input and leaves the warehouse unchanged."""
    code, _, err = run_cli(capsys, "sql", "--db", str(db), "drop table anomalies")
    assert code == 2 and "read-only" in err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM anomalies").fetchone()[0] == 2


def test_missing_warehouse_hints_at_make_demo(tmp_path, capsys):
    """Every reading command on a missing file says how to build the warehouse."""
    missing = str(tmp_path / "none.duckdb")
    for argv in (["trace", "UB", "--db", missing], ["sql", "--db", missing, "select 1"],
                 ["resend-plan", "--db", missing, "--group", "g1"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "make demo" in err and "retry-audit warehouse" in err


def test_warehouse_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    """warehouse on a directory without parquet/ is bad input, not a traceback."""
    code, _, err = run_cli(capsys, "warehouse", str(tmp_path), "--db", str(tmp_path / "w.duckdb"))
    assert code == 2 and "not a run directory" in err
