"""Decoding a 5.x broker's POP checkpoints and acks from their record bodies.

The bodies have the shape a real 5.3.3 broker wrote (fastjson of PopCheckPoint / AckMsg, keys in
alphabetical order; docs/rocketmq-5x.md "POP consumption: confirmed"); the values are made up.
"""

from __future__ import annotations

import pytest

from broker_core.errors import CorruptRecordError
from broker_core.store import pop

CK = (b'{"bm":0,"bn":"broker-a","c":"g1","d":[0,1,3],"it":5000,"n":3,"pt":1000,"q":1,'
      b'"reviveTime":6000,"ro":0,"so":7,"t":"T1"}')
ACK = b'{"ao":8,"bn":"broker-a","c":"g1","pt":1000,"q":1,"so":7,"t":"T1"}'


def test_a_checkpoint_lists_its_offsets_pop_time_and_invisible_time():
    """A checkpoint's offsets are its start offset plus each difference in 'd'."""
    ck = pop.decode_pop_body("ck", CK, "here")
    assert ck == pop.PopRecord("ck", "g1", "T1", 1, 7, (7, 8, 10), 1000, 5000, 6000, "broker-a")


def test_a_checkpoint_without_offset_list_or_revive_time_uses_its_count_and_pop_plus_invisible():
    """An older checkpoint body without 'd' covers n offsets from so; without reviveTime its revive
    time is pop time + invisible time."""
    ck = pop.decode_pop_body("ck", b'{"c":"g","t":"T","q":0,"so":4,"pt":10,"it":20,"n":2}', "here")
    assert (ck.offsets, ck.revive_ts_ms, ck.broker_name) == ((4, 5), 30, None)


def test_an_ack_names_its_offset_and_the_checkpoint_it_acks():
    """An ack carries the acked offset and the pop time and start offset of its checkpoint."""
    ack = pop.decode_pop_body("ack", ACK, "here")
    assert ack == pop.PopRecord("ack", "g1", "T1", 1, 7, (8,), 1000, None, None, "broker-a")


def test_a_batch_ack_lists_its_offsets():
    """A batch ack (tag bAck) acks every offset of 'aol'."""
    body = b'{"aol":[7,10],"c":"g1","pt":1000,"q":1,"so":7,"t":"T1"}'
    assert pop.decode_pop_body("bAck", body, "here").offsets == (7, 10)


@pytest.mark.parametrize("tag, body, words", [
    ("ck", b"not json", "not JSON"),
    ("ck", b"[1]", "not an object"),
    ("ck", b'{"c":"g","t":"T","q":"0","so":1,"pt":1,"it":1,"d":[0]}', "'q'"),
    ("ck", b'{"c":"g","t":"T","q":0,"so":1,"pt":1,"it":1,"d":[true]}', "'d'"),
    ("ack", b'{"c":"g","t":"T","q":0,"so":1,"pt":1}', "'ao'"),
    ("bAck", b'{"c":"g","t":"T","q":0,"so":1,"pt":1,"aol":"7"}', "'aol'"),
    ("pop", ACK, "tag"),
])
def test_a_body_that_is_not_a_pop_record_is_a_clear_error(tag, body, words):
    """A body or tag the broker does not write raises CorruptRecordError naming the field and place."""
    with pytest.raises(CorruptRecordError) as caught:
        pop.decode_pop_body(tag, body, "commitlog@42")
    assert words in caught.value.message and caught.value.where == "commitlog@42"


def test_pop_stage_tells_the_timer_copy_from_the_revive_copy():
    """A checkpoint or ack waits in the timer topic (REAL_TOPIC the revive topic), then is put to
    the revive topic; no other record is POP bookkeeping."""
    revive = "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert pop.pop_stage("rmq_sys_wheel_timer", revive) == pop.STAGE_TIMER
    assert pop.pop_stage(revive, revive) == pop.STAGE_REVIVE
    assert pop.pop_stage("rmq_sys_wheel_timer", "TimerTopic") is None
    assert pop.pop_stage("T1", None) is None


def test_retry_topic_names_are_the_revive_service_names_for_a_message_topic_only():
    """A checkpoint of T popped by g names %RETRY%g_T (v1) and %RETRY%g+T (v2); a checkpoint of a
    retry topic names nothing new (its retries stay in it)."""
    assert pop.retry_topic_names("g_x", "T") == ("%RETRY%g_x_T", "%RETRY%g_x+T")
    assert pop.retry_topic_names("g", "%RETRY%g_T") is None
