"""The scenario loader: defaults, value formats, and every way a scenario can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.constants import SIM_MESSAGES_MAX
from broker_core.delay_levels import parse_delay_levels
from broker_core.errors import ScenarioError
from broker_core.sim.scenario import (
    DURATION_UNITS_MS,
    load_scenario,
    load_scenario_text,
    parse_duration_ms,
    parse_rate_per_s,
    parse_size_bytes,
)

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"

BASE = """\
name: t
topics:
  - {name: OrderTopic, queues: 4}
groups:
  - name: g1
    subscribe: [OrderTopic]
producers:
  - {topic: OrderTopic, messages: 10}
"""


def error_of(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(text, source="s.yaml")
    return info.value


def test_every_shipped_scenario_loads():
    """Every scenario in scenarios/ passes validation."""
    files = sorted(SCENARIOS.glob("*.yaml"))
    assert files, "no scenarios shipped"
    for path in files:
        scenario = load_scenario(path)
        assert scenario.name == path.stem, f"{path.name}: name {scenario.name} differs from the file name"


def test_defaults_fill_every_field():
    """A scenario naming only what it needs gets RocketMQ's defaults for the rest."""
    s = load_scenario_text(BASE)
    g = s.groups[0]
    assert (g.model, g.mode, g.consumers, g.max_reconsume_times) == ("clustering", "concurrently", 1, -1)
    assert g.consume_timeout_ms == 15 * 60 * 1000  # RocketMQ's consumeTimeout: 15 minutes
    assert s.broker.delay_levels_ms[0] == 1000 and len(s.broker.delay_levels_ms) == 18
    assert s.producers[0].delay_weights == ((0, 1.0),)
    assert s.producers[0].send == "sync"


def test_value_formats():
    """Durations, sizes, rates and delay-level tables read as documented."""
    assert parse_duration_ms("1h10m") == 4_200_000
    assert parse_duration_ms("5ms") == 5
    assert parse_duration_ms("2d") == 2 * DURATION_UNITS_MS["d"]
    assert parse_duration_ms("-30s", signed=True) == -30_000
    assert parse_size_bytes("64MiB") == 64 * 1024 * 1024
    assert parse_size_bytes(4096) == 4096
    assert parse_rate_per_s("1000/s") == 1000.0
    assert parse_rate_per_s("120/m") == 2.0
    assert parse_delay_levels("1s 5s 2m 1h 1d") == (1000, 5000, 120_000, 3_600_000, 86_400_000)


def test_delay_level_weight_table():
    """delay_level may be a weight table {level: weight}, kept sorted by level."""
    s = load_scenario_text(BASE.replace("messages: 10}", "messages: 10, delay_level: {3: 0.1, 0: 0.9}}"))
    assert s.producers[0].delay_weights == ((0, 0.9), (3, 0.1))


@pytest.mark.parametrize("text", ["30x", "1h1h", "10m1h", "h", "1.5h", "", "30"])
def test_bad_durations(text):
    """A duration with an unknown unit, repeated or out-of-order units, or no unit is refused."""
    with pytest.raises(ValueError):
        parse_duration_ms(text)


# (replacement applied to BASE, expected line, words the message must contain)
ERROR_CASES = [
    ("name: t\n", "name: t\nbogus: 1\n", 2, ["bogus", "unknown key"]),
    ("name: t\n", "name: a b\n", 1, ["name", "'a b'"]),
    ("name: t\n", "name: t\nhorizon: 30x\n", 2, ["horizon", "'30x'", "duration"]),
    ("name: t\n", "name: t\nhorizon: 1h1h\n", 2, ["horizon", "largest to smallest"]),
    ("name: t\n", "name: t\nhorizon: 100d\n", 2, ["horizon", "outside"]),
    ("name: t\n", "name: t\nseed: -1\n", 2, ["seed", "-1"]),
    ("name: t\n", "name: t\nseed: abc\n", 2, ["seed", "not an integer"]),
    ("name: t\n", "name: t\nbroker: {commitlog_file_size: 64MB}\n", 2, ["commitlog_file_size", "64MB"]),
    ("name: t\n", "name: t\nbroker: {commitlog_file_size: 1KiB}\n", 2, ["commitlog_file_size", "outside"]),
    ("name: t\n", "name: t\nbroker: {message_delay_level: \"1s  5s\"}\n", 2,
     ["broker.message_delay_level: '1s  5s' token 2 is empty (two spaces, or a leading or trailing space)"]),
    ("name: t\n", "name: t\nbroker: {message_delay_level: \"1s 5S\"}\n", 2,
     ["broker.message_delay_level: '1s 5S' token 2 '5S' does not end in a unit s, m, h or d (lowercase)"]),
    ("name: t\n", "name: t\nbroker: {message_delay_level: \"1s xs\"}\n", 2,
     ["broker.message_delay_level: '1s xs' token 2 'xs' is not a whole number of s"]),
    ("name: t\n", "name: t\nbroker: {flush: fast}\n", 2, ["broker.flush", "fast", "async | sync"]),
    ("name: t\n", "name: t\nbroker: {store_host: 10.0.0.300:1}\n", 2, ["store_host"]),
    ("queues: 4", "queues: -1", 3, ["topics[0].queues", "-1"]),
    ("queues: 4", "queues: 100000", 3, ["topics[0].queues", "100000"]),
    ("queues: 4", "queues: four", 3, ["topics[0].queues", "not an integer"]),
    ("{name: OrderTopic, queues: 4}", "{name: 'Bad Topic'}", 3, ["topics[0].name", "illegal characters"]),
    ("{name: OrderTopic, queues: 4}", "{name: SCHEDULE_TOPIC_XXXX}", 3, ["system"]),
    ("{name: OrderTopic, queues: 4}", "{name: '%RETRY%g1'}", 3, ["retry"]),
    ("  - {name: OrderTopic, queues: 4}\n", "  - {name: OrderTopic}\n  - {name: OrderTopic}\n", 4,
     ["topics[1].name", "twice"]),
    ("  - name: g1\n", "  - name: 'g 1'\n", 5, ["groups[0].name", "illegal characters"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [NoSuchTopic]\n", 6, ["subscribe[0]", "NoSuchTopic",
                                                                             "not a declared topic"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: OrderTopic\n", 6, ["subscribe", "list"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [OrderTopic]\n    model: cluster\n", 7,
     ["model", "cluster"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [OrderTopic]\n    consumers: 9999\n", 7, ["consumers"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [OrderTopic]\n    max_reconsume_times: -2\n", 7,
     ["max_reconsume_times", "-2"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [OrderTopic]\n    behavior: {fail_probability: 1.5}\n", 7,
     ["fail_probability", "1.5", "probability"]),
    ("    subscribe: [OrderTopic]\n",
     "    subscribe: [OrderTopic]\n    behavior: {fail_probability: 0.6, exception_probability: 0.6}\n", 7,
     ["add up"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [OrderTopic]\n    behavior: {sleep: 1s}\n", 7,
     ["behavior.sleep", "unknown key"]),
    ("    subscribe: [OrderTopic]\n", "    subscribe: [OrderTopic]\n  - name: g1\n    subscribe: [OrderTopic]\n",
     7, ["groups[1].name", "twice"]),
    ("messages: 10}", "messages: -5}", 8, ["producers[0].messages", "-5"]),
    ("messages: 10}", f"messages: {SIM_MESSAGES_MAX + 1}}}", 8, ["messages"]),
    ("messages: 10}", "messages: 10, rate: 1000}", 8, ["rate", "1000"]),
    ("messages: 10}", "messages: 10, rate: 1000/x}", 8, ["rate", "1000/x"]),
    ("messages: 10}", "messages: 10, rate: 0/s}", 8, ["rate", "above 0"]),
    ("messages: 10}", "messages: 10, body_size: 0}", 8, ["body_size", "outside"]),
    ("messages: 10}", "messages: 10, body_size: 64MiB}", 8, ["body_size", "outside"]),
    ("messages: 10}", "messages: 10, delay_level: 19}", 8, ["delay_level", "19"]),
    ("messages: 10}", "messages: 10, delay_level: {0: 0, 3: 0}}", 8, ["delay_level", "weight above 0"]),
    ("messages: 10}", "messages: 10, delay_level: {0: -1}}", 8, ["delay_level", "weight"]),
    ("messages: 10}", "messages: 10, send: maybe}", 8, ["send", "maybe"]),
    ("{topic: OrderTopic, messages: 10}", "{topic: Nope, messages: 10}", 8, ["producers[0].topic", "Nope"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: meteor}\n", 10, ["kind", "meteor"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {kind: broker_crash}\n", 10, ["faults[0].at", "required"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: broker_crash, probability: 1}\n", 10,
     ["probability", "unknown key"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {from: 2m, to: 1m, kind: put_failure}\n", 10,
     ["faults[0].to", "after from"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: consumer_crash, group: nope}\n", 10,
     ["group", "nope"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: consumer_crash, group: g1, consumer: 3}\n",
     10, ["consumer", "3"]),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: clock_jump, delta: 5x}\n", 10,
     ["delta", "5x"]),
]


@pytest.mark.parametrize("old,new,line,words", ERROR_CASES,
                         ids=[f"{i}-{c[3][0]}" for i, c in enumerate(ERROR_CASES)])
def test_scenario_errors_name_key_value_and_line(old, new, line, words):
    """Each scenario mistake is a ScenarioError naming the key, the value, the file and the line."""
    assert old in BASE, f"test case does not apply: {old!r}"
    err = error_of(BASE.replace(old, new, 1))
    assert err.where == f"s.yaml:{line}", f"{err} (expected line {line})"
    for word in words:
        assert word in str(err), f"{word!r} not in {err}"


def test_duplicate_yaml_key_is_an_error():
    """A key given twice in one mapping is refused instead of silently keeping the last."""
    err = error_of(BASE + "seed: 1\nseed: 2\n")
    assert "twice" in str(err) and err.where == "s.yaml:10"


def test_name_is_required_and_empty_file_is_refused(tmp_path):
    """An empty scenario or one without a name is refused."""
    assert "empty" in str(error_of(""))
    assert "name" in str(error_of("seed: 3\n"))


def test_yaml_syntax_error_has_a_line():
    """Malformed YAML is reported with its line, not as a traceback."""
    err = error_of("name: t\ntopics: [\n  {name: A\n")
    assert err.where.startswith("s.yaml:") and "not valid YAML" in str(err)


def test_missing_file_and_directory(tmp_path):
    """A missing scenario file or a directory is a ScenarioError naming the path."""
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "nope.yaml")
    assert "not found" in str(info.value) and "nope.yaml" in str(info.value)
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path)


def test_errors_from_a_file_name_the_file(tmp_path):
    """Errors read from a file carry that file's path and the line."""
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace("queues: 4", "queues: 0"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.where == f"{path}:3"


def test_with_seed_overrides_and_checks():
    """--seed replaces the scenario's seed and is range-checked."""
    s = load_scenario_text(BASE)
    assert s.with_seed(9).seed == 9
    with pytest.raises(ScenarioError):
        s.with_seed(-1)


def test_with_messages_keeps_each_producers_share():
    """with_messages(n) scales the producers to n in all, in their proportions, nothing else."""
    s = load_scenario_text(BASE.replace("  - {topic: OrderTopic, messages: 10}",
                                        "  - {topic: OrderTopic, messages: 10}\n"
                                        "  - {topic: OrderTopic, messages: 30, rate: 50/s}"))
    scaled = s.with_messages(1001)
    assert [p.messages for p in scaled.producers] == [251, 750]
    assert scaled.producers[1].rate_per_s == 50.0 and scaled.scaled_messages == 1001
    assert scaled.groups == s.groups and scaled.seed == s.seed
    assert s.with_messages(0).messages_total == 0


@pytest.mark.parametrize("total", [-1, SIM_MESSAGES_MAX + 1])
def test_with_messages_refuses_impossible_counts(total):
    with pytest.raises(ScenarioError, match="--messages"):
        load_scenario_text(BASE).with_messages(total)


def test_with_name_checks_the_run_name():
    assert load_scenario_text(BASE).with_name("big-s3").name == "big-s3"
    with pytest.raises(ScenarioError, match="run name"):
        load_scenario_text(BASE).with_name("../x")


# Cases where the order of the checks decides the message (the first mistake is the one reported).
ORDER_CASES = [
    # An unknown key is reported before the required key it was probably meant to be.
    ("{name: OrderTopic, queues: 4}", "{nmae: OrderTopic, queues: 4}", 3,
     "topics[0].nmae: unknown key; expected one of name, queues"),
    # A value YAML cannot construct under an unknown key: the key is the mistake.
    ("name: t\n", "name: t\nbogus: !!binary 'zz'\n", 2,
     "bogus: unknown key; expected one of broker, faults, groups, horizon, name, producers, seed, topics"),
    # A mapping where one value belongs is that mistake, whatever its keys are.
    ("queues: 4", "queues: {0: 1}", 3, "topics[0].queues: expected a single value, not a list or mapping"),
    ("messages: 10}", "messages: 10, delay_level: {1: [2]}}", 8,
     "producers[0].delay_level[1]: expected a single value, not a list or mapping"),
    ("messages: 10}", "messages: 10, delay_level: {1: 1, 1: 2}}", 8, "producers[0].delay_level: 1 lists a level twice"),
    ("messages: 10}", "messages: 10, delay_level: {19: 1}}", 8, "producers[0].delay_level level: 19 is outside 0..18"),
    # A fault's start is bounded by the scenario's horizon, and the message says so.
    ("name: t\n", "name: t\nhorizon: 1m\nfaults: [{at: 2m, kind: broker_crash}]\n", 3,
     "faults[0].at: '2m' is outside 0..60000 ms"),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: burst}\n", 10, "faults[0].topic: is required for a burst"),
    ("messages: 10}\n", "messages: 10}\nfaults:\n  - {at: 1m, kind: consumer_crash, group: g1, consumer: -1}\n", 10,
     "faults[0].consumer: -1 is outside 0..0"),
]


@pytest.mark.parametrize("old,new,line,message", ORDER_CASES, ids=[c[3].split(":")[0] for c in ORDER_CASES])
def test_first_mistake_is_reported_whole(old, new, line, message):
    """The first mistake in the file is reported with its exact message and line."""
    assert old in BASE, f"test case does not apply: {old!r}"
    err = error_of(BASE.replace(old, new, 1))
    assert (err.where, str(err)) == (f"s.yaml:{line}", f"s.yaml:{line}: {message}")


@pytest.mark.parametrize("kind", ["broker_crash", "torn_write"])
def test_a_fault_5x_rules_cannot_play_is_refused_at_its_line(kind):
    """Under broker semantics "5.x" a broker kill (whose 5.x recovery is not modelled) is refused
    naming the file, the line, the key and the reason; the same fault loads under "4.9"."""
    text = BASE + f"faults:\n  - {{at: 1s, kind: {kind}}}\n"
    err = error_of(text.replace("name: t\n", 'name: t\nbroker: {semantics: "5.x"}\n'))
    assert str(err).startswith("s.yaml:11: faults[0].kind: ")
    assert f"'{kind}' is not modelled under broker semantics '5.x'" in str(err)
    assert "confirmPhyOffset" in str(err)
    assert load_scenario_text(text, source="s.yaml").faults[0].kind == kind
    restart = BASE.replace("name: t\n", 'name: t\nbroker: {semantics: "5.x"}\n') + \
        "faults:\n  - {at: 1s, kind: broker_restart}\n"
    assert load_scenario_text(restart, source="s.yaml").broker.semantics == "5.x"


FIVE_X = BASE.replace("name: t\n", 'name: t\nbroker: {semantics: "5.x"}\n')


def test_a_timer_table_loads_under_5x_rules():
    """producers[].timer takes a delay or a weight table of delays (0s: no timer) under "5.x"."""
    one = load_scenario_text(FIVE_X.replace("messages: 10}", "messages: 10, timer: 3s}"), source="s.yaml")
    assert one.producers[0].timer_weights == ((3000, 1.0),)
    table = FIVE_X.replace("messages: 10}", "messages: 10, timer: {0s: 0.5, 3s: 0.3, 1m: 0.2}}")
    assert load_scenario_text(table, source="s.yaml").producers[0].timer_weights == \
        ((0, 0.5), (3000, 0.3), (60000, 0.2))
    assert load_scenario_text(BASE, source="s.yaml").producers[0].timer_weights == ((0, 1.0),)


def test_a_timer_past_the_roll_window_loads_with_the_window_as_a_broker_setting():
    """broker.timer_roll_window_slot is timerRollWindowSlot (default 172800, the broker's); a timer
    past the window loads (it rolls), up to timerMaxDelaySec."""
    assert load_scenario_text(FIVE_X, source="s.yaml").broker.timer_roll_window_slot == 172_800
    text = FIVE_X.replace('"5.x"}', '"5.x", timer_roll_window_slot: 5}').replace(
        "messages: 10}", "messages: 10, timer: {14s: 1, 3d: 1}}")
    s = load_scenario_text(text, source="s.yaml")
    assert s.broker.timer_roll_window_slot == 5
    assert s.producers[0].timer_weights == ((14_000, 1.0), (259_200_000, 1.0))


@pytest.mark.parametrize("text, line, words", [
    (BASE.replace("messages: 10}", "messages: 10, timer: 3s}"), 8,
     "producers[0].timer: needs broker semantics '5.x': RocketMQ 4.9 has no timer messages"),
    (FIVE_X.replace("messages: 10}", "messages: 10, timer: 3d1s}"), 9,
     "producers[0].timer: '3d1s' is outside 0s..259200s (the broker refuses a timer further ahead"),
    (BASE.replace("name: t\n", "name: t\nbroker: {timer_roll_window_slot: 5}\n"), 2,
     "broker.timer_roll_window_slot: 5 needs broker semantics '5.x': RocketMQ 4.9 has no timer wheel"),
    (FIVE_X.replace('"5.x"}', '"5.x", timer_roll_window_slot: 1}'), 2,
     "broker.timer_roll_window_slot"),
    (FIVE_X.replace("messages: 10}", "messages: 10, timer: 3s, delay_level: 2}"), 9,
     "producers[0].timer: cannot be combined with delay_level"),
    (FIVE_X.replace("messages: 10}", "messages: 10, timer: 3s}") + "faults:\n  - {at: 1s, kind: broker_restart}\n",
     11, "faults[0].kind: 'broker_restart' is not modelled with timer messages"),
    (FIVE_X.replace("messages: 10}", "messages: 10, timer: {3s: 1, 3000ms: 1}}"), 9,
     "lists a timer twice"),
    (FIVE_X.replace("messages: 10}", "messages: 10, recall: 0.5}"), 9,
     "producers[0].recall: 0.5 needs timer messages to recall"),
    (FIVE_X.replace("messages: 10}", "messages: 10, timer: 3s, recall: 1.5}"), 9, "producers[0].recall"),
])
def test_a_timer_the_rules_cannot_play_is_refused_at_its_line(text, line, words):
    """A timer under 4.9, past timerMaxDelaySec, with a delay level, with a broker restart, or listed
    twice, a roll window under 4.9 or one the broker would replace, and a recall without timers or
    above 1, are refused naming the file, the line and the key."""
    err = str(error_of(text))
    assert err.startswith(f"s.yaml:{line}: "), err
    assert words in err, err


def test_a_transaction_table_loads_with_the_brokers_transaction_settings():
    """producers[].transaction takes a decision or a weight table of decisions (commit, rollback,
    unknown, commit@N, rollback@N); the broker's check settings default to RocketMQ's."""
    one = load_scenario_text(BASE.replace("messages: 10}", "messages: 10, transaction: commit@2}"), source="s.yaml")
    assert one.producers[0].transaction_weights == (("commit@2", 1.0),)
    assert one.broker.transaction_check_interval_ms is None and one.broker.transaction_timeout_ms == 6000
    assert one.broker.transaction_check_max == 15
    table = BASE.replace("name: t\n", "name: t\nbroker: {transaction_check_interval: 2s, transaction_check_max: 3}\n") \
        .replace("messages: 10}", "messages: 10, transaction: {unknown: 1, commit: 3, rollback@1: 0.5}}")
    s = load_scenario_text(table, source="s.yaml")
    assert s.producers[0].transaction_weights == (("commit", 3.0), ("rollback@1", 0.5), ("unknown", 1.0))
    assert (s.broker.transaction_check_interval_ms, s.broker.transaction_check_max) == (2000, 3)
    assert load_scenario_text(BASE, source="s.yaml").producers[0].transaction_weights == ()


@pytest.mark.parametrize("text, line, words", [
    (BASE.replace("messages: 10}", "messages: 10, transaction: maybe}"), 8,
     "producers[0].transaction: 'maybe' is not a transaction decision"),
    (BASE.replace("messages: 10}", "messages: 10, transaction: {commit@0: 1}}"), 8, "commit@0"),
    (BASE.replace("messages: 10}", "messages: 10, transaction: commit, send: async}"), 8,
     "producers[0].send: 'async' is sync for a transactional producer"),
    (FIVE_X.replace("messages: 10}", "messages: 10, transaction: commit, timer: 3s}"), 9,
     "producers[0].transaction: cannot be combined with timer"),
    (BASE.replace("name: t\n", "name: t\nbroker: {transaction_check_max: 0}\n"), 2, "broker.transaction_check_max"),
])
def test_a_transaction_the_model_cannot_play_is_refused_at_its_line(text, line, words):
    """An unknown decision, an async transactional producer, a timer on a transactional message and
    a check maximum under 1 are refused naming the file, the line and the key."""
    err = str(error_of(text))
    assert err.startswith(f"s.yaml:{line}: "), err
    assert words in err, err
