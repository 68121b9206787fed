"""The DuckDB audit warehouse on a hand-built run whose answers are worked out by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

from assets.audit import AUDIT_TABLES
from assets.warehouse import WAREHOUSE_TABLES, build_warehouse, open_read_only
from broker_core.errors import BadInputError

sys.path.insert(0, str(Path(__file__).parent))
from tiny_runs import GROUP, TOPIC, write_tiny_run  # noqa: E402


@pytest.fixture
def warehouse(tmp_path):
    run = write_tiny_run(tmp_path / "runs" / "tiny")
    db = tmp_path / "warehouse.duckdb"
    build_warehouse([run], db)
    con = open_read_only(db)
    yield con
    con.close()


def test_every_table_exists_with_a_run_id_column(warehouse):
    """Every warehouse table exists and carries a run_id column."""
    for table in WAREHOUSE_TABLES:
        cols = [r[0] for r in warehouse.execute(f'DESCRIBE "{table}"').fetchall()]
        assert "run_id" in cols, table


def test_dlq_messages_has_origin_retries_properties_and_last_failure(warehouse):
    """A DLQ record lists its origin topic and msgId, its retries, all properties and the last failure."""
    rows = warehouse.execute(
        'SELECT "group", message_key, origin_topic, origin_msg_id, retries, properties, last_status, '
        "last_outcome FROM dlq_messages").fetchall()
    assert len(rows) == 1
    group, key, origin_topic, origin_msg_id, retries, props, status, outcome = rows[0]
    assert (group, key, origin_topic, retries) == (GROUP, "UB", TOPIC, 1)
    assert origin_msg_id == "0A00000100002A9F0000000000000064"  # UB's first record, at offset 100
    assert props["color"] == "blue" and props["RETRY_TOPIC"] == TOPIC
    assert (status, outcome) == ("EXCEPTION", "SENT_BACK")


def test_retry_funnel_counts_reached_succeeded_and_dlq_per_attempt(warehouse):
    """The funnel counts who reached each attempt, who succeeded there and who went to the DLQ."""
    rows = warehouse.execute(
        "SELECT attempt, reached, succeeded, to_dlq FROM retry_funnel ORDER BY attempt").fetchall()
    assert rows == [(0, 3, 2, 0), (1, 1, 0, 1)]


def test_delivery_accounting_has_the_openchaos_fields(warehouse):
    """Four sent, three consumed (one twice), one lost: not at-least-once, not exactly-once."""
    row = warehouse.execute(
        "SELECT enqueue_invoke, enqueue_success, dequeue_success, lost, duplicated, at_least_once, "
        "exactly_once FROM delivery_accounting").fetchone()
    assert row == (4, 4, 3, 1, 1, False, False)


def test_group_health_and_delay_accuracy(warehouse):
    """Group health counts final states; delay accuracy reports each level's expected delay."""
    health = warehouse.execute(
        "SELECT messages, consumed, dlq, retrying, lost, retry_rate FROM group_health").fetchone()
    assert health == (4, 2, 1, 0, 1, 0.25)
    delays = warehouse.execute(
        "SELECT delay_level, deliveries, expected_delay_ms, lateness_max_ms, early_count "
        "FROM delay_accuracy ORDER BY delay_level").fetchall()
    assert delays == [(2, 1, 5_000, 0, 0), (3, 1, 10_000, 0, 0)]


def test_anomalies_list_the_duplicate_and_the_explained_loss(warehouse):
    """The duplicate consume of UC and the loss of UD (explained by the crash) are anomalies."""
    rows = warehouse.execute("SELECT kind, message_key, detail FROM anomalies ORDER BY kind").fetchall()
    assert [(k, m) for k, m, _ in rows] == [("DUPLICATE_CONSUME", "UC"), ("LOST", "UD")]
    assert "explained by a crash" in rows[1][2]


def test_two_runs_load_side_by_side(tmp_path):
    """Two runs share one warehouse, each row tagged with its run."""
    a = write_tiny_run(tmp_path / "a", run_id="run-a")
    b = write_tiny_run(tmp_path / "b", run_id="run-b")
    summary = build_warehouse([a, b], tmp_path / "w.duckdb")
    assert summary.run_ids == ["run-a", "run-b"]
    with open_read_only(tmp_path / "w.duckdb") as con:
        rows = con.execute("SELECT run_id, count(*) FROM message_hops GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("run-a", 7), ("run-b", 7)]


def test_a_run_directory_named_with_glob_characters_loads(tmp_path):
    """The views read a table's directory by glob; wildcard characters in its path match literally."""
    odd = write_tiny_run(tmp_path / "runs [1]" / "t*?y")
    decoy = write_tiny_run(tmp_path / "runs 1" / "tiny", run_id="decoy")  # what "[1]" and "*?" would match
    summary = build_warehouse([odd, decoy], tmp_path / "w.duckdb")
    with open_read_only(summary.db_path) as con:
        rows = con.execute("SELECT run_id, count(*) FROM message_hops GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("decoy", 7), ("tiny", 7)]


def test_the_same_run_twice_is_refused(tmp_path):
    """Loading two directories with one run id would mix their rows, so it is refused."""
    a = write_tiny_run(tmp_path / "a")
    b = write_tiny_run(tmp_path / "b")
    with pytest.raises(BadInputError, match="appears twice"):
        build_warehouse([a, b], tmp_path / "w.duckdb")


def test_a_run_without_lineage_is_refused_with_a_hint(tmp_path):
    """A run directory without lineage/ is bad input that names the command to run."""
    run = write_tiny_run(tmp_path / "r", change=lambda t: None)
    for p in (run / "lineage").rglob("*.parquet"):
        p.unlink()
    with pytest.raises(BadInputError) as err:
        build_warehouse([run], tmp_path / "w.duckdb")
    assert "retry-audit lineage" in err.value.hint


def test_an_open_reader_does_not_block_a_rebuild(tmp_path):
    """A read-only session stays open on the old file while a rebuild swaps the new one in."""
    db = tmp_path / "w.duckdb"
    build_warehouse([write_tiny_run(tmp_path / "a", run_id="first")], db)
    reader = duckdb.connect(str(db), read_only=True)
    try:
        build_warehouse([write_tiny_run(tmp_path / "b", run_id="second")], db)
        assert reader.execute("SELECT DISTINCT run_id FROM runs").fetchall() == [("first",)]
    finally:
        reader.close()
    with open_read_only(db) as con:
        assert con.execute("SELECT DISTINCT run_id FROM runs").fetchall() == [("second",)]
    assert not list(tmp_path.glob(".w.duckdb.building*"))


def test_the_file_uses_the_v1_storage_format(tmp_path):
    """The warehouse is written in DuckDB's v1.0.0 storage so 1.x clients can open it."""
    db = tmp_path / "w.duckdb"
    build_warehouse([write_tiny_run(tmp_path / "a")], db)
    con = duckdb.connect()
    con.execute(f"ATTACH '{db}' AS w (READ_ONLY)")
    tags = con.execute("SELECT tags FROM duckdb_databases() WHERE database_name = 'w'").fetchone()[0]
    # DuckDB names the oldest release that reads the file: v1.0.0 and every later one.
    assert tags["storage_version"] == "v1.0.0+"


def test_missing_warehouse_is_bad_input_with_a_hint(tmp_path):
    """Opening a warehouse that does not exist says how to build one."""
    with pytest.raises(BadInputError) as err:
        open_read_only(tmp_path / "nope.duckdb")
    assert "make demo" in err.value.hint


def test_audit_tables_build_on_empty_runs(tmp_path):
    """An import-like run with empty producer and consumer tables still builds every audit table."""
    def strip(tables):
        tables["produced"].clear()
        tables["consume_attempts"].clear()
    run = write_tiny_run(tmp_path / "imp", change=strip)
    summary = build_warehouse([run], tmp_path / "w.duckdb")
    assert set(AUDIT_TABLES) <= set(summary.rows)
    with open_read_only(tmp_path / "w.duckdb") as con:
        row = con.execute("SELECT enqueue_success, dequeue_success, duplicated, counted_from "
                          "FROM delivery_accounting").fetchone()
    assert row == (3, 2, None, "lineage")


def _build(tmp_path, change):
    run = write_tiny_run(tmp_path / "run", change)
    build_warehouse([run], tmp_path / "w.duckdb")
    return open_read_only(tmp_path / "w.duckdb")


def test_delay_accuracy_of_an_import_is_measured_from_the_commit_log(tmp_path):
    """Without recorded deliveries and schedule-queue units, lateness is a SCHEDULE hop's dwell
    minus its level's delay in the broker's table."""
    def no_deliveries(tables):
        tables["schedule_deliveries"].clear()
        tables["message_hops"][2]["dwell_ms"] += 40  # UB's SCHEDULE hop left 40 ms late
    with _build(tmp_path, no_deliveries) as con:
        rows = con.execute("SELECT delay_level, expected_delay_ms, lateness_max_ms, measured_from "
                           "FROM delay_accuracy ORDER BY 1").fetchall()
    table = "commitlog, due time from the broker's delay table"
    assert rows == [(2, 5_000, 0, table), (3, 10_000, 40, table)]


def test_delay_accuracy_without_a_due_time_measures_nothing(tmp_path):
    """No schedule-queue unit and no level table: no expected delay is known, and none is guessed
    from the deliveries it would judge (the lateness drift is then not applicable)."""
    def imported(tables):
        tables["schedule_deliveries"].clear()
        tables["run.json"] = None
    with _build(tmp_path, imported) as con:
        rows = con.execute("SELECT delay_level, expected_delay_ms, lateness_max_ms, measured_from "
                           "FROM delay_accuracy ORDER BY 1").fetchall()
    assert rows == []


def test_store_damage_and_late_delivery_are_anomalies(tmp_path):
    """Damage found in an imported store and a delivery seconds late are listed as anomalies."""
    def damage(tables):
        tables["store_problems"].append({"run_id": "tiny", "file_name": "00000000000000000000",
                                         "offset": 4096, "kind": "TORN_RECORD", "detail": "CRC mismatch"})
        tables["schedule_deliveries"][0]["lateness_ms"] = 60_000
    with _build(tmp_path, damage) as con:
        rows = con.execute("SELECT kind, message_key, \"group\", detail FROM anomalies "
                           "WHERE kind IN ('STORE_DAMAGE', 'LATE_DELIVERY') ORDER BY kind").fetchall()
    assert rows[0][:3] == ("LATE_DELIVERY", "UB", "g1") and "60000 ms" in rows[0][3]
    assert rows[1][0] == "STORE_DAMAGE" and "TORN_RECORD" in rows[1][3] and "4096" in rows[1][3]


def test_delivery_accounting_counts_a_message_once_however_often_it_was_sent(tmp_path):
    """Send rows of one message count it once: SEND_OK if any was, under every topic it went to."""
    def resend(tables):
        produced = tables["produced"]
        first = dict(produced[0], status="SEND_FAILED")  # UA: a failed send, then SEND_OK
        ud = produced[3]
        ud["status"] = "FLUSH_DISK_TIMEOUT"
        elsewhere = dict(ud, topic="OtherTopic", status="SEND_OK")  # UD also went to a topic nobody reads
        produced.extend([first, elsewhere])
    with _build(tmp_path, resend) as con:
        row = con.execute("SELECT enqueue_invoke, enqueue_success FROM delivery_accounting").fetchone()
    # Four messages reach the group's topic; UD's only SEND_OK went to OtherTopic.
    assert row == (4, 3)
