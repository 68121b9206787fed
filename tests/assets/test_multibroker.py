"""Several brokers in one run, on real bytes: import per broker -> one lineage -> warehouse checks.

A message's hops may be on several brokers of a cluster: an orderly consumer's client sends a
message past its maximum reconsume times to ``%RETRY%group`` through its inner producer, which
picks any broker's queue, and that broker diverts it (SCHEDULE_TOPIC_XXXX, then ``%DLQ%group``)
where it landed. Here broker-a is the real RocketMQ 4.9.4 fixture store and broker-b a store the
model's store writes (RocketMQ's record format, byte for byte) holding that continuation of one
of broker-a's messages; a second broker-b holds the continuation of a message no broker has (a
real break). Two simulated brokers with their own messages, topics and groups of the same names
and their own consumer offsets merge into one run without changing any chain.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from assets import checks as c
from broker_core.store.config_files import save_consumer_offsets
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig
from tests.conftest import STORE_FIXTURES, drop_oldest_commitlog_files

GOLDEN = Path(__file__).parents[1] / "golden"
FIXTURE = STORE_FIXTURES / "store-clean"
GROUP = "GroupA"
# An OrderTopic message at offset 0 of the fixture (broker-a), in its first commit-log file.
KEY = "C00002027C225FFD2B276D1F61390000"
KEY_PROPS = {"KEYS": "order-0", "UNIQ_KEY": KEY, "CLUSTER": "DefaultCluster", "TAGS": "TagA"}
# Another one at offset 691, retried once on broker-b by a client's send that names its record on
# broker-a (the ORIGIN_MESSAGE_ID of a send-back, kept by the client's fallback send).
KEY2 = "C00002027C225FFD2B276D1F61600002"
KEY2_PROPS = {"KEYS": "order-2", "UNIQ_KEY": KEY2, "CLUSTER": "DefaultCluster", "TAGS": "TagA"}
KEY2_RECORD_ON_A = "C0A8000100002A9F00000000000002B3"
ORPHAN = "C00002027C225FFD2B276D1F61FF00FF"  # on no broker
BROKER_B_HOST = "192.168.0.2:10911"
B_STORE_MS = 1795321990000  # after every record of the fixture
DLQ_LEVEL = 3  # 10 s in RocketMQ's default table


def _send_back_chain(store: MessageStore, props: dict, *, real_topic: str, origin: str, reconsume: int,
                     max_reconsume: int) -> None:
    """A client's send of a failed message to %RETRY%GROUP (its properties copied, RETRY_TOPIC,
    ORIGIN_MESSAGE_ID, RECONSUME_TIME and DELAY set), as the broker stores it: ``real_topic`` is
    %RETRY%GROUP, or %DLQ%GROUP past the maximum (handleRetryAndDLQ keeps DELAY in 4.9.4); the
    commit log turns DELAY into a SCHEDULE_TOPIC_XXXX record, and the schedule service puts it
    back into ``real_topic`` with the same stored properties."""
    sent = {**props, "RETRY_TOPIC": "OrderTopic", "ORIGIN_MESSAGE_ID": origin,
            "RECONSUME_TIME": str(reconsume), "MAX_RECONSUME_TIMES": str(max_reconsume),
            "DELAY": str(DLQ_LEVEL)}
    body = b"continued on broker-b"
    assert store.put_message(MessageInner(real_topic, 0, body, sent, born_ts=B_STORE_MS - 5,
                                          born_host="192.168.0.10:50000", reconsume_times=reconsume)).ok
    rewritten = {**sent, "REAL_TOPIC": real_topic, "REAL_QID": "0"}
    assert store.put_message(MessageInner(real_topic, 0, body, rewritten, born_ts=B_STORE_MS - 5,
                                          born_host="192.168.0.10:50000", reconsume_times=reconsume,
                                          delay_level=0)).ok


def _broker_b_store(root: Path, *, key_props: dict, with_key2: bool) -> Path:
    """broker-b's store: ``key_props``'s message sent past its maximum and diverted to the DLQ
    through the schedule; with ``with_key2``, KEY2's first retry. Its consumerOffset.json commits
    every OrderTopic queue of GROUP far ahead: broker-b has no OrderTopic record, so none of
    broker-a's may be taken as consumed by it (offsets are per broker)."""
    times = iter(range(B_STORE_MS, B_STORE_MS + 100_000, 10_000))
    store = MessageStore(root, StoreConfig(store_host=BROKER_B_HOST), lambda: next(times))
    assert store.load()
    store.start()
    _send_back_chain(store, key_props, real_topic=f"%DLQ%{GROUP}", origin=key_props["UNIQ_KEY"],
                     reconsume=3, max_reconsume=2)
    if with_key2:
        _send_back_chain(store, KEY2_PROPS, real_topic=f"%RETRY%{GROUP}", origin=KEY2_RECORD_ON_A,
                         reconsume=1, max_reconsume=2)
    store.shutdown()
    save_consumer_offsets(root / "config", {f"OrderTopic@{GROUP}": {q: 1000 for q in range(4)}})
    return root


SIM_BROKERS = {"east": ("10.0.0.1:10911", 1), "west": ("10.0.0.2:10911", 2)}  # store host, seed


def _simulated_store(root: Path, broker: str) -> Path:
    """The tiny golden scenario simulated as ``broker`` (its own store host and seed)."""
    from broker_core.sim.run import simulate
    from broker_core.sim.scenario import load_scenario_text

    host, seed = SIM_BROKERS[broker]
    text = (GOLDEN / "tiny.yaml").read_text().replace(
        "broker:\n", f"broker:\n  name: {broker}\n  store_host: {host}\n").replace("seed: 1", f"seed: {seed}")
    scenario = load_scenario_text(text, source=f"{broker}.yaml")
    simulate(f"{broker}.yaml", root / f"sim-{broker}", scenario=scenario)
    return root / f"sim-{broker}" / "store"


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    """Run directories, their lineage, one warehouse and the checks' verdicts per run."""
    from assets.checks import run_checks_per_run
    from assets.lineage import run_lineage
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse, open_read_only
    from broker_core.export.store_import import import_store

    root = tmp_path_factory.mktemp("cluster")
    stores = root / "stores"
    b = _broker_b_store(stores / "broker-b", key_props=KEY_PROPS, with_key2=True)
    orphan = _broker_b_store(stores / "broker-b-orphan", key_props={**KEY_PROPS, "UNIQ_KEY": ORPHAN},
                             with_key2=False)
    cut_a = stores / "broker-a-cut"
    shutil.copytree(FIXTURE, cut_a)
    for path in cut_a.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    drop_oldest_commitlog_files(cut_a, 1)
    runs = root / "runs"
    plan = {
        "cluster": [(FIXTURE, "broker-a"), (b, "broker-b")],
        "cluster-cut": [(cut_a, "broker-a"), (b, "broker-b")],   # broker-a's oldest file deleted
        "cluster-orphan": [(FIXTURE, "broker-a"), (orphan, "broker-b")],
        "alone-a": [(FIXTURE, None)],
        "alone-b": [(b, None)],
        "sims": [(_simulated_store(root, name), name) for name in SIM_BROKERS],
        # broker-a's master (the clean store) and its slave (the crashed copy, one record behind)
        "replicated": [(FIXTURE, "broker-a"), (STORE_FIXTURES / "store-crashed", "broker-a", "slave")],
    }
    for name in SIM_BROKERS:
        plan[f"{name}-alone"] = [(root / f"sim-{name}" / "store", name)]
    for run_id, brokers in plan.items():
        for store, broker, *role in brokers:
            import_store(store, runs / run_id, broker=broker, role=role[0] if role else "master")
    # The pipeline's engine, Spark, builds the cluster run; DuckDB, running the same SQL
    # (assets/sql/lineage/), the others: a Spark run costs seconds of fixed cost however small.
    # The cluster run's rows are held equal on both engines (test_both_engines_...).
    run_lineage(runs / "cluster", spark)
    for run_id in plan:
        if run_id != "cluster":
            run_lineage_duckdb(runs / run_id)
    db = root / "warehouse.duckdb"
    build_warehouse([runs / r for r in plan], db)
    con = open_read_only(db)
    verdicts = run_checks_per_run(con, list(plan))
    yield {"runs": runs, "con": con, "verdicts": verdicts}
    con.close()


def _failed(cluster, run_id) -> dict[str, list[dict]]:
    return {o.check.name: list(o.examples) for o in cluster["verdicts"][run_id] if o.blocking and not o.passed}


def _chain(con, run_id, key, group=GROUP):
    hops = con.execute(
        'SELECT hop_kind, topic, broker FROM message_hops WHERE run_id = ? AND message_key = ? '
        'AND ("group" IS NULL OR "group" = ?) ORDER BY hop_index', [run_id, key, group]).fetchall()
    row = con.execute('SELECT path, final_state, retries, truncated FROM message_lineage '
                      'WHERE run_id = ? AND message_key = ? AND "group" = ?', [run_id, key, group]).fetchone()
    return hops, row


def test_a_chain_that_continues_on_another_broker_is_one_journey(cluster):
    """The PUBLISH on broker-a and the SCHEDULE and DLQ on broker-b are one chain, in store-time
    order, ending in the DLQ, not truncated; every blocking check passes on the run."""
    hops, row = _chain(cluster["con"], "cluster", KEY)
    assert hops == [("PUBLISH", "OrderTopic", "broker-a"), ("SCHEDULE", "SCHEDULE_TOPIC_XXXX", "broker-b"),
                    ("DLQ", f"%DLQ%{GROUP}", "broker-b")]
    assert row == (f"OrderTopic > SCHEDULE_TOPIC_XXXX[{DLQ_LEVEL}] > %DLQ%{GROUP}", "DLQ", 0, False)
    hops2, row2 = _chain(cluster["con"], "cluster", KEY2)
    assert [h[2] for h in hops2] == ["broker-a", "broker-b", "broker-b"]
    assert row2 == (f"OrderTopic > SCHEDULE_TOPIC_XXXX[{DLQ_LEVEL}] > %RETRY%{GROUP}", "RETRYING", 1, False)
    assert _failed(cluster, "cluster") == {}


def test_the_same_stores_as_separate_runs_break_the_chain(cluster):
    """Imported as two runs, broker-a's half says UNCONSUMED and broker-b's half has group hops
    without a real record before them: what one run of both brokers fixes."""
    _hops, row = _chain(cluster["con"], "alone-a", KEY)
    assert row[1] == "UNCONSUMED"
    failed = _failed(cluster, "alone-b")
    assert {(e["message_key"], e["detail"]) for e in failed[c.HOP_GRAMMAR]} >= {
        (KEY, "group hops without a real record before them")}


def test_a_continuation_whose_head_no_broker_has_still_fails(cluster):
    """A chain on broker-b whose message no broker of the run published breaks hop_grammar_valid
    (the run's logs start at 0: nothing was deleted)."""
    assert cluster["con"].execute("SELECT DISTINCT broker FROM commitlog WHERE run_id = 'cluster-orphan' "
                                  "ORDER BY 1").fetchall() == [("broker-a",), ("broker-b",)]
    failed = _failed(cluster, "cluster-orphan")
    assert {(e["message_key"], e["detail"]) for e in failed[c.HOP_GRAMMAR]} == {
        (ORPHAN, "group hops without a real record before them"),
        (ORPHAN, "truncated, but its first hop is in the commit log")}
    assert set(failed) == {c.HOP_GRAMMAR}


def test_a_head_deleted_on_the_other_broker_is_truncated(cluster):
    """With broker-a's oldest file deleted, the chains that continue on broker-b lost their head
    there: truncated (KEY2's record on broker-b names its deleted record on broker-a), and every
    blocking check passes."""
    con = cluster["con"]
    assert con.execute("SELECT broker, first_offset FROM runs WHERE run_id = 'cluster-cut' ORDER BY broker"
                       ).fetchall() == [("broker-a", 16384), ("broker-b", 0)]
    for key in (KEY, KEY2):
        hops, row = _chain(con, "cluster-cut", key)
        assert [h[2] for h in hops] == ["broker-b", "broker-b"] and row[3] is True, key
    assert _failed(cluster, "cluster-cut") == {}


def test_committed_offsets_count_only_on_their_own_broker(cluster):
    """broker-b's offsets for GroupA's OrderTopic queues do not consume broker-a's OrderTopic
    records: every GroupA OrderTopic chain on broker-a ends as it does in broker-a's run alone."""
    con = cluster["con"]
    query = ('SELECT message_key, final_state FROM message_lineage WHERE run_id = ? AND "group" = ? '
             "AND message_key NOT IN (?, ?) ORDER BY message_key")
    alone = con.execute(query, ["alone-a", GROUP, KEY, KEY2]).fetchall()
    assert alone and {s for _k, s in alone} == {"UNCONSUMED", "DLQ"}
    assert con.execute(query, ["cluster", GROUP, KEY, KEY2]).fetchall() == alone


def test_two_brokers_with_their_own_messages_merge_without_changing_a_chain(cluster):
    """Two simulated brokers (same topics and groups, each with its own consumer offsets) in one
    run give exactly the hops and lineage rows each gives alone, and pass every blocking check."""
    runs = cluster["runs"]

    def rows(run_id, table):
        t = pq.read_table(runs / run_id / "lineage" / table).drop_columns(["run_id"])
        return sorted(map(repr, t.to_pylist()))

    for table in ("message_hops", "message_lineage"):
        together = rows("sims", table)
        assert together == sorted(rows("east-alone", table) + rows("west-alone", table)), table
        assert len(together) >= 40  # 20 messages a broker, one group
    states = cluster["con"].execute(
        "SELECT DISTINCT final_state FROM message_lineage WHERE run_id = 'sims' ORDER BY 1").fetchall()
    assert states == [("CONSUMED",), ("DLQ",)]
    brokers = cluster["con"].execute(
        "SELECT DISTINCT broker FROM message_hops WHERE run_id = 'sims' ORDER BY 1").fetchall()
    assert brokers == [("east",), ("west",)]
    assert _failed(cluster, "sims") == {}


def test_trace_shows_the_broker_of_every_hop(cluster):
    """trace prints one message's hops across both brokers, each with its broker."""
    from orchestration.cmd_pipeline import format_trace, trace_messages

    messages = [m for m in trace_messages(cluster["con"], KEY) if m["run_id"] == "cluster"]
    assert [h["broker"] for h in messages[0]["hops"]] == ["broker-a", "broker-b", "broker-b"]
    text = format_trace(messages)
    assert "broker-b" in text.split("group GroupA")[1] and "truncated" not in text
    cut = [m for m in trace_messages(cluster["con"], KEY2) if m["run_id"] == "cluster-cut"]
    assert "truncated: its first hops were in commit-log files retention deleted" in format_trace(cut)


def test_a_master_and_its_slave_count_each_record_once(cluster):
    """A broker imported from its master and from its slave (which lacks the master's last record)
    has exactly the hops and lineage of the master alone, and passes every blocking check."""
    runs = cluster["runs"]

    def rows(run_id, table):
        t = pq.read_table(runs / run_id / "lineage" / table)
        return sorted(map(repr, t.drop_columns([c for c in ("run_id", "broker") if c in t.column_names]).to_pylist()))

    for table in ("message_hops", "message_lineage"):
        assert rows("replicated", table) == rows("alone-a", table), table
    assert cluster["con"].execute("SELECT kind FROM store_problems WHERE run_id = 'replicated' "
                                  "AND kind = 'slave-behind'").fetchall() == [("slave-behind",)]
    assert _failed(cluster, "replicated") == {}


def test_both_engines_write_the_cluster_runs_lineage_alike(cluster, tmp_path):
    """The cluster run's hops and lineage, which Spark wrote, are the rows DuckDB writes from the
    same SQL, in the same order: the other runs here are built by DuckDB."""
    from assets.lineage_duckdb import run_lineage_duckdb

    copy = tmp_path / "cluster"
    shutil.copytree(cluster["runs"] / "cluster" / "parquet", copy / "parquet")
    run_lineage_duckdb(copy)
    for table in ("message_hops", "message_lineage"):
        spark_rows = pq.read_table(cluster["runs"] / "cluster" / "lineage" / table).to_pylist()
        duck_rows = pq.read_table(copy / "lineage" / table).to_pylist()
        assert spark_rows and duck_rows == spark_rows, table
