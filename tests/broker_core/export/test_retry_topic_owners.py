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


def test_a_5_4_retry_records_origin_group_names_its_owner_where_config_is_ambiguous():
    """%RETRY%a_b_c fits group a (topic b_c) and group a_b (topic c). Without a checkpoint (retention
    deleted them), the revive service's records on 5.4+ name their group (ORIGIN_GROUP): a_b. Records
    naming two groups, or a group the name does not start with, settle nothing."""
    owners = retry_topic_owners({"a", "a_b"}, {"b_c", "c", "%RETRY%a_b_c", "%RETRY%a_x_c"}, {"%RETRY%a_y_c"}, [],
                                {"%RETRY%a_b_c": {"a_b"}, "%RETRY%a_x_c": {"a", "a_x"}, "%RETRY%a_y_c": {"zz"}})
    assert owners == [
        ("%RETRY%a_b_c", "a_b", "c", "record"),
        ("%RETRY%a_x_c", "a_x_c", None, "name"),  # the 4.9.4 reading, as without ORIGIN_GROUP
        ("%RETRY%a_y_c", "a_y_c", None, "name"),
    ]


def test_the_import_reads_origin_group_from_a_5_4_stores_retry_records(tmp_path):
    """The model under 5.4 rules writes ORIGIN_GROUP on every POP retry record (as real 5.5.1
    brokers did); the import's scan of the commit log finds each retry topic's group."""
    from dataclasses import replace
    from pathlib import Path

    from broker_core.export.pop_import import _origin_groups
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario

    path = Path(__file__).resolve().parents[3] / "scenarios" / "pop-small.yaml"
    scenario = load_scenario(path)
    scenario = replace(scenario, broker=replace(scenario.broker, semantics="5.4"))
    simulate(path, tmp_path / "run", scenario=scenario)
    commitlog = tmp_path / "run" / "parquet" / "commitlog"
    assert _origin_groups(commitlog, scenario.broker.name, {"%RETRY%pop-service_PopTopic", "%RETRY%nobody"}) == {
        "%RETRY%pop-service_PopTopic": {"pop-service"}}
    owners = {r for r in _read(tmp_path / "run" / "parquet" / "retry_topics")}
    assert ("%RETRY%pop-service_PopTopic", "pop-service", "PopTopic", "checkpoint") in owners


def _read(path):
    import pyarrow.parquet as pq
    return [(r["retry_topic"], r["group"], r["origin_topic"], r["resolution"]) for r in pq.read_table(path).to_pylist()]
