"""What a check of a store finds: one :class:`Problem` per damaged place, for the model and the reader.

``MessageStore.check()`` / ``CommitLog.check()`` (a post-mortem of a store this model wrote) and
:class:`~broker_core.store.reader.StoreReader` (any RocketMQ store, read-only) report the same
kind of finding, so ``import-store``, the warehouse's ``store_problems`` table and the tests read
one shape.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """Something wrong in a store: which file (relative to the root), where, what kind, why.

    ``offset`` is a commit-log problem's physical offset (the file name plus the position); in
    any other file the reader gives the byte position, the model's consume-queue check the
    unit's queue offset.
    """

    file: str
    offset: int
    kind: str
    reason: str
    severity: str = ERROR

    def __str__(self) -> str:
        return f"{self.severity}: {self.file}@{self.offset}: {self.kind}: {self.reason}"
