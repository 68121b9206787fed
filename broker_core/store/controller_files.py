"""A 5.x controller-mode broker's own files beside its ordinary store: the epoch file and its identity.

A broker in controller mode (``enableControllerMode``, RIP-44) keeps an ordinary commit log. Two
small files say which master wrote which part of it (read from RocketMQ 5.3.3 and confirmed on the
stores of a real master and slave, docs/rocketmq-5x.md "Controller mode"):

* ``<root>/epochFileCheckpoint`` (and ``.bak``, the content before the last write;
  ``MixAll.string2File``): ``CheckpointFile`` text, line 1 the number of entries, line 2 the CRC32
  (``UtilAll.crc32``: the low 31 bits) of the entry lines, each with its line end; 0 means not
  checked. Then one ``<epoch>-<startOffset>`` line per master epoch, in order
  (``EpochFileCache.EpochEntrySerializer``): the controller raised the epoch at each election, and
  the master elected wrote from ``startOffset`` on. An entry ends where the next starts; the last
  at the log's end. A master appends its epoch when it takes over (``AutoSwitchHAService.
  changeToMaster``: its own log end); a slave copies the entries from its master's transfers.
  RocketMQ reads the file and, when it is empty or does not check, its ``.bak`` (``CheckpointFile.read``).
* ``<root>/brokerIdentity``: ``<cluster>#<brokerName>#<brokerId>``, the id the controller gave the
  broker (``BrokerMetadata.encodeToStr``); ``brokerIdentity-temp`` holds one being applied for.

Standard library only, read-only. Damage is a :class:`Problem`, never an exception.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.store.problem import ERROR, WARNING, Problem

EPOCH_FILE = "epochFileCheckpoint"
EPOCH_BACKUP_SUFFIX = ".bak"
IDENTITY_FILE = "brokerIdentity"
IDENTITY_SEPARATOR = "#"
# CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE: a file whose CRC line is 0 is not checked.
CRC_NOT_CHECKED = 0
CRC_MASK = 0x7FFFFFFF  # UtilAll.crc32 keeps the low 31 bits
KIND_EPOCH_FILE_BAD = "epoch-file-bad"
KIND_EPOCH_ORDER = "epoch-order"
KIND_EPOCH_PAST_END = "epoch-past-log-end"
KIND_IDENTITY_BAD = "broker-identity-bad"


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True)
class BrokerIdentity:
    cluster: str
    broker: str
    broker_id: int


@dataclass
class ControllerFiles:
    """What a controller-mode store's own files say: its epochs (file order) and its identity."""

    epochs: list[EpochEntry] = field(default_factory=list)
    identity: BrokerIdentity | None = None
    problems: list[Problem] = field(default_factory=list)
    epoch_file: str | None = None  # the file the epochs were read from (EPOCH_FILE or its .bak)

    def ranges(self, log_end: int) -> list[tuple[EpochEntry, int]]:
        """Each epoch with the offset it ends at: the next epoch's start, the last one's ``log_end``."""
        ends = [e.start_offset for e in self.epochs[1:]] + [max(log_end, self.epochs[-1].start_offset)
                                                             if self.epochs else log_end]
        return list(zip(self.epochs, ends, strict=True))

    def to_json(self) -> dict:
        return {"epoch_file": self.epoch_file,
                "epochs": [{"epoch": e.epoch, "start_offset": e.start_offset} for e in self.epochs],
                "identity": None if self.identity is None else {
                    "cluster": self.identity.cluster, "broker": self.identity.broker,
                    "broker_id": self.identity.broker_id}}


def has_controller_files(root: Path) -> bool:
    root = Path(root)
    return any((root / name).is_file() for name in (EPOCH_FILE, EPOCH_FILE + EPOCH_BACKUP_SUFFIX, IDENTITY_FILE))


def read_controller_files(root: Path, log_end: int | None = None) -> ControllerFiles | None:
    """The epochs and identity of the store at ``root``; None when it has neither file (not controller mode).

    ``log_end``, when given, is where the store's valid log ends: an epoch that starts past it names
    offsets the log does not hold (``epoch-past-log-end``)."""
    root = Path(root)
    if not has_controller_files(root):
        return None
    found = ControllerFiles()
    _read_epochs(root, found)
    _read_identity(root, found)
    if log_end is not None:
        for e in found.epochs:
            if e.start_offset > log_end:
                found.problems.append(Problem(
                    found.epoch_file or EPOCH_FILE, e.start_offset, KIND_EPOCH_PAST_END,
                    f"epoch {e.epoch} starts at offset {e.start_offset}, past the log's end {log_end}: the "
                    "epoch file and the commit log are not of one store", WARNING))
    return found


def parse_epoch_text(text: str) -> list[EpochEntry]:
    """The entries of an epoch file's text, checked as ``CheckpointFile.read`` checks them; raises
    ValueError with the reason when RocketMQ would refuse the file."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError("fewer than two lines (the entry count and the CRC)")
    try:
        expected, crc = int(lines[0]), int(lines[1])
    except ValueError:
        raise ValueError(f"the first two lines are not numbers: {lines[0]!r}, {lines[1]!r}") from None
    entries = []
    for line in lines[2:]:
        parts = line.split("-")
        if len(parts) == 2 and parts[0].strip().lstrip("+").isdigit() and parts[1].strip().isdigit():
            entries.append(EpochEntry(int(parts[0]), int(parts[1])))
    if len(entries) != expected:
        raise ValueError(f"it says {expected} entries and holds {len(entries)}")
    body = "".join(f"{line}\n" for line in lines[2:]).encode()
    actual = zlib.crc32(body) & CRC_MASK
    if crc != CRC_NOT_CHECKED and crc != actual:
        raise ValueError(f"its CRC line says {crc}, the entries' CRC32 is {actual}")
    return entries


def _read_epochs(root: Path, found: ControllerFiles) -> None:
    """The main file, else (empty, absent or refused) the .bak, as RocketMQ reads them."""
    refused = []
    for name in (EPOCH_FILE, EPOCH_FILE + EPOCH_BACKUP_SUFFIX):
        path = root / name
        if not path.is_file():
            continue
        try:
            entries = parse_epoch_text(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            refused.append((name, str(e)))
            continue
        if entries:
            found.epochs, found.epoch_file = entries, name
            break
    for name, reason in refused:
        severity = WARNING if found.epoch_file else ERROR
        then = f"the epochs were read from {found.epoch_file}, as RocketMQ does" if found.epoch_file else \
            "no epoch is known: offsets cannot be attributed to masters"
        found.problems.append(Problem(name, 0, KIND_EPOCH_FILE_BAD, f"RocketMQ would refuse it: {reason}; {then}",
                                      severity))
    for before, after in zip(found.epochs, found.epochs[1:], strict=False):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            found.problems.append(Problem(
                found.epoch_file, after.start_offset, KIND_EPOCH_ORDER,
                f"epoch {after.epoch} at offset {after.start_offset} follows epoch {before.epoch} at offset "
                f"{before.start_offset}: epochs and their start offsets only grow (EpochFileCache.appendEntry)"))


def _read_identity(root: Path, found: ControllerFiles) -> None:
    path = root / IDENTITY_FILE
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    parts = text.split(IDENTITY_SEPARATOR)
    if len(parts) == 3 and parts[0] and parts[1] and parts[2].lstrip("-").isdigit():
        found.identity = BrokerIdentity(parts[0], parts[1], int(parts[2]))
        return
    found.problems.append(Problem(IDENTITY_FILE, 0, KIND_IDENTITY_BAD,
                                  f"{text[:80]!r} is not <cluster>#<brokerName>#<brokerId> (BrokerMetadata)"))
