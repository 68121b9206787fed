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
from conformance.jars import move_into_place

SOURCE = Path(__file__).with_name("driver") / "Driver.java"
MAIN_CLASS = "Driver"
JAVAC_TIMEOUT_S = 300
# Classes 5.0 moved from rocketmq-common to rocketmq-remoting; the driver is written against 4.x.
MOVED_IN_5 = {
    "import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;":
        "import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;",
    "import org.apache.rocketmq.common.subscription.SubscriptionGroupConfig;":
        "import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;",
}


def source_for(version: str) -> str:
    """The driver's source for a release: the 4.x imports, or the packages 5.x moved them to."""
    text = SOURCE.read_text()
    if int(version.split(".")[0]) >= 5:
        for old, new in MOVED_IN_5.items():
            assert old in text, f"the driver no longer imports {old!r}"
            text = text.replace(old, new)
    return text


def source_hash(version: str) -> str:
    return hashlib.sha256(source_for(version).encode()).hexdigest()[:16]


def compile_driver(lib: Path, version: str) -> Path:
    """The directory holding ``Driver.class`` compiled against ``lib`` (compiled on first use)."""
    out = lib.parent / f"driver-{source_hash(version)}"
    if (out / f"{MAIN_CLASS}.class").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise RetryAuditError("javac is needed to compile the RocketMQ client driver and was not found",
                              hint="apt-get install openjdk-17-jdk-headless (.ci/run does it)")
    partial = Path(tempfile.mkdtemp(prefix="driver-", dir=lib.parent))
    source = partial / "src" / SOURCE.name
    source.parent.mkdir()
    source.write_text(source_for(version))
    try:
        proc = subprocess.run([javac, "-nowarn", "-d", str(partial), "-cp", str(lib / "*"), str(source)],
                              capture_output=True, text=True, timeout=JAVAC_TIMEOUT_S)
        if proc.returncode != 0:
            raise RetryAuditError(f"javac failed: {proc.stderr.strip()[-2000:]}", where=str(SOURCE))
        move_into_place(partial, out)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return out
