"""Topic and group names follow RocketMQ's TopicValidator / Validators (4.9.4)."""

import pytest

from broker_core import names
from broker_core.errors import InvalidNameError


@pytest.mark.parametrize("topic", ["Hello", "%RETRY%Hello", "_%RETRY%Hello", "-%RETRY%Hello",
                                   "223-%RETRY%Hello", "a|b", "x" * 127])
def test_valid_topics_are_accepted(topic):
    """Every topic RocketMQ's ValidatorsTest accepts is accepted."""
    assert names.validate_topic(topic) == topic


@pytest.mark.parametrize("topic, message", [
    ("", "The specified topic is blank."),
    ("   ", "The specified topic is blank."),
    ("TOPIC&*^", "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
    ("../TopicTest", "contains illegal characters"),
    ("/etc/passwd", "contains illegal characters"),
    ("a\x00b", "contains illegal characters"),
    ("订单", "contains illegal characters"),
    ("x" * 128, "longer than topic max length 127"),
    ("0123456789" * 128, "longer than topic max length"),
])
def test_invalid_topics_are_rejected_with_rocketmq_messages(topic, message):
    """A blank, illegal or too long topic is rejected with RocketMQ's own remark."""
    with pytest.raises(InvalidNameError) as err:
        names.validate_topic(topic)
    assert message in str(err.value)


def test_hostile_name_is_rendered_printably_in_errors():
    """An error message shows a hostile name escaped and bounded, never raw control bytes."""
    with pytest.raises(InvalidNameError) as err:
        names.validate_topic("../" + "\x00" * 200)
    text = str(err.value)
    assert "\x00" not in text and len(text) < 300


def test_blank_group_is_rejected():
    """A null or blank group gives 'the specified group is blank'."""
    for group in (None, "", "  "):
        with pytest.raises(InvalidNameError, match="the specified group is blank"):
            names.validate_group(group)


def test_group_whose_retry_topic_would_be_too_long_is_rejected():
    """A group is only valid when its %RETRY% topic is itself a storable topic."""
    assert names.validate_group("g" * 120) == "g" * 120
    with pytest.raises(InvalidNameError):
        names.validate_group("g" * 121)


def test_retry_and_dlq_names_round_trip():
    """%RETRY%g and %DLQ%g are built in one place and map back to their group."""
    assert names.retry_topic("GroupA") == "%RETRY%GroupA"
    assert names.dlq_topic("GroupA") == "%DLQ%GroupA"
    assert names.group_of("%RETRY%GroupA") == "GroupA"
    assert names.group_of("%DLQ%GroupA") == "GroupA"
    assert names.group_of("OrderTopic") is None


def test_system_and_not_allowed_send_topics():
    """System topics include the rmq_sys_ prefix; the schedule topic is not allowed for sends."""
    assert names.is_system_topic("rmq_sys__test")
    assert not names.is_system_topic("test_not_system_topic")
    for topic in names.SYSTEM_TOPICS:
        assert names.is_system_topic(topic)
    assert names.is_not_allowed_send_topic("SCHEDULE_TOPIC_XXXX")
    assert not names.is_not_allowed_send_topic("OrderTopic")


def test_retry_topic_owner_reads_push_and_pop_retry_topics():
    """%RETRY%g is g's; %RETRY%g+T is g's (POP v2); %RETRY%g_T is g's when g and T are known."""
    groups, topics = {"order-service", "pop_group", "pg"}, {"OrderTopic", "Pay_Topic"}
    owner = names.retry_topic_owner
    assert owner("%RETRY%order-service", groups, topics) == names.RetryTopicOwner("order-service")
    assert owner("%RETRY%pg+Pay_Topic", groups, topics) == names.RetryTopicOwner("pg", "Pay_Topic")
    assert owner("%RETRY%pop_group_Pay_Topic", groups, topics) == names.RetryTopicOwner("pop_group", "Pay_Topic")
    assert owner("%RETRY%pg_OrderTopic", groups, topics) == names.RetryTopicOwner("pg", "OrderTopic")
    assert owner("OrderTopic", groups, topics) is None
    assert owner("%DLQ%pg", groups, topics) is None


def test_retry_topic_owner_marks_a_v1_name_two_readings_fit_as_ambiguous():
    """%RETRY%a_b_c with groups a and a_b and topics b_c and c fits two (group, topic) pairs."""
    assert names.retry_topic_owner("%RETRY%a_b_c", {"a", "a_b"}, {"b_c", "c"}) == names.RetryTopicOwner(
        None, None, ambiguous=True)
    # A push group named like a POP retry topic's group_topic is ambiguous too.
    assert names.retry_topic_owner("%RETRY%g_T", {"g", "g_T"}, {"T"}) == names.RetryTopicOwner(
        None, None, ambiguous=True)


def test_retry_topic_owner_leaves_an_unknown_name_as_the_group():
    """A name no known group or topic fits keeps the 4.9.4 reading: everything after %RETRY%."""
    assert names.retry_topic_owner("%RETRY%x_y", {"g"}, {"T"}) == names.RetryTopicOwner("x_y")
