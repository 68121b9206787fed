"""Client offset stores: increase-only updates and persistence to the broker."""

from broker_core.client.offset_store import (
    MEMORY_FIRST_THEN_STORE,
    READ_FROM_MEMORY,
    READ_FROM_STORE,
    LocalOffsetStore,
    RemoteBrokerOffsetStore,
)

MQ = ("T", 1)


def test_update_offset_increase_only(rig):
    """RemoteBrokerOffsetStoreTest.testUpdateOffset: 1024, then 1023, then 1022 increaseOnly stays 1023."""
    store = RemoteBrokerOffsetStore(rig.broker, "G")
    store.update_offset(MQ, 1024, increase_only=False)
    assert store.read_offset(MQ, READ_FROM_MEMORY) == 1024
    store.update_offset(MQ, 1023, increase_only=False)
    assert store.read_offset(MQ, READ_FROM_MEMORY) == 1023
    store.update_offset(MQ, 1022, increase_only=True)
    assert store.read_offset(MQ, READ_FROM_MEMORY) == 1023


def test_memory_offsets_reach_the_broker_only_when_persisted(rig):
    """Updates stay in memory until persist_all; unassigned queues are dropped, not sent."""
    store = RemoteBrokerOffsetStore(rig.broker, "G")
    store.update_offset(MQ, 7, increase_only=True)
    store.update_offset(("T", 2), 9, increase_only=True)
    assert rig.broker.query_consumer_offset("G", "T", 1) == -1
    store.persist_all([MQ])
    assert rig.broker.query_consumer_offset("G", "T", 1) == 7
    assert rig.broker.query_consumer_offset("G", "T", 2) == -1
    assert store.queues() == [MQ]
    fresh = RemoteBrokerOffsetStore(rig.broker, "G")
    assert fresh.read_offset(MQ, MEMORY_FIRST_THEN_STORE) == 7
    assert fresh.read_offset(("T", 3), READ_FROM_STORE) == -1


def test_local_store_survives_memory_loss():
    """A broadcasting consumer's persisted offsets survive the loss of its memory (a crash)."""
    store = LocalOffsetStore()
    store.update_offset(MQ, 5, increase_only=True)
    store.persist_all([MQ])
    store.update_offset(MQ, 8, increase_only=True)
    store.clear_memory()
    assert store.read_offset(MQ, READ_FROM_STORE) == 5
