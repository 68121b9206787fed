"""Ports for the servers tests start: one the kernel says is free now, so that tests running at once
(make test's worker processes) and a developer's own servers never collide on a fixed number."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` right now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
