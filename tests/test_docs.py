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


def _code_spans(text: str) -> list[str]:
    """The text of every fenced code block and every inline `code` span of a Markdown file."""
    fenced = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.M | re.S)
    return fenced + re.findall(r"`([^`\n]+)`", prose)


def _cli_subcommands() -> dict[str, set[str]]:
    """Each subcommand of the retry-audit parser, with the long options it accepts."""
    import argparse

    from orchestration.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: {s for action in p._actions for s in action.option_strings if s.startswith("--")}
            for name, p in sub.choices.items()}


def test_the_readme_shows_exactly_the_commands_the_cli_has():
    """Every `retry-audit <command>` the README shows is a subcommand of the CLI, with options the
    subcommand accepts, and every subcommand of the CLI is shown in the README."""
    commands = _cli_subcommands()
    shown: dict[str, set[str]] = {}
    for span in _code_spans((ROOT / "README.md").read_text()):
        for line in span.splitlines():
            line = line.split(" # ")[0]  # a comment after the command is prose
            for match in re.finditer(r"(?:^|[\s(])retry-audit\s+([a-z][a-z-]*)(.*)", line):
                shown.setdefault(match[1], set()).update(re.findall(r"(--[a-z][a-z-]*)", match[2]))
    assert set(shown) - set(commands) == set(), "the README shows commands the CLI does not have"
    assert set(commands) - set(shown) == set(), "CLI commands the README does not show"
    unknown = {name: sorted(options - commands[name]) for name, options in shown.items()
               if options - commands[name]}
    assert unknown == {}, "options the README shows that the command does not accept"


def test_every_make_target_the_readme_shows_is_in_the_makefile():
    """Every `make <target>` the README shows is a target of the Makefile."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    shown = {m for span in _code_spans((ROOT / "README.md").read_text())
             for m in re.findall(r"(?:^|\s)make ([a-z][a-z-]*)", span, re.M)}
    assert shown and shown - targets == set()


def test_the_readme_names_every_hop_kind():
    """The README's message_hops row names every hop kind the lineage writes, and no other."""
    from broker_core.export.schema import HOP_KINDS

    row = next(line for line in _section((ROOT / "README.md").read_text(), "## The warehouse").splitlines()
               if line.startswith("| `message_hops`"))
    listed = re.search(r"hop kind \(([A-Z, ]+)\)", row)[1].split(", ")
    assert sorted(listed) == sorted(HOP_KINDS)
