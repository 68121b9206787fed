"""The broker's topic table (TopicConfigManager 4.9.4): built-in topics, auto-creation, topics.json.

Every change is written to ``config/topics.json`` at once, as the Java broker persists on each
``updateTopicConfig`` / ``createTopicIn*Method`` call, and bumps the data version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.constants import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    SCHEDULE_TOPIC_QUEUES,
    TOPIC_QUEUES_DEFAULT,
)
from broker_core.store.config_files import DataVersion, TopicConfig, load_topics, save_topics

# The auto-create template topic (TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC) and its queue count
# (BrokerConfig.defaultTopicQueueNums); its perm carries INHERIT so new topics copy it.
AUTO_CREATE_TEMPLATE_TOPIC = "TBW102"
AUTO_CREATE_TEMPLATE_QUEUES = 8
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
BENCHMARK_TOPIC_QUEUES = 1024
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"  # MixAll.REPLY_TOPIC_POSTFIX


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


class TopicTable:
    """Topic configs of one broker, loaded from and written to ``<root>/config/topics.json``."""

    def __init__(self, config_dir: Path, *, cluster: str, broker_name: str, auto_create: bool,
                 now_ms: Callable[[], int]):
        self.config_dir = Path(config_dir)
        self.cluster = cluster
        self.broker_name = broker_name
        self.auto_create = auto_create
        self._now_ms = now_ms
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()

    # -- lifecycle -------------------------------------------------------------------------------

    def load(self) -> None:
        """Built-in topics first (TopicConfigManager's constructor), then topics.json over them."""
        self.topics = {}
        self._add_builtins()
        self.topics.update(load_topics(self.config_dir))

    def _add_builtins(self) -> None:
        rw = PERM_READ | PERM_WRITE
        self.topics[SELF_TEST_TOPIC] = TopicConfig(SELF_TEST_TOPIC, 1, 1)
        if self.auto_create:
            self.topics[AUTO_CREATE_TEMPLATE_TOPIC] = TopicConfig(
                AUTO_CREATE_TEMPLATE_TOPIC, AUTO_CREATE_TEMPLATE_QUEUES, AUTO_CREATE_TEMPLATE_QUEUES,
                perm=rw | PERM_INHERIT)
        self.topics[BENCHMARK_TOPIC] = TopicConfig(BENCHMARK_TOPIC, BENCHMARK_TOPIC_QUEUES,
                                                   BENCHMARK_TOPIC_QUEUES)
        # The cluster and broker names are topics too (used by name-server routing).
        self.topics[self.cluster] = TopicConfig(self.cluster, 16, 16, perm=PERM_INHERIT | rw)
        self.topics[self.broker_name] = TopicConfig(self.broker_name, 1, 1, perm=PERM_INHERIT | rw)
        self.topics[OFFSET_MOVED_EVENT_TOPIC] = TopicConfig(OFFSET_MOVED_EVENT_TOPIC, 1, 1)
        self.topics[SCHEDULE_TOPIC] = TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUES,
                                                  SCHEDULE_TOPIC_QUEUES)
        reply = self.cluster + REPLY_TOPIC_SUFFIX
        self.topics[reply] = TopicConfig(reply, 1, 1)

    def persist(self) -> None:
        save_topics(self.config_dir, self.topics, data_version=self.data_version)

    def _changed(self) -> None:
        self.data_version.counter += 1
        self.data_version.timestamp = self._now_ms()
        self.persist()

    # -- queries and changes ---------------------------------------------------------------------

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def queue_count(self, topic: str) -> int:
        """max(read, write) queues of a topic, 0 when it does not exist."""
        cfg = self.topics.get(topic)
        return 0 if cfg is None else max(cfg.read_queue_nums, cfg.write_queue_nums)

    def create(self, topic: str, queues: int, perm: int, sys_flag: int = 0) -> TopicConfig:
        """Create or replace a topic (admin updateTopic): always written to topics.json."""
        assert queues > 0, f"topic {topic} needs at least one queue, got {queues}"
        cfg = TopicConfig(topic, queues, queues, perm=perm, topic_sys_flag=sys_flag)
        self.topics[topic] = cfg
        self._changed()
        return cfg

    def create_in_send(self, topic: str, client_default_queues: int = TOPIC_QUEUES_DEFAULT,
                       sys_flag: int = 0) -> TopicConfig | None:
        """createTopicInSendMessageMethod: a new topic copied from TBW102, or None when disabled."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        template = self.topics.get(AUTO_CREATE_TEMPLATE_TOPIC)
        if template is None or not (template.perm & PERM_INHERIT):
            return None
        queues = min(client_default_queues, template.write_queue_nums)
        if queues <= 0:
            return None
        return self.create(topic, queues, template.perm & ~PERM_INHERIT, sys_flag)

    def create_in_send_back(self, topic: str, queues: int, perm: int,
                            sys_flag: int = 0) -> TopicConfig:
        """createTopicInSendMessageBackMethod: the retry/DLQ topic, created once, kept after."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        return self.create(topic, queues, perm, sys_flag)
