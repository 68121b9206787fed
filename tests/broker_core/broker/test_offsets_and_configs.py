"""Broker consumer offsets (5 s persistence, crash window) and topics/subscriptionGroup.json on change."""

from __future__ import annotations

from broker_core.broker.offsets import grid_at_or_after
from broker_core.broker.semantics import semantics_for
from broker_core.errors import BadInputError
from broker_core.store.config_files import (
    load_consumer_offsets,
    load_subscription_groups,
    load_topics,
)

SIM_START_MS = 1_795_305_600_000  # conftest's start time of make_broker


def rows_of(rows: list[tuple[str, dict]], table: str) -> list[dict]:
    return [row for t, row in rows if t == table]


def test_grid_at_or_after():
    """The first grid point at or after a time: the origin itself before it, else a whole period up."""
    assert grid_at_or_after(1000, 100, 0) == 1000
    assert grid_at_or_after(1000, 100, 1000) == 1000
    assert grid_at_or_after(1000, 100, 1001) == 1100
    assert grid_at_or_after(1000, 100, 1100) == 1100


def test_query_without_commit_is_minus_one(make_broker):
    """queryOffset of a queue the group never committed is -1; a commit is read back at once."""
    broker, _sim, rows = make_broker()
    assert broker.query_consumer_offset("g", "T", 0) == -1
    broker.update_consumer_offset("g", "T", 0, 5)
    assert broker.query_consumer_offset("g", "T", 0) == 5
    assert rows_of(rows, "consumer_offsets")[-1]["event"] == "UPDATE"


def test_offsets_persist_on_the_5s_grid_after_10s(make_broker):
    """consumerOffset.json is first written 10 s after start, then on the 5 s grid, only when changed."""
    broker, sim, rows = make_broker()
    broker.update_consumer_offset("g", "T", 0, 5)
    sim.run(until_ms=SIM_START_MS + 9_999)
    assert load_consumer_offsets(broker.config_dir) == {}
    sim.run(until_ms=SIM_START_MS + 10_000)
    assert load_consumer_offsets(broker.config_dir) == {"T@g": {0: 5}}
    broker.update_consumer_offset("g", "T", 0, 7)
    sim.run(until_ms=SIM_START_MS + 14_999)
    assert load_consumer_offsets(broker.config_dir) == {"T@g": {0: 5}}
    sim.run(until_ms=SIM_START_MS + 15_000)
    assert load_consumer_offsets(broker.config_dir) == {"T@g": {0: 7}}
    persists = [r for r in rows_of(rows, "consumer_offsets") if r["event"] == "PERSIST"]
    assert [(r["ts"] - SIM_START_MS, r["offset"]) for r in persists] == [(10_000, 5), (15_000, 7)]
    events_before = sim.events_run
    sim.run(until_ms=SIM_START_MS + 3_600_000)
    assert sim.events_run == events_before  # nothing changed: no timer runs


def test_crash_loses_unpersisted_commits_and_shutdown_keeps_them(make_broker):
    """A crash forgets commits since the last write; a clean shutdown writes them; start restores."""
    broker, sim, rows = make_broker()
    broker.update_consumer_offset("g", "T", 0, 5)
    sim.run(until_ms=SIM_START_MS + 10_000)
    broker.update_consumer_offset("g", "T", 0, 9)
    broker.crash()
    broker.start()
    assert broker.query_consumer_offset("g", "T", 0) == 5
    restored = [r for r in rows_of(rows, "consumer_offsets") if r["event"] == "RESTORE"]
    assert [(r["group"], r["topic"], r["queue_id"], r["offset"]) for r in restored] == [("g", "T", 0, 5)]
    broker.update_consumer_offset("g", "T", 0, 11)
    broker.shutdown()
    broker.start()
    assert broker.query_consumer_offset("g", "T", 0) == 11


def test_topics_and_groups_are_written_on_change(make_broker):
    """create_topic and a new group are in topics.json / subscriptionGroup.json at once, and survive a crash."""
    broker, _sim, _ = make_broker()
    broker.create_topic("OrderTopic", 8)
    group = broker.subscription_group("order-service")
    assert (group.retry_queue_nums, group.retry_max_times) == (1, 16)
    assert load_topics(broker.config_dir)["OrderTopic"].write_queue_nums == 8
    assert "order-service" in load_subscription_groups(broker.config_dir)
    broker.crash()
    broker.start()
    assert broker.topic_queue_count("OrderTopic") == 8
    assert "order-service" in broker.groups.groups


def test_only_4_9_and_5_x_semantics_are_known():
    """Semantics "4.9" answers the 4.9.4 rules (>= for the DLQ); an unknown version is rejected."""
    rules = semantics_for("4.9")
    assert rules.dlq_on_retry_topic_send(16, 16) and not rules.dlq_on_retry_topic_send(15, 16)
    assert rules.dlq_on_send_back(0, 16, -1) and not rules.dlq_on_send_back(15, 16, 0)
    assert semantics_for("5.x").version == "5.x"
    try:
        semantics_for("6.0")
    except BadInputError as exc:
        assert "6.0" in str(exc) and "4.9, 5.x" in str(exc)
    else:
        raise AssertionError("6.0 should not be accepted")


def test_offset_requests_to_a_down_broker(make_broker):
    """While the broker is down an offset update is lost (oneway) and a query answers -1."""
    broker, _sim, _ = make_broker(flush="sync")
    broker.update_consumer_offset("g", "T", 0, 5)
    broker.shutdown()
    broker.update_consumer_offset("g", "T", 0, 8)
    assert broker.query_consumer_offset("g", "T", 0) == -1
    broker.start()
    assert broker.query_consumer_offset("g", "T", 0) == 5
