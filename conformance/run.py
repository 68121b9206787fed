"""One conformance run: the model and real RocketMQ play the same scenario; the audit is judged.

Steps, each timed in the report: simulate the scenario (the model's run), resolve the release's
jars and compile the driver, start a name server and two brokers, let the real clients play the
plan, stop the brokers cleanly, copy their stores, import both stores into one run (a broker
each, as ``import-store --broker`` does) and build the lineage of every run, build one warehouse
with every check, then compare (``compare.py``).

``report.json`` is written last, atomically: a directory without it is an unfinished or failed
run (the warehouse's views name the run directories by path, so the directory is built in place
rather than renamed at the end). A failed run keeps the processes' logs there for a post-mortem,
and the error names the directory.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from broker_core.broker.semantics import semantics_for, semantics_of_release
from broker_core.errors import BadInputError, RetryAuditError
from broker_core.sim.scenario import BrokerSpec as ScenarioBroker
from broker_core.sim.scenario import load_scenario
from conformance import compare, jars, observed
from conformance.cluster import BrokerSpec, Cluster
from conformance.driver import compile_driver, compile_grpc_driver
from conformance.plan import build_plan, check_groups, grpc_groups, is_grpc
from conformance.play import SIDE_DIR, GrpcSide, Outage, driver_home, play, side_consumers

BROKERS = ("broker-a", "broker-b")
# A run on a DLedger group: one broker, broker-a, whose nodes are the group (cluster.py names them
# broker-a-n0, ...); each node's store is imported as a replica of broker-a.
DLEDGER_BROKERS = ("broker-a",)
# A DLedger master elected after a kill registers with the name server at once; the producers
# read the new route this often (their default is every 30 s).
DLEDGER_ROUTE_POLL_MS = 1000
# After a DLedger master is killed the clients run at least this long before they may stop (the
# plan's min_run_ms, from the kill): a 4.9.4 push consumer whose pull the killed master was holding
# waits for it until its 30 s timeout (DefaultMQPushConsumerImpl CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND;
# the client fails requests at once only on a channel it closes itself), so no listener is called
# for about 30 s (measured: the first call 31.6 s after the kill); the election (5-6 s measured) is
# long over by then. The margin covers a retry chain's delays after that.
DLEDGER_CONSUMER_STALL_MS = 40_000
# The real stores are one run: a message's hops may be on both brokers (an orderly client's send
# past the maximum, a client's fallback send, a producer's retry go to any broker's queue).
REAL_RUN_DIR = "real"


def real_run_id(scenario_name: str) -> str:
    """The run id of the real cluster's stores, imported together (one broker each)."""
    return f"{scenario_name}-{REAL_RUN_DIR}"

# The proxy's minimums on a receive's invisible time (10 s) and long polling (5 s) lowered, and the
# long polling it tells a push consumer to use (20 s) cut: a retry written to a POP retry topic does
# not wake a waiting pop (apache/rocketmq #6681), so a short poll picks it up soon; a scenario's
# invisible time is then used as given, as the model does (broker_core/broker/proxy.py).
PROXY_CONFIG = {"minInvisibleTimeMillsForRecv": 1000, "grpcClientConsumerMinLongPollingTimeoutMillis": 1000,
                "grpcClientConsumerMaxLongPollingTimeoutMillis": 2000}

# With client trace on, every broker hosts the trace topic (RMQ_SYS_TRACE_TOPIC, one queue; off by
# default): the clients' trace producer sends to any broker that routes it (docs/client-trace.md).
TRACE_BROKER_SETTINGS = {"traceTopicEnable": "true"}

REPORT_NAME = "report.json"
MARKER_NAME = ".conformance-run"


def _timed(timings: dict[str, float], name: str):
    @contextmanager
    def block():
        started = time.perf_counter()
        try:
            yield
        finally:
            timings[name] = round(time.perf_counter() - started, 2)
    return block()


def run_conformance(version: str, scenario_path: str | Path, out_dir: str | Path, *, spark=None,
                    log: Callable[[str], None] | None = None, outages: tuple[Outage, ...] = (),
                    dledger_nodes: int = 0, controller_nodes: int = 0, client_trace: bool = False,
                    lineage_engine: str = "spark") -> dict:
    """Run the scenario on RocketMQ ``version`` and on the model; write and return the report.

    ``outages`` kill real brokers with SIGKILL and restart them (abnormal recovery) while the
    clients run; the model plays no such fault, so the messages they touch are compared between
    the audit and the clients only (docs/conformance.md).

    ``dledger_nodes`` (more than 0): the real cluster is one broker, a DLedger group of that many
    nodes (``enableDLegerCommitLog``); an outage of it kills its master, and the group elects
    another. Every node's store is imported as a replica of the broker (``--role replica``).

    ``controller_nodes`` (more than 0): the real cluster is one 5.x broker, broker-a, as that many
    brokers of one name in controller mode (the controller embedded in the name server): a master
    and its slaves. An outage of it kills its master and the controller makes a slave the master.
    The store of the node that is master at the end is imported as the master, the others as its
    slaves (``--role slave``), merged by their epoch files.

    ``lineage_engine``: ``spark`` (the default) or ``duckdb``, which runs the same lineage SQL.

    ``client_trace``: every broker hosts the trace topic (``traceTopicEnable=true``) and every real
    client writes its message trace there (``enableMsgTrace``); the import reads it into
    ``client_trace``, and the report compares it with the driver's own log (docs/client-trace.md).
    """
    if dledger_nodes and controller_nodes:
        raise BadInputError("a broker is a DLedger group or controller-mode nodes, not both",
                            where="--controller-nodes")
    say = log or (lambda _m: None)
    jars.check_version(version)
    if controller_nodes and semantics_of_release(version).startswith("4"):
        raise BadInputError(f"controller mode is RocketMQ 5.x's (RIP-44); {version} has no controller",
                            where="--controller-nodes", hint="use --rocketmq 5.3.3, or --dledger-nodes on 4.x")
    scenario_path = Path(scenario_path)
    if not scenario_path.is_file():
        raise BadInputError("scenario file does not exist", where=str(scenario_path))
    scenario = _model_rules_of_release(load_scenario(scenario_path), version)
    side_consumers(scenario)  # refuses faults the real cluster cannot play, before anything starts
    check_groups(scenario)  # and groups its clients cannot
    brokers = DLEDGER_BROKERS if dledger_nodes or controller_nodes else BROKERS
    for outage in outages:
        if outage.broker not in brokers:
            raise BadInputError(f"no broker {outage.broker!r} in the cluster", where="--broker-outage",
                                hint=f"one of {', '.join(brokers)}")
    work = Path(out_dir).absolute()
    work.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_output(work)
    try:
        return _run(version, scenario_path, scenario, work, spark=spark, say=say, outages=outages,
                    dledger_nodes=dledger_nodes, controller_nodes=controller_nodes, client_trace=client_trace,
                    lineage_engine=lineage_engine)
    finally:
        lock.close()  # closing the file releases the lock


def _run(version: str, scenario_path: Path, scenario, work: Path, *, spark, say, outages, dledger_nodes: int,
         controller_nodes: int = 0, client_trace: bool = False, lineage_engine: str = "spark") -> dict:
    from broker_core.export.store_import import import_store
    from broker_core.sim.run import simulate

    if work.exists():
        # Only a conformance run's directory (finished or failed) is replaced; anything else is kept.
        if not (work / MARKER_NAME).exists() and any(work.iterdir()):
            raise BadInputError("the output directory exists and is not a conformance run's", where=str(work),
                                hint="choose a new directory (an earlier run's is replaced)")
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / MARKER_NAME).write_text("a retry-audit conformance run; report.json is written last\n")
    timings: dict[str, float] = {}
    replicated = bool(dledger_nodes or controller_nodes)
    brokers = DLEDGER_BROKERS if replicated else BROKERS
    report: dict = {"rocketmq_version": version, "rocketmq_client_version": jars.client_side_release(version),
                    "scenario": scenario.name,
                    "scenario_file": str(scenario_path), "brokers": list(brokers),
                    "model_semantics": scenario.broker.semantics, "client_trace": client_trace}
    try:
        with _timed(timings, "model_simulate_s"):
            simulate(scenario_path, work / "runs" / "model", scenario=scenario)
        grpc = bool(grpc_groups(scenario))
        with _timed(timings, "resolve_jars_s"):
            lib = jars.resolve(version, log=say)
            classes = compile_driver(lib, version)
            if grpc:
                proxy_lib = jars.resolve_proxy(version, log=say)
                grpc_classpath = compile_grpc_driver(lib, jars.resolve_grpc_client(log=say))

        specs = [BrokerSpec(name, scenario.broker.message_delay_level,
                            scenario.broker.commitlog_file_size_bytes,
                            extra={**broker_settings(scenario), **(TRACE_BROKER_SETTINGS if client_trace else {})},
                            dledger_nodes=dledger_nodes, controller_nodes=controller_nodes)
                 for name in brokers]
        with Cluster(work / "cluster", lib, specs, cluster_name=scenario.broker.cluster, log=say) as cluster:
            grpc_side = None
            if grpc:
                # The gRPC groups' consumers go through a proxy in cluster mode, in front of both brokers.
                grpc_side = GrpcSide(grpc_classpath, cluster.start_proxy(proxy_lib, PROXY_CONFIG))
            timings["boot_s"] = {k: round(v, 2) for k, v in cluster.boot_seconds.items()}
            plan = build_plan(scenario, work / "runs" / "model", namesrv=cluster.namesrv_addr,
                              brokers=cluster.broker_addrs, sides=side_consumers(scenario),
                              side_dir=work / SIDE_DIR)
            report["messages"] = plan.messages
            plan_path = work / "plan.tsv"
            kills_ms = [o.at_ms for o in outages]
            plan_path.write_text(plan.text + (f"setting\troute_poll_ms\t{DLEDGER_ROUTE_POLL_MS}\n"
                                              f"setting\tmin_run_ms\t{max(kills_ms, default=0) + DLEDGER_CONSUMER_STALL_MS}\n"
                                              if replicated else "")
                                 + ("setting\ttrace\t1\n" if client_trace else ""))
            say(f"real clients: {plan.messages} messages on {', '.join(brokers)} (RocketMQ {version})")
            with _timed(timings, "real_clients_s"):
                played = play(scenario, classes, lib, plan_path, work, plan.timeout_ms, log=say,
                              cluster=cluster, outages=tuple(outages), grpc=grpc_side)
            seen, driver_rss = played.seen, played.driver_rss_mib
            report["faults"] = played.faults
            if played.not_played:
                report["faults_not_played"] = played.not_played
            report["jvm_rss_mib"] = {**{k: round(v) for k, v in cluster.rss_mib().items()},
                                     "driver": driver_rss}
            roles = _import_roles(cluster, specs)
            if controller_nodes:
                report["controller"] = {node: cluster.controller_roles(node) for node in cluster.node_addrs}
                report["node_addrs"] = dict(cluster.node_addrs)
            with _timed(timings, "stop_brokers_s"):
                cluster.stop_all()
            _keep_logs(cluster, work)
            (work / "stores").mkdir()
            for spec in specs:
                for node in spec.node_names():
                    shutil.move(cluster.procs[node].store, work / "stores" / node)
        shutil.rmtree(work / "cluster", ignore_errors=True)
        report["driver"] = {"phases_ms": seen.phases, "end": seen.done,
                            "recalls": sum(1 for x in seen.sends if x.get("recalled_id")),
                            "recall_errors": [x["recall_error"] for x in seen.sends if x.get("recall_error")][:5]}
        observed.write_tables(seen, work / "clients", f"{scenario.name}-clients",
                              {g.name: g.retry_max_times if is_grpc(g) else g.max_reconsume_times
                               for g in scenario.groups})

        real_dir = work / "runs" / REAL_RUN_DIR
        runs = [work / "runs" / "model", real_dir]
        with _timed(timings, "import_s"):
            for spec in specs:
                for node in spec.node_names():
                    report.setdefault("imports", {})[node] = _import_summary(import_store(
                        work / "stores" / node, real_dir, name=real_run_id(scenario.name), broker=spec.name,
                        role=roles[node]))
        with _timed(timings, "lineage_s"):
            _lineage(runs, spark, lineage_engine)
        with _timed(timings, "warehouse_s"):
            checks = _warehouse(runs, work / "warehouse.duckdb")
        report["checks"] = checks
        report["revives_lost"] = _revives_lost(work / "warehouse.duckdb")
        report["forks"] = _forks(work / "warehouse.duckdb", real_run_id(scenario.name))
        with _timed(timings, "compare_s"):
            windows = _outage_windows(played.faults)
            report.update(compare.compare_all(work, scenario, outage_windows=windows, model_run_id=scenario.name,
                                              real_run_ids=[real_run_id(scenario.name)],
                                              stranded=compare.stranded_brokers(played.faults),
                                              killed=compare.killed_brokers(played.faults), checks=checks))
        if client_trace:
            from conformance.trace_compare import trace_vs_clients

            report["trace_vs_clients"] = trace_vs_clients(work / "warehouse.duckdb", real_run_id(scenario.name), seen)
        report["timings"] = timings
        partial = work / f".{REPORT_NAME}.tmp"
        partial.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
        os.replace(partial, work / REPORT_NAME)
    except RetryAuditError as e:
        e.hint = (e.hint + "; " if e.hint else "") + f"logs and partial output kept in {work} (no report.json)"
        raise
    return report


def _import_roles(cluster: Cluster, specs: list[BrokerSpec]) -> dict[str, str]:
    """How each node's store is imported: a DLedger node as a replica; of controller-mode nodes, the
    one that is master now as the master and the others as its slaves; a plain broker as itself."""
    roles = {}
    for spec in specs:
        master = cluster.leader(spec.name) if spec.controller_nodes else None
        for node in spec.node_names():
            roles[node] = ("replica" if spec.dledger_nodes else "slave" if spec.controller_nodes and node != master
                           else "master")
    return roles


def _import_summary(summary) -> dict:
    """What the report keeps of a store's import: counts, problems, a DLedger store's entries, a
    controller-mode store's epochs and what merging them cut."""
    return {"records": summary.records, "errors": len(summary.errors),
            "warnings": len(summary.problems) - len(summary.errors), "dledger": summary.dledger,
            "controller": summary.controller, "epochs": (summary.merged or {}).get("epochs")}


def broker_settings(scenario) -> dict[str, str]:
    """The scenario's broker settings the real brokers get beyond the harness's own: under 5.x rules
    the timer wheel (on by default, written out) and its roll window, so both wheels roll alike,
    and the recall of timer messages (off by default) when a producer recalls; with transactional
    producers the check settings (and under 5.x rules the op batch interval) the model plays."""
    semantics = semantics_for(scenario.broker.semantics)
    settings = {}
    if any(p.transaction_weights for p in scenario.producers):
        b = scenario.broker
        settings.update({
            "transactionCheckInterval": str(b.transaction_check_interval_ms
                                            or semantics.transaction_check_interval_ms_default()),
            "transactionTimeOut": str(b.transaction_timeout_ms),
            "transactionCheckMax": str(b.transaction_check_max)})
        if semantics.transaction_ops_batched():
            settings["transactionOpBatchInterval"] = str(b.transaction_op_batch_interval_ms)
    if not semantics.timer_wheel():
        return settings
    settings.update({"timerWheelEnable": "true", "timerRollWindowSlot": str(scenario.broker.timer_roll_window_slot)})
    if any(p.recall_fraction > 0 for p in scenario.producers):
        settings["recallMessageEnable"] = "true"
    return settings


def _model_rules_of_release(scenario, version: str):
    """The scenario with the model's rules for ``version`` (4.x: "4.9", 5.0-5.3: "5.x", 5.4+: "5.4").

    A scenario that asks for another major release's rules (``broker: {semantics: "5.x"}``
    against 4.9.4) is refused: the comparison would judge the model by the wrong broker. The
    default ("4.9") follows the release, so one workload file serves every release, and a 5.x
    workload runs with the rules of the 5.x release it is played against."""
    wanted = semantics_of_release(version)
    asked = scenario.broker.semantics
    if asked != ScenarioBroker.semantics and asked.split(".")[0] != wanted.split(".")[0]:
        raise BadInputError(f"the scenario asks for broker semantics {asked!r}, but RocketMQ {version} "
                            f"follows {wanted!r}", where=f"{scenario.source}: broker.semantics",
                            hint=f"run it with a {asked.split('.')[0]}.x release, or drop broker.semantics")
    return scenario.with_semantics(wanted)


def _lock_output(work: Path):
    """An exclusive lock beside ``work``: two runs into one directory would delete each other's files."""
    import fcntl

    handle = open(work.parent / f".{work.name}.lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise BadInputError("another conformance run is writing this directory", where=str(work),
                            hint="wait for it, or choose another --out") from None
    return handle


# After a broker comes back, its clients take a while to route to it again (the route refresh,
# the next rebalance, a local retry 5 s later): what happens then still follows from the outage.
OUTAGE_AFTERMATH_MS = 15_000
# Before a broker dies, what its clients committed in the last few seconds may die with it: a client
# sends its offsets every 5 s and the broker writes them to consumerOffset.json every 5 s.
OUTAGE_LEAD_MS = 10_000
RUN_END_MS = 2**62  # the end of an outage that lasts as long as the run


def _outage_windows(faults: list[dict]) -> list[tuple[int, int]]:
    """Wall-clock (from, to) ms of each broker outage, the offsets it may lose and its aftermath included.

    A broker killed and not started again (a DLedger group's master: the group elects another) is
    out for the rest of the run: a new master starts its schedule from the delay offsets it copied,
    which can deliver again a retry of a message sent long before."""
    kills = {f["broker"]: f["wall_ts_ms"] for f in faults if f["kind"] == "broker_kill"}
    restarted = {f["broker"] for f in faults if f["kind"] == "broker_restart"}
    out = [(at - OUTAGE_LEAD_MS, RUN_END_MS) for broker, at in kills.items() if broker not in restarted]
    for f in faults:
        if f["kind"] == "broker_restart" and f["broker"] in kills:
            end = f["wall_ts_ms"] + int(f.get("boot_s", 0) * 1000) + OUTAGE_AFTERMATH_MS
            out.append((kills[f["broker"]] - OUTAGE_LEAD_MS, end))
    return out


def _keep_logs(cluster: Cluster, work: Path) -> None:
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    for name, proc in cluster.procs.items():
        # 4.9.4 logs to the harness's one file; 5.x to its own files under logs/rocketmqlogs/, of
        # which the broker's, the POP service's and the store's say what a post-mortem needs.
        own = proc.home / "logs" / "rocketmqlogs"
        for src in (proc.log, proc.home / "logs" / "rocketmq.log",
                    *(own / f for f in ("broker.log", "pop.log", "store.log", "proxy.log"))):
            if src.exists():
                shutil.copy(src, logs / f"{name}-{src.name}")
    # The clients' own logs (the driver's and each side consumer's, under their homes' logs/; with
    # the broker's jars on the class path a 5.x client logs through the broker's logback files):
    # what a client dropped without a listener call (a pop past its invisible time, a dropped
    # queue) is written only there.
    clients = driver_home(work)
    for src in sorted(clients.glob("**/logs/**/*.log")):
        first = src.relative_to(clients).parts[0]  # a side consumer's home, or the driver's logs/
        shutil.copy(src, logs / f"{'driver' if first == 'logs' else first}-client-{src.name}")


def _lineage(runs: list[Path], spark, engine: str = "spark") -> None:
    from assets.lineage import run_lineage
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.spark import spark_session

    if engine == "duckdb":
        for run in runs:
            run_lineage_duckdb(run)
        return
    assert engine == "spark", engine
    if spark is not None:
        for run in runs:
            run_lineage(run, spark)
        return
    with spark_session(quiet=True) as session:
        for run in runs:
            run_lineage(run, session)


def _revives_lost(db: Path) -> list[dict]:
    """The revives the real brokers dropped (anomaly REVIVE_LOST): a disagreement with the
    clients that is the broker's, not the audit's."""
    from assets.warehouse import open_read_only

    con = open_read_only(db)
    try:
        return [{"run_id": r, "message_key": k, "group": g, "detail": d} for r, k, g, d in con.execute(
            """SELECT run_id, message_key, "group", detail FROM anomalies
               WHERE kind = 'REVIVE_LOST' ORDER BY ALL""").fetchall()]
    finally:
        con.close()


def _forks(db: Path, run_id: str) -> dict:
    """What the real run's forked chains read as in the audit (docs/lineage.md "forks"): the
    messages with copies, the deepest chain, the funnel's top attempt, and the DLQ's records
    against its rows (one per message and group)."""
    from assets.warehouse import open_read_only

    con = open_read_only(db)
    try:
        forked, copies, deepest = con.execute(
            "SELECT count(DISTINCT message_key) FILTER (WHERE forks > 0), coalesce(sum(forks), 0), "
            "coalesce(max(retries), 0) FROM message_lineage WHERE run_id = ?", [run_id]).fetchone()
        (top,) = con.execute("SELECT coalesce(max(attempt), 0) FROM retry_funnel WHERE run_id = ?", [run_id]).fetchone()
        rows, dlq_copies = con.execute("SELECT count(*), coalesce(sum(dlq_copies), 0) FROM dlq_messages "
                                       "WHERE run_id = ?", [run_id]).fetchone()
    finally:
        con.close()
    return {"messages_with_forks": forked, "fork_copies": int(copies), "deepest_chain_retries": deepest,
            "funnel_top_attempt": top, "dlq_rows": rows, "dlq_records": int(dlq_copies)}


def _warehouse(runs: list[Path], db: Path) -> dict:
    from assets.checks import run_checks_per_run
    from assets.warehouse import build_warehouse, open_read_only

    summary = build_warehouse(runs, db)
    con = open_read_only(summary.db_path)
    try:
        verdicts = run_checks_per_run(con, summary.run_ids)
    finally:
        con.close()
    out = {}
    for run_id, outcomes in verdicts.items():
        out[run_id] = {o.check.name: {"passed": o.passed, "verdict": o.verdict, "blocking": o.blocking, "violations": o.violations,
                                      "first": None if o.passed else o.metadata()["evidence"][0],
                                      # The message it names, for its trail (compare.check_trails).
                                      "first_message": None if o.passed else
                                      {k: o.examples[0].get(k) for k in ("message_key", "group")}}
                       for o in outcomes}
    return out
