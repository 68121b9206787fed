"""The reproduce line a failing seeded test prints reruns that test with that seed, as written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_printed_reproduce_line_reruns_the_test_with_its_seed(reproduce, seed):
    """`make test-all PYTEST_ARGS="--seed N <test id>"` (the line printed) runs exactly that test and accepts the seed."""
    assert reproduce.startswith(f"SEED={seed}; reproduce: ")
    command = reproduce.split("reproduce: ", 1)[1]
    target = "tests/broker_core/store/test_recovery.py::test_random_crash_points_keep_exactly_the_flushed_records"
    # This test's own id would rerun this test; the line is the same for any test id.
    command = command.replace("tests/test_reproduce.py::test_the_printed_reproduce_line_reruns_the_test_with_its_seed",
                              target)
    assert command == f'make test-all PYTEST_ARGS="--seed {seed} {target}"'
    # As a shell runs the line: make, test-all, PYTEST_ARGS=--seed N <test id>.
    done = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\b1 passed\b", done.stdout), done.stdout[-3000:]
