"""`retry-audit trace` prints what the clients' message trace says beside the store's journey."""

from __future__ import annotations

import duckdb
from testdata import data_path

from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse
from broker_core.export.store_import import import_store
from orchestration.cli import main as cli_main

TRACE_STORES = data_path("rocketmq-4.9.4-trace")


def test_trace_shows_the_traced_send_consumes_and_transaction_answers(tmp_path, capsys):
    """A message committed at a check: its traced half send, the producer's traced answers (UNKNOW
    at once, COMMIT_MESSAGE to the check) and the group's traced consume appear in the timeline."""
    run = tmp_path / "run"
    for broker in ("broker-a", "broker-b"):
        import_store(TRACE_STORES / broker, run, name="traced", broker=broker)
    run_lineage_duckdb(run)
    db = build_warehouse([run], tmp_path / "w.duckdb").db_path
    with duckdb.connect(str(db), read_only=True) as con:
        (key,) = con.execute("SELECT message_key FROM transactions WHERE transaction_state = 'COMMITTED' "
                             "AND transaction_checks = 1 ORDER BY message_key LIMIT 1").fetchone()
    assert cli_main(["trace", key, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "traced send" in out and "SEND_OK" in out and "Trans_Msg_Half" in out
    assert "answer at once" in out and "UNKNOW" in out
    assert "answer a check" in out and "COMMIT_MESSAGE" in out
    assert "traced consumes (1, the client's own record):" in out and "success (SUCCESS)" in out
