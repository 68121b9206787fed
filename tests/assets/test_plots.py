"""Plots and the HTML report read the warehouse tables of a run (retry_funnel, delay_accuracy,
message_hops)."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from assets import plots
from assets.warehouse import run_warehouse
from broker_core.export import schema
from orchestration.cli import main as cli_main

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def hop(key, group, index, kind, topic, level=0, store=0, nxt=None):
    return {"run_id": "r1", "message_key": key, "group": group, "hop_index": index, "hop_kind": kind,
            "topic": topic, "queue_id": 0, "broker": "broker-a", "phys_offset": index * 100, "msg_id": f"{key}-{index}",
            "delay_level": level, "reconsume_times": 0, "store_ts": ts(T0 + store),
            "next_store_ts": ts(T0 + nxt) if nxt is not None else None,
            "dwell_ms": (nxt - store) if nxt is not None else None}


def lineage(key, group, retries, state, hops):
    return {"run_id": "r1", "message_key": key, "group": group, "origin_topic": "OrderTopic",
            "origin_msg_id": f"{key}-0", "hops": hops, "retries": retries, "path": "", "final_topic": "",
            "final_state": state, "first_store_ts": ts(T0), "last_store_ts": ts(T0), "total_delay_ms": 0}


def write(run_dir: Path, folder: str, table: str, rows: list[dict], sch: pa.Schema) -> None:
    out = run_dir / folder / table
    out.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=sch), out / "part-00000.parquet")


def make_run(run_dir: Path) -> None:
    """m1: consumed at once; m2: two retries then the DLQ; m3: one retry then consumed."""
    hops = [
        hop("m1", None, 0, "PUBLISH", "OrderTopic"),
        hop("m2", None, 0, "PUBLISH", "OrderTopic", nxt=10),
        hop("m2", "g", 1, "SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 10, 20),
        hop("m2", "g", 2, "RETRY", "%RETRY%g", 0, 20, 30),
        hop("m2", "g", 3, "SCHEDULE", "SCHEDULE_TOPIC_XXXX", 4, 30, 40),
        hop("m2", "g", 4, "RETRY", "%RETRY%g", 0, 40, 50),
        hop("m2", "g", 5, "DLQ", "%DLQ%g", 0, 50),
        hop("m3", None, 0, "PUBLISH", "OrderTopic", nxt=10),
        hop("m3", "g", 1, "SCHEDULE", "SCHEDULE_TOPIC_XXXX", 3, 10, 20),
        hop("m3", "g", 2, "RETRY", "%RETRY%g", 0, 20),
    ]
    lin = [lineage("m1", "g", 0, "CONSUMED", 1), lineage("m2", "g", 2, "DLQ", 6),
           lineage("m3", "g", 1, "CONSUMED", 3)]
    deliveries = [{"run_id": "r1", "delay_level": lvl, "schedule_queue_offset": i, "schedule_msg_id": "s",
                   "delivered_msg_id": "d", "real_topic": "%RETRY%g", "scheduled_store_ts": ts(T0),
                   "due_ts": ts(T0 + 10_000), "delivered_ts": ts(T0 + 10_000 + late), "lateness_ms": late,
                   "put_attempts": 1, "uniq_key": "m"}
                  for i, (lvl, late) in enumerate([(3, 40), (3, 90), (4, 10)])]
    runs = [{"run_id": "r1", "scenario": "t", "seed": 1, "sim_start_ts": ts(T0), "sim_end_ts": ts(T0),
             "wall_seconds": 0.0, "messages_produced": 3, "records_written": 10, "version": "0",
             "source": "simulation"}]
    write(run_dir, "lineage", "message_hops", hops, schema.MESSAGE_HOPS)
    write(run_dir, "lineage", "message_lineage", lin, schema.MESSAGE_LINEAGE)
    write(run_dir, "parquet", "schedule_deliveries", deliveries, schema.SCHEDULE_DELIVERIES)
    write(run_dir, "parquet", "runs", runs, schema.RUNS)


def test_retry_funnel_counts_reached_succeeded_and_dlq_per_attempt(tmp_path):
    """Attempt k is reached by every message with at least k retries; success and DLQ land at their k."""
    make_run(tmp_path)
    data = plots.retry_funnel_data(run_warehouse(tmp_path), "r1")
    assert data == {"g": [(0, 3, 1, 0), (1, 2, 1, 0), (2, 1, 0, 1)]}


def test_hop_flow_counts_every_transition_once_per_group_chain(tmp_path):
    """Transitions follow each group's chain: shared PUBLISH, then the group's own hops."""
    make_run(tmp_path)
    flows = plots.hop_flow_data(run_warehouse(tmp_path), "r1")
    assert flows == {("PUBLISH", "END"): 1, ("PUBLISH", "SCHEDULE"): 2, ("SCHEDULE", "RETRY"): 3,
                     ("RETRY", "SCHEDULE"): 1, ("RETRY", "DLQ"): 1, ("RETRY", "END"): 1,
                     ("DLQ", "END"): 1}


def test_lateness_per_level(tmp_path):
    """Per level: deliveries, p50/p99/max lateness and the early count, as delay_accuracy has them."""
    make_run(tmp_path)
    rows = plots.lateness_data(run_warehouse(tmp_path), "r1")
    assert rows == [(3, 2, 40, 90, 90, 0), (4, 1, 10, 10, 10, 0)]


def test_report_is_one_file_with_every_plot_embedded(tmp_path):
    """The report command writes one HTML file embedding the three plots as PNG data URIs."""
    run = tmp_path / "run"
    make_run(run)
    out = tmp_path / "report.html"
    assert cli_main(["report", str(run), "--out", str(out)]) == 0
    text = out.read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 3
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert "DLQ" in text and "CONSUMED" in text


def test_report_without_lineage_says_what_to_run(tmp_path, capsys):
    """A run without lineage tables gets exit 2 and a hint to run the lineage first."""
    (tmp_path / "run" / "parquet").mkdir(parents=True)
    assert cli_main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "missing table" in err and "retry-audit lineage" in err
    assert not (tmp_path / "r.html").exists()


def test_an_imported_stores_report_shows_the_lateness_delay_accuracy_measured(tmp_path, store_fixtures):
    """An imported store records no schedule_deliveries; the report's lateness per level is the
    delay_accuracy table's (measured from the commit log), in a warehouse and in a report of the run alone."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse, open_read_only
    from broker_core.export.store_import import import_store

    run = tmp_path / "runs" / "clean"
    import_store(store_fixtures / "store-clean", run)
    run_lineage_duckdb(run)  # the same SQL as Spark's: the plots read the warehouse
    db = build_warehouse([run], tmp_path / "warehouse.duckdb").db_path
    con = open_read_only(db)
    try:
        measured = con.execute(
            "select delay_level, deliveries, lateness_p50_ms, lateness_p99_ms, lateness_max_ms, early_count "
            "from delay_accuracy where run_id = 'clean' order by delay_level").fetchall()
        shown = plots.lateness_data(con, "clean")
        plot = plots.lateness_plot(con, "clean")
    finally:
        con.close()
    assert measured, "store-clean has delayed records: delay_accuracy measures them from the commit log"
    assert shown == [tuple(r) for r in measured]
    # The report of the run directory alone (no --db) embeds the same lateness picture.
    out = tmp_path / "report.html"
    assert cli_main(["report", str(run), "--out", str(out)]) == 0
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', out.read_text())
    assert plot.data_uri().removeprefix("data:image/png;base64,") in images


def test_the_transactions_plot_shows_each_message_s_checks_and_decision_time():
    """The transactions plot reads the transactions table: one point per message, by outcome, with
    its checks and its time from half to decision; a run without transactions says so."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("create table transactions (run_id varchar, message_key varchar, transaction_state varchar, "
                    "transaction_checks integer, decision_ms bigint)")
        con.executemany("insert into transactions values (?, ?, ?, ?, ?)", [
            ("r1", "a", "COMMITTED", 0, 7), ("r1", "b", "COMMITTED", 1, 2300), ("r1", "c", "ROLLED_BACK", 2, 4400),
            ("r1", "d", "DISCARDED", 3, 8100), ("r1", "e", "UNDECIDED", 1, None)])
        assert plots.transactions_data(con, "r1") == [
            ("COMMITTED", 0, 7), ("COMMITTED", 1, 2300), ("DISCARDED", 3, 8100), ("ROLLED_BACK", 2, 4400),
            ("UNDECIDED", 1, None)]
        plot = plots.transactions_plot(con, "r1")
        assert plot.png.startswith(b"\x89PNG") and plot.name == "transactions"
        assert plots.transactions_data(con, "other") == []
        assert plots.transactions_plot(con, "other").png != plot.png
    finally:
        con.close()
