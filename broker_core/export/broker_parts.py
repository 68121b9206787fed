"""A run directory that holds several brokers: one Parquet file per broker per table.

Physical offsets, consume queues, consumer offsets and retention are per broker, and a message's
hops may be on several brokers of a cluster (a send-back or a client's retry goes to any broker's
queue). ``import-store --broker NAME`` therefore adds one broker to a run: every table it writes is
``parquet/<table>/part-<NAME>.parquet``, and importing NAME again replaces those files and keeps
the other brokers' ones. The run directory is still replaced whole (built beside the old one,
then renamed in), so a reader sees it with the old or the new data of that broker, never half.

This module owns that layout: the file name of a broker's part, which files of an earlier run a
new import of one broker keeps (after checking that the run is one it may add to), and the lock
that keeps two imports into one run from interleaving.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from broker_core.errors import BadInputError
from broker_core.export.schema import RAW_TABLES

# A broker name becomes part of a file name: letters, digits, '_', '-' and '.', not starting with
# '.' (a hidden file is skipped by every Parquet reader). RocketMQ's own names (broker-a) fit.
BROKER_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
BROKER_NAME_CHARS_MAX = 128  # a file name stays well under the usual 255-byte limit
PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"
PARQUET_DIR_NAME = "parquet"
# Where a broker imported from both its master's and its slave's store keeps each side's own
# tables (replicas/<broker>/<role>/parquet/<table>/part-<broker>.parquet), so that importing one
# side again merges it with the other anew. Nothing reads them as the run's tables.
REPLICAS_DIR_NAME = "replicas"
# Where each imported broker's run remembers how far its last import read the store
# (import_state/<broker>.json, see broker_core.export.increments).
IMPORT_STATE_DIR_NAME = "import_state"
STATE_SUFFIX = ".json"
RUNS_TABLE = "runs"
SOURCE_IMPORT = "import"


def validate_broker(broker: str) -> str:
    """``broker`` if it can name a broker's files, else BadInputError."""
    if not BROKER_NAME_PATTERN.fullmatch(broker or "") or len(broker) > BROKER_NAME_CHARS_MAX:
        raise BadInputError(f"broker name {broker!r} must match [A-Za-z0-9_-][A-Za-z0-9_.-]* "
                            f"(at most {BROKER_NAME_CHARS_MAX} characters)",
                            where="--broker", hint="use the broker's brokerName, e.g. broker-a")
    return broker


def part_name(broker: str) -> str:
    """The file name of one broker's rows of a table: ``part-<broker>.parquet``."""
    return f"{PART_PREFIX}{broker}{PART_SUFFIX}"


# An import that continues an earlier one of the same broker adds the new records as another file
# of the broker's commitlog table, named after the physical offset it starts at:
# ``part-<broker>+<offset, 20 digits>.parquet``. '+' is not in a broker name, so no broker's
# files are mistaken for another's.
INCREMENT_SEPARATOR = "+"


def increment_part_name(broker: str, offset: int) -> str:
    """The file of ``broker``'s records from physical offset ``offset`` on, added by a later import."""
    assert offset >= 0, f"negative offset {offset}"
    return f"{PART_PREFIX}{broker}{INCREMENT_SEPARATOR}{offset:020d}{PART_SUFFIX}"


def is_broker_part(file_name: str, broker: str) -> bool:
    """Whether ``file_name`` holds rows of ``broker`` only: its part, or one of its increments."""
    return file_name == part_name(broker) or (
        file_name.startswith(f"{PART_PREFIX}{broker}{INCREMENT_SEPARATOR}") and file_name.endswith(PART_SUFFIX))


def broker_parts_of(table_dir: Path, broker: str) -> list[Path]:
    """``broker``'s files of one table directory in physical order: its part, then its increments."""
    if not table_dir.is_dir():
        return []
    return sorted((p for p in table_dir.iterdir() if is_broker_part(p.name, broker)),
                  key=lambda p: (p.name != part_name(broker), p.name))


@contextlib.contextmanager
def run_lock(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run directory's parent while a run is rebuilt.

    Two imports of different brokers into one run each build a new directory from the old one;
    without the lock the second rename would drop the first import's broker (and each would remove
    the other's temporary directory as a leftover). The lock is the parent directory's own flock,
    so nothing is left behind; it is released when the process ends, however it ends.
    """
    parent = Path(out_dir).absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def kept_parts(out_dir: Path, run_id: str, broker: str) -> list[Path]:
    """The Parquet files of an existing run that an import of ``broker`` keeps (relative paths).

    Every file under ``parquet/`` but the broker's own parts is kept (an import that goes on from
    the broker's last one carries its commitlog files itself: ``increments.carry_commitlog``), the
    other brokers' replicas (``replicas/<other>/``) and import states; the lineage is not (it was built from the old data and is
    rebuilt by ``retry-audit lineage``). Refuses, with BadInputError,
    a directory that is not a run of imported brokers named ``run_id``, and a file written before
    runs held several brokers (no broker column, or rows of ``broker`` in a file of another name,
    which replacing the broker's parts would leave behind).
    """
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return []
    if not out_dir.is_dir():
        raise BadInputError("the output path exists and is not a directory", where=str(out_dir))
    parquet = out_dir / PARQUET_DIR_NAME
    if not parquet.is_dir():
        if any(out_dir.iterdir()):
            raise BadInputError("the output directory exists and is not a run directory (no parquet/)",
                                where=str(out_dir),
                                hint="choose a new directory, or an earlier import-store --broker run")
        return []
    _check_run(out_dir, run_id)
    kept = []
    for path in sorted(parquet.rglob(f"*{PART_SUFFIX}")):
        if path.name.startswith((".", "_")):
            continue  # a writer's work in progress, never read as data
        if is_broker_part(path.name, broker):
            continue
        _check_part(path, broker, out_dir)
        kept.append(path.relative_to(out_dir))
    replicas = out_dir / REPLICAS_DIR_NAME
    for side in sorted(replicas.iterdir()) if replicas.is_dir() else []:
        if side.name != broker:
            kept.extend(path.relative_to(out_dir) for path in sorted(side.rglob(f"*{PART_SUFFIX}")))
    states = out_dir / IMPORT_STATE_DIR_NAME
    for path in sorted(states.glob(f"*{STATE_SUFFIX}")) if states.is_dir() else []:
        if path.name != f"{broker}{STATE_SUFFIX}":
            kept.append(path.relative_to(out_dir))
    return kept


def _check_run(out_dir: Path, run_id: str) -> None:
    runs_dir = out_dir / PARQUET_DIR_NAME / RUNS_TABLE
    files = sorted(runs_dir.glob(f"*{PART_SUFFIX}")) if runs_dir.is_dir() else []
    if not files:
        raise BadInputError("the output directory has no runs table: not a complete run directory",
                            where=str(out_dir), hint="choose a new directory for the import")
    for f in files:
        rows = pq.read_table(f, columns=["run_id", "source"]).to_pylist()
        for row in rows:
            if row["source"] != SOURCE_IMPORT:
                raise BadInputError(f"the run directory holds a {row['source'] or 'non-import'} run, "
                                    "not imported brokers", where=str(out_dir),
                                    hint="import the broker into another directory")
            if row["run_id"] != run_id:
                raise BadInputError(f"the run directory holds run {row['run_id']!r}, not {run_id!r}",
                                    where=str(out_dir),
                                    hint=f"pass --name {row['run_id']} to add a broker to it")


def _check_part(path: Path, broker: str, out_dir: Path) -> None:
    schema = RAW_TABLES.get(path.parent.name)
    if schema is not None and "broker" not in schema.names:
        return  # a table of simulations only (deliveries, faults): an import's part is empty
    meta = pq.ParquetFile(path).metadata
    names = meta.schema.names
    if "broker" not in names:
        raise BadInputError(f"{path.relative_to(out_dir)} has no broker column: the run was written "
                            "before runs held several brokers", where=str(out_dir),
                            hint="re-import every broker into a new directory with --broker")
    column = names.index("broker")
    for i in range(meta.num_row_groups):
        chunk = meta.row_group(i).column(column)
        stats = chunk.statistics
        if stats is not None and stats.has_min_max and stats.null_count == 0 and not \
                (stats.min <= broker <= stats.max):
            continue  # the row group's brokers all sort before or after this one
        values = set(pq.read_table(path, columns=["broker"]).column(0).to_pylist())
        if broker in values:
            raise BadInputError(f"{path.relative_to(out_dir)} holds rows of broker {broker!r} that "
                                "re-importing it would not replace", where=str(out_dir),
                                hint="re-import every broker into a new directory with --broker")
        return


def link_parts(src_dir: Path, parts: list[Path], dest_dir: Path) -> None:
    """Put the kept files into the new run directory: hard links (no data copied), else copies."""
    for rel in parts:
        target = dest_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src_dir / rel, target)
        except OSError:
            shutil.copy2(src_dir / rel, target)


def brokers_of(run_dir: Path) -> list[str]:
    """The brokers a run directory's runs table lists, sorted."""
    runs_dir = Path(run_dir) / PARQUET_DIR_NAME / RUNS_TABLE
    found: set[str] = set()
    for f in sorted(runs_dir.glob(f"*{PART_SUFFIX}")) if runs_dir.is_dir() else []:
        if f.name.startswith((".", "_")):
            continue
        if "broker" in pq.ParquetFile(f).metadata.schema.names:
            found.update(b for b in pq.read_table(f, columns=["broker"]).column(0).to_pylist() if b)
    return sorted(found)
