"""ProcessQueue bookkeeping (RocketMQ ProcessQueueTest) and the min-offset commit rule."""

from broker_core.client.process_queue import ProcessQueue, PulledMessage

BODY_BYTES = 123  # ProcessQueueTest's message body size


def _msgs(n: int, start: int = 0) -> list[PulledMessage]:
    return [PulledMessage(queue_topic="T", queue_id=0, queue_offset=start + i, phys_offset=1000 * i,
                          body=b"a" * BODY_BYTES, properties={}) for i in range(n)]


def test_cached_message_count():
    """100 cached, take 10 and commit leaves 90, removing the last leaves 89."""
    pq = ProcessQueue()
    msgs = _msgs(100)
    pq.put_messages(msgs)
    assert pq.msg_count == 100
    pq.take_messages(10)
    pq.commit()
    assert pq.msg_count == 90
    pq.remove_message([msgs[-1]])
    assert pq.msg_count == 89


def test_cached_message_size():
    """12300 bytes cached, 11070 after take+commit of 10, 10947 after removing one more."""
    pq = ProcessQueue()
    msgs = _msgs(100)
    pq.put_messages(msgs)
    assert pq.msg_size == 12300
    pq.take_messages(10)
    pq.commit()
    assert pq.msg_size == 11070
    pq.remove_message([msgs[-1]])
    assert pq.msg_size == 10947


def test_fill_process_queue_info_mib():
    """102400 messages of 123 bytes are 12 MiB; after taking 10000, 10000, 80000: 10, 9, 0 MiB."""
    pq = ProcessQueue()
    pq.put_messages(_msgs(102400))
    assert pq.cached_size_mib() == 12
    seen = []
    for n in (10000, 10000, 80000):
        pq.take_messages(n)
        pq.commit()
        seen.append(pq.cached_size_mib())
    assert seen == [10, 9, 0]


def test_remove_returns_smallest_offset_still_in_flight():
    """The committable offset is the smallest unconsumed offset, or max+1 once all are done."""
    pq = ProcessQueue()
    msgs = _msgs(5, start=10)  # offsets 10..14
    pq.put_messages(msgs)
    assert pq.remove_message([msgs[1], msgs[2]]) == 10  # 10 still in flight
    assert pq.remove_message([msgs[4]]) == 10
    assert pq.remove_message([msgs[0]]) == 13  # 13 is now the head
    assert pq.remove_message([msgs[3]]) == 15  # empty: queueOffsetMax + 1
    assert pq.remove_message([msgs[3]]) == -1  # empty before removal


def test_orderly_commit_and_consume_again():
    """An orderly batch commits to its last offset + 1; a suspended batch returns to the head."""
    pq = ProcessQueue()
    msgs = _msgs(4)
    assert pq.put_messages(msgs) is True  # dispatch once
    assert pq.put_messages(_msgs(1, start=4)) is False  # already consuming
    taken = pq.take_messages(2)
    assert [m.queue_offset for m in taken] == [0, 1]
    pq.make_message_to_consume_again(taken)
    assert [m.queue_offset for m in pq.take_messages(3)] == [0, 1, 2]
    assert pq.commit() == 3
    assert pq.msg_count == 2
