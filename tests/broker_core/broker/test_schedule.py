"""The delay-level scheduler: RocketMQ's ScheduleMessageServiceTest cases and the virtual-clock rules."""

from __future__ import annotations

import random

from broker_core.broker.schedule import correct_deliver_timestamp, message_timeup
from broker_core.broker.send import SendRequest
from broker_core.constants import SCHEDULE_TOPIC
from broker_core.delay_levels import deliver_timestamp, level_to_queue_id, queue_id_to_level
from broker_core.store.config_files import (
    DELAY_OFFSET_FILE,
    load_delay_offsets,
    save_delay_offsets,
)

HOUR_MS = 3_600_000
SIM_START_MS = 1_795_305_600_000  # conftest's start time of make_broker
FIRST_DELAY_MS = 1000  # ScheduleMessageService FIRST_DELAY_TIME
POLL_PERIOD_MS = 100  # DELAY_FOR_A_WHILE: each level is polled this often (4.9.3+)


def rows_of(rows: list[tuple[str, dict]], table: str) -> list[dict]:
    return [row for t, row in rows if t == table]


def _send(broker, sim, topic="schedule_topic_test", level=2, body=b"schedule body", queue_id=0,
          key="k"):
    props = {"TAGS": "schedule_tag", "KEYS": key, "WAIT": "true", "DELAY": str(level),
             "UNIQ_KEY": f"U-{key}"}
    resp = broker.send_message(SendRequest(topic, queue_id, body, props, born_ts=sim.now(),
                                           born_host="192.168.0.10:50000"))
    assert resp.ok, resp
    return resp


def test_deliver_delayed_message_timer_task(make_broker):
    """Level 2 of "5s 8s": not readable in the real topic right away, readable with the same body after 10 s."""
    broker, sim, _ = make_broker(message_delay_level="5s 8s", commitlog_file_size_bytes=1024,
                                 cq_units_per_file=1)
    broker.create_topic("schedule_topic_test", 4)
    resp = _send(broker, sim, level=2)
    assert (resp.topic, resp.queue_id) == (SCHEDULE_TOPIC, level_to_queue_id(2)) == (SCHEDULE_TOPIC, 1)
    now = broker.pull_message("g", "schedule_topic_test", 0, 0, 32)
    assert now.status == "NO_NEW_MSG" and now.records == []
    sim.run(until_ms=sim.now() + 10_000)
    later = broker.pull_message("g", "schedule_topic_test", 0, 0, 32)
    assert later.status == "FOUND"
    assert [r.body for r in later.records] == [b"schedule body"]
    assert broker.store.max_offset("schedule_topic_test", 0) == 1  # TOPIC_PUT_NUMS[topic] == 1


def test_other_rules():
    """queueId2DelayLevel(d) == d+1, computeDeliverTimestamp(999, 0) == 1000 (otherTest)."""
    levels = [1000 * n for n in range(1, 19)]
    for queue_id in range(18):
        assert queue_id_to_level(queue_id) == queue_id + 1
        assert level_to_queue_id(queue_id + 1) == queue_id
    assert deliver_timestamp(levels, 999, 0) == 1000


def test_empty_wrapper_decodes(tmp_path):
    """An empty DelayOffsetSerializeWrapper ("{}") decodes to an empty offset table without error."""
    (tmp_path / DELAY_OFFSET_FILE).write_text("{}")
    assert load_delay_offsets(tmp_path) == {}


def test_correct_delay_offset_when_init(make_broker, tmp_path):
    """Random offsets for levels 1..18 survive encode/decode; correctDelayOffset sets them to 0 on empty queues."""
    rng = random.Random(7)
    table = {level: rng.randrange(-2**63, 2**63) for level in range(1, 19)}
    save_delay_offsets(tmp_path / "cfg", table)
    assert load_delay_offsets(tmp_path / "cfg") == table
    broker, _sim, _ = make_broker()
    broker.schedule.offset_table = dict(table)
    broker.schedule.correct_delay_offset()
    assert broker.schedule.offset_table == {level: 0 for level in range(1, 19)}


def test_correct_deliver_timestamp():
    """A deliver time more than one level delay in the future is corrected to now; others stay."""
    levels = [1000, 5000]
    assert correct_deliver_timestamp(levels, 2, 10_000, 15_000) == 15_000
    assert correct_deliver_timestamp(levels, 2, 10_000, 15_001) == 10_000


def test_deliveries_never_early_and_on_the_poll_grid(make_broker, seed, reproduce):
    """Every delivery happens at or after its due time, on the 100 ms grid, less than 100 ms late."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 4)
    origin = SIM_START_MS + FIRST_DELAY_MS
    rng = random.Random(seed)
    sent = 0
    for n in range(60):
        sim.run(until_ms=sim.now() + rng.randrange(0, 3000))
        _send(broker, sim, topic="T", level=rng.randrange(1, 7), queue_id=n % 4, key=f"m{n}")
        sent += 1
    sim.run(until_ms=sim.now() + HOUR_MS)
    deliveries = rows_of(rows, "schedule_deliveries")
    again = reproduce
    assert len(deliveries) == sent, again
    for row in deliveries:
        assert row["delivered_ts"] >= row["due_ts"], (again, row)
        assert (row["delivered_ts"] - origin) % POLL_PERIOD_MS == 0, (again, row)
        assert 0 <= row["lateness_ms"] < POLL_PERIOD_MS, (again, row)
        assert row["due_ts"] == row["scheduled_store_ts"] + broker.levels_ms[row["delay_level"] - 1]
        assert row["put_attempts"] == 1
    assert sum(broker.store.max_offset("T", q) for q in range(4)) == sent


def test_failed_put_is_retried_at_the_same_offset(make_broker):
    """A failed re-put is retried 100 ms later at the same queue offset; nothing is skipped or doubled."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    for n in range(3):
        _send(broker, sim, topic="T", level=1, key=f"m{n}")
    broker.put_failure_probability = 1.0
    sim.run(until_ms=sim.now() + 1500)  # level 1 (1 s) is due; every put fails
    assert rows_of(rows, "schedule_deliveries") == []
    broker.put_failure_probability = 0.0
    sim.run(until_ms=sim.now() + 1000)
    deliveries = rows_of(rows, "schedule_deliveries")
    assert [r["schedule_queue_offset"] for r in deliveries] == [0, 1, 2]
    first = deliveries[0]
    assert first["put_attempts"] > 1
    assert (first["delivered_ts"] - first["due_ts"]) // POLL_PERIOD_MS == \
        first["put_attempts"] - 1
    assert [r.properties["KEYS"] for r in broker.pull_message("g", "T", 0, 0, 32).records] == \
        ["m0", "m1", "m2"]


def test_idle_levels_cost_no_events(make_broker):
    """A 6 h run holding one 2 h delayed message runs a handful of events, not a poll every 100 ms."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    _send(broker, sim, topic="T", level=18)
    before = sim.events_run
    sim.run(until_ms=sim.now() + 6 * HOUR_MS)
    assert len(rows_of(rows, "schedule_deliveries")) == 1
    assert sim.events_run - before <= 6
    assert broker.schedule.runs == 1


def test_a_put_into_an_idle_level_wakes_it(make_broker):
    """A level that went idle delivers a message put later at its own due time."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    _send(broker, sim, topic="T", level=2, key="a")
    sim.run(until_ms=sim.now() + HOUR_MS)
    _send(broker, sim, topic="T", level=2, key="b")
    due = sim.now() + broker.levels_ms[1]
    sim.run(until_ms=sim.now() + HOUR_MS)
    second = rows_of(rows, "schedule_deliveries")[1]
    assert second["due_ts"] == due and 0 <= second["lateness_ms"] < POLL_PERIOD_MS


def test_trans_half_real_topic_is_dropped(make_broker):
    """A schedule record whose REAL_TOPIC is RMQ_SYS_TRANS_HALF_TOPIC is discarded, not delivered."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    broker.put(dict(topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, body=b"half",
                    properties={"DELAY": "1", "UNIQ_KEY": "H"}, store_host=None,
                    born_ts=sim.now()))
    _send(broker, sim, topic="T", level=1, key="after")
    sim.run(until_ms=sim.now() + 5000)
    deliveries = rows_of(rows, "schedule_deliveries")
    assert [d["real_topic"] for d in deliveries] == ["T"]
    assert broker.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0


def test_message_timeup_keeps_the_schedule_string(make_broker):
    """The re-put's stored string is the schedule copy's (DELAY, REAL_* kept); the map loses DELAY."""
    broker, sim, _ = make_broker()
    broker.create_topic("T", 1)
    resp = _send(broker, sim, topic="T", level=3)
    record = broker.store.look_message_by_offset(resp.phys_offset)
    fields = message_timeup(record)
    assert fields["properties_string"] == "\x02".join(f"{k}\x01{v}" for k, v in record.properties.items())
    assert "DELAY" not in fields["properties"] and fields["delay_level"] == 0
    assert (fields["topic"], fields["queue_id"]) == ("T", 0)


def test_message_timeup_leaves_the_prepared_transaction_offset_at_zero(make_broker):
    """messageTimeup never sets preparedTransactionOffset on the new MessageExtBrokerInner."""
    broker, sim, _ = make_broker()
    broker.create_topic("T", 1)
    resp = _send(broker, sim, topic="T", level=3)
    record = broker.store.look_message_by_offset(resp.phys_offset)
    record.prepared_tx_offset = 4242  # as a committed transaction message's schedule copy carries
    assert message_timeup(record)["prepared_tx_offset"] == 0


def test_delay_offsets_persist_and_restore_across_shutdown(make_broker):
    """delayOffset.json is written on shutdown and read back at start: nothing is delivered twice."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    for n in range(3):
        _send(broker, sim, topic="T", level=1, key=f"m{n}")
    sim.run(until_ms=sim.now() + 3000)
    broker.shutdown()
    assert load_delay_offsets(broker.config_dir) == {1: 3}
    broker.start()
    assert broker.schedule.offset_table == {1: 3}
    sim.run(until_ms=sim.now() + HOUR_MS)
    assert len(rows_of(rows, "schedule_deliveries")) == 3
    assert broker.store.max_offset("T", 0) == 3


def test_delay_offsets_persist_on_the_10s_grid(make_broker):
    """The periodic write happens 10 s after start and every 10 s, only when offsets changed."""
    broker, sim, _ = make_broker()
    broker.create_topic("T", 1)
    _send(broker, sim, topic="T", level=1)
    sim.run(until_ms=SIM_START_MS + 9_999)
    assert broker.schedule.persist_count == 0
    sim.run(until_ms=SIM_START_MS + 10_000)
    assert broker.schedule.persist_count == 1
    assert load_delay_offsets(broker.config_dir) == {1: 1}
    sim.run(until_ms=SIM_START_MS + HOUR_MS)
    assert broker.schedule.persist_count == 1


def test_crash_loses_the_unpersisted_window(make_broker):
    """Deliveries after the last delayOffset.json write are repeated after a crash (duplicates)."""
    broker, sim, rows = make_broker(flush="sync")
    broker.create_topic("T", 1)
    _send(broker, sim, topic="T", level=1, key="persisted")
    sim.run(until_ms=SIM_START_MS + 10_000)  # delivered at ~2 s, persisted at 10 s
    _send(broker, sim, topic="T", level=1, key="lost")
    sim.run(until_ms=sim.now() + 3000)  # delivered, not yet persisted
    assert len(rows_of(rows, "schedule_deliveries")) == 2
    broker.crash()
    assert load_delay_offsets(broker.config_dir) == {1: 1}
    broker.start()
    sim.run(until_ms=sim.now() + 5000)
    keys = [r.properties["KEYS"] for r in broker.pull_message("g", "T", 0, 0, 32).records]
    assert keys == ["persisted", "lost", "lost"]


def test_backward_clock_jump_delivers_far_future_heads_at_once(make_broker):
    """After the clock is turned back by more than a level's delay, its waiting head is delivered at the next poll."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    _send(broker, sim, topic="T", level=3, key="early")  # due in 10 s
    sim.run(until_ms=sim.now() + 2000)
    sim.jump(-60_000)
    broker.on_clock_jump(-60_000)
    sim.run(until_ms=sim.now() + 1000)
    deliveries = rows_of(rows, "schedule_deliveries")
    assert len(deliveries) == 1 and deliveries[0]["lateness_ms"] < 0


def test_small_backward_clock_jump_waits_for_the_due_time(make_broker):
    """A backward jump smaller than the level delay keeps the message until its due time on the new clock."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)
    _send(broker, sim, topic="T", level=4, key="late")  # due in 30 s
    sim.run(until_ms=sim.now() + 10_000)  # 20 s to go; 25 s after the jump, still < 30 s
    sim.jump(-5_000)
    broker.on_clock_jump(-5_000)
    sim.run(until_ms=sim.now() + 120_000)
    (row,) = rows_of(rows, "schedule_deliveries")
    assert row["delivered_ts"] >= row["due_ts"] and row["lateness_ms"] < POLL_PERIOD_MS


def test_puts_made_during_a_delivery_wake_their_level(make_broker):
    """A send-back made synchronously while a level delivers is still delivered, on its own or the same level."""
    broker, sim, rows = make_broker()
    broker.create_topic("T", 1)

    def send_back_on_arrival(topic: str, queue_id: int) -> None:
        if topic == "T":
            offset = broker.store.max_offset("T", 0) - 1
            record = broker.pull_message("g", "T", 0, offset, 1).records[0]
            level = 2 if record.properties["KEYS"] == "other-level" else 1
            assert broker.consumer_send_msg_back(record.phys_offset, "g", level).ok

    broker.on_message_arrival(send_back_on_arrival)
    _send(broker, sim, topic="T", level=1, key="other-level")
    _send(broker, sim, topic="T", level=1, key="same-level")
    sim.run(until_ms=sim.now() + HOUR_MS)
    retried = broker.pull_message("g", "%RETRY%g", 0, 0, 32).records
    assert sorted(r.properties["KEYS"] for r in retried) == ["other-level", "same-level"]
    assert len(rows_of(rows, "schedule_deliveries")) == 4


def test_same_seed_same_deliveries(make_broker, reproduce):
    """Two brokers fed the same sends and failures under one seed record identical delivery rows."""
    runs = []
    for name in ("first", "second"):
        broker, sim, rows = make_broker(name)
        broker.create_topic("T", 2)
        for n in range(20):
            _send(broker, sim, topic="T", level=1 + n % 4, queue_id=n % 2, key=f"m{n}")
        broker.put_failure_probability = 0.3
        sim.run(until_ms=sim.now() + HOUR_MS)
        runs.append(rows_of(rows, "schedule_deliveries"))
    assert runs[0] == runs[1], reproduce
    assert any(r["put_attempts"] > 1 for r in runs[0]), reproduce
