"""AllocateMessageQueueAveragely and the group rebalance built on it."""

from broker_core.client.rebalance import allocate_averagely, assign_broadcasting, assign_clustering


def test_allocate_averagely_slices():
    """Sorted queues are cut into contiguous slices, the first (n mod k) consumers get one more."""
    mqs = [("T", q) for q in range(8)]
    cids = ["c0", "c1", "c2"]
    assert allocate_averagely("c0", mqs, cids) == [("T", 0), ("T", 1), ("T", 2)]
    assert allocate_averagely("c1", mqs, cids) == [("T", 3), ("T", 4), ("T", 5)]
    assert allocate_averagely("c2", mqs, cids) == [("T", 6), ("T", 7)]
    assert allocate_averagely("zz", mqs, cids) == []


def test_more_consumers_than_queues():
    """With fewer queues than consumers, the first consumers get one queue each, the rest none."""
    mqs = [("T", 0), ("T", 1)]
    cids = ["a", "b", "c"]
    assert [allocate_averagely(c, mqs, cids) for c in cids] == [[("T", 0)], [("T", 1)], []]


def test_three_consumers_over_four_plus_one_queues():
    """3 consumers, a 4-queue topic and a 1-queue retry topic: 2/1/1 and the retry queue to c0."""
    got = assign_clustering(["c2", "c0", "c1"], {"T": 4, "%RETRY%G": 1})
    assert got == {
        "c0": [("%RETRY%G", 0), ("T", 0), ("T", 1)],
        "c1": [("T", 2)],
        "c2": [("T", 3)],
    }


def test_broadcasting_gives_everyone_everything():
    """Broadcasting: every consumer reads every queue."""
    got = assign_broadcasting(["b", "a"], {"T": 2})
    assert got == {"a": [("T", 0), ("T", 1)], "b": [("T", 0), ("T", 1)]}


def test_group_rebalance_follows_membership(rig):
    """A group of 3 splits T's 4 queues 2/1/1 plus the retry queue; a crash hands them over."""
    g = rig.group(consumers=3)
    assert [c.assigned() for c in g.consumers] == [
        [("%RETRY%G", 0), ("T", 0), ("T", 1)], [("T", 2)], [("T", 3)]]
    g.crash_consumer("G-c0")
    assert [c.assigned() for c in g.consumers] == [
        [], [("%RETRY%G", 0), ("T", 0), ("T", 1)], [("T", 2), ("T", 3)]]
    g.restart_consumer("G-c0")
    assert g.consumers[0].assigned() == [("%RETRY%G", 0), ("T", 0), ("T", 1)]
