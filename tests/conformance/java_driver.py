"""Compile and run the small Java drivers of the real-broker tests.

A driver is one Java source compiled with ``javac`` against a release's jars; it prints one JSON
line per client event (a send, a listener call, ...) on stdout, the ground truth its test compares
the audit with. Its stderr goes to ``driver.err`` in the test's directory.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

# A real-broker test module's mark (its `pytestmark`): tests/conftest.py skips such tests where a
# tool they need is missing, counts them, and starts them first (they mostly wait on brokers).
needs_real_rocketmq = pytest.mark.real_broker

# Bounded memory and a quick start: the drivers run for seconds beside brokers on a 2-core machine.
DRIVER_JVM_FLAGS = ("-Xmx128m", "-XX:TieredStopAtLevel=1")
# And a push consumer that rebalances every second, not every 20 s: it finds its topic's queues (and
# the retry topic its first send-back created) while a short run lasts.
QUICK_REBALANCE_FLAGS = (*DRIVER_JVM_FLAGS, "-Drocketmq.client.rebalance.waitInterval=1000")
DRIVER_ERR_TAIL_CHARS = 3000  # how much of a failed driver's stderr its test failure shows
# What the drivers share (running to an exit code, the admin client), compiled with each; and what
# they share with the product's drivers (printing a JSON line, the plan), from the package.
DRIVER_SUPPORT = Path(__file__).resolve().with_name("DriverSupport.java")
PLAN_SUPPORT = Path(__file__).resolve().parents[2] / "conformance" / "driver" / "PlanSupport.java"


def compile_driver(source: Path, classpath: str, classes: Path, *, also: tuple[Path, ...] = ()) -> str:
    """Compile ``source`` (with DriverSupport.java, PlanSupport.java and the sources ``also``
    names) into the directory ``classes``; return the class path that runs it."""
    proc = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", classpath, str(source),
                           str(DRIVER_SUPPORT), str(PLAN_SUPPORT), *map(str, also)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"javac {source.name}: {proc.stderr}"
    return f"{classes}:{classpath}"


def run_driver(classpath: str, main: str, args, *, cwd: Path, timeout_s: float,
               flags: tuple[str, ...] = DRIVER_JVM_FLAGS) -> list[dict]:
    """Run the driver class ``main`` with ``args`` until it exits; its events, in order.

    A driver that exits non-zero fails the test with the end of its output and of its stderr."""
    err_path = cwd / "driver.err"
    with open(err_path, "w") as err:
        proc = subprocess.run(["java", *flags, "-cp", classpath, main, *map(str, args)],
                              stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout_s, cwd=cwd)
    assert proc.returncode == 0, (f"{main} {' '.join(map(str, args))} exited {proc.returncode}: "
                                  f"{proc.stdout[-3000:]}\nstderr ({err_path}): "
                                  f"{err_path.read_text(errors='replace')[-DRIVER_ERR_TAIL_CHARS:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def events_by_key(events: list[dict], kind: str) -> dict[str, list[dict]]:
    """The events of one kind ("send", "consume", ...) by message key, each key's in order."""
    found: dict[str, list[dict]] = {}
    for e in events:
        if e["event"] == kind:
            found.setdefault(e["keys"], []).append(e)
    return found


def run_mqadmin(lib: Path, args, *, timeout_s: float) -> str:
    """Run RocketMQ's own admin tool (``mqadmin``, from the release's jars in ``lib``) with
    ``args``; its output. A command that exits non-zero fails the test with its output."""
    proc = subprocess.run(["java", *DRIVER_JVM_FLAGS, "-cp", str(Path(lib) / "*"),
                           "org.apache.rocketmq.tools.command.MQAdminStartup", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, f"mqadmin {' '.join(map(str, args))} exited {proc.returncode}: " \
                                 f"{proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return proc.stdout
