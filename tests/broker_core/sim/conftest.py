"""Shared simulation fixtures: one run of the small scenario per test session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from simruns import SMALL


@pytest.fixture(scope="session")
def small_run(simulated_run) -> Path:
    """The small scenario, simulated once for the whole session (read-only for tests)."""
    return simulated_run(SMALL.stem)


@pytest.fixture
def small_copy(small_run, tmp_path) -> Path:
    """A private copy of the small run that a test may damage."""
    dest = tmp_path / "small"
    shutil.copytree(small_run, dest)
    return dest
