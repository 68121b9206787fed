"""Consumer offset stores: the broker-backed one (clustering) and the local one (broadcasting).

RocketMQ 4.9.4 ``RemoteBrokerOffsetStore`` keeps offsets in memory and pushes them to the broker
every ``persistConsumerOffsetInterval`` (5 s, 10 s initial delay) and on shutdown; a crash loses
whatever was committed in memory since the last push, which is exactly the duplicate window the
audit measures. ``LocalFileOffsetStore`` keeps a broadcasting consumer's offsets in a file of its
own; here that file is a dict that survives the consumer's crash but not its memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# A message queue is (topic, queue_id); one broker in the model, so no broker name.
MessageQueue = tuple[str, int]

# ReadOffsetType of RocketMQ: where readOffset looks.
READ_FROM_MEMORY = "READ_FROM_MEMORY"
READ_FROM_STORE = "READ_FROM_STORE"
MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"

OFFSET_NONE = -1  # readOffset's "nothing known" (and the broker's "no committed offset")


class OffsetStore:
    """Offsets committed in memory, with increaseOnly updates (MixAll.compareAndIncreaseOnly)."""

    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set the memory offset of ``mq``; with ``increase_only`` it only ever goes up."""
        assert offset >= 0, f"negative offset {offset} for {mq}"
        current = self._table.get(mq)
        if current is None or not increase_only or offset > current:
            self._table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int:
        return self._table.get(mq, OFFSET_NONE)

    def read_offset(self, mq: MessageQueue, read_type: str) -> int:
        """RocketMQ readOffset: the memory value, the stored value, or memory then store."""
        if read_type in (READ_FROM_MEMORY, MEMORY_FIRST_THEN_STORE):
            value = self._table.get(mq)
            if value is not None:
                return value
            if read_type == READ_FROM_MEMORY:
                return OFFSET_NONE
        stored = self._read_stored(mq)
        if stored is not None and stored >= 0:
            # readOffset(READ_FROM_STORE) also caches the stored value in memory.
            self.update_offset(mq, stored, increase_only=False)
            return stored
        return OFFSET_NONE

    def _read_stored(self, mq: MessageQueue) -> int | None:
        """The persisted offset of ``mq`` (the broker's, or the local file's), None when unknown."""
        raise NotImplementedError

    def remove_offset(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)

    def queues(self) -> list[MessageQueue]:
        return sorted(self._table)

    def clear_memory(self) -> None:
        """Forget everything held in memory (a crash)."""
        self._table.clear()


class RemoteBrokerOffsetStore(OffsetStore):
    """CLUSTERING offsets: memory first, pushed to the broker by :meth:`persist_all`."""

    def __init__(self, broker, group: str) -> None:
        super().__init__()
        self.broker = broker
        self.group = group
        self.persists = 0  # broker updates sent, for tests and statistics

    def _read_stored(self, mq: MessageQueue) -> int | None:
        return self.broker.query_consumer_offset(self.group, mq[0], mq[1])

    def persist(self, mq: MessageQueue) -> None:
        """Push one queue's memory offset to the broker (persist on queue removal)."""
        value = self._table.get(mq)
        if value is None:
            return
        # A 4.9.4 client re-sends unchanged offsets every 5 s; when the broker already holds
        # exactly this value the write changes nothing, so the model skips it (and spares the
        # broker a consumerOffset.json rewrite). After a broker restart that lost the value,
        # the broker holds something else and the update goes out, as it would for real.
        if self.broker.query_consumer_offset(self.group, mq[0], mq[1]) == value:
            return
        self.broker.update_consumer_offset(self.group, mq[0], mq[1], value)
        self.persists += 1

    def persist_all(self, assigned: Iterable[MessageQueue]) -> None:
        """Push every assigned queue's offset (oneway UPDATE_CONSUMER_OFFSET) and drop the rest."""
        assigned = set(assigned)
        for mq in sorted(self._table):
            if mq in assigned:
                self.persist(mq)
        for mq in [mq for mq in self._table if mq not in assigned]:
            del self._table[mq]


class LocalOffsetStore(OffsetStore):
    """BROADCASTING offsets: each consumer persists its own copy (offsets.json in RocketMQ)."""

    def __init__(self, on_persist: Callable[[MessageQueue, int], None] | None = None) -> None:
        super().__init__()
        self._file: dict[MessageQueue, int] = {}
        self._on_persist = on_persist
        self.persists = 0

    def _read_stored(self, mq: MessageQueue) -> int | None:
        return self._file.get(mq)

    def persist(self, mq: MessageQueue) -> None:
        value = self._table.get(mq)
        if value is not None:
            self._file[mq] = value
            self.persists += 1
            if self._on_persist is not None:
                self._on_persist(mq, value)

    def persist_all(self, assigned: Iterable[MessageQueue]) -> None:
        for mq in sorted(set(assigned)):
            self.persist(mq)

    def persisted(self, mq: MessageQueue) -> int:
        return self._file.get(mq, OFFSET_NONE)
