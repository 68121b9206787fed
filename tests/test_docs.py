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


def _cited_sections(text: str) -> set[str]:
    """Every section number cited as §n, §n.m, §n-§m or §n.m–n.k (both ends of a range)."""
    found = set()
    for match in re.finditer(r"§(\d+(?:\.\d+)?)(?:\s*[–-]\s*§?(\d+(?:\.\d+)?))?", text):
        found.update(g for g in match.groups() if g)
    return found


def test_every_cited_section_is_in_the_references_page():
    """Each § the code, tests and docs cite is a section of docs/rocketmq-references.md."""
    refs = (ROOT / "docs" / "rocketmq-references.md").read_text()
    sections = set(re.findall(r"^#{2,3} §(\d+(?:\.\d+)?) ", refs, re.M))
    cited: dict[str, set[str]] = {}
    for path in sorted(ROOT.glob("*.md")) + sorted(p for d in ("broker_core", "assets", "orchestration",
                                                                "docs", "tests", "bench", "tools")
                                                   for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md", ".sql")):
        if "data" in path.relative_to(ROOT).parts:
            continue
        for number in _cited_sections(path.read_text(errors="replace")):
            cited.setdefault(number, set()).add(path.relative_to(ROOT).as_posix())
    missing = {n: sorted(where) for n, where in cited.items() if n not in sections}
    assert missing == {}
    assert len(cited) > 30, "the scan found too few citations to be reading the code"
