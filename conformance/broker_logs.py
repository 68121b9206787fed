"""What a controller-mode broker's own log says of a failover's cut, read from the logs a conformance
run keeps (``DIR/logs/<node>-store.log``: the store's log, where 5.3.3 writes its HA client's lines).

A master killed with records its slave did not have loses them when it is started again: it rejoins
as a slave, compares its epochs with the new master's and truncates its log to their consistent
point (5.3.3 ``AutoSwitchHAClient.doTruncate``), so a store taken after that holds no trace of the
cut (docs/decisions.md, "Controller-mode stores"). Its log does: ``local epoch entries is
[EpochEntry{epoch=1, startOffset=0, endOffset=E}]`` then ``truncateOffset is T``; with E > T, the
bytes [T, E) of its log were cut.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["cut_bytes_by_broker", "rejoin_cuts"]

_LOCAL_EPOCHS = re.compile(r"local epoch entries is \[(.*)\]")
_END_OFFSET = re.compile(r"endOffset=(-?\d+)")
_TRUNCATE = re.compile(r"truncateOffset is (-?\d+)")
# A node of a replicated broker is named <broker>-n<index> (conformance.cluster.dledger_node_name).
_NODE_SUFFIX = re.compile(r"-n\d+$")


def rejoin_cuts(logs: Path) -> list[tuple[str, int, int]]:
    """(node, from, to) of each log tail a rejoining broker truncated, in its brokers' logs under
    ``logs`` (none when there are none)."""
    out = []
    for path in sorted(logs.glob("*-store.log")) if logs.is_dir() else ():
        local_end = None
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                epochs = _LOCAL_EPOCHS.search(line)
                if epochs:
                    ends = _END_OFFSET.findall(epochs[1])
                    local_end = int(ends[-1]) if ends else None
                    continue
                truncate = _TRUNCATE.search(line)
                if truncate and local_end is not None:
                    if local_end > int(truncate[1]) >= 0:
                        out.append((path.name.removesuffix("-store.log"), int(truncate[1]), local_end))
                    local_end = None
    return out


def cut_bytes_by_broker(cuts: list[tuple[str, int, int]]) -> dict[str, int]:
    """The bytes the rejoining nodes of each broker cut from their logs (``rejoin_cuts``), by broker
    name: the most records of that broker no store holds can fill."""
    out: dict[str, int] = {}
    for node, lo, hi in cuts:
        broker = _NODE_SUFFIX.sub("", node)
        out[broker] = out.get(broker, 0) + hi - lo
    return out
