"""Producer send paths: retries on retryable codes only, the 3000 ms budget, queue round-robin."""

import pytest

from broker_core.broker.codes import MESSAGE_ILLEGAL, SYSTEM_ERROR
from broker_core.client.producer import SEND_MSG_TIMEOUT_MS
from broker_core.errors import BadInputError

BODY = b"hello"
PROPERTIES_TOO_LARGE = {"big": "x" * 40_000}  # over the 32 KiB properties limit: MESSAGE_ILLEGAL


def _produced(rig):
    return rig.recorder.rows["produced"]


def test_sync_send_stores_with_uniq_key_and_rotates_queues(rig):
    """A sync send stores the message once with its UNIQ_KEY; successive sends go round the queues."""
    p = rig.producer()
    keys = [p.send("T", BODY, tags="TagA", keys=f"k{i}") for i in range(8)]
    rows = _produced(rig)
    assert [r["status"] for r in rows] == ["SEND_OK"] * 8
    assert [r["uniq_key"] for r in rows] == keys and len(set(keys)) == 8
    queues = [r["queue_id"] for r in rows]
    assert queues[4:] == queues[:4] and sorted(queues[:4]) == [0, 1, 2, 3]
    stored = rig.records("T", queues[0])
    assert stored[0].uniq_key == keys[0]
    assert stored[0].properties["TAGS"] == "TagA" and stored[0].properties["KEYS"] == "k0"
    assert p.sent_ok == 8 and p.send_failed == 0


def test_sync_retries_a_retryable_code_three_times(rig):
    """A put failure (SYSTEM_ERROR, retryable) is tried 1 + 2 times, then counted as failed."""
    rig.broker.put_failure_probability = 1.0
    p = rig.producer()
    key = p.send("T", BODY)
    row = _produced(rig)[-1]
    assert row["status"] == "FAILED" and row["attempts"] == 3
    assert p.failed_uniq_keys == [key] and p.send_failed == 1
    assert p.attempts_total == 3


def test_broker_down_is_retried(rig):
    """A stopped broker refuses the connection (a remoting failure): retried, three attempts."""
    p = rig.producer()
    rig.broker.shutdown()
    outcome = p.send_properties("T", BODY, {"UNIQ_KEY": "K"})
    assert (outcome.ok, outcome.code, outcome.attempts) == (False, None, 3)


def test_non_retryable_code_is_not_retried(rig):
    """MESSAGE_ILLEGAL (oversized properties) is not in retryResponseCodes: one attempt only."""
    p = rig.producer()
    p.send("T", BODY, properties=PROPERTIES_TOO_LARGE)
    row = _produced(rig)[-1]
    assert row["status"] == "FAILED" and row["attempts"] == 1
    outcome = p.send_properties("T", BODY, dict(PROPERTIES_TOO_LARGE))
    assert outcome.code == MESSAGE_ILLEGAL


def test_retries_stop_when_the_budget_is_spent(rig):
    """With 2500 ms per failing attempt the second one times out past 3000 ms: no third attempt."""
    rig.broker.put_failure_probability = 1.0
    p = rig.producer(send_latency_ms=2500)
    outcome = p.send_properties("T", BODY, {"UNIQ_KEY": "K"})
    assert outcome.attempts == 2 and outcome.remark == "sendDefaultImpl call timeout"
    fast = rig.producer(send_latency_ms=1000)
    assert fast.send_properties("T", BODY, {"UNIQ_KEY": "K2"}).attempts == 3
    assert SEND_MSG_TIMEOUT_MS == 3000


def test_timed_out_attempt_may_still_be_stored(rig):
    """A response slower than the budget fails the send although the broker stored the message."""
    p = rig.producer(send_latency_ms=SEND_MSG_TIMEOUT_MS + 1000)
    key = p.send("T", BODY)
    assert _produced(rig)[-1]["status"] == "FAILED" and _produced(rig)[-1]["attempts"] == 1
    stored = [r.uniq_key for q in range(4) for r in rig.records("T", q)]
    assert stored == [key]


def test_async_does_not_retry_broker_error_codes(rig):
    """Async: a broker error code in the response is final (needRetry=false): one attempt."""
    rig.broker.put_failure_probability = 1.0
    p = rig.producer(send_mode="async")
    outcome = p.send_properties("T", BODY, {"UNIQ_KEY": "K"}, mode="async")
    assert (outcome.ok, outcome.code, outcome.attempts) == (False, SYSTEM_ERROR, 1)


def test_async_resends_after_timeouts(rig):
    """Async: a response timeout is resent through onException, at most twice."""
    p = rig.producer(send_mode="async", send_latency_ms=SEND_MSG_TIMEOUT_MS + 1)
    outcome = p.send_properties("T", BODY, {"UNIQ_KEY": "K"}, mode="async")
    assert outcome.attempts == 3 and not outcome.ok
    assert len(outcome.stored_on_timeout) == 3  # every timed-out copy is in the commit log


def test_oneway_makes_one_attempt(rig):
    """Oneway: a single attempt whatever happens."""
    rig.broker.put_failure_probability = 1.0
    p = rig.producer(send_mode="oneway")
    p.send("T", BODY)
    assert _produced(rig)[-1]["attempts"] == 1 and p.attempts_total == 1


def test_client_checks_reject_bad_messages(rig):
    """Empty bodies and forbidden topics are refused before any request."""
    p = rig.producer()
    with pytest.raises(BadInputError, match="body length is zero"):
        p.send("T", b"")
    with pytest.raises(BadInputError, match="forbidden"):
        p.send("SCHEDULE_TOPIC_XXXX", BODY)
    assert p.attempts_total == 0


def test_delay_level_becomes_the_delay_property(rig):
    """A delayed send carries DELAY and lands in SCHEDULE_TOPIC_XXXX first."""
    p = rig.producer()
    key = p.send("T", BODY, delay_level=2)
    parked = rig.records("SCHEDULE_TOPIC_XXXX", 1)  # level 2 lives in queue 1
    assert [r.uniq_key for r in parked] == [key]
    assert parked[0].properties["DELAY"] == "2"
