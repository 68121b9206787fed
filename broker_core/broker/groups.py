"""The broker's subscription groups (SubscriptionGroupManager 4.9.4) and subscriptionGroup.json.

A group a client names is auto-created with RocketMQ's defaults (retryQueueNums 1, retryMaxTimes
16) when auto-creation is on or the group is a system one; every change is written at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.constants import SYSTEM_GROUP_PREFIX  # always auto-created
from broker_core.store.config_files import (
    DataVersion,
    SubscriptionGroupConfig,
    load_subscription_groups,
    save_subscription_groups,
)

# Groups every 4.9.4 broker knows from its constructor; the last four may consume broadcast.
BUILTIN_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                  "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")
_NOT_BROADCAST_BUILTINS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP"})


class GroupTable:
    """Subscription group configs of one broker, kept in ``<root>/config/subscriptionGroup.json``."""

    def __init__(self, config_dir: Path, *, auto_create: bool, now_ms: Callable[[], int]):
        self.config_dir = Path(config_dir)
        self.auto_create = auto_create
        self._now_ms = now_ms
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()

    def load(self) -> None:
        self.groups = {}
        for name in BUILTIN_GROUPS:
            self.groups[name] = SubscriptionGroupConfig(
                name, consume_broadcast_enable=name not in _NOT_BROADCAST_BUILTINS)
        self.groups.update(load_subscription_groups(self.config_dir))

    def persist(self) -> None:
        save_subscription_groups(self.config_dir, self.groups, data_version=self.data_version)

    def _changed(self) -> None:
        self.data_version.counter += 1
        self.data_version.timestamp = self._now_ms()
        self.persist()

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """findSubscriptionGroupConfig: the group, auto-created with defaults when allowed."""
        cfg = self.groups.get(group)
        if cfg is None and (self.auto_create or group.startswith(SYSTEM_GROUP_PREFIX)):
            cfg = SubscriptionGroupConfig(group)
            self.groups[group] = cfg
            self._changed()
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        """updateSubscriptionGroupConfig: add or replace a group (e.g. retryMaxTimes, retryQueueNums)."""
        self.groups[cfg.group_name] = cfg
        self._changed()
