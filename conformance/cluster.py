"""A RocketMQ name server and brokers of one cluster as ``java`` processes on 127.0.0.1.

Every process runs in its own process group with its own ``user.home`` (logs, the name server's
kv store) and its own store root, on ports probed free before it starts. Readiness is the boot
line on stdout; a clean stop is SIGTERM and a wait, after which the store's ``abort`` file must be
gone (RocketMQ deletes it last on a clean shutdown; without the JDK 17 module flags 4.9.4 cannot
unmap its files and leaves it). :class:`Cluster` is a context manager that ends every process it
started, whatever happened, and keeps their logs for the report of a failure.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.errors import RetryAuditError

# 4.9.4 unmaps files through reflection into java.nio and jdk.internal.ref (MappedFile.clean); the
# sun.nio.ch export serves the DirectBuffer casts of the warm-up and transient-pool paths.
JDK17_FLAGS = ("--add-opens", "java.base/java.nio=ALL-UNNAMED",
               "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
               "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED")
COMMON_FLAGS = ("-XX:-OmitStackTraceInFastThrow", "-Djava.net.preferIPv4Stack=true", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1")
NAMESRV_MEMORY = ("-Xms64m", "-Xmx128m")
# The scripts' 8 GiB pre-touched heaps would not fit three JVMs on a small machine; the commit
# log is memory-mapped, outside the heap. Direct memory is another matter: every thread that puts
# a record keeps its own encoder buffer of maxMessageSize + 64 KiB (4.06 MiB) for life, and a 5.5
# broker puts from some sixty threads (pull threads writing POP checkpoints, eight revive threads,
# the timer's). At 256 MiB a revive thread's first put failed with "Cannot reserve 4259840 bytes of
# direct buffer memory" and the broker committed its revive offset past the checkpoint without a
# retry record (docs/rocketmq-5x.md). Reserved, not touched: the resident size grows only by what
# is used.
BROKER_MEMORY = ("-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=768m")
DRIVER_MEMORY = ("-Xmx256m",)
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
PROXY_MEMORY = ("-Xms128m", "-Xmx256m")
PROXY_BOOT_LINE = "rocketmq-proxy startup successfully"
PROXY_NO_ROUTE = "create system broadcast topic"  # its exit while no broker of the cluster is registered
PROXY_ROUTE_WAIT_S = 45.0
NAMESRV_BOOT_LINE = "The Name Server boot success"
BROKER_BOOT_LINE = "boot success"
BOOT_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0
# Below Linux's ephemeral range (32768-60999 by default): a port there can be taken as the local
# port of a client connection between a broker's kill and its restart, and the restart then fails
# to bind it (seen on a controller-mode broker's HA port).
PORT_BASE_MIN, PORT_BASE_MAX = 21000, 32000
# "LOW-HIGH" narrows where pick_ports looks (within the range above): the test suite gives each of
# its worker processes a range of its own, so two clusters starting at once never probe one port.
PORT_RANGE_ENV = "RETRY_AUDIT_PORT_RANGE"
PORT_TRIES_MAX = 50
LOG_TAIL_LINES = 40
# A DLedger node's own port (dLegerPeers), this far above its listen port: pick_ports probes it too.
DLEDGER_PORT_OFFSET = 3
# How long a DLedger group may take to elect a leader and make it the master (BrokerController
# changeToMaster once the new leader has committed and dispatched everything it holds).
DLEDGER_LEADER_TIMEOUT_S = 90.0
# What DLedgerRoleChangeHandler logs once a node is its group's master (4.9.4 and 5.x).
_ROLE_LINE = re.compile(r"Finish handling broker role change succ=(\w+) term=(\d+) role=(\w+)")
# What a 5.x broker in controller mode logs once it registered with the name server in a new role
# (ReplicasManager.registerBrokerWhenRoleChange): its role and the master epoch it now serves.
_CONTROLLER_ROLE_LINE = re.compile(r"Change broker \[id:(\d+)\]\[address:([^\]]*)\] to (\w+), "
                                   r"newMasterBrokerId:(\w+), newMasterAddress:([^,]*), newMasterEpoch:(\d+)")
# How long a controller-mode broker may take to be told its role (the controller elects a master
# among the brokers of a name that registered, and the others become its slaves).
CONTROLLER_ROLE_TIMEOUT_S = 90.0
# The controller's Raft log (its own DLedger store, election events only): small files, not 1 GiB.
CONTROLLER_LOG_FILE_BYTES = 4 << 20

# 4.9.4 configures logback from <rocketmq.home>/conf/logback_*.xml and exits without it.
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/rocketmq.log</file>
    <encoder><pattern>%d{yyyy-MM-dd HH:mm:ss.SSS} %-5level [%thread] %logger{24} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


@dataclass
class BrokerSpec:
    """What a broker of the cluster is configured with beyond the harness's defaults."""

    name: str
    message_delay_level: str
    commitlog_file_size_bytes: int = 1 << 20
    extra: dict[str, str] = field(default_factory=dict)
    # More than 0: the broker is a DLedger group of this many nodes (enableDLegerCommitLog), each
    # a process of its own named dledger_node_name(name, i), with its own store and ports.
    dledger_nodes: int = 0
    # More than 0: the broker is this many 5.x brokers of one brokerName in controller mode
    # (enableControllerMode, the controller embedded in the name server): one master, the others
    # its slaves; node i is the process dledger_node_name(name, i), started in that order.
    controller_nodes: int = 0

    def node_names(self) -> list[str]:
        """The processes of this broker: itself, or its DLedger group's or controller-mode nodes."""
        nodes = self.dledger_nodes or self.controller_nodes
        if not nodes:
            return [self.name]
        return [dledger_node_name(self.name, i) for i in range(nodes)]


def dledger_node_name(broker: str, index: int) -> str:
    """The process of node ``n<index>`` of broker ``broker``'s DLedger group (its dLegerSelfId is n<index>)."""
    return f"{broker}-n{index}"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    home: Path
    store: Path | None = None
    addr: str | None = None

    def alive(self) -> bool:
        return self.popen.poll() is None


def _port_free(port: int) -> bool:
    # 4.9.4 binds the wildcard address, so probe that, not only loopback.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def port_base_range() -> tuple[int, int]:
    """Where pick_ports chooses its bases: [low, high), from RETRY_AUDIT_PORT_RANGE when set."""
    value = os.environ.get(PORT_RANGE_ENV)
    if not value:
        return PORT_BASE_MIN, PORT_BASE_MAX
    low, _, high = value.partition("-")
    if not (low.isdigit() and high.isdigit() and PORT_BASE_MIN <= int(low) < int(high) <= PORT_BASE_MAX):
        raise RetryAuditError(f"{PORT_RANGE_ENV}={value!r} is not LOW-HIGH within "
                              f"{PORT_BASE_MIN}-{PORT_BASE_MAX}", where=PORT_RANGE_ENV)
    return int(low), int(high)


def pick_ports(brokers: int, extra_offsets: tuple[int, ...] = ()) -> tuple[int, list[int]]:
    """A name-server port and one listen port per broker, each with its P-2 and P+1 free (and
    P + each of ``extra_offsets``: a DLedger node's own port)."""
    assert brokers <= 8, f"ten ports per broker above a base of 100: {brokers} brokers do not fit"
    chooser = random.SystemRandom()
    low, high = port_base_range()
    for _ in range(PORT_TRIES_MAX):
        base = chooser.randrange(low, high, 100)
        ns = base
        listen = [base + 11 + 10 * i for i in range(brokers)]
        needed = [ns] + [p + d for p in listen for d in (-2, 0, 1, *extra_offsets)]
        if all(_port_free(p) for p in needed):
            return ns, listen
    raise RetryAuditError("no free ports for a name server and brokers on 127.0.0.1")


def rss_mib(pid: int) -> float:
    """A process's resident memory from /proc (MiB); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _broker_log(proc: Proc) -> Path:
    """A broker's main log: 4.9.4's is the harness's one file (logs/rocketmq.log), 5.x's its own
    logs/rocketmqlogs/broker.log (its logback configuration is in its jars)."""
    own = proc.home / "logs" / "rocketmqlogs" / "broker.log"
    return own if own.exists() else proc.home / "logs" / "rocketmq.log"


def _broker_log_text(proc: Proc) -> str:
    try:
        return _broker_log(proc).read_text(errors="replace")
    except OSError:
        return ""


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class Cluster:
    """A name server and brokers of one cluster under ``root``; a context manager that ends them all."""

    def __init__(self, root: Path, lib: Path, brokers: list[BrokerSpec], *, cluster_name: str = "DefaultCluster",
                 log=None):
        self.root = Path(root)
        self.lib = lib
        self.specs = brokers
        self.cluster_name = cluster_name
        self.log = log or (lambda _m: None)
        self.procs: dict[str, Proc] = {}
        self.namesrv_addr: str | None = None
        self.broker_addrs: dict[str, str] = {}
        self.node_addrs: dict[str, str] = {}  # a DLedger or controller-mode node's own address, by process
        self.controller_addr: str | None = None  # the name server's embedded controller, when a broker needs one
        self._booting: dict[str, tuple[int, str, float]] = {}  # launched, boot line not seen yet
        self.proxy_grpc_addr: str | None = None
        self.boot_seconds: dict[str, float] = {}
        self._ports: list[int] = []
        self._home = self.root / "rocketmq-home"

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.kill_all()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.kill_all()

    def start(self) -> None:
        (self._home / "conf").mkdir(parents=True, exist_ok=True)
        for name in ("logback_namesrv.xml", "logback_broker.xml", "logback_tools.xml"):
            (self._home / "conf" / name).write_text(_LOGBACK)
        nodes = sum(len(spec.node_names()) for spec in self.specs)
        extra = (DLEDGER_PORT_OFFSET,) if any(spec.dledger_nodes for spec in self.specs) else ()
        ns_port, listen = pick_ports(nodes, extra)
        self.namesrv_addr = f"127.0.0.1:{ns_port}"
        ns_home = self.root / "namesrv"
        ns_home.mkdir(parents=True, exist_ok=True)
        conf = ns_home / "namesrv.properties"
        conf.write_text(f"listenPort={ns_port}\n"
                        f"kvConfigPath={ns_home / 'kvConfig.json'}\n"
                        f"configStorePath={ns_home / 'namesrv-config.properties'}\n"
                        + (self._controller_props(ns_home) if any(s.controller_nodes for s in self.specs) else ""))
        self._launch("namesrv", ns_home, NAMESRV_MEMORY, [NAMESRV_MAIN, "-c", str(conf)], NAMESRV_BOOT_LINE)
        ports = iter(listen)
        for spec in self.specs:
            if spec.dledger_nodes:
                self.start_dledger_group(spec, [next(ports) for _ in spec.node_names()])
            elif spec.controller_nodes:
                self.start_controller_group(spec, [next(ports) for _ in spec.node_names()])
            else:
                self.start_broker(spec, next(ports))

    def restart_broker(self, name: str) -> float:
        """Start broker ``name`` again on its port and store (after a kill: abnormal recovery); seconds to boot.

        For a DLedger group: its nodes that are not running, each on its own port and store."""
        spec = next(s for s in self.specs if s.name == name)
        if not (spec.dledger_nodes or spec.controller_nodes):
            self.start_broker(spec)
            return self.boot_seconds[name]
        down = [n for n in spec.node_names() if not self.procs[n].alive()]
        for node in down:
            self.start_broker(spec, node=node)
        return max((self.boot_seconds[n] for n in down), default=0.0)

    def _broker_props(self, spec: BrokerSpec, store: Path, port: int) -> dict[str, str]:
        props = {
            "brokerClusterName": self.cluster_name,
            "brokerName": spec.name,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "brokerIP2": "127.0.0.1",
            "listenPort": str(port),
            "haListenPort": str(port + 1),
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(spec.commitlog_file_size_bytes),
            "mappedFileSizeConsumeQueue": "60000",
            "maxHashSlotNum": "5000",
            "maxIndexNum": "20000",
            "messageDelayLevel": spec.message_delay_level,
            "flushDiskType": "ASYNC_FLUSH",
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            "deleteWhen": "99",
            "fileReservedTime": "72",
            # No load shedding: on a busy host a request queued past 200 ms would be answered
            # SYSTEM_BUSY, and neither a trace batch (sent async) nor a sync send retries that code.
            # The model sheds nothing, and a lost send or trace record is no finding of the audit.
            "brokerFastFailureEnable": "false",
        }
        props.update(spec.extra)
        return props

    def start_broker(self, spec: BrokerSpec, port: int | None = None, *, node: str | None = None,
                     wait: bool = True) -> None:
        """Start (or restart, on the same port and store) the broker ``spec``, or its DLedger node ``node``."""
        name = node or spec.name
        home = self.root / name
        store = home / "store"
        store.mkdir(parents=True, exist_ok=True)
        if port is None:
            port = int((self.node_addrs if node else self.broker_addrs)[name].rsplit(":", 1)[1])
        props = self._broker_props(spec, store, port)
        if node is not None:
            props.update(self._dledger_props(spec, node) if spec.dledger_nodes else self._controller_mode_props())
        conf = home / "broker.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        addr = f"127.0.0.1:{port}"
        if node is None:
            self.broker_addrs[name] = addr
        else:
            self.node_addrs[name] = addr
        self._launch(name, home, BROKER_MEMORY, [BROKER_MAIN, "-c", str(conf)], BROKER_BOOT_LINE,
                     store=store, addr=addr, wait=wait)

    # --- DLedger groups --------------------------------------------------------------------------

    def _dledger_props(self, spec: BrokerSpec, node: str) -> dict[str, str]:
        """A DLedger node's settings: the group is the broker's name, each peer ``n<i>-host:port``."""
        peers = ";".join(f"n{i}-127.0.0.1:{int(self.node_addrs[n].rsplit(':', 1)[1]) + DLEDGER_PORT_OFFSET}"
                         for i, n in enumerate(spec.node_names()))
        return {"enableDLegerCommitLog": "true", "dLegerGroup": spec.name, "dLegerPeers": peers,
                "dLegerSelfId": f"n{spec.node_names().index(node)}"}

    def start_dledger_group(self, spec: BrokerSpec, ports: list[int]) -> None:
        """Start the nodes of a DLedger group at once (on ``ports``), then wait until one is master.

        ``broker_addrs[spec.name]`` is then the master's address (a slave refuses to create topics
        and groups; the others copy them from the master every 10 s, SlaveSynchronize)."""
        for node, port in zip(spec.node_names(), ports, strict=True):
            self.node_addrs[node] = f"127.0.0.1:{port}"
        for node in spec.node_names():
            self.start_broker(spec, node=node, wait=False)
        # The nodes boot at once on the same cores (three 5.3.3 nodes took 11-22 s each here): each
        # may take as long as booting them one after the other.
        for node in spec.node_names():
            self._await_boot(node, BOOT_TIMEOUT_S * len(spec.node_names()))
        self.broker_addrs[spec.name] = self.node_addrs[self.wait_leader(spec.name)]

    def leader(self, name: str) -> str | None:
        """The running node of DLedger broker ``name`` that is master now: of the running nodes whose
        last role change made them LEADER, the one of the highest term (None when there is none)."""
        spec = next(s for s in self.specs if s.name == name)
        if spec.controller_nodes:
            return self._controller_master(spec)
        best: tuple[int, str] | None = None
        for node in spec.node_names():
            proc = self.procs.get(node)
            if proc is None or not proc.alive():
                continue
            found = _ROLE_LINE.findall(_broker_log_text(proc))
            if found and found[-1][0] == "true" and found[-1][2] == "LEADER":
                term = int(found[-1][1])
                if best is None or term > best[0]:
                    best = (term, node)
        return best[1] if best else None

    def _controller_master(self, spec: BrokerSpec) -> str | None:
        """The running controller-mode node of ``spec`` whose last role change made it master, of the
        highest epoch."""
        best: tuple[int, str] | None = None
        for node in spec.node_names():
            proc = self.procs.get(node)
            changes = self.controller_roles(node) if proc is not None and proc.alive() else []
            if changes and changes[-1]["role"] == "SYNC_MASTER" and (best is None or changes[-1]["epoch"] > best[0]):
                best = (changes[-1]["epoch"], node)
        return best[1] if best else None

    def wait_leader(self, name: str, timeout_s: float = DLEDGER_LEADER_TIMEOUT_S) -> str:
        """Wait until DLedger broker ``name`` has a master; its node."""
        deadline = time.monotonic() + timeout_s
        while (node := self.leader(name)) is None:
            if time.monotonic() > deadline:
                spec = next(s for s in self.specs if s.name == name)
                logs = "\n".join(tail(_broker_log(self.procs[n]), 10) for n in spec.node_names())
                raise RetryAuditError(f"DLedger group {name} elected no master within {timeout_s:.0f} s:\n{logs}",
                                      where=str(self.root))
            time.sleep(0.2)
        self.log(f"{name}: {node} is the master")
        return node

    # --- controller mode (5.x) -----------------------------------------------------------------

    def _controller_props(self, ns_home: Path) -> str:
        """The name server's embedded controller (enableControllerInNamesrv): a one-peer DLedger
        controller on a port of its own, which is also where brokers send their controller requests."""
        _, (port,) = pick_ports(1)
        self.controller_addr = f"127.0.0.1:{port}"
        return (f"enableControllerInNamesrv=true\ncontrollerDLegerGroup=controller\n"
                f"controllerDLegerPeers=n0-{self.controller_addr}\ncontrollerDLegerSelfId=n0\n"
                f"controllerStorePath={ns_home / 'controller-store'}\nmappedFileSize={CONTROLLER_LOG_FILE_BYTES}\n")

    def _controller_mode_props(self) -> dict[str, str]:
        """A controller-mode broker's settings, as RocketMQ's quick-start files have them: it starts as
        a slave with no id, the controller gives it one (brokerIdentity) and its role; a master acks a
        send once every replica of its SyncStateSet has it (allAckInSyncStateSet)."""
        return {"enableControllerMode": "true", "controllerAddr": self.controller_addr, "brokerId": "-1",
                "brokerRole": "SLAVE", "allAckInSyncStateSet": "true"}

    def start_controller_group(self, spec: BrokerSpec, ports: list[int]) -> None:
        """Start the controller-mode nodes of ``spec`` one after the other: the first becomes the
        master (epoch 1), each next one its slave. ``broker_addrs[spec.name]`` is the master's address."""
        for node, port in zip(spec.node_names(), ports, strict=True):
            self.node_addrs[node] = f"127.0.0.1:{port}"
        for i, node in enumerate(spec.node_names()):
            self.start_broker(spec, node=node)
            self.wait_role(node, "SYNC_MASTER" if i == 0 else "SLAVE")
        self.broker_addrs[spec.name] = self.node_addrs[spec.node_names()[0]]

    def controller_roles(self, node: str) -> list[dict]:
        """Every role change a controller-mode node logged, oldest first: role, epoch, master id."""
        proc = self.procs[node]
        found = []
        for log in (proc.home / "logs" / "rocketmqlogs" / "broker.log", proc.home / "logs" / "rocketmq.log"):
            try:
                found += _CONTROLLER_ROLE_LINE.findall(log.read_text(errors="replace"))
            except OSError:
                continue
        return [{"broker_id": int(i), "role": role, "master_broker_id": master, "epoch": int(epoch)}
                for i, _addr, role, master, _maddr, epoch in found]

    def is_controller_mode(self, name: str) -> bool:
        """Whether broker ``name`` is controller-mode nodes (``BrokerSpec.controller_nodes``)."""
        return any(s.name == name and s.controller_nodes for s in self.specs)

    def wait_role(self, node: str, role: str, timeout_s: float = CONTROLLER_ROLE_TIMEOUT_S) -> dict:
        """Wait until controller-mode ``node`` logs that it serves as ``role``; that role change."""
        deadline = time.monotonic() + timeout_s
        while True:
            changes = self.controller_roles(node)
            if changes and changes[-1]["role"] == role:
                self.log(f"{node} is {role} (epoch {changes[-1]['epoch']}, broker id {changes[-1]['broker_id']})")
                return changes[-1]
            if time.monotonic() > deadline or not self.procs[node].alive():
                raise RetryAuditError(f"{node} did not become {role} within {timeout_s:.0f} s:\n"
                                      f"{tail(self.procs[node].home / 'logs' / 'rocketmqlogs' / 'broker.log', 10)}",
                                      where=str(self.procs[node].home))
            time.sleep(0.2)

    def start_proxy(self, lib: Path, extra: dict | None = None) -> str:
        """Start a 5.x gRPC proxy in cluster mode (its own jars, ``lib``) in front of this cluster's
        brokers; its gRPC endpoint ``127.0.0.1:port``. ``extra`` goes into its ``rmq-proxy.json``."""
        home = self.root / "proxy"
        home.mkdir(parents=True, exist_ok=True)
        grpc_port, (remoting_port,) = pick_ports(1)
        config = {"rocketMQClusterName": self.cluster_name, "namesrvAddr": self.namesrv_addr,
                  "grpcServerPort": grpc_port, "remotingListenPort": remoting_port, **(extra or {})}
        conf = home / "rmq-proxy.json"
        conf.write_text(json.dumps(config, indent=1))
        self.proxy_grpc_addr = f"127.0.0.1:{grpc_port}"
        # The proxy creates its system topics on the brokers the name server lists under the
        # cluster's name, and exits when there is none yet: a 5.x broker registers some seconds
        # after its boot line. Launch it again until the route is there.
        deadline = time.monotonic() + PROXY_ROUTE_WAIT_S
        while True:
            try:
                self._launch("proxy", home, PROXY_MEMORY, [PROXY_MAIN, "-pc", str(conf), "-pm", "cluster"],
                             PROXY_BOOT_LINE, addr=self.proxy_grpc_addr, lib=lib)
                return self.proxy_grpc_addr
            except RetryAuditError as e:
                if PROXY_NO_ROUTE not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _launch(self, name: str, home: Path, memory, main_args: list[str], boot_line: str, *,
                store: Path | None = None, addr: str | None = None, lib: Path | None = None,
                wait: bool = True) -> None:
        """Start a process; unless ``wait`` is False, wait for its boot line (``_await_boot``)."""
        log = home / "stdout.log"
        # A restart appends to the same log: wait for a boot line written after this launch.
        offset = log.stat().st_size if log.exists() else 0
        cmd = ["java", *JDK17_FLAGS, *COMMON_FLAGS, *memory, f"-Duser.home={home}",
               f"-Drocketmq.home.dir={self._home}", "-cp", str((lib or self.lib) / "*"), *main_args]
        started = time.monotonic()
        with open(log, "ab") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=home,
                                     env=dict(os.environ, ROCKETMQ_HOME=str(self._home)))
        proc = Proc(name, popen, log, home, store, addr)
        self.procs[name] = proc
        self._booting[name] = (offset, boot_line, started)
        if wait:
            self._await_boot(name)

    def _await_boot(self, name: str, timeout_s: float = BOOT_TIMEOUT_S) -> None:
        """Wait for the boot line of ``name`` (launched by ``_launch``), written after its launch."""
        proc = self.procs[name]
        offset, boot_line, started = self._booting.pop(name)
        deadline = started + timeout_s
        while True:
            with open(proc.log, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            if boot_line in text:
                break
            if not proc.alive():
                raise RetryAuditError(f"{name} exited with code {proc.popen.returncode} before it booted:\n"
                                      f"{tail(proc.log)}", where=str(proc.log))
            if time.monotonic() > deadline:
                raise RetryAuditError(f"{name} did not boot within {timeout_s:.0f} s:\n{tail(proc.log)}",
                                      where=str(proc.log))
            time.sleep(0.1)
        self.boot_seconds[name] = time.monotonic() - started
        self.log(f"{name} booted in {self.boot_seconds[name]:.1f} s ({proc.addr or self.namesrv_addr})")

    # --- stopping --------------------------------------------------------------------------------

    def stop(self, name: str) -> float:
        """SIGTERM ``name`` and wait; the seconds it took. A broker must leave no ``abort`` file."""
        return self._stop_together([name])[name]

    def _stop_together(self, names: list[str]) -> dict[str, float]:
        """SIGTERM every one of ``names`` at once, then wait for each: a 5.x broker takes 15-35 s
        to shut down, and two brokers' shutdowns do not wait for each other."""
        started = time.monotonic()
        live = [n for n in names if self.procs[n].alive()]
        for name in live:
            os.killpg(self.procs[name].popen.pid, signal.SIGTERM)
        seconds = {}
        for name in names:
            proc = self.procs[name]
            if name in live:
                try:
                    proc.popen.wait(timeout=max(0.0, started + STOP_TIMEOUT_S - time.monotonic()))
                except subprocess.TimeoutExpired as e:
                    for other in live:
                        if self.procs[other].alive():
                            os.killpg(self.procs[other].popen.pid, signal.SIGKILL)
                            self.procs[other].popen.wait()
                    raise RetryAuditError(f"{name} did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM:\n"
                                          f"{tail(proc.log)}", where=str(proc.log)) from e
            seconds[name] = time.monotonic() - started
        for name in names:
            proc = self.procs[name]
            if proc.store is not None and (proc.store / "abort").exists():
                raise RetryAuditError(f"{name} left an abort file after SIGTERM: its shutdown was not clean\n"
                                      f"{tail(proc.log)}", where=str(proc.store / "abort"))
        return seconds

    def kill(self, name: str) -> str:
        """SIGKILL ``name`` (a crash: the broker's store keeps its abort file); the process killed.

        For a DLedger or controller-mode broker, its node that is master now (another is elected)."""
        if name not in self.procs and any(s.name == name and (s.dledger_nodes or s.controller_nodes)
                                          for s in self.specs):
            node = self.leader(name)
            if node is None:
                raise RetryAuditError(f"broker {name} has no master node to kill", where=str(self.root))
            name = node
        proc = self.procs[name]
        if proc.alive():
            os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait()
        return name

    def stop_all(self) -> dict[str, float]:
        """Stop the brokers, then the name server (a broker unregisters from it on the way out)."""
        seconds = {}
        # The proxy first (it holds client sessions), then the brokers together, then the name server.
        brokers = [n for n in self.procs if n not in ("proxy", "namesrv")]
        for names in (["proxy"], brokers, ["namesrv"]):
            names = [n for n in names if n in self.procs and self.procs[n].alive()]
            if names:
                seconds.update(self._stop_together(names))
        return seconds

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.alive():
                try:
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.popen.wait()

    def rss_mib(self) -> dict[str, float]:
        """Resident memory of each live process, from /proc (MiB)."""
        return {name: rss_mib(proc.popen.pid) for name, proc in self.procs.items() if proc.alive()}

    def logs(self) -> dict[str, str]:
        """The tail of every process's stdout and RocketMQ log, for a failure report."""
        out = {}
        for name, proc in self.procs.items():
            out[f"{name}/stdout"] = tail(proc.log)
            out[f"{name}/rocketmq.log"] = tail(proc.home / "logs" / "rocketmq.log")
        return out
