"""What a 5.x POP push consumer did with popped records without calling its listener, read from the
clients' own logs (a conformance run keeps them in ``DIR/logs/*-client-*.log``).

The driver logs every listener call; three things a POP client does with a popped record never
reach a listener, and its log is the only place they are written (read in the 5.3.3 client):

* ``ConsumeMessagePopConcurrentlyService.ConsumeRequest.run``: the request's process queue was
  dropped (a rebalance replaced it, as after a broker's return): "the message queue not be able to
  consume, because it's dropped(pop). group=G MessageQueue [topic=T, brokerName=B, queueId=-1]".
  No listener, no ack, no change of invisible time: the broker revives the record at the next
  count. The line names the group and broker, not the record: it is matched to a popped record by
  time (:func:`conformance.compare.unheard_pops`).
* the same method, a request that waited past its invisible time: "the pop message time out so
  abort consume. popTime=P invisibleTime=I, group=G MessageQueue [...]": the pop's own time, which
  its checkpoint in the store carries too.
* ``DefaultMQPushConsumerImpl.processPopResult``: a popped record past the group's maximum is acked
  without a listener: "Reconsume times has reached N, so ack msg=MessageExt [brokerName=B, ...,
  msgId=M, ...]": the record's own msgId.

RocketMQ's logback patterns (the broker's, which a client with the broker's jars on its class path
uses, and the client's own ``rmq.client.logback.xml``) stamp lines at GMT+8 to the second or the
millisecond, whatever the host's zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

__all__ = ["PopClientEvidence", "read_pop_evidence", "LOG_ZONE"]

LOG_ZONE = timezone(timedelta(hours=8))
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{3}))?\s")
_QUEUE = r"group=(?P<group>[^\s]+) MessageQueue \[topic=[^,]*, brokerName=(?P<broker>[^,]+),"
_DROPPED = re.compile(r"because it's dropped\(pop\)\. " + _QUEUE)
_TIMED_OUT = re.compile(r"the pop message time out so abort consume\. popTime=(?P<pop>\d+) invisibleTime=\d+, "
                        + _QUEUE)
_ACKED_PAST_MAX = re.compile(r"Reconsume times has reached \d+, so ack msg=MessageExt \[.*?\bmsgId=(?P<msg>[0-9A-Fa-f]+),")


@dataclass
class PopClientEvidence:
    """``dropped``: (group, broker) -> the times (epoch ms, as precise as the log's stamp: ``stamp_ms``
    wide) its process queue was found dropped, one per consume request; ``timed_out``: (group,
    broker, pop time ms) of requests aborted past their invisible time; ``acked_past_max``: msgIds of
    records acked without a listener, past the maximum."""
    dropped: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)
    timed_out: set[tuple[str, str, int]] = field(default_factory=set)
    acked_past_max: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.dropped or self.timed_out or self.acked_past_max)


def _stamp(line: str) -> tuple[int, int] | None:
    """(epoch ms, the stamp's width in ms) of a log line's time, or None."""
    m = _STAMP.match(line)
    if not m:
        return None
    when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=LOG_ZONE)
    ms = int(when.timestamp() * 1000)
    return (ms + int(m.group(2)), 1) if m.group(2) else (ms, 1000)


def read_pop_evidence(logs: Path) -> PopClientEvidence:
    """The POP clients' unheard records in every ``*-client-*.log`` under ``logs`` (none when the
    folder or its files are missing)."""
    out = PopClientEvidence()
    if not logs.is_dir():
        return out
    for path in sorted(logs.glob("*-client-*.log")):
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if "dropped(pop)" in line:
                    m, stamp = _DROPPED.search(line), _stamp(line)
                    if m and stamp:
                        out.dropped.setdefault((m["group"], m["broker"]), []).append(stamp)
                elif "pop message time out" in line:
                    m = _TIMED_OUT.search(line)
                    if m:
                        out.timed_out.add((m["group"], m["broker"], int(m["pop"])))
                elif "Reconsume times has reached" in line:
                    m = _ACKED_PAST_MAX.search(line)
                    if m:
                        out.acked_past_max.add(m["msg"].upper())
    for stamps in out.dropped.values():
        stamps.sort()
    return out
