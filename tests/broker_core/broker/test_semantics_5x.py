"""The 5.x broker rules (semantics "5.x"), each pinned by input and expected output.

Every rule cites the RocketMQ 5.3.3 code it follows (``apache/rocketmq`` tag
``rocketmq-all-5.3.3``); the property orders are the ones a real 5.3.3 broker stored in
``retry-audit conformance --rocketmq 5.3.3`` (docs/rocketmq-5x.md).
"""

from __future__ import annotations

import random

import pytest

from broker_core.broker.semantics import SEMANTICS_4_9, SEMANTICS_5_X, semantics_for, semantics_of_release
from broker_core.broker.send import SendRequest
from broker_core.constants import SCHEDULE_TOPIC
from broker_core.errors import BadInputError
from broker_core.message import JavaHashMap, java_ordered_properties_string
from broker_core.names import dlq_topic, retry_topic

GROUP = "order-service"
RETRY = retry_topic(GROUP)
DLQ = dlq_topic(GROUP)
CLIENT_HOST = "192.168.0.10:50000"
OTHER_BROKER_HOST = "10.9.9.9:10911"


def _keys(props) -> list[str]:
    return [k for k, _ in props.items()]


# --- the rules one by one --------------------------------------------------------------------

def test_retry_topic_send_dlq_test_is_strictly_greater():
    """handleRetryAndDLQ @5.3.3 (broker/.../processor/SendMessageProcessor.java) diverts a %RETRY%
    send to the DLQ when reconsumeTimes > max; 4.9.4 when >=."""
    assert not SEMANTICS_5_X.dlq_on_retry_topic_send(16, 16)
    assert SEMANTICS_5_X.dlq_on_retry_topic_send(17, 16)
    assert SEMANTICS_4_9.dlq_on_retry_topic_send(16, 16)


def test_send_back_dlq_test_is_unchanged():
    """consumerSendMsgBack @5.3.3 (AbstractSendMessageProcessor.java) keeps `>= max || level < 0`."""
    assert SEMANTICS_5_X.dlq_on_send_back(16, 16, 0) and SEMANTICS_5_X.dlq_on_send_back(0, 16, -1)
    assert not SEMANTICS_5_X.dlq_on_send_back(15, 16, 0)


def test_retry_queue_is_next_int_of_the_queue_count():
    """consumerSendMsgBack @5.3.3 draws `random.nextInt(retryQueueNums)`: the stream's randrange(n)."""
    a, b = random.Random(7), random.Random(7)
    assert [SEMANTICS_5_X.retry_queue_id(a, 4) for _ in range(20)] == [b.randrange(4) for _ in range(20)]
    c, d = random.Random(7), random.Random(7)
    assert [SEMANTICS_4_9.retry_queue_id(c, 4) for _ in range(20)] == \
        [d.randrange(99_999_999) % 4 for _ in range(20)]


def test_property_map_and_string_format():
    """MessageDecoder @5.3.3: string2messageProperties builds `new HashMap<>(128)` and
    messageProperties2String ends every pair, the last one too, with \\x02."""
    assert (SEMANTICS_5_X.properties_map_capacity(), SEMANTICS_4_9.properties_map_capacity()) == (128, 16)
    assert SEMANTICS_5_X.properties_trailing_separator() and not SEMANTICS_4_9.properties_trailing_separator()
    # The real 5.3.3 broker's first record: this key order is HashMap(128)'s, not HashMap(16)'s.
    sent = {"KEYS": "k", "UNIQ_KEY": "U", "TAGS": "t", "WAIT": "true", "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true", "CLUSTER": "DefaultCluster"}
    text = java_ordered_properties_string(sent, capacity=128, trailing_separator=True)
    assert text.endswith("\x02")
    assert [p.split("\x01")[0] for p in text.split("\x02")[:-1]] == \
        ["MSG_REGION", "UNIQ_KEY", "CLUSTER", "TAGS", "KEYS", "WAIT", "TRACE_ON"]
    assert _keys(JavaHashMap.from_items(sent.items(), 16)) != \
        ["MSG_REGION", "UNIQ_KEY", "CLUSTER", "TAGS", "KEYS", "WAIT", "TRACE_ON"]


def test_send_adds_region_and_trace_switch():
    """buildMsgContext @5.3.3 (AbstractSendMessageProcessor.java) runs on every send and puts
    MSG_REGION=regionId and TRACE_ON=traceOn (BrokerConfig defaults DefaultRegion, true)."""
    assert SEMANTICS_5_X.send_added_properties() == (("MSG_REGION", "DefaultRegion"), ("TRACE_ON", "true"))
    assert SEMANTICS_4_9.send_added_properties() == ()


def test_wait_store_host_and_dlq_delay_rules():
    """sendMessage @5.3.3 stores WAIT; handleRetryAndDLQ stores DELAY=-1; consumerSendMsgBack stores
    this broker's host (`this.getStoreHost()`)."""
    assert not SEMANTICS_5_X.strip_wait_from_stored_properties()
    assert not SEMANTICS_5_X.dlq_send_keeps_client_delay()
    assert not SEMANTICS_5_X.send_back_store_host_from_message()
    assert SEMANTICS_4_9.strip_wait_from_stored_properties() and SEMANTICS_4_9.send_back_store_host_from_message()


def test_orderly_send_back_adds_one_to_reconsume_time():
    """ConsumeMessageOrderlyService.sendMessageBack @5.3.3 (client) writes RECONSUME_TIME =
    reconsumeTimes + 1; 4.9.4 writes reconsumeTimes."""
    assert SEMANTICS_5_X.orderly_send_back_reconsume_time(16) == 17
    assert SEMANTICS_4_9.orderly_send_back_reconsume_time(16) == 16


def test_broker_kills_are_not_played_under_5x_rules():
    """A 5.x broker's abnormal recovery (StoreCheckpoint @5.3.3 keeps confirmPhyOffset) is not
    modelled: broker_crash and torn_write are refused, a clean restart is not."""
    assert set(SEMANTICS_5_X.unmodelled_faults()) == {"broker_crash", "torn_write"}
    assert SEMANTICS_4_9.unmodelled_faults() == {}


def test_switching_a_scenario_with_a_broker_kill_to_5x_rules_is_refused_at_the_faults_line():
    """with_semantics("5.x") (a conformance run's switch) refuses a broker_crash, naming its line."""
    from broker_core.errors import ScenarioError
    from broker_core.sim.scenario import load_scenario_text
    scenario = load_scenario_text("name: t\ntopics:\n  - {name: T, queues: 1}\n"
                                  "faults:\n  - {at: 1s, kind: broker_crash}\n", source="s.yaml")
    with pytest.raises(ScenarioError, match=r"^s\.yaml:5: faults\[0\]\.kind: 'broker_crash'"):
        scenario.with_semantics("5.x")
    assert scenario.with_semantics("4.9").broker.semantics == "4.9"


@pytest.mark.parametrize("release, expected", [("4.9.4", "4.9"), ("5.3.3", "5.x"), ("5.1.0", "5.x"),
                                               ("5.4.0", "5.4"), ("5.5.0", "5.4"), ("5.10.1", "5.4")])
def test_release_numbers_pick_a_rule_set(release, expected):
    """A conformance run's release number picks the model's rules: 4.x -> "4.9", 5.0 to 5.3 ->
    "5.x", 5.4 and later -> "5.4"."""
    assert semantics_of_release(release) == expected
    assert semantics_for(expected).version == expected


def test_a_release_without_rules_is_refused():
    """RocketMQ 3.x or 6.x has no rule set: a clear error naming --rocketmq."""
    with pytest.raises(BadInputError, match="--rocketmq"):
        semantics_of_release("6.0.0")


# --- the rules on a running 5.x broker ---------------------------------------------------------

def _publish(broker, sim, topic="OrderTopic", **extra):
    broker.create_topic(topic, 4)
    props = {"TAGS": "TagA", "KEYS": "order-1", "WAIT": "true", "UNIQ_KEY": "UK-1", **extra}
    resp = broker.send_message(SendRequest(topic, 2, b"order body", props, born_ts=sim.now(),
                                           born_host=CLIENT_HOST))
    assert resp.ok, resp
    return resp


def test_a_5x_send_stores_what_a_real_5_3_3_broker_stored(make_broker):
    """A plain send: MSG_REGION, TRACE_ON, CLUSTER and the client's WAIT=true, in HashMap(128)
    order, with the trailing separator (the order a real 5.3.3 broker wrote)."""
    broker, sim, _ = make_broker(semantics="5.x")
    record = broker.store.look_message_by_offset(_publish(broker, sim).phys_offset)
    assert list(record.properties.items()) == [
        ("MSG_REGION", "DefaultRegion"), ("UNIQ_KEY", "UK-1"), ("CLUSTER", "DefaultCluster"),
        ("TAGS", "TagA"), ("KEYS", "order-1"), ("WAIT", "true"), ("TRACE_ON", "true")]
    assert record.properties_trailing_separator
    old, sim4, _ = make_broker("four")
    record4 = old.store.look_message_by_offset(_publish(old, sim4).phys_offset)
    assert "WAIT" not in record4.properties and "MSG_REGION" not in record4.properties
    assert not record4.properties_trailing_separator


def test_a_5x_send_back_is_stored_with_the_brokers_host_and_5x_order(make_broker):
    """The send-back copy: store host = this broker even when the record names another; its
    schedule record's properties in the order a real 5.3.3 broker wrote (REAL_TOPIC, REAL_QID last)."""
    broker, sim, _ = make_broker(semantics="5.x")
    sent = _publish(broker, sim)
    resp = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 0)
    assert resp.ok and resp.topic == SCHEDULE_TOPIC
    record = broker.store.look_message_by_offset(resp.phys_offset)
    assert record.store_host == broker.config.store_host
    # The real broker's order, read through the warehouse (which keeps ORIGIN_MESSAGE_ID and
    # REAL_QID in columns of their own): RETRY_TOPIC, MSG_REGION, ..., TRACE_ON, REAL_TOPIC.
    assert _keys(record.properties) == ["ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "MSG_REGION", "UNIQ_KEY",
                                        "CLUSTER", "DELAY", "TAGS", "KEYS", "WAIT", "TRACE_ON",
                                        "REAL_TOPIC", "REAL_QID"]
    assert record.properties["WAIT"] == "false" and record.properties["DELAY"] == "3"


def test_5x_send_back_host_differs_from_4_9_when_the_record_came_from_elsewhere(make_broker):
    """4.9.4 copies the looked-up record's store host, 5.x writes its own: shown by a record
    whose store host is another broker's (a record a replica holds)."""
    hosts = {}
    for semantics in ("4.9", "5.x"):
        broker, sim, _ = make_broker(semantics.replace(".", ""), semantics=semantics)
        broker.create_topic("OrderTopic", 4)
        from broker_core.store.message_store import MessageInner
        put = broker.store.put_message(MessageInner(
            topic="OrderTopic", queue_id=0, body=b"b", properties={"UNIQ_KEY": "U", "TAGS": "t"},
            properties_string=None, flag=0, sys_flag=0, born_ts=sim.now(), born_host=CLIENT_HOST,
            store_host=OTHER_BROKER_HOST, reconsume_times=0, prepared_tx_offset=0, delay_level=None))
        resp = broker.consumer_send_msg_back(put.phys_offset, GROUP, 0)
        hosts[semantics] = broker.store.look_message_by_offset(resp.phys_offset).store_host
    assert hosts == {"4.9": OTHER_BROKER_HOST, "5.x": "10.0.0.1:10911"}


def test_a_5x_client_retry_at_the_max_is_retried_once_more(make_broker):
    """A client's send to %RETRY% with RECONSUME_TIME = max is a retry on 5.x (`>`), the DLQ on 4.9."""
    landed = {}
    for semantics in ("4.9", "5.x"):
        broker, sim, _ = make_broker(semantics.replace(".", ""), semantics=semantics)
        broker.subscription_group(GROUP)
        resp = broker.send_message(SendRequest(
            RETRY, 0, b"b", {"UNIQ_KEY": "U", "RETRY_TOPIC": "OrderTopic", "RECONSUME_TIME": "2",
                             "MAX_RECONSUME_TIMES": "2", "DELAY": "5"},
            born_ts=sim.now(), born_host=CLIENT_HOST, reconsume_times=2, max_reconsume_times=2))
        assert resp.ok, resp
        record = broker.store.look_message_by_offset(resp.phys_offset)
        landed[semantics] = (resp.topic, record.properties.get("REAL_TOPIC"))
    # 4.9.4 diverts to the DLQ (its copy keeps the client's DELAY, so it waits in the schedule).
    assert landed == {"4.9": (SCHEDULE_TOPIC, DLQ), "5.x": (SCHEDULE_TOPIC, RETRY)}


def test_a_5x_dlq_diversion_stores_delay_minus_one_and_is_not_delayed(make_broker):
    """handleRetryAndDLQ @5.3.3 puts DELAY=-1 on a diverted send: the DLQ copy is stored at once
    in %DLQ%group, where 4.9.4 keeps the client's DELAY and parks it in the schedule topic."""
    landed = {}
    for semantics in ("4.9", "5.x"):
        broker, sim, _ = make_broker(semantics.replace(".", ""), semantics=semantics)
        broker.subscription_group(GROUP)
        resp = broker.send_message(SendRequest(
            RETRY, 0, b"b", {"UNIQ_KEY": "U", "RECONSUME_TIME": "3", "DELAY": "5"},
            born_ts=sim.now(), born_host=CLIENT_HOST, reconsume_times=3, max_reconsume_times=2))
        record = broker.store.look_message_by_offset(resp.phys_offset)
        landed[semantics] = (resp.topic, record.properties["DELAY"])
    assert landed == {"4.9": (SCHEDULE_TOPIC, "5"), "5.x": (DLQ, "-1")}


def test_a_5x_delayed_record_is_delivered_with_the_5x_format(make_broker):
    """messageTimeUp @5.3.3 re-serializes the schedule record's map (HashMap(128), trailing \\x02):
    the delivered retry keeps the schedule record's order and separator."""
    broker, sim, _ = make_broker(semantics="5.x")
    sent = _publish(broker, sim)
    back = broker.consumer_send_msg_back(sent.phys_offset, GROUP, 1)
    schedule = broker.store.look_message_by_offset(back.phys_offset)
    sim.run(stop=lambda: broker.store.max_offset(RETRY, 0) > 0)
    retry = broker.pull_message(GROUP, RETRY, 0, 0, 1).records[0]
    assert _keys(retry.properties) == _keys(schedule.properties)
    assert retry.properties_trailing_separator and retry.store_host == broker.config.store_host


# --- timer messages (5.x only) -------------------------------------------------------------------

def _send_timer(broker, sim, **timer):
    broker.create_topic("TimerTopic", 4)
    props = {"TAGS": "t", "KEYS": "timer-0", "WAIT": "true", **timer, "UNIQ_KEY": "UK-T"}
    resp = broker.send_message(SendRequest("TimerTopic", 1, b"timer body", props, born_ts=sim.now(),
                                           born_host=CLIENT_HOST))
    assert resp.ok, resp
    return resp


def test_a_timer_goes_through_the_wheel_topic_and_is_delivered_after_its_slot(make_broker):
    """HookUtils.transformTimerMessage @5.3.3: TIMER_DELAY_MS=3000 sent at ...967 is stored in
    rmq_sys_wheel_timer[0] with TIMER_OUT_MS rounded down to the second, REAL_TOPIC, REAL_QID; the
    wheel delivers it one second after TIMER_OUT_MS (a real 5.3.3 broker: 1.0 to 1.1 s) into the
    real topic, keeping every timer property and REAL_*, adding TIMER_ENQUEUE_MS/TIMER_DEQUEUE_MS."""
    broker, sim, _ = make_broker(semantics="5.x")
    sim.at(sim.now() + 967, lambda: None)  # send at ...967, as the real broker's run did
    sim.run(until_ms=sim.now() + 967)
    sent_at = sim.now()
    assert sent_at % 1000 == 967
    resp = _send_timer(broker, sim, TIMER_DELAY_MS="3000")
    assert (resp.topic, resp.queue_id) == ("rmq_sys_wheel_timer", 0)
    first = broker.store.look_message_by_offset(resp.phys_offset)
    out_ms = (sent_at + 3000) // 1000 * 1000
    assert first.properties["TIMER_OUT_MS"] == str(out_ms)
    assert (first.properties["REAL_TOPIC"], first.properties["REAL_QID"]) == ("TimerTopic", "1")
    sim.run(stop=lambda: broker.store.max_offset("TimerTopic", 1) > 0)
    delivered = broker.pull_message("g", "TimerTopic", 1, 0, 1).records[0]
    assert delivered.store_ts == out_ms + 1000
    assert delivered.properties["TIMER_DELAY_MS"] == "3000" and "DELAY" not in delivered.properties
    assert delivered.properties["TIMER_ENQUEUE_MS"] == str(sent_at // 1000 * 1000)
    assert delivered.properties["TIMER_DEQUEUE_MS"] == str(out_ms + 1000)
    assert delivered.properties["REAL_TOPIC"] == "TimerTopic" and delivered.properties_trailing_separator
    assert (delivered.born_host, delivered.store_host) == (first.born_host, first.store_host)
    assert broker.timer.delivered == 1 and broker.timer.pending == 0


def test_timer_edges_follow_5_3_3(make_broker):
    """An aligned due time moves one slot earlier; a past deliver time is stored in its own topic
    as it is; a timer beyond timerMaxDelaySec or not a number is refused (MESSAGE_ILLEGAL)."""
    broker, sim, _ = make_broker(semantics="5.x")
    now = sim.now()
    assert now % 1000 == 0
    aligned = _send_timer(broker, sim, TIMER_DELIVER_MS=str(now + 5000))
    assert broker.store.look_message_by_offset(aligned.phys_offset).properties["TIMER_OUT_MS"] == str(now + 4000)
    past = _send_timer(broker, sim, TIMER_DELIVER_MS=str(now - 1000))
    assert past.topic == "TimerTopic"
    assert "TIMER_OUT_MS" not in broker.store.look_message_by_offset(past.phys_offset).properties
    far = broker.send_message(SendRequest("TimerTopic", 0, b"b", {"UNIQ_KEY": "U2", "TIMER_DELAY_SEC": "259201"},
                                          born_ts=now, born_host=CLIENT_HOST))
    bad = broker.send_message(SendRequest("TimerTopic", 0, b"b", {"UNIQ_KEY": "U3", "TIMER_DELAY_MS": "soon"},
                                          born_ts=now, born_host=CLIENT_HOST))
    assert not far.ok and not bad.ok


def test_a_delay_level_clears_the_timer_and_4_9_ignores_it(make_broker):
    """checkIfTimerMessage @5.3.3: with DELAY > 0 the timer properties are dropped and the level
    wins (the send-back of a delivered timer message); 4.9.4 stores a timer message at once."""
    broker, sim, _ = make_broker(semantics="5.x")
    both = _send_timer(broker, sim, TIMER_DELAY_MS="3000", DELAY="1")
    record = broker.store.look_message_by_offset(both.phys_offset)
    assert both.topic == SCHEDULE_TOPIC and "TIMER_DELAY_MS" not in record.properties
    old, sim4, _ = make_broker("four")
    plain = _send_timer(old, sim4, TIMER_DELAY_MS="3000")
    assert plain.topic == "TimerTopic" and old.timer is None


# --- timer rolls (5.x only) ----------------------------------------------------------------------

def _wheel_records(broker, key: str) -> list:
    """The records of message ``key`` in rmq_sys_wheel_timer[0], in queue order."""
    high = broker.store.max_offset("rmq_sys_wheel_timer", 0)
    records = broker.pull_message("g", "rmq_sys_wheel_timer", 0, 0, high).records if high else []
    return [r for r in records if r.properties.get("UNIQ_KEY") == key]


def _send_at(sim, offset_ms: int) -> int:
    """Move the clock to ``offset_ms`` past the next whole second; the time reached."""
    target = (sim.now() // 1000 + 1) * 1000 + offset_ms
    sim.at(target, lambda: None)
    sim.run(until_ms=target)
    return sim.now()


@pytest.mark.parametrize("rules", ["5.x", "5.4"])
def test_a_timer_two_windows_ahead_rolls_twice_at_plus_6_and_12_s_then_is_delivered(make_broker, rules):
    """TimerMessageStore.doEnqueue @5.3.3 with timerRollWindowSlot=5: a timer 14 s ahead is parked
    one window ahead and rolled when the wheel passes that slot (+6 s, +12 s, as the real 5.3.3
    broker did), each roll a new rmq_sys_wheel_timer[0] record with TIMER_ENQUEUE_MS (the previous
    record's enqueue slot), TIMER_ROLL_TIMES 1 then 2, TIMER_DEQUEUE_MS and REAL_TOPIC/REAL_QID
    kept; the delivery carries the last roll count. The 5.4 rules roll alike."""
    broker, sim, _ = make_broker(semantics=rules, timer_roll_window_slot=5)
    sent_at = _send_at(sim, 967)
    w0 = sent_at // 1000 * 1000
    _send_timer(broker, sim, TIMER_DELAY_SEC="14")
    out_ms = (sent_at + 14_000) // 1000 * 1000
    assert out_ms == w0 + 14_000
    sim.run(stop=lambda: broker.store.max_offset("TimerTopic", 1) > 0)
    first, roll1, roll2 = _wheel_records(broker, "UK-T")
    assert [r.store_ts - w0 for r in (first, roll1, roll2)] == [967, 6000, 12_000]
    assert "TIMER_ROLL_TIMES" not in first.properties and "TIMER_ENQUEUE_MS" not in first.properties
    for roll, count, enqueued in ((roll1, "1", w0), (roll2, "2", w0 + 6000)):
        p = roll.properties
        assert (roll.topic, roll.queue_id) == ("rmq_sys_wheel_timer", 0)
        assert p["TIMER_ROLL_TIMES"] == count and p["TIMER_ENQUEUE_MS"] == str(enqueued)
        assert p["TIMER_DEQUEUE_MS"] == str(roll.store_ts) and p["TIMER_OUT_MS"] == str(out_ms)
        assert (p["REAL_TOPIC"], p["REAL_QID"], p["TIMER_DELAY_SEC"]) == ("TimerTopic", "1", "14")
        assert p["UNIQ_KEY"] == "UK-T" and p["WAIT"] == "true"
        assert (roll.body, roll.born_ts, roll.born_host, roll.store_host) == \
            (first.body, first.born_ts, first.born_host, first.store_host)
    # The map's order: HashMap(128) of the record read back, the new keys where they hash.
    assert _keys(roll2.properties) == _keys(JavaHashMap.from_items(roll2.properties.items(), 128))
    delivered = broker.pull_message("g", "TimerTopic", 1, 0, 1).records[0]
    assert delivered.store_ts == out_ms + 1000
    assert delivered.properties["TIMER_ROLL_TIMES"] == "2"
    assert delivered.properties["TIMER_ENQUEUE_MS"] == str(w0 + 12_000)
    assert (broker.timer.rolled, broker.timer.delivered, broker.timer.pending) == (2, 1, 0)


def test_a_timer_just_over_a_window_is_parked_half_a_window(make_broker):
    """doEnqueue @5.3.3: when what is left after one window is under a third of it (5 // 3 slots),
    the roll is parked half a window (5 // 2 slots) ahead instead, "to give enough time to the next
    roll"; a timer under one window ahead does not roll."""
    broker, sim, _ = make_broker(semantics="5.x", timer_roll_window_slot=5)
    sent_at = _send_at(sim, 0)
    _send_timer(broker, sim, TIMER_DELIVER_MS=str(sent_at + 5500))  # TIMER_OUT_MS = +5 s: one window
    sim.run(stop=lambda: broker.store.max_offset("TimerTopic", 1) > 0)
    first, roll = _wheel_records(broker, "UK-T")
    assert roll.store_ts - sent_at == 3000 and roll.properties["TIMER_ROLL_TIMES"] == "1"
    delivered = broker.pull_message("g", "TimerTopic", 1, 0, 1).records[0]
    assert delivered.store_ts - sent_at == 6000 and delivered.properties["TIMER_ENQUEUE_MS"] == str(sent_at + 3000)

    short, sim2, _ = make_broker("short", semantics="5.x", timer_roll_window_slot=5)
    _send_timer(short, sim2, TIMER_DELAY_MS="4999")
    sim2.run(stop=lambda: short.store.max_offset("TimerTopic", 1) > 0)
    assert len(_wheel_records(short, "UK-T")) == 1 and short.timer.rolled == 0


def test_a_roll_that_reaches_the_wheel_after_its_slot_is_delivered_at_once_never_enqueued(make_broker):
    """putMessageToTimerWheel @5.3.3: a record whose TIMER_OUT_MS is before the wheel's write time is
    put at once with TIMER_ENQUEUE_MS Long.MAX_VALUE; with a 2-slot window a timer 2 s ahead is parked
    2 slots ahead, rolls in its own due slot, and its roll is delivered at once."""
    broker, sim, _ = make_broker(semantics="5.x", timer_roll_window_slot=2)
    sent_at = _send_at(sim, 0)
    _send_timer(broker, sim, TIMER_DELIVER_MS=str(sent_at + 2500))
    sim.run(stop=lambda: broker.store.max_offset("TimerTopic", 1) > 0)
    first, roll = _wheel_records(broker, "UK-T")
    delivered = broker.pull_message("g", "TimerTopic", 1, 0, 1).records[0]
    assert roll.store_ts == delivered.store_ts == sent_at + 3000
    assert delivered.properties["TIMER_ENQUEUE_MS"] == "9223372036854775807"
    assert delivered.properties["TIMER_ROLL_TIMES"] == "1"


def test_a_roll_window_the_broker_would_replace_is_refused(make_broker):
    """TimerMessageStore's constructor replaces a timerRollWindowSlot under 2 or over 7 days less 60
    slots; the model takes only windows the broker keeps."""
    with pytest.raises(BadInputError, match="timerRollWindowSlot 1 is outside 2..604740"):
        make_broker(semantics="5.x", timer_roll_window_slot=1)


@pytest.mark.parametrize(("rules", "delete_key"), [("5.x", "TimerTopic+UK-T"), ("5.4", "UK-T")])
def test_a_recalled_timer_is_dropped_by_the_wheel_with_its_recall_record(make_broker, rules, delete_key):
    """RecallMessageProcessor @5.3.3: the send answers with a handle (TIMER_OUT_MS + 1); the recall
    record is a wheel record with the message's UNIQ_KEY, TAGS _RECALL_TAG_, TIMER_DEL_UNIQKEY
    (<topic>+<uniqKey> on 5.3.3, the bare UNIQ_KEY on 5.4+, as real 5.3.3 and 5.5.0 brokers
    wrote), body "0", born at the client, the message's TIMER_OUT_MS; at that slot the wheel puts
    neither, and the topic never sees the message."""
    broker, sim, _ = make_broker(semantics=rules)
    resp = _send_timer(broker, sim, TIMER_DELAY_SEC="4")
    first = broker.store.look_message_by_offset(resp.phys_offset)
    handle = resp.recall_handle
    assert (handle.topic, handle.uniq_key) == ("TimerTopic", "UK-T")
    assert handle.timestamp_ms == int(first.properties["TIMER_OUT_MS"]) + 1
    sim.run(until_ms=sim.now() + 500)
    recalled = broker.recall_message("TimerTopic", handle, producer_group="pg", born_host=CLIENT_HOST)
    assert recalled.ok, recalled
    original, recall = _wheel_records(broker, "UK-T")
    assert recall.body == b"0" and recall.born_host == CLIENT_HOST
    p = recall.properties
    assert (p["TAGS"], p["TIMER_DEL_UNIQKEY"], p["PGROUP"]) == ("_RECALL_TAG_", delete_key, "pg")
    assert p["TIMER_OUT_MS"] == first.properties["TIMER_OUT_MS"] and p["TIMER_DELIVER_MS"] == str(handle.timestamp_ms)
    assert (p["REAL_TOPIC"], p["REAL_QID"]) == ("TimerTopic", "0")
    sim.run(until_ms=handle.timestamp_ms + 5000)
    assert broker.store.max_offset("TimerTopic", 1) == 0 and broker.store.max_offset("TimerTopic", 0) == 0
    assert (broker.timer.recalled, broker.timer.delivered, broker.timer.pending) == (1, 0, 0)
    # Too late: the handle's time has passed.
    late = broker.recall_message("TimerTopic", handle, producer_group="pg", born_host=CLIENT_HOST)
    assert (late.code, late.remark) == (604, "recall failed, timestamp invalid")


def test_a_recall_taken_in_another_roll_slot_is_lost_and_the_timer_delivered(make_broker):
    """A timer 14 s ahead with a 5-slot window is parked 5 s ahead of the second the wheel took it;
    a recall made two seconds later waits in another slot, and a roll slot's recall records are
    dropped, not rolled (dequeue @5.3.3): the message rolls on and is delivered. A recall in the
    same second meets the record and both are dropped."""
    broker, sim, _ = make_broker(semantics="5.x", timer_roll_window_slot=5)
    _send_at(sim, 100)
    resp = _send_timer(broker, sim, TIMER_DELAY_SEC="14")
    sim.run(until_ms=sim.now() + 2000)
    assert broker.recall_message("TimerTopic", resp.recall_handle, producer_group="pg", born_host=CLIENT_HOST).ok
    sim.run(stop=lambda: broker.store.max_offset("TimerTopic", 1) > 0)
    assert broker.store.max_offset("TimerTopic", 1) == 1 and broker.timer.recalled == 0

    broker, sim, _ = make_broker("b2", semantics="5.x", timer_roll_window_slot=5)
    _send_at(sim, 100)
    resp = _send_timer(broker, sim, TIMER_DELAY_SEC="14")
    sim.run(until_ms=sim.now() + 300)
    assert broker.recall_message("TimerTopic", resp.recall_handle, producer_group="pg", born_host=CLIENT_HOST).ok
    sim.run(until_ms=sim.now() + 20_000)
    assert broker.store.max_offset("TimerTopic", 1) == 0 and broker.timer.recalled == 1
