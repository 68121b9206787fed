"""What ``make demo`` prints once the pipeline ran: states, DLQ, lateness, checks, path, queries."""

from __future__ import annotations

import sys
from pathlib import Path

from assets.warehouse import build_warehouse
from orchestration.demo import EXAMPLE_QUERIES, print_summary

sys.path.insert(0, str(Path(__file__).parents[1] / "assets"))
from tiny_runs import write_tiny_run  # noqa: E402


def test_summary_lists_states_dlq_lateness_checks_and_queries(tmp_path, capsys):
    """The summary shows every section the demo promises, from the warehouse it built."""
    db = tmp_path / "warehouse.duckdb"
    build_warehouse([write_tiny_run(tmp_path / "runs" / "tiny")], db)
    checks = [("lineage/message_hops", "hop_grammar_valid", True, "ERROR"),
              ("audit/delivery_accounting", "duplicate_rate_below_max", False, "WARN")]
    print_summary(db, "tiny", checks, 1.0)
    out = capsys.readouterr().out
    assert "g1" in out and "CONSUMED" in out and "LOST" in out
    assert "DLQ messages by group and origin topic:" in out and "OrderTopic" in out
    assert "worst delay lateness:" in out and "level 2: max 0 ms" in out
    assert "passed" in out and "FAILED (WARN)" in out
    assert f"warehouse: {db}" in out
    assert all(q in out for q in EXAMPLE_QUERIES)
