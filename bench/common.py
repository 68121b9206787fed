"""Shared benchmark plumbing: repeated timing, summary statistics, machine facts, result files.

Benchmarks are not tests: they print a table (median, p90, max over repeats) with the machine they
ran on, and write it under bench/results/ so that a regression shows in review.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
# The benchmark inputs' root, the same for every benchmark's ``--data-dir``: full-size inputs in
# its full/, the --quick ones in its quick/ (bench_data_dir).
DATA_ROOT_DEFAULT = Path(__file__).resolve().parent.parent / "var" / "bench"


@dataclass
class Stats:
    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]

    @property
    def max(self) -> float:
        return max(self.samples)


def bench_data_dir(root: Path, quick: bool) -> Path:
    """Where the inputs of a full or quick run live under ``root`` (a benchmark's ``--data-dir``).

    One meaning for every benchmark: ``root`` holds ``full/`` and ``quick/``. A root that holds
    the inputs themselves (``runs/``, ``set-*``), as a level of it does, is refused with the
    directory it probably meant, rather than simulating everything again one level down.
    """
    root = Path(root)
    if (root / "runs").is_dir() or any(root.glob("set-*")):
        raise SystemExit(
            f"--data-dir {root}: this directory holds benchmark inputs itself (runs/, set-*); "
            f"--data-dir names their root, the directory holding full/ and quick/ "
            f"(here probably {root.parent})")
    out = root / ("quick" if quick else "full")
    out.mkdir(parents=True, exist_ok=True)
    return out


def repeat(fn: Callable[[], object], runs: int) -> Stats:
    """Time ``fn`` ``runs`` times (seconds, wall clock)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Stats(samples)


def machine() -> dict[str, str]:
    """Cores, memory, Python and Java of the machine a benchmark ran on."""
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            mem = f"{kib / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20).stderr
        java = java.splitlines()[0] if java else "?"
    except (OSError, subprocess.SubprocessError):
        java = "not found"
    return {
        "cores": str(os.cpu_count()),
        "memory": mem,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "java": java,
    }


HAND_SECTION = "## "  # a results file's hand-written sections start with such a heading


def result_name(name: str, quick: bool) -> str:
    """The result file a run writes: ``name``, or for a quick or resized run ``quick/name``, which
    never overwrites the committed full-size table (``results/quick/`` is not committed)."""
    if not quick:
        return name
    (RESULTS / "quick").mkdir(parents=True, exist_ok=True)
    return f"quick/{name}"


def write_result(name: str, title: str, header: list[str], rows: list[list[str]], notes: str = "") -> Path:
    """Write ``bench/results/<name>.md``: the machine, the table, and notes; also print it.

    The generated part is replaced; the hand-written sections after it (from the file's first
    line starting with ``## ``, which no generated part has) are kept below the new table, so a
    benchmark run never deletes the write-ups of what was measured by hand before.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    facts = machine()
    lines = [f"# {title}", "", "Machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    if notes:
        lines += ["", notes.strip()]
    if any(line.startswith(HAND_SECTION) for line in "\n".join(lines).splitlines()):
        raise ValueError(f"{name}: a generated results part may not hold a hand-section heading "
                         f"(a line starting with {HAND_SECTION!r})")
    text = "\n".join(lines) + "\n"
    print(text)
    path = RESULTS / f"{name}.md"
    kept = hand_sections(path.read_text()) if path.exists() else ""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + ("\n" + kept if kept else ""))
    tmp.replace(path)  # a stopped benchmark leaves the old file whole, never half of the new one
    return path


def hand_sections(text: str) -> str:
    """The hand-written part of a results file: from its first ``## `` line to the end."""
    lines = text.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.startswith(HAND_SECTION)), len(lines))
    return "".join(lines[first:])


# The machine is shared: wall time moves with everyone else's load, while the CPU time of a
# single-threaded Python process does not. Benchmarks of in-process Python work report both.
def load_note() -> str:
    """The 1/5/15-minute load average, so a reader can tell a busy machine from a slow program."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} cores"
