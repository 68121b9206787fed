"""The dependency direction orchestration -> assets -> broker_core is never reversed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "assets"


def test_assets_import_nothing_from_orchestration():
    """No assets module imports the orchestration package (at module level or inside a function)."""
    pattern = re.compile(r"^\s*(import|from)\s+orchestration\b", re.M)
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted(ROOT.rglob("*.py")) if pattern.search(p.read_text())]
    assert offenders == []
