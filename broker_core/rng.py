"""Seeded random streams: one per subsystem, all derived from the run's seed.

Adding a draw in one subsystem never reshuffles another, because each stream's seed is derived
from ``(run seed, stream name)`` alone. This is the only module allowed to import ``random``.
"""

from __future__ import annotations

import hashlib
import random


def derive_seed(seed: int, name: str) -> int:
    """A 64-bit seed for stream ``name`` of run ``seed``: stable across Python versions."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class Streams:
    """Hands out named, independent ``random.Random`` streams derived from one seed."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._streams: dict[str, random.Random] = {}

    def stream(self, name: str) -> random.Random:
        """The stream for ``name`` (created on first use; the same object afterwards)."""
        rng = self._streams.get(name)
        if rng is None:
            rng = random.Random(derive_seed(self.seed, name))
            self._streams[name] = rng
        return rng

    def fork(self, name: str) -> Streams:
        """A child family of streams (e.g. one per consumer) derived from this seed and ``name``."""
        return Streams(derive_seed(self.seed, name))
