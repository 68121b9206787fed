"""Playing a plan on the real cluster: the main driver process, and consumers run apart to be killed.

A consumer that a scenario crashes (``consumer_crash`` / ``consumer_restart`` faults) runs in a
driver process of its own, so that the crash is a real SIGKILL of a real client: its in-flight
messages die with it and the offsets it had not yet persisted are delivered again, to whichever
consumer the rebalance hands its queues. The fault times count from the first send, as in the
model. Every process is ended when playing ends, however it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.errors import BadInputError, RetryAuditError
from broker_core.sim.scenario import Scenario
from conformance import observed
from conformance.cluster import COMMON_FLAGS, DRIVER_MEMORY, JDK17_FLAGS, rss_mib, tail
from conformance.driver import GRPC_MAIN_CLASS, MAIN_CLASS

DRIVER_GRACE_S = 90  # beyond the plan's own timeout before the driver process is killed
REBALANCE_WAIT_MS = 2000  # the clients' periodic rebalance (default 20 s): queues move quickly
POLL_S = 0.1
SIDE_STOP_TIMEOUT_S = 30
# Faults the real cluster plays; any other fault in a scenario is refused (it would make the two
# runs differ for a reason the comparison cannot see). A send_back_failure is played per attempt:
# the plan names each send-back the model's broker refused, and the driver makes the real broker
# refuse the same one (conformance/plan.py, Driver.refuseSendBack).
PLAYED_FAULTS = ("consumer_crash", "consumer_restart", "send_back_failure")
SIDE_FAULTS = ("consumer_crash", "consumer_restart")
SIDE_DIR = "side"
GRPC_SIDE = "grpc"  # the gRPC driver's files in SIDE_DIR (its stdout, stderr, "ready" marker)
# While this file is in SIDE_DIR the clients do not stop, and their idle time counts from its end
# (Driver.java): it is there from the start of a run whose broker is restarted until the restart
# is done. A killed broker's store still holds records to hand out (a send-back it stored, a
# schedule record due), and a slow restart (12 s on a loaded host) outlasts the clients' idle time.
HOLD_FILE = "outage.hold"


def side_consumers(scenario: Scenario) -> list[tuple[str, int]]:
    """The consumers the scenario crashes: they run in processes of their own."""
    unsupported = sorted({f.kind for f in scenario.faults if f.kind not in PLAYED_FAULTS})
    if unsupported:
        raise BadInputError(f"fault(s) {', '.join(unsupported)} cannot be played on the real cluster",
                            where=scenario.source,
                            hint=f"conformance plays {', '.join(PLAYED_FAULTS)}")
    return sorted({(f.group, f.consumer) for f in scenario.faults if f.kind in SIDE_FAULTS})


@dataclass
class Played:
    seen: observed.Observed
    driver_rss_mib: int
    faults: list[dict] = field(default_factory=list)
    # Faults due after the clients had stopped (no listener call for the plan's idle time): never
    # played on the real cluster, though the model played them.
    not_played: list[dict] = field(default_factory=list)


class _Side:
    """The processes one side consumer has had (one per start)."""

    def __init__(self, group: str, index: int):
        self.group, self.index = group, index
        self.proc: subprocess.Popen | None = None
        self.starts = 0


def driver_home(work: Path) -> Path:
    """The clients' home under a conformance run's work directory: the driver's ``logs/`` and
    offsets, and a home per side consumer (and the gRPC driver) beneath it."""
    return work / "cluster" / "driver"


def _java(classes: Path, lib: Path, home: Path) -> list[str]:
    return ["java", *JDK17_FLAGS, *COMMON_FLAGS, *DRIVER_MEMORY, f"-Duser.home={home}",
            f"-Drocketmq.client.logRoot={home / 'logs'}",
            f"-Drocketmq.client.rebalance.waitInterval={REBALANCE_WAIT_MS}",
            "-cp", f"{classes}{os.pathsep}{lib / '*'}", MAIN_CLASS]


@dataclass(frozen=True)
class Outage:
    """A real broker killed with SIGKILL at ``at_ms`` and started again at ``until_ms`` (from the first
    send; None: not started again). A DLedger broker's kill is of its group's master node."""

    broker: str
    at_ms: int
    until_ms: int | None

    @staticmethod
    def parse(text: str) -> Outage:
        """``BROKER@FROM-TO`` in seconds or milliseconds, e.g. ``broker-a@3s-6s``; ``BROKER@FROM``
        kills the broker for the rest of the run."""
        from broker_core.sim.scenario import parse_duration_ms

        try:
            broker, window = text.split("@", 1)
            start, dash, end = window.partition("-")
            outage = Outage(broker, parse_duration_ms(start), parse_duration_ms(end) if dash else None)
        except (ValueError, BadInputError) as e:
            raise BadInputError(f"not an outage: {text!r} ({e})", where="--broker-outage",
                                hint="BROKER@FROM-TO, e.g. broker-a@3s-6s, or BROKER@FROM") from None
        if outage.at_ms < 0 or (outage.until_ms is not None and outage.until_ms <= outage.at_ms):
            raise BadInputError(f"an outage must end after it starts: {text!r}", where="--broker-outage")
        return outage


@dataclass(frozen=True)
class GrpcSide:
    """The gRPC groups' driver: the class path that runs ``GrpcPlanDriver`` and the proxy's endpoint."""

    classpath: str
    endpoint: str


def _note_elections(cluster, electing: list[tuple[str, str, int]], faults: list[dict], say) -> list:
    """Add a ``master_elected`` fault row for each killed controller-mode master whose broker has a
    new master now (its node, epoch and the ms since the kill); the brokers still electing."""
    still = []
    for broker, killed, kill_ms in electing:
        node = cluster.leader(broker)
        if node is None or node == killed:
            still.append((broker, killed, kill_ms))
            continue
        wall_ms = int(time.time() * 1000)
        change = cluster.controller_roles(node)[-1]
        faults.append({"kind": "master_elected", "broker": broker, "node": node, "epoch": change["epoch"],
                       "broker_id": change["broker_id"], "wall_ts_ms": wall_ms, "after_kill_ms": wall_ms - kill_ms})
        say(f"{broker}: {node} is the master (epoch {change['epoch']}) {(wall_ms - kill_ms) / 1000:.1f} s after the kill")
    return still


def play(scenario: Scenario, classes: Path, lib: Path, plan_path: Path, work: Path, timeout_ms: int,
         log=None, cluster=None, outages: tuple[Outage, ...] = (), grpc: GrpcSide | None = None) -> Played:
    """Run the main driver (and the side consumers); return what every client observed.

    ``outages`` kill and restart brokers of ``cluster`` (the real cluster only: the model has one
    broker and no such fault; docs/conformance.md). ``grpc`` runs the plan's gRPC groups in a
    driver of their own (GrpcPlanDriver.java, through the proxy), started with the side consumers;
    its listener calls are read from ``side/grpc.out`` like theirs.
    """
    say = log or (lambda _m: None)
    home = driver_home(work)
    home.mkdir(parents=True, exist_ok=True)
    side_dir = work / SIDE_DIR
    side_dir.mkdir(exist_ok=True)
    sides = {(g, i): _Side(g, i) for g, i in side_consumers(scenario)}
    actions = sorted([(f.at_ms, n, f.kind, (f.group, f.consumer)) for n, f in enumerate(scenario.faults)
                      if f.kind in SIDE_FAULTS]
                     + [(o.at_ms, -1, "broker_kill", o.broker) for o in outages]
                     + [(o.until_ms, -1, "broker_restart", o.broker) for o in outages if o.until_ms is not None])
    assert not outages or cluster is not None, "broker outages need the cluster"
    stdout_path, stderr_path = work / "driver.out", work / "driver.err"
    hold = side_dir / HOLD_FILE

    def restart_pending() -> bool:
        return any(kind == "broker_restart" for _, _, kind, _ in actions)

    if restart_pending():
        hold.write_text("a killed broker is to be started again\n")
    peak_rss = 0.0
    faults: list[dict] = []
    # Controller-mode brokers whose master was killed: (broker, killed node, kill wall ms), until
    # another node logs that it is the master (a "master_elected" fault row says when).
    electing: list[tuple[str, str, int]] = []

    def start_side(side: _Side) -> None:
        side.starts += 1
        name = f"{side.group}-c{side.index}-{side.starts}"
        out = open(side_dir / f"{name}.out", "wb")
        err = open(side_dir / f"{name}.err", "wb")
        side.proc = subprocess.Popen(
            [*_java(classes, lib, home / name), str(plan_path), "--only", side.group, str(side.index)],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        err.close()

    grpc_proc: subprocess.Popen | None = None

    def start_grpc() -> subprocess.Popen:
        out = open(side_dir / f"{GRPC_SIDE}.out", "wb")
        err = open(side_dir / f"{GRPC_SIDE}.err", "wb")
        grpc_home = home / GRPC_SIDE
        proc = subprocess.Popen(
            ["java", *JDK17_FLAGS, *COMMON_FLAGS, *DRIVER_MEMORY, f"-Duser.home={grpc_home}",
             "-cp", grpc.classpath, GRPC_MAIN_CLASS, str(plan_path), grpc.endpoint],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        err.close()
        return proc

    def kill(proc: subprocess.Popen | None, sig: int) -> None:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)

    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        main = subprocess.Popen([*_java(classes, lib, home), str(plan_path)], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_ms / 1000 + DRIVER_GRACE_S
    sends_start: float | None = None
    sides_started = False
    try:
        while main.poll() is None:
            now = time.monotonic()
            if now > deadline:
                raise RetryAuditError(f"the client driver did not finish in time:\n{tail(stderr_path)}",
                                      where=str(stdout_path))
            if not sides_started or sends_start is None:
                text = stdout_path.read_text(errors="replace")
                if not sides_started and '"name":"admin"' in text:
                    for side in sides.values():
                        start_side(side)
                    if grpc is not None:
                        grpc_proc = start_grpc()
                    sides_started = True
                if sends_start is None and '"name":"consumers"' in text:
                    sends_start = now
            while sends_start is not None and actions and now >= sends_start + actions[0][0] / 1000:
                at_ms, _, kind, key = actions.pop(0)
                if kind in ("broker_kill", "broker_restart"):
                    wall_ms = int(time.time() * 1000)
                    if kind == "broker_kill":
                        killed = cluster.kill(key)
                        detail = {} if killed == key else {"node": killed}
                        if cluster.is_controller_mode(key):
                            electing.append((key, killed, wall_ms))
                    else:
                        detail = {"boot_s": round(cluster.restart_broker(key), 2)}
                        if not restart_pending():
                            hold.unlink(missing_ok=True)
                    faults.append({"at_ms": at_ms, "kind": kind, "broker": key, "wall_ts_ms": wall_ms,
                                   "late_ms": round((now - sends_start) * 1000 - at_ms), **detail})
                    say(f"fault at {at_ms / 1000:.1f} s: {kind} {key}")
                    continue
                side = sides[key]
                if kind == "consumer_crash":
                    kill(side.proc, signal.SIGKILL)
                    if side.proc is not None:
                        side.proc.wait()
                else:
                    kill(side.proc, signal.SIGTERM)
                    start_side(side)
                faults.append({"at_ms": at_ms, "kind": kind, "consumer": f"{key[0]}-c{key[1]}",
                               "late_ms": round((now - sends_start) * 1000 - at_ms)})
                say(f"fault at {at_ms / 1000:.1f} s: {kind} {key[0]}-c{key[1]}")
            electing = _note_elections(cluster, electing, faults, say)
            if grpc_proc is not None and grpc_proc.poll() is not None:
                raise RetryAuditError(f"the gRPC driver exited with code {grpc_proc.returncode}:\n"
                                      f"{tail(side_dir / (GRPC_SIDE + '.err'))}",
                                      where=str(side_dir / f"{GRPC_SIDE}.err"))
            peak_rss = max(peak_rss, rss_mib(main.pid))
            time.sleep(POLL_S)
    finally:
        hold.unlink(missing_ok=True)
        kill(main, signal.SIGKILL)
        main.wait()
        # A clean stop of every side consumer still running (and of the gRPC driver's consumers):
        # it persists its offsets, as the main driver's consumers do when it ends.
        procs = [side.proc for side in sides.values()] + [grpc_proc]
        for proc in procs:
            kill(proc, signal.SIGTERM)
        for proc in procs:
            if proc is not None:
                try:
                    proc.wait(timeout=SIDE_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    kill(proc, signal.SIGKILL)
                    proc.wait()
    if main.returncode != 0:
        raise RetryAuditError(f"the client driver exited with code {main.returncode}:\n{tail(stderr_path)}",
                              where=str(stderr_path))
    seen = observed.parse_lines(stdout_path.read_text().splitlines())
    for f in sorted(side_dir.glob("*.out")):
        seen.consumes += observed.parse_lines(f.read_text().splitlines()).consumes
    if seen.done is None:
        raise RetryAuditError("the client driver ended without its done line", where=str(stdout_path))
    not_played = [{"at_ms": at_ms, "kind": kind,
                   **({"broker": key} if kind.startswith("broker_") else {"consumer": f"{key[0]}-c{key[1]}"})}
                  for at_ms, _, kind, key in actions]
    for f in not_played:
        say(f"not played: {f['kind']} {f.get('broker') or f.get('consumer')} at {f['at_ms'] / 1000:.1f} s "
            f"(the clients had stopped)")
    return Played(seen, round(peak_rss), faults, not_played)
