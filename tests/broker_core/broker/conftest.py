"""Brokers on a virtual clock for the broker tests."""

from __future__ import annotations

import pytest

from broker_core.broker.broker import Broker, BrokerConfig
from broker_core.clock import Simulator
from broker_core.rng import Streams

# 2026-11-22 00:00:00 UTC: an epoch-ms start on a whole second, like the fixture's era.
SIM_START_MS = 1_795_305_600_000
SMALL_COMMITLOG_BYTES = 64 * 1024
SMALL_CQ_UNITS = 1000


@pytest.fixture
def make_broker(tmp_path, seed):
    """Build a started broker under tmp_path; returns (broker, sim, rows) with recorded rows."""

    def make(name: str = "b", *, start_ms: int = SIM_START_MS, **overrides):
        sim = Simulator(start_ms)
        rows: list[tuple[str, dict]] = []

        class Recorder:
            def emit(self, table: str, row: dict) -> None:
                rows.append((table, row))

        cfg = BrokerConfig(commitlog_file_size_bytes=SMALL_COMMITLOG_BYTES,
                           cq_units_per_file=SMALL_CQ_UNITS)
        for key, value in overrides.items():
            setattr(cfg, key, value)
        broker = Broker(tmp_path / name, cfg, sim, Streams(seed), Recorder())
        broker.start()
        return broker, sim, rows

    return make
