"""Config files: fastjson's dialect and standard JSON in, fastjson PrettyFormat out, .bak fallback."""

from __future__ import annotations

import shutil

import pytest
from testdata import data_path

from broker_core.errors import CorruptStoreError
from broker_core.store.config_files import (
    DataVersion,
    SubscriptionGroupConfig,
    TopicConfig,
    load_consumer_offsets,
    load_delay_offsets,
    load_subscription_groups,
    load_topics,
    parse_config_json,
    read_config,
    save_consumer_offsets,
    save_delay_offsets,
    save_subscription_groups,
    save_topics,
    to_fastjson,
)


@pytest.fixture
def fixture_config(store_fixtures):
    return store_fixtures / "store-clean" / "config"


def test_reads_fixture_delay_offsets(fixture_config):
    """The delayOffset.json written by a 4.9.4 ScheduleMessageService reads as {level: offset}."""
    assert load_delay_offsets(fixture_config) == {3: 22, 4: 8}


def test_rewrites_fixture_delay_offsets_byte_identically(fixture_config, tmp_path):
    """Saving what was loaded reproduces the fixture's delayOffset.json byte for byte."""
    save_delay_offsets(tmp_path, load_delay_offsets(fixture_config))
    expected = (fixture_config / "delayOffset.json").read_bytes()
    assert (tmp_path / "delayOffset.json").read_bytes() == expected
    assert expected == b'{\n\t"offsetTable":{3:22,4:8\n\t}\n}'


def test_save_keeps_previous_content_as_bak_and_leaves_no_tmp(tmp_path):
    """A second save moves the first content to .bak and leaves no .tmp behind (MixAll.string2File)."""
    save_delay_offsets(tmp_path, {1: 5})
    first = (tmp_path / "delayOffset.json").read_bytes()
    save_delay_offsets(tmp_path, {1: 6})
    assert (tmp_path / "delayOffset.json.bak").read_bytes() == first
    assert load_delay_offsets(tmp_path) == {1: 6}
    assert not (tmp_path / "delayOffset.json.tmp").exists()


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
def test_load_falls_back_to_bak(fixture_config, tmp_path, damage):
    """A missing, empty or undecodable file is replaced by its .bak on load (ConfigManager.load)."""
    shutil.copy(fixture_config / "delayOffset.json.bak", tmp_path / "delayOffset.json.bak")
    if damage == "empty":
        (tmp_path / "delayOffset.json").write_bytes(b"")
    elif damage == "garbage":
        (tmp_path / "delayOffset.json").write_bytes(b'{"offsetTable":{3:22,')
    assert load_delay_offsets(tmp_path) == {3: 22, 4: 8}
    loaded = read_config(tmp_path / "delayOffset.json")
    assert loaded.source == tmp_path / "delayOffset.json.bak"
    assert len(loaded.damaged) == (1 if damage == "garbage" else 0)


def test_neither_file_is_an_empty_state(tmp_path):
    """With neither the file nor its .bak present every table loads empty."""
    assert load_delay_offsets(tmp_path) == {}
    assert load_consumer_offsets(tmp_path) == {}
    assert load_topics(tmp_path) == {}
    assert load_subscription_groups(tmp_path) == {}


def test_invalid_json_names_file_and_position(tmp_path):
    """Text that is neither JSON nor fastjson's dialect raises CorruptStoreError with file, line and char."""
    path = tmp_path / "delayOffset.json"
    text = '{\n\t"offsetTable":{3:22,4:}\n}'
    path.write_text(text)
    with pytest.raises(CorruptStoreError) as info:
        load_delay_offsets(tmp_path)
    assert info.value.path == path
    assert info.value.offset == text.index("4:}") + 2  # the '}' where a value should be
    assert f"{path}:2:24" in str(info.value)


def test_wrong_shape_is_a_typed_error(tmp_path):
    """Valid JSON of the wrong shape (a string offset) is reported as damage of that file."""
    (tmp_path / "delayOffset.json").write_text('{"offsetTable":{"3":"x"}}')
    with pytest.raises(CorruptStoreError, match="delayOffset.json"):
        load_delay_offsets(tmp_path)


def test_standard_json_and_fastjson_dialect_read_alike():
    """Quoted keys, bare integer keys and any whitespace give the same table."""
    fast = parse_config_json('{"offsetTable":{3:22 , 4 :8\n\t}}')
    std = parse_config_json('{ "offsetTable" : { "3" : 22, "4": 8 } }')
    assert fast == {"offsetTable": {3: 22, 4: 8}}
    assert std == {"offsetTable": {"3": 22, "4": 8}}


def test_standard_json_consumer_offsets(tmp_path):
    """A consumerOffset.json written as standard JSON (quoted queue ids) loads with int queue ids."""
    (tmp_path / "consumerOffset.json").write_text(
        '{"offsetTable": {"TopicTest@g": {"0": 250, "1": 249}, "%RETRY%g@g": {"0": 3}}}')
    assert load_consumer_offsets(tmp_path) == {"TopicTest@g": {0: 250, 1: 249}, "%RETRY%g@g": {0: 3}}


# consumerOffset.json as a real 5.5.0 broker wrote it (trimmed): bare integer queue ids, each on
# its own line; a broadcasting group's "@broadcast" key; groupTopicMap and pullOffsetTable beside
# the offsetTable.
CONSUMER_OFFSETS_5_5_0 = (
    '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1795665880324\n\t},'
    '\n\t"groupTopicMap":{\n\t\t"order-service":[\n\t\t\t"OrderTopic",\n\t\t\t"%RETRY%order-service"\n\t\t]\n\t},'
    '\n\t"offsetTable":{\n\t\t"OrderTopic@audit-broadcast@broadcast":{\n\t\t\t0:8,\n\t\t\t1:8\n\t\t},'
    '\n\t\t"%RETRY%order-service@order-service":{\n\t\t\t0:9\n\t\t},'
    '\n\t\t"OrderTopic@order-service":{\n\t\t\t0:8,\n\t\t\t1:8\n\t\t}\n\t},'
    '\n\t"pullOffsetTable":{\n\t\t"%RETRY%delay-service@delay-service":{\n\t\t\t0:0\n\t\t}\n\t}\n}')
CONSUMER_OFFSETS_5_5_0_TABLE = {"OrderTopic@audit-broadcast@broadcast": {0: 8, 1: 8},
                                "%RETRY%order-service@order-service": {0: 9},
                                "OrderTopic@order-service": {0: 8, 1: 8}}


@pytest.mark.parametrize("form", ["bare", "quoted"])
def test_5x_consumer_offsets_load_with_bare_or_quoted_queue_ids(tmp_path, form):
    """consumerOffset.json as 5.5.0 writes it (bare integer keys, one per line) and the same file
    with fastjson2's quoted keys ({"0":8}) load to the same int-keyed table; the tables beside
    offsetTable are not offsets."""
    text = CONSUMER_OFFSETS_5_5_0
    if form == "quoted":
        text = text.replace("\t0:", '\t"0":').replace("\t1:", '\t"1":')
        assert '"0":8' in text and "\t0:" not in text
    (tmp_path / "consumerOffset.json").write_text(text)
    assert load_consumer_offsets(tmp_path) == CONSUMER_OFFSETS_5_5_0_TABLE


@pytest.mark.parametrize("form", ['{"offsetTable":{2:2,3:10}}', '{"offsetTable":{"2":2,"3":10}}',
                                  '{\n\t"dataVersion":{"counter":0,"stateVersion":0,"timestamp":1},'
                                  '\n\t"offsetTable":{\n\t\t2:2,\n\t\t"3":10\n\t}\n}'])
def test_5x_delay_offsets_load_with_bare_or_quoted_levels(tmp_path, form):
    """delayOffset.json loads alike with bare, quoted or mixed delay-level keys and a dataVersion."""
    (tmp_path / "delayOffset.json").write_text(form)
    assert load_delay_offsets(tmp_path) == {2: 2, 3: 10}


def test_a_quoted_key_that_is_no_integer_is_a_clear_error(tmp_path):
    """A queue id that is neither a bare nor a quoted integer names the file, the key and the value."""
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable":{"T@g":{"zero":8}}}')
    with pytest.raises(CorruptStoreError, match="queue id of T@g is 'zero', not an integer"):
        load_consumer_offsets(tmp_path)


def test_consumer_offsets_round_trip_in_fastjson_layout(tmp_path):
    """Consumer offsets are written with String keys on new lines and bare Integer queue ids."""
    table = {"TopicTest@g": {1: 249, 0: 250}, "%RETRY%g@g": {0: 3}}
    save_consumer_offsets(tmp_path, table)
    text = (tmp_path / "consumerOffset.json").read_text()
    assert text == ('{\n\t"offsetTable":{\n\t\t"TopicTest@g":{0:250,1:249\n\t\t},'
                    '\n\t\t"%RETRY%g@g":{0:3\n\t\t}\n\t}\n}')
    assert load_consumer_offsets(tmp_path) == table


def test_topics_match_spec_layout_and_defaults(tmp_path):
    """topics.json has the §3.4 layout: alphabetical properties, TopicConfig defaults."""
    save_topics(tmp_path, {"TopicTest": TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4)},
                data_version=DataVersion(counter=2, timestamp=1656000000000))
    expected = ('{\n\t"dataVersion":{\n\t\t"counter":2,\n\t\t"timestamp":1656000000000\n\t},'
                '\n\t"topicConfigTable":{\n\t\t"TopicTest":{\n\t\t\t"order":false,\n\t\t\t"perm":6,'
                '\n\t\t\t"readQueueNums":4,\n\t\t\t"topicFilterType":"SINGLE_TAG",'
                '\n\t\t\t"topicName":"TopicTest",\n\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":4'
                '\n\t\t}\n\t}\n}')
    assert (tmp_path / "topics.json").read_text() == expected
    loaded = load_topics(tmp_path)["TopicTest"]
    assert (loaded.read_queue_nums, loaded.perm, loaded.order) == (4, 6, False)
    assert TopicConfig("x").read_queue_nums == 16 and TopicConfig("x").perm == 6


def test_subscription_group_defaults_and_unknown_properties(tmp_path):
    """A 5.x group entry loads with its unknown properties kept and 4.9.4 defaults for missing ones."""
    (tmp_path / "subscriptionGroup.json").write_text(
        '{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":5},"forbiddenTable":{},'
        '"subscriptionGroupTable":{"groupA":{"groupName":"groupA","retryMaxTimes":3,'
        '"consumeTimeoutMinute":15,"groupRetryPolicy":{"type":"CUSTOMIZED"}}}}')
    group = load_subscription_groups(tmp_path)["groupA"]
    assert group.retry_max_times == 3 and group.retry_queue_nums == 1 and group.consume_enable
    assert group.extra == {"consumeTimeoutMinute": 15, "groupRetryPolicy": {"type": "CUSTOMIZED"}}
    save_subscription_groups(tmp_path, {"groupA": group})
    assert load_subscription_groups(tmp_path)["groupA"] == group
    assert SubscriptionGroupConfig("g").retry_max_times == 16


def test_fastjson_empty_containers():
    """Empty maps and beans are written as {} with no line break (fastjson checks size > 0)."""
    assert to_fastjson({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'


def test_a_real_5_3_3_consumer_offsets_file_names_its_groups():
    """A 5.3.3 broker's consumerOffset.json (groupTopicMap beside the table, a broadcasting group's `topic@group@broadcast` key) gives plain group names."""
    from broker_core.store.config_files import split_topic_group

    config = data_path("rocketmq-5.3.3-config")
    table = load_consumer_offsets(config)
    pairs = sorted(split_topic_group(key) for key in table)
    assert pairs == [("%RETRY%notice-service", "notice-service"), ("%RETRY%order-service", "order-service"),
                     ("DelayTopic", "delay-service"), ("NoticeTopic", "notice-service"),
                     ("OrderTopic", "audit-broadcast"), ("OrderTopic", "order-service"),
                     ("SeqTopic", "seq-service")]
    assert table["OrderTopic@audit-broadcast@broadcast"] == {0: 15, 1: 15}
