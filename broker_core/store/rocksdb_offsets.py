"""Consumer offsets a 5.x broker keeps in RocksDB (``storeType=defaultRocksDB``).

Such a broker writes no ``consumerOffset.json``: its ``RocksDBConsumerOffsetManager`` (5.3.3,
``broker/config/v1``) keeps them in the RocksDB directory ``config/consumerOffsets/``
(``ConfigRocksDBStorage``). Read in the 5.3.3 source and confirmed on a real 5.3.3 store
(docs/rocketmq-5x.md "Other layouts and names: confirmed"):

* column families ``default``, ``kvDataVersion`` and ``forbidden``; the offsets are in ``default``;
* key: ``topic@group`` in UTF-8 (``topic@group@broadcast`` for a broadcasting group, as in the
  JSON file);
* value: fastjson of ``RocksDBOffsetSerializeWrapper`` with ``BrowserCompatible``, e.g.
  ``{"offsetTable":{"1":1,"2":1,"3":1}}`` (queue id -> next offset to consume; the queue ids are
  quoted, and a number beyond 2^53 would be too).

The directory is copied before it is opened (read-only): RocksDB takes no lock in read-only mode,
but ``rocksdict`` writes its own ``rocksdict-config.json`` into any directory it opens, and a
broker may be writing the store. The copy is a snapshot; a WAL tail cut mid-write is dropped on
recovery as RocksDB's point-in-time recovery does.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from broker_core.store.config_files import TOPIC_GROUP_SEPARATOR

OFFSETS_COLUMN_FAMILY = "default"


class RocksDBOffsetsError(Exception):
    """The RocksDB offsets could not be read; the message says why."""


def newest_mtime_ms(directory: Path) -> int | None:
    """The newest modification time of a file in ``directory`` (ms), None if it holds none: the
    broker's last persist of the offsets wrote a file there (a WAL append, an SST on flush)."""
    times = [p.stat().st_mtime for p in Path(directory).iterdir() if p.is_file()]
    return int(max(times) * 1000) if times else None


def _decode(key: bytes, value: bytes) -> tuple[str, dict[int, int]]:
    try:
        name = key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RocksDBOffsetsError(f"key {key!r} is not UTF-8") from exc
    if TOPIC_GROUP_SEPARATOR not in name:
        raise RocksDBOffsetsError(f"key {name!r} is not 'topic@group'")
    try:
        doc = json.loads(value)
        table = doc["offsetTable"]
        return name, {int(q): int(o) for q, o in table.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RocksDBOffsetsError(f"the value of {name!r} is not an offsetTable: {value[:200]!r}") from exc


def rocksdb_items(directory: Path, column_family: str | None = None) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of one column family (``None``: ``default``) of the RocksDB directory
    ``directory``, read from a copy (see the module docstring), in key order.

    Raises RocksDBOffsetsError (with the reason) when rocksdict is not installed or the directory
    cannot be copied or opened."""
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError as exc:
        raise RocksDBOffsetsError(f"the rocksdict package is not installed ({exc})") from exc
    with tempfile.TemporaryDirectory(prefix="rocksdb-snapshot-") as scratch:
        copy = Path(scratch) / "db"
        try:
            shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("LOCK"))
        except OSError as exc:
            raise RocksDBOffsetsError(f"cannot copy {directory}: {exc}") from exc
        families = {column_family: Options(raw_mode=True)} if column_family else None
        try:
            db = Rdict(str(copy), options=Options(raw_mode=True), column_families=families,
                       access_type=AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain Exception for a RocksDB status
            reason = str(exc).replace(str(copy), str(directory))
            raise RocksDBOffsetsError(f"RocksDB cannot open it: {reason}") from exc
        try:
            table = db.get_column_family(column_family) if column_family else db
            return list(table.items())
        except Exception as exc:  # a missing column family is a plain Exception too
            raise RocksDBOffsetsError(f"RocksDB cannot read {column_family or 'default'}: {exc}") from exc
        finally:
            db.close()


def read_rocksdb_offsets(directory: Path) -> dict[str, dict[int, int]]:
    """``config/consumerOffsets/``: "topic@group" -> {queueId: next offset to consume}.

    Raises RocksDBOffsetsError (with the reason) when rocksdict is not installed, the directory
    cannot be opened, or an entry is not in the broker's format."""
    return dict(_decode(k, v) for k, v in rocksdb_items(directory))
