"""Who owns a %RETRY% topic of an imported store (the import's retry_topics table)."""

from __future__ import annotations

from broker_core.export.pop_import import retry_topic_owners
from broker_core.store.pop import PopRecord


def ck(group: str, topic: str) -> PopRecord:
    return PopRecord("ck", group, topic, 0, 0, (0,), 1000, 5000, 6000, "broker-a")


def test_a_checkpoint_names_the_group_of_its_pop_retry_topic_even_where_config_is_ambiguous():
    """%RETRY%a_b_c fits group a (topic b_c) and group a_b (topic c); a checkpoint of c popped by
    a_b settles it."""
    owners = retry_topic_owners({"a", "a_b"}, {"b_c", "c", "%RETRY%a_b_c"}, (), [ck("a_b", "c")])
    # Only topics the store has are listed: the v2 name the checkpoint also implies is not one.
    assert owners == [("%RETRY%a_b_c", "a_b", "c", "checkpoint")]


def test_without_a_checkpoint_the_config_reads_the_name():
    """One reading the config knows is the owner; several are ambiguous (no group); a name no
    config knows keeps its own reading."""
    owners = retry_topic_owners({"a", "a_b", "g"}, {"b_c", "c", "T", "%RETRY%a_b_c", "%RETRY%g"},
                                {"%RETRY%g_T", "%RETRY%zz_T", "%RETRY%h+U"}, [])
    assert owners == [
        ("%RETRY%a_b_c", None, None, "ambiguous"),
        ("%RETRY%g", "g", None, "config"),
        ("%RETRY%g_T", "g", "T", "config"),
        ("%RETRY%h+U", "h", "U", "name"),
        ("%RETRY%zz_T", "zz_T", None, "name"),
    ]


def test_the_checkpoints_groups_and_topics_count_as_known():
    """A group only a checkpoint names (not in subscriptionGroup.json) still resolves its v1 name
    found in the commit log, through the checkpoint's exact names."""
    owners = retry_topic_owners(set(), set(), {"%RETRY%pg_PopTopic"}, [ck("pg", "PopTopic"),
                                                                        ck("pg", "%RETRY%pg_PopTopic")])
    assert owners == [("%RETRY%pg_PopTopic", "pg", "PopTopic", "checkpoint")]
