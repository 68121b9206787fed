"""atomic_dir: an output directory is replaced whole, and nothing is left beside it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker_core.export.parquet import atomic_dir

# A child that replaces a complete output and is killed (SIGKILL, as by the OOM killer or kill -9)
# at one step of the swap: after the old output is renamed aside, or while it is being removed.
CHILD = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from broker_core.export.parquet import atomic_dir

    final, step = Path(sys.argv[1]), sys.argv[2]
    rename, rmtree = os.rename, shutil.rmtree

    def die(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    def rename_then_die(src, dst):
        rename(src, dst)
        if ".old-" in str(dst):
            die()

    def remove_half_then_die(path, *args, **kwargs):
        if ".old-" in str(path):
            os.remove(next(Path(path).iterdir()))
            die()
        rmtree(path, *args, **kwargs)

    if step == "moved aside":
        os.rename = rename_then_die
    else:
        shutil.rmtree = remove_half_then_die
    with atomic_dir(final) as tmp:
        (tmp / "a").write_text("new")
        (tmp / "b").write_text("new")
""")


def _complete(final: Path, text: str) -> None:
    with atomic_dir(final) as tmp:
        (tmp / "a").write_text(text)
        (tmp / "b").write_text(text)


def test_a_replace_leaves_only_the_output(tmp_path):
    """Replacing an output leaves the new one and nothing else beside it."""
    final = tmp_path / "out"
    _complete(final, "first")
    _complete(final, "second")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (final / "a").read_text() == "second"


def test_an_exception_leaves_the_old_output_and_nothing_else(tmp_path):
    """A failed write keeps the previous output whole and removes its temporary directory."""
    final = tmp_path / "out"
    _complete(final, "first")
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "a").write_text("half")
        raise RuntimeError("writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (final / "a").read_text() == "first"


@pytest.mark.parametrize("step", ["moved aside", "half removed"])
def test_the_next_replace_removes_what_a_killed_replace_left(tmp_path, step):
    """A replace killed while swapping leaves the old output aside; the next one removes it."""
    final = tmp_path / "out"
    _complete(final, "first")
    root = Path(__file__).resolve().parents[3]
    killed = subprocess.run([sys.executable, "-c", CHILD, str(final), step], cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    assert killed.returncode == -9
    assert any(".out.old-" in p.name for p in tmp_path.iterdir()), "the kill came too late to test anything"
    _complete(final, "third")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (final / "a").read_text() == "third"
