"""Queue allocation between the consumers of a group (RocketMQ ``AllocateMessageQueueAveragely``).

RocketMQ rebalances topic by topic (``RebalanceImpl.rebalanceByTopic``): for each subscribed
topic it sorts the topic's queues and the group's client ids and gives each client a contiguous
slice. In clustering mode ``%RETRY%<group>`` is one more subscribed topic, so with its single
queue the first consumer (by id) consumes every retry. Broadcasting gives every consumer every
queue.
"""

from __future__ import annotations

from collections.abc import Sequence

MessageQueue = tuple[str, int]


def allocate_averagely(current_cid: str, mq_all: Sequence[MessageQueue],
                       cid_all: Sequence[str]) -> list[MessageQueue]:
    """The queues ``current_cid`` owns: AllocateMessageQueueAveragely.allocate over sorted inputs.

    ``mq_all`` and ``cid_all`` must already be sorted (RocketMQ sorts both before allocating).
    A client not in ``cid_all`` gets nothing.
    """
    assert list(mq_all) == sorted(mq_all), "mq_all must be sorted"
    assert list(cid_all) == sorted(cid_all), "cid_all must be sorted"
    if current_cid not in cid_all or not mq_all:
        return []
    index = cid_all.index(current_cid)
    n_mq, n_cid = len(mq_all), len(cid_all)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    span = min(average, n_mq - start)
    return [mq_all[(start + i) % n_mq] for i in range(max(span, 0))]


def assign_clustering(consumer_ids: Sequence[str],
                      queues_by_topic: dict[str, int]) -> dict[str, list[MessageQueue]]:
    """Every consumer's queues, topic by topic, as RocketMQ's clustering rebalance computes them."""
    cids = sorted(consumer_ids)
    result: dict[str, list[MessageQueue]] = {cid: [] for cid in cids}
    for topic in sorted(queues_by_topic):
        mqs = [(topic, q) for q in range(queues_by_topic[topic])]
        for cid in cids:
            result[cid].extend(allocate_averagely(cid, mqs, cids))
    return result


def assign_broadcasting(consumer_ids: Sequence[str],
                        queues_by_topic: dict[str, int]) -> dict[str, list[MessageQueue]]:
    """Broadcasting: every consumer reads every queue of every subscribed topic."""
    every = [(topic, q) for topic in sorted(queues_by_topic) for q in range(queues_by_topic[topic])]
    return {cid: list(every) for cid in sorted(consumer_ids)}
