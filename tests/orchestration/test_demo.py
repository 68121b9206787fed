"""What ``make demo`` prints once the pipeline ran: states, DLQ, lateness, checks, path, queries."""

from __future__ import annotations

import sys
from pathlib import Path

from assets.warehouse import build_warehouse
from orchestration.demo import EXAMPLE_QUERIES, print_summary

sys.path.insert(0, str(Path(__file__).parents[1] / "assets"))
from tiny_runs import write_tiny_run  # noqa: E402


def _sections(out: str) -> dict[str, list[str]]:
    """The summary's sections by heading (an unindented line ending in ':'): their indented lines."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("  ") and current is not None:
            current.append(" ".join(line.split()))
        elif line:
            current = sections.setdefault(line[:-1], []) if line.endswith(":") else None
    return sections


def test_summary_counts_what_the_warehouse_holds(tmp_path, capsys):
    """The summary's counts are the hand-worked journeys of the tiny run (tests/assets/tiny_runs.py):
    UA and UC consumed, UB in the DLQ from OrderTopic, UD lost; UC's level-2 delay on time and
    consumed twice. The checks are listed as evaluated, then the warehouse and the queries to try."""
    db = tmp_path / "warehouse.duckdb"
    build_warehouse([write_tiny_run(tmp_path / "runs" / "tiny")], db)
    checks = [("lineage/message_hops", "hop_grammar_valid", True, "ERROR"),
              ("audit/delivery_accounting", "duplicate_rate_below_max", False, "WARN")]
    print_summary(db, "tiny", checks, 1.25)
    out = capsys.readouterr().out
    assert "retry-audit demo: run 'tiny' materialized in 1.2 s" in out
    sections = _sections(out)
    assert sections["messages by final state (per consumer group)"] == ["g1 CONSUMED 2", "g1 DLQ 1", "g1 LOST 1"]
    assert sections["DLQ messages by group and origin topic"] == ["g1 OrderTopic 1"]
    assert sections["worst delay lateness"] == ["level 2: max 0 ms, p99 0 ms over 1 deliveries; 0 early"]
    assert "anomalies: DUPLICATE_CONSUME 1, LOST 1" in out.splitlines()
    assert sections["checks"] == ["passed hop_grammar_valid on lineage/message_hops",
                                  "FAILED (WARN) duplicate_rate_below_max on audit/delivery_accounting"]
    assert f"warehouse: {db}" in out.splitlines()
    assert sections["try"] == [f"{q} --db {db}" for q in EXAMPLE_QUERIES]


def test_a_run_id_the_warehouse_lacks_prints_empty_sections(tmp_path, capsys):
    """A run the warehouse does not hold counts nothing: no states, "(none)" in the DLQ, no delays."""
    db = tmp_path / "warehouse.duckdb"
    build_warehouse([write_tiny_run(tmp_path / "runs" / "tiny")], db)
    print_summary(db, "other", [], 0.0)
    sections = _sections(capsys.readouterr().out)
    assert sections["messages by final state (per consumer group)"] == []
    assert sections["DLQ messages by group and origin topic"] == ["(none) 0"]
    assert sections["worst delay lateness"] == ["(no delayed deliveries)"]
    assert sections["checks"] == []
