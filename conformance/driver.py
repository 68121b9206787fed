"""The Java client driver, compiled with ``javac`` against a release's jars and cached.

The compiled classes live beside the release's lib directory under a name made of the source's
hash, so a changed driver or another release compiles anew and an unchanged one never does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from broker_core.errors import RetryAuditError
from conformance.jars import move_into_place

SOURCE = Path(__file__).with_name("driver") / "Driver.java"
MAIN_CLASS = "Driver"
# The gRPC groups' driver (5.x only): compiled against the gRPC client's jars and the broker's.
GRPC_SOURCE = Path(__file__).with_name("driver") / "GrpcPlanDriver.java"
GRPC_MAIN_CLASS = "GrpcPlanDriver"
# Compiled with each of the two: the plan's verdicts and the JSON fields of the lines they print.
SHARED_SOURCE = Path(__file__).with_name("driver") / "PlanSupport.java"
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
    return hashlib.sha256((source_for(version) + "\0" + SHARED_SOURCE.read_text()).encode()).hexdigest()[:16]


def compile_driver(lib: Path, version: str) -> Path:
    """The directory holding ``Driver.class`` compiled against ``lib`` (compiled on first use)."""
    out = lib.parent / f"driver-{source_hash(version)}"
    return _compile(SOURCE.name, source_for(version), MAIN_CLASS, str(lib / "*"), out)


def grpc_classpath(lib: Path, client_lib: Path) -> str:
    """The class path the gRPC driver compiles and runs with: the gRPC client first (the broker's
    jars carry an unshaded rocketmq-proto it must not see), then the broker's (the admin client)."""
    return f"{client_lib / '*'}{os.pathsep}{lib / '*'}"


def compile_grpc_driver(lib: Path, client_lib: Path) -> str:
    """The class path that runs ``GrpcPlanDriver`` against the broker's ``lib`` and the gRPC client's
    ``client_lib`` (compiled on first use, beside ``lib``, under the hash of its source and jars)."""
    classpath = grpc_classpath(lib, client_lib)
    text = GRPC_SOURCE.read_text()
    digest = hashlib.sha256((text + "\0" + SHARED_SOURCE.read_text() + "\0" + client_lib.parent.name)
                            .encode()).hexdigest()[:16]
    out = _compile(GRPC_SOURCE.name, text, GRPC_MAIN_CLASS, classpath, lib.parent / f"grpc-driver-{digest}")
    return f"{out}{os.pathsep}{classpath}"


def _compile(name: str, text: str, main_class: str, classpath: str, out: Path) -> Path:
    if (out / f"{main_class}.class").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise RetryAuditError("javac is needed to compile the RocketMQ client driver and was not found",
                              hint="apt-get install openjdk-17-jdk-headless (.ci/run does it)")
    partial = Path(tempfile.mkdtemp(prefix="driver-", dir=out.parent))
    source = partial / "src" / name
    source.parent.mkdir()
    source.write_text(text)
    shared = source.parent / SHARED_SOURCE.name
    shutil.copy(SHARED_SOURCE, shared)
    try:
        proc = subprocess.run([javac, "-nowarn", "-d", str(partial), "-cp", classpath, str(source), str(shared)],
                              capture_output=True, text=True, timeout=JAVAC_TIMEOUT_S)
        if proc.returncode != 0:
            raise RetryAuditError(f"javac failed: {proc.stderr.strip()[-2000:]}", where=name)
        move_into_place(partial, out)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return out
