"""A benchmark rewriting its results file replaces the generated table and keeps the write-ups."""

from __future__ import annotations

import pytest

from bench import common


def test_rewrite_keeps_hand_sections_and_replaces_the_table(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    path = tmp_path / "p9.md"
    path.write_text("# P9 old title\n\nMachine: old\n\n| a |\n|---|\n| 1 |\n\nold notes\n\n"
                    "## Measured by hand\n\nA write-up.\n\n## Another\n\n| kept | table |\n")
    common.write_result("p9", "P9 new title", ["a"], [["2"]], notes="new notes")
    text = path.read_text()
    assert text.startswith("# P9 new title\n")
    assert "| 2 |" in text and "new notes" in text
    assert "| 1 |" not in text and "old notes" not in text and "Machine: old" not in text
    assert text.endswith("\n## Measured by hand\n\nA write-up.\n\n## Another\n\n| kept | table |\n")
    assert text.index("new notes") < text.index("## Measured by hand")
    assert not (tmp_path / "p9.md.tmp").exists()


def test_first_write_has_no_hand_sections(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.write_result("p9", "P9", ["a"], [["1"]])
    assert "## " not in (tmp_path / "p9.md").read_text()


def test_generated_notes_may_not_look_like_a_hand_section(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="hand-section heading"):
        common.write_result("p9", "P9", ["a"], [["1"]], notes="text\n## not allowed")
