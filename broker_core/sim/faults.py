"""Fault injection: the scenario's ``faults:`` list turned into events on the virtual clock.

Each fault is recorded in the ``faults`` table when it happens (and again when a window closes or
a crashed broker comes back), so the warehouse can line anomalies up with their cause.
``docs/faults.md`` says, for each kind, what RocketMQ does and what the model does.
"""

from __future__ import annotations

from broker_core.sim.scenario import FaultSpec, consumer_id

# A knob a component does not have yet reads as off.
KNOB_OFF_PROBABILITY = 0.0
TORN_FRACTION_DIVISOR = 2  # a torn append leaves this fraction (1/n) of the record on disk


def tear_unflushed_record(broker) -> str:
    """kill -9 while the first unflushed record was half written: crash, then put its first half
    back on disk where it was. Abnormal recovery must stop at the torn record and drop it."""
    from broker_core.codec import encode_record

    store = broker.store
    commit_log = store.commit_log
    flushed, end = commit_log.flushed_offset, commit_log.max_offset
    record = store.look_message_by_offset(flushed) if flushed < end else None
    broker.crash()
    if record is None:
        return "nothing unflushed: a plain crash"
    data = encode_record(record)
    torn = data[:max(len(data) // TORN_FRACTION_DIVISOR, 1)]
    size = commit_log.file_size
    path = commit_log.directory / f"{flushed - flushed % size:020d}"
    if not path.exists():
        return "the unflushed record's file never reached disk: a plain crash"
    with open(path, "r+b") as fh:
        fh.seek(flushed % size)
        fh.write(torn)
    return f"{len(torn)} of {len(data)} bytes at offset {flushed}"


class FaultInjector:
    """Schedules a scenario's faults against a :class:`~broker_core.sim.world.World`."""

    def __init__(self, world):
        self.world = world
        self.sim = world.sim
        self._open_windows = 0
        self._restarts_pending = 0
        self._bursts_pending = 0
        self.injected = 0

    # --- bookkeeping used by the world's terminal check ------------------------------------------

    def active(self) -> bool:
        """A window is open or a crashed broker/consumer is about to come back."""
        return self._open_windows > 0 or self._restarts_pending > 0

    def pending_bursts(self) -> bool:
        return self._bursts_pending > 0

    def schedule(self, faults: tuple[FaultSpec, ...]) -> None:
        start = self.world.start_ms
        for f in faults:
            if f.kind == "burst":
                self._bursts_pending += 1
            if f.kind in ("broker_crash", "broker_restart", "torn_write"):
                self._restarts_pending += 1
            if f.until_ms is not None:
                self._open_windows += 1
            self.sim.at(start + f.at_ms, self._fire, f)

    def record(self, kind: str, target: str, detail: str) -> None:
        self.world.recorder.emit("faults", {"ts": self.sim.now(), "kind": kind, "target": target,
                                            "detail": detail})

    # --- firing -------------------------------------------------------------------------------------

    def _fire(self, f: FaultSpec) -> None:
        self.injected += 1
        getattr(self, f"_{f.kind}")(f)

    def _broker_crash(self, f: FaultSpec) -> None:
        broker = self.world.broker
        if not broker.running:
            self.record(f.kind, broker.config.name, "skipped: broker already down")
            self._restarts_pending -= 1
            return
        broker.crash()
        self.record(f.kind, broker.config.name, f"kill -9; restart in {f.pause_ms} ms (abnormal recovery)")
        self.sim.after(f.pause_ms, self._restart, f.kind)

    def _torn_write(self, f: FaultSpec) -> None:
        broker = self.world.broker
        if not broker.running:
            self.record(f.kind, broker.config.name, "skipped: broker already down")
            self._restarts_pending -= 1
            return
        torn = tear_unflushed_record(broker)
        self.record(f.kind, broker.config.name,
                    f"kill -9 in the middle of an append ({torn}); restart in {f.pause_ms} ms")
        self.sim.after(f.pause_ms, self._restart, f.kind)

    def _broker_restart(self, f: FaultSpec) -> None:
        broker = self.world.broker
        if not broker.running:
            self.record(f.kind, broker.config.name, "skipped: broker already down")
            self._restarts_pending -= 1
            return
        broker.shutdown()
        self.record(f.kind, broker.config.name, f"clean shutdown; restart in {f.pause_ms} ms")
        self.sim.after(f.pause_ms, self._restart, f.kind)

    def _restart(self, cause: str) -> None:
        broker = self.world.broker
        broker.start()
        self._restarts_pending -= 1
        self.record("broker_start", broker.config.name, f"back after {cause}")

    def _group(self, f: FaultSpec):
        assert f.group is not None, f"fault {f.kind} needs a group (scenario line {f.line})"
        return self.world.groups[f.group]

    def _consumer_crash(self, f: FaultSpec) -> None:
        cid = consumer_id(f.group, f.consumer)
        self._group(f).crash_consumer(cid)
        self.record(f.kind, cid, "kill -9: in-flight messages lost with the process, "
                                 "offsets since the last persist redelivered")

    def _consumer_restart(self, f: FaultSpec) -> None:
        cid = consumer_id(f.group, f.consumer)
        self._group(f).restart_consumer(cid)
        self.record(f.kind, cid, "restarted")

    def _clock_jump(self, f: FaultSpec) -> None:
        self.sim.jump(f.delta_ms)
        self.record(f.kind, "clock", f"delta={f.delta_ms}")

    def _burst(self, f: FaultSpec) -> None:
        assert f.topic is not None
        self._bursts_pending -= 1
        self.world.add_burst(f.topic, f.messages, f.rate_per_s)
        self.record(f.kind, f.topic, f"messages={f.messages} rate={f.rate_per_s:g}/s")

    # --- windows ----------------------------------------------------------------------------------

    def _window(self, f: FaultSpec, targets: list[tuple[str, object, str]]) -> None:
        """Set ``attr`` of each target to the fault's probability until the window closes."""
        saved = []
        for name, obj, attr in targets:
            saved.append((name, obj, attr, getattr(obj, attr, KNOB_OFF_PROBABILITY)))
            setattr(obj, attr, f.probability)
            self.record(f.kind, name, f"probability={f.probability:g} until +{f.until_ms - f.at_ms} ms")
        self.sim.at(self.world.start_ms + f.until_ms, self._close, f, saved)

    def _close(self, f: FaultSpec, saved: list[tuple[str, object, str, float]]) -> None:
        # Overlapping windows on one knob: the value before this window comes back.
        for name, obj, attr, before in saved:
            setattr(obj, attr, before)
            self.record(f"{f.kind}_end", name, "window closed")
        self._open_windows -= 1

    def _groups_of(self, f: FaultSpec):
        if f.group is not None:
            return [(f.group, self.world.groups[f.group])]
        return sorted(self.world.groups.items())

    def _send_back_failure(self, f: FaultSpec) -> None:
        self._window(f, [(name, g, "send_back_failure_probability") for name, g in self._groups_of(f)])

    def _put_failure(self, f: FaultSpec) -> None:
        broker = self.world.broker
        self._window(f, [(broker.config.name, broker, "put_failure_probability")])

    def _consumer_hang(self, f: FaultSpec) -> None:
        self._window(f, [(name, g.behavior, "hang_probability") for name, g in self._groups_of(f)])
