"""The body of a transaction op record: which half records were decided (docs/transactions.md).

A broker that commits or rolls back a transactional message writes an op record to
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (tag ``d``, the half's queue id) whose body names the decided
record by its queue offset in ``RMQ_SYS_TRANS_HALF_TOPIC``, in decimal. 4.9.4 writes one offset
per record (``"17"``); 5.x batches them per queue, each followed by a comma (``"0,1,6,"``,
``TransactionalOpBatchService``, RIP-50). The broker reads both forms the same way (5.3.3
``fillOpRemoveMap`` splits on the comma; 4.9.4 parses the whole body), and so does this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OP_TAG_REMOVE = "d"  # TransactionalMessageUtil.REMOVETAG / REMOVE_TAG
OP_OFFSET_SEPARATOR = ","  # TransactionalMessageUtil.OFFSET_SEPARATOR (5.x)
# An op body names at most this many offsets: 5.x cuts a batch once it passes
# transactionOpMsgMaxSize (4096) bytes, so a longer body is not a broker's (reading stops there).
OP_BODY_OFFSETS_MAX = 4096
_LONG = re.compile(r"-?[0-9]{1,18}")  # what Long.parseLong reads, within a long's digits


@dataclass(frozen=True)
class OpBody:
    """The half queue offsets an op body names, and the pieces that are not offsets."""

    offsets: tuple[int, ...]
    bad_pieces: tuple[str, ...] = ()


def encode_op_body(offsets: list[int], *, batched: bool) -> bytes:
    """An op record's body: ``"12"`` (4.9.4, one offset) or ``"12,13,"`` (5.x, a batch)."""
    assert offsets, "an op record names at least one half offset"
    assert batched or len(offsets) == 1, f"4.9.4 writes one offset per op record, not {offsets}"
    assert all(o >= 0 for o in offsets), f"negative half queue offset in {offsets}"
    if not batched:
        return str(offsets[0]).encode()
    return "".join(f"{o}{OP_OFFSET_SEPARATOR}" for o in offsets).encode()


def decode_op_body(body: bytes) -> OpBody:
    """The offsets an op body names, in order, as the broker's check reads them.

    Java's ``String.split`` drops trailing empty pieces, so ``"12,13,"`` is two offsets; a piece
    that is not a decimal long (the broker's ``getLong`` logs it and reads -1, which names no
    record) is returned in ``bad_pieces``. Bytes that are not UTF-8 are one bad piece.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return OpBody((), (body[:40].hex(),))
    pieces = text.split(OP_OFFSET_SEPARATOR)
    while pieces and pieces[-1] == "":
        pieces.pop()
    offsets, bad = [], []
    for piece in pieces[:OP_BODY_OFFSETS_MAX]:
        if _LONG.fullmatch(piece):
            offsets.append(int(piece))
        else:
            bad.append(piece[:40])
    if len(pieces) > OP_BODY_OFFSETS_MAX:
        bad.append(f"... {len(pieces) - OP_BODY_OFFSETS_MAX} more pieces")
    return OpBody(tuple(offsets), tuple(bad))
