"""The Java client driver, compiled with ``javac`` against a release's jars and cached.

The compiled classes live beside the release's lib directory under a name made of the source's
hash, so a changed driver or another release compiles anew and an unchanged one never does.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from broker_core.errors import RetryAuditError

SOURCE = Path(__file__).with_name("driver") / "Driver.java"
MAIN_CLASS = "Driver"
JAVAC_TIMEOUT_S = 300


def source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def compile_driver(lib: Path) -> Path:
    """The directory holding ``Driver.class`` compiled against ``lib`` (compiled on first use)."""
    out = lib.parent / f"driver-{source_hash()}"
    if (out / f"{MAIN_CLASS}.class").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise RetryAuditError("javac is needed to compile the RocketMQ client driver and was not found",
                              hint="apt-get install openjdk-17-jdk-headless (.ci/run does it)")
    partial = Path(tempfile.mkdtemp(prefix="driver-", dir=lib.parent))
    try:
        proc = subprocess.run([javac, "-nowarn", "-d", str(partial), "-cp", str(lib / "*"), str(SOURCE)],
                              capture_output=True, text=True, timeout=JAVAC_TIMEOUT_S)
        if proc.returncode != 0:
            raise RetryAuditError(f"javac failed: {proc.stderr.strip()[-2000:]}", where=str(SOURCE))
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return out
