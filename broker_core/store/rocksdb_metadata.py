"""Where a 5.x store keeps its topics, subscription groups and consumer offsets when not in JSON.

A table comes from the first of these the store has (docs/rocketmq-5x.md):

1. its JSON file (``topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``): the
   file layout, and what the 4.9.4 reader has always read (the reader's own business);
2. ``config/rdb/``: ``configManagerVersion=v2``, whatever the storeType (``rocksdb_config_v2``);
3. ``config/topics/``, ``config/subscriptionGroups/``, ``config/consumerOffsets/``:
   ``storeType=defaultRocksDB`` with the v1 managers (``rocksdb_config``).

A broker writes only one of them, so a store has one unless its configuration changed between
runs; then the JSON file wins as before, and v2 wins over v1 (a v2 broker ignores both). Each
RocksDB directory is read once, from a copy. A table that cannot be read is empty, and
:meth:`RocksDBMetadata.problems` says so with the reason: ``offsets-not-read`` for the offsets
(what a push group consumed without a retry then has no group), ``config-not-read`` for topics
and groups (POP retry topics are then resolved by checkpoints and the name alone).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.store import config_files
from broker_core.store.problem import WARNING, Problem
from broker_core.store.rocksdb_config import (
    CONSUMER_OFFSETS_DIR,
    SUBSCRIPTION_GROUPS_DIR,
    TOPICS_DIR,
    RocksDBConfigError,
    newest_mtime_ms,
    read_rocksdb_groups,
    read_rocksdb_offsets,
    read_rocksdb_topics,
)
from broker_core.store.rocksdb_config_v2 import (
    RDB_DIR,
    TABLE_CONSUMER_OFFSET,
    TABLE_NAMES,
    TABLE_SUBSCRIPTION_GROUP,
    TABLE_TOPIC,
    UNKNOWN_KEYS,
    ConfigV2,
    read_config_v2,
)

CONFIG_DIR_NAME = "config"
TOPICS, GROUPS, OFFSETS = TABLE_NAMES[TABLE_TOPIC], TABLE_NAMES[TABLE_SUBSCRIPTION_GROUP], \
    TABLE_NAMES[TABLE_CONSUMER_OFFSET]
# table -> (its JSON file, its v1 RocksDB directory, how to read that directory)
_TABLES: dict[str, tuple[str, str, Callable[[Path], dict]]] = {
    TOPICS: (config_files.TOPICS_FILE, TOPICS_DIR, read_rocksdb_topics),
    GROUPS: (config_files.SUBSCRIPTION_GROUP_FILE, SUBSCRIPTION_GROUPS_DIR, read_rocksdb_groups),
    OFFSETS: (config_files.CONSUMER_OFFSET_FILE, CONSUMER_OFFSETS_DIR, read_rocksdb_offsets),
}
# What the audit loses when a table cannot be read (the end of the problem's detail).
_CONSEQUENCE = {
    OFFSETS: "a message a push group consumed without a retry shows as UNCONSUMED with no group "
             "(POP groups are named by their checkpoints)",
    TOPICS: "the store's topics are not known: POP retry topics are resolved by their checkpoints "
            "and their names, and retry-topic-ambiguous is not checked",
    GROUPS: "the store's subscription groups are not known: POP retry topics are resolved by their "
            "checkpoints and their names",
}


class RocksDBMetadata:
    """A store's topics, groups and consumer offsets kept in RocksDB (read once, on first use)."""

    def __init__(self, root: Path | str):
        self.config_dir = Path(root) / CONFIG_DIR_NAME
        self._v2: ConfigV2 | None = None
        self._v2_error: str | None = None
        self._values: dict[str, dict] = {}
        self._errors: dict[str, str] = {}

    def source(self, table: str) -> Path | None:
        """The RocksDB directory ``table`` (TOPICS, GROUPS, OFFSETS) is read from, None when it
        is in its JSON file or nowhere."""
        json_file, v1_dir, _ = _TABLES[table]
        if (self.config_dir / json_file).exists():
            return None
        for directory in (self.config_dir / RDB_DIR, self.config_dir / v1_dir):
            if directory.is_dir():
                return directory
        return None

    def rel(self, directory: Path) -> str:
        return f"{CONFIG_DIR_NAME}/{directory.name}"

    def _read_v2(self) -> ConfigV2 | None:
        if self._v2 is None and self._v2_error is None:
            try:
                self._v2 = read_config_v2(self.config_dir / RDB_DIR)
            except RocksDBConfigError as exc:
                self._v2_error = str(exc)
        return self._v2

    def table(self, table: str) -> dict | None:
        """``table``'s entries from RocksDB ({} when they cannot be read: see problems()), None
        when the table is not kept in RocksDB."""
        directory = self.source(table)
        if directory is None:
            return None
        if table not in self._values:
            value: dict | None
            if directory.name == RDB_DIR:
                v2 = self._read_v2()
                value = None if v2 is None else {TOPICS: v2.topics, GROUPS: v2.groups, OFFSETS: v2.offsets}[table]
                error = self._v2_error if v2 is None else v2.errors.get(table)
            else:
                try:
                    value, error = _TABLES[table][2](directory), None
                except RocksDBConfigError as exc:
                    value, error = None, str(exc)
            self._values[table] = value or {}
            if error is not None:
                self._errors[table] = error
        return self._values[table]

    def offsets_ts_ms(self) -> int | None:
        """When the offsets read from RocksDB were last written: the newest file's modification
        time in their directory (None when none were read)."""
        directory = self.source(OFFSETS)
        if directory is None or not self.table(OFFSETS):
            return None
        return newest_mtime_ms(directory)

    def problems(self) -> list[Problem]:
        """A warning per table kept in RocksDB that could not be read, and for keys of
        ``config/rdb/`` in no table this reader knows."""
        problems = []
        for table in (OFFSETS, TOPICS, GROUPS):
            self.table(table)
            if table in self._errors:
                directory = self.source(table)
                kind = "offsets-not-read" if table == OFFSETS else "config-not-read"
                problems.append(Problem(self.rel(directory), 0, kind,
                                        f"the {table} are kept in RocksDB ({self.rel(directory)}/) and "
                                        f"could not be read ({self._errors[table]}): {_CONSEQUENCE[table]}",
                                        WARNING))
        if self._v2 is not None and UNKNOWN_KEYS in self._v2.errors:
            problems.append(Problem(f"{CONFIG_DIR_NAME}/{RDB_DIR}", 0, "config-not-read",
                                    self._v2.errors[UNKNOWN_KEYS], WARNING))
        return problems
