"""One simulated run, scenario file in, complete run directory out (or nothing at all).

``RUN_DIR/store/`` is the broker's root in RocketMQ's own layout; ``RUN_DIR/parquet/<table>/``
holds the data contract's tables; ``RUN_DIR/run.json`` says how the run was made and how it ended
(``broker_core.sim.invariants`` reads it). Everything is written into a temporary sibling directory that replaces
RUN_DIR only when the run finished, so a run directory is complete or absent.

The commit-log table is read back from the store files after shutdown with the same reader
``import-store`` uses, so a simulated run and an imported store share one code path.

Wall time is measured here, at the edge, and lands only in ``runs.wall_seconds`` and the summary;
every other byte of a run depends on (scenario, seed, code version) alone.
"""

from __future__ import annotations

import gc
import json
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from broker_core.broker.proxy import FORWARD_MAX_RECONSUME_TIMES, max_attempts
from broker_core.client.pop_consumer import CLIENT_GRPC_FIFO
from broker_core.export.counts import run_counts
from broker_core.export.parquet import DEFAULT_PART, TableWriter, atomic_dir, write_rows
from broker_core.export.schema import RUN_SOURCE_SIMULATION
from broker_core.sim.invariants import MANIFEST_NAME
from broker_core.sim.recorder import Recorder
from broker_core.sim.scenario import POP_MODE, Scenario, load_scenario
from broker_core.sim.world import World

# While a run goes, the garbage collector's full pass runs only after this many passes over the
# middle generation instead of CPython's 10. A run makes almost no reference cycles (an event lets
# go of its callback once run: EventHandle.fire), yet each full pass walks every live object, and
# the default schedule made 35 of them in the default scenario: 4.4 s of a 27 s run. The young
# passes, which free what few cycles there are, run as before.
FULL_GC_AFTER_MIDDLE_PASSES = 1000
CONSUMED_OUTCOMES = ("ACKED", "EXPIRED")  # a listener returned success on these deliveries
GIVEN_UP_OUTCOMES = ("POP_ACKED_AT_MAX",)  # a POP client acked a message it failed at its maximum


@dataclass
class RunSummary:
    """What a run produced, for the CLI's summary line and its --json output."""

    run_id: str
    seed: int
    run_dir: str
    sim_start_ms: int
    sim_end_ms: int
    end_reason: str  # "terminal" (every message settled) or "horizon"
    produced: int  # sends acknowledged SEND_OK
    send_failed: int
    consumed: int  # (clustering group, message) pairs consumed successfully
    retried: int  # records stored in %RETRY% topics
    dlq: int  # records stored in %DLQ% topics
    in_flight: int  # (clustering group, message) pairs neither consumed nor dead-lettered
    records_written: int
    wall_seconds: float
    # CPU time of this process during the run: on a shared machine the honest measure of cost.
    cpu_seconds: float = 0.0
    tables: dict[str, int] = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.records_written / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def records_per_cpu_second(self) -> float:
        return self.records_written / self.cpu_seconds if self.cpu_seconds > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["records_per_second"] = round(self.records_per_second, 1)
        out["records_per_cpu_second"] = round(self.records_per_cpu_second, 1)
        return out


def reproduce_command(scenario_path: str | Path, out_dir: str | Path, seed: int,
                      messages: int | None = None) -> str:
    """The one command that reproduces a run (``messages``: the run was scaled to that many)."""
    scaled = f" --messages {messages}" if messages is not None else ""
    return (f"retry-audit simulate {shlex.quote(str(scenario_path))} "
            f"--out {shlex.quote(str(out_dir))} --seed {seed}{scaled}")


def simulate(scenario_path: str | Path, out_dir: str | Path, *, seed: int | None = None,
             progress: Callable[[int, int], None] | None = None,
             scenario: Scenario | None = None) -> RunSummary:
    """Run a scenario into ``out_dir`` (replaced atomically) and return its summary.

    ``seed`` overrides the scenario's seed; ``progress(sim_ms, records)`` is called as simulated
    time passes; ``scenario`` may be given already loaded (``scenario_path`` then only names it).
    """
    if scenario is None:
        scenario = load_scenario(scenario_path)
    if seed is not None:
        scenario = scenario.with_seed(seed)
    wall_start = time.perf_counter()
    cpu_start = time.process_time()
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp, _rare_full_collections():
        store_dir = tmp / "store"
        parquet_dir = tmp / "parquet"
        recorder = Recorder(scenario.name, parquet_dir, broker=scenario.broker.name)
        world = World(scenario, store_dir, recorder, progress=progress)
        world.run()
        tables = recorder.close()
        tables.update(_write_store_tables(store_dir, parquet_dir, scenario))
        manifest = _manifest(scenario, world, scenario_path, out_dir)
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        counts = _count(tmp, scenario)
        records = sum(tables.values()) + 1  # + the runs row itself
        wall = time.perf_counter() - wall_start
        from broker_core.export.commitlog_rows import msg_id_host

        write_rows(parquet_dir, "runs", [{
            "run_id": scenario.name, "scenario": scenario.name, "seed": scenario.seed,
            "sim_start_ts": world.start_ms, "sim_end_ts": world.sim.now(), "wall_seconds": wall,
            "messages_produced": counts["produced"], "records_written": records,
            "version": _version(), "source": RUN_SOURCE_SIMULATION, "broker": scenario.broker.name,
            "msg_id_hosts": [msg_id_host(scenario.broker.store_host)],
            "delay_levels_ms": list(scenario.broker.delay_levels_ms) or None}])
        tables["runs"] = 1
    return RunSummary(run_id=scenario.name, seed=scenario.seed, run_dir=str(out_dir),
                      sim_start_ms=world.start_ms, sim_end_ms=world.sim.now(),
                      end_reason=world.end_reason, records_written=records, wall_seconds=wall,
                      cpu_seconds=time.process_time() - cpu_start,
                      tables=dict(sorted(tables.items())), **counts)


@contextmanager
def _rare_full_collections() -> Iterator[None]:
    """Run the body with FULL_GC_AFTER_MIDDLE_PASSES; the thresholds before are restored after."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], FULL_GC_AFTER_MIDDLE_PASSES)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _write_store_tables(store_dir: Path, parquet_dir: Path, scenario: Scenario) -> dict[str, int]:
    """commitlog, delay_offsets, store_problems and the 5.x POP tables, read from the store as
    import-store reads them, and the (empty) inner_messages."""
    from broker_core.export.store_import import commitlog_values, write_schedule_units
    from broker_core.store.reader import StoreReader

    run_id = scenario.name
    broker = scenario.broker.name
    reader = StoreReader(store_dir)
    writer = TableWriter(parquet_dir, "commitlog")
    # commitlog_values is import-store's own row builder: one code path for both sources.
    for values in commitlog_values(reader, run_id, broker):
        writer.write_values(values)
    out = {"commitlog": writer.close()}
    out["delay_offsets"] = write_rows(parquet_dir, "delay_offsets", [
        {"run_id": run_id, "broker": broker, "delay_level": level, "offset": offset}
        for level, offset in sorted(reader.delay_offsets().items())])
    out["schedule_units"] = write_schedule_units(reader, parquet_dir, DEFAULT_PART, run_id, broker)
    pop_problems = []
    if any(g.mode == POP_MODE for g in scenario.groups):
        # A POP group's checkpoints and acks and the owner of every retry topic, decoded from the
        # store as import-store decodes them.
        from broker_core.export.pop_import import commitlog_topics, write_pop_tables

        out["pop_evidence"], out["retry_topics"], pop_problems = write_pop_tables(
            reader, parquet_dir, DEFAULT_PART, run_id, broker, commitlog_topics(parquet_dir))
    else:
        # Without POP groups the model reads retry topics by their names: both tables are empty.
        out["pop_evidence"] = write_rows(parquet_dir, "pop_evidence", [])
        out["retry_topics"] = write_rows(parquet_dir, "retry_topics", [])
    # The model stores a batch send as one record per message (putMessages), never as a 5.x
    # inner batch: nothing to unwrap.
    out["inner_messages"] = write_rows(parquet_dir, "inner_messages", [])
    # The model's broker keeps a plain commit log, never a DLedger one: no entries.
    out["dledger_entries"] = write_rows(parquet_dir, "dledger_entries", [])
    # ... nor controller-mode epochs.
    out["replica_epochs"] = write_rows(parquet_dir, "replica_epochs", [])
    out["failover_cut"] = write_rows(parquet_dir, "failover_cut", [])
    # The model's broker has no multi-dispatch (LMQ): no dispatch positions (docs/decisions.md).
    out["lmq_dispatches"] = write_rows(parquet_dir, "lmq_dispatches", [])
    # Transaction op records, their bodies read from the store as import-store reads them.
    from broker_core.export.transaction_ops import write_transaction_ops

    out["transaction_ops"], op_problems = write_transaction_ops(reader, parquet_dir, DEFAULT_PART, run_id, broker)
    # The model's clients write no message trace: read as an import reads it, the table is empty.
    from broker_core.export.client_trace import write_client_trace

    out["client_trace"], trace_problems = write_client_trace(reader, parquet_dir, DEFAULT_PART, run_id, broker)
    op_problems += trace_problems
    # The scan above filled reader.problems (a torn tail after a crash shows up there).
    out["store_problems"] = write_rows(parquet_dir, "store_problems", [
        {"run_id": run_id, "broker": broker, "file_name": p.file, "offset": p.offset, "kind": p.kind,
         "detail": f"{p.severity}: {p.reason}"} for p in reader.problems + pop_problems + op_problems])
    return out


def _manifest(scenario: Scenario, world: World, scenario_path, out_dir) -> dict:
    return {
        "run_id": scenario.name,
        "scenario": str(scenario_path),
        "seed": scenario.seed,
        "horizon_ms": scenario.horizon_ms,
        "sim_start_ms": world.start_ms,
        "sim_end_ms": world.sim.now(),
        "end_reason": world.end_reason,
        "broker": scenario.broker.name,
        "flush": scenario.broker.flush,
        "semantics": scenario.broker.semantics,
        "transaction_check_max": scenario.broker.transaction_check_max,
        "delay_levels_ms": list(scenario.broker.delay_levels_ms),
        "groups": [_manifest_group(g) for g in scenario.groups],
        "fault_kinds": sorted({f.kind for f in scenario.faults}),
        "reproduce": reproduce_command(scenario_path, out_dir, scenario.seed, scenario.scaled_messages),
    }


def _manifest_group(g) -> dict:
    """A group as the checks read it. A gRPC group has no client maximum of its own: the proxy
    dead-letters a record popped at reconsume times retryMaxTimes + 1 (maxAttempts), so that is
    the maximum the manifest records for it, beside the client and the configured retryMaxTimes.
    A FIFO one counts its attempts itself and has the proxy forward the message with
    maxReconsumeTimes 0: its DLQ record shows no reconsume, and 0 is its maximum."""
    doc = {"name": g.name, "subscribe": list(g.subscribe), "model": g.model, "mode": g.mode,
           "consumers": g.consumers, "max_reconsume_times": g.max_reconsume_times}
    if g.client != "remoting":
        doc.update(client=g.client, retry_max_times=g.retry_max_times,
                   max_reconsume_times=FORWARD_MAX_RECONSUME_TIMES if g.client == CLIENT_GRPC_FIFO
                   else max_attempts(g.retry_max_times))
    return doc


def _count(run_dir: Path, scenario: Scenario) -> dict[str, int]:
    """produced / consumed / retried / DLQ / in-flight, from the tables just written (streamed)."""
    subscriptions: dict[str, list[str]] = {}
    for g in scenario.groups:
        if g.model == "clustering":
            subscriptions.setdefault(g.name, []).extend(g.subscribe)
    return run_counts(run_dir, subscriptions, CONSUMED_OUTCOMES, given_up_outcomes=GIVEN_UP_OUTCOMES)


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("retry-audit")
    except Exception:  # noqa: BLE001 - running from a source tree without an install
        return "0+unknown"
