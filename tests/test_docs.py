"""The README and docs say what the code does: the warehouse's tables, and where the RocketMQ
rules the code cites are described."""

from __future__ import annotations

import re
from pathlib import Path

from assets.warehouse import WAREHOUSE_TABLES

ROOT = Path(__file__).resolve().parents[1]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else None]


def test_the_readme_lists_every_warehouse_table_and_no_other():
    """The README's table of warehouse tables names exactly the tables a built warehouse holds."""
    section = _section((ROOT / "README.md").read_text(), "## The warehouse")
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    listed = [name for cell in rows for name in re.findall(r"`([a-z_]+)`", cell)]
    assert sorted(listed) == sorted(WAREHOUSE_TABLES)
    assert len(listed) == len(set(listed)), "a table is listed twice"
