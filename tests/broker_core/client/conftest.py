"""A small real broker on a virtual clock, with a recorder that keeps rows in memory."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from broker_core.broker.broker import Broker, BrokerConfig
from broker_core.client.consumer_group import Behavior, ConsumerGroup, ConsumerSettings
from broker_core.client.producer import Producer
from broker_core.clock import Simulator
from broker_core.message import UniqKeyGenerator
from broker_core.rng import Streams

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
COMMITLOG_FILE_SIZE_BYTES = 1024 * 1024  # small files keep the tests quick


class MemoryRecorder:
    """Keeps every emitted row per table (the world's recorder writes Parquet instead)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict]] = defaultdict(list)

    def emit(self, table: str, row: dict) -> None:
        self.rows[table].append(dict(row))

    def attempts(self, **match) -> list[dict]:
        return [r for r in self.rows["consume_attempts"]
                if all(r.get(k) == v for k, v in match.items())]


@dataclass
class Rig:
    """One broker, its clock, seeded streams and an in-memory recorder."""

    sim: Simulator
    broker: Broker
    streams: Streams
    recorder: MemoryRecorder
    producers: list = field(default_factory=list)

    def group(self, name: str = "G", subscribe=("T",), behavior: Behavior | None = None,
              consumers: int = 1, **settings) -> ConsumerGroup:
        g = ConsumerGroup(self.sim, self.broker,
                          ConsumerSettings(group=name, subscribe=list(subscribe), **settings),
                          behavior or Behavior(), self.streams.fork(f"group.{name}"),
                          self.recorder)
        for i in range(consumers):
            g.add_consumer(f"{name}-c{i}")
        return g

    def producer(self, send_mode: str = "sync", **kw) -> Producer:
        n = len(self.producers) + 1
        p = Producer(self.sim, self.broker, self.streams.fork(f"producer.{n}"),
                     producer_group="P", born_host=f"10.0.1.{n}:{50000 + n}",
                     uniq_keys=UniqKeyGenerator(f"10.0.1.{n}", 4000 + n, 12345),
                     recorder=self.recorder, send_mode=send_mode, **kw)
        self.producers.append(p)
        return p

    def run_for(self, ms: int) -> None:
        self.sim.run(until_ms=self.sim.now() + ms)

    def records(self, topic: str, queue_id: int = 0) -> list:
        """Every record stored in (topic, queue_id), oldest first."""
        out, offset = [], 0
        while True:
            result = self.broker.pull_message("__test_reader", topic, queue_id, offset, 32)
            if result.status != "FOUND":
                return out
            out.extend(result.records)
            offset = result.next_begin_offset


@pytest.fixture
def semantics() -> str:
    """The broker's (and its clients') rules; a test overrides it with indirect parametrization."""
    return "4.9"


@pytest.fixture
def rig(tmp_path, seed, semantics) -> Rig:
    sim = Simulator(START_MS)
    streams = Streams(seed)
    recorder = MemoryRecorder()
    broker = Broker(tmp_path / "broker", BrokerConfig(commitlog_file_size_bytes=COMMITLOG_FILE_SIZE_BYTES,
                                                      semantics=semantics),
                    sim, streams.fork("broker"), recorder)
    broker.start()
    broker.create_topic("T", 4)
    yield Rig(sim, broker, streams, recorder)
    if broker.running:
        broker.shutdown()
