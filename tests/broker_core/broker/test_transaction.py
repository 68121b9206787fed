"""The broker model's transactional messages against what real 4.9.4 and 5.3.3 brokers stored.

tests/data/rocketmq-<version>-transactions holds a real broker's store after the conformance
driver played plan.tsv there (docs/transactions.md); here the model plays the same plan, with the
same broker settings, and its store must hold the same records: per message, the same topics,
queues of the system topics, sysFlags, PREPARED_TRANSACTION_OFFSET targets, bodies and property
keys and values in the same order (ids, hosts and clock values aside), the same queue offsets in
the half queue and the same op record bodies.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from broker_core.client.transaction_producer import TransactionListener, TransactionProducer
from broker_core.constants import SYSFLAG_TRANSACTION_COMMIT
from broker_core.message import PROP_TRANSACTION_ID, PROP_UNIQ_KEY, UniqKeyGenerator
from broker_core.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.store.reader import StoreReader
from broker_core.store.transaction_op import decode_op_body

DATA = Path(__file__).resolve().parents[2] / "data"
SEMANTICS = {"4.9.4": "4.9", "5.3.3": "5.x"}
CHECK_INTERVAL_MS, TIMEOUT_MS, CHECK_MAX = 2000, 3000, 3
SETTLE_MS = 30_000
# What the model cannot share with a real run: the ids the clients made, the real queue the
# producer picked (two queues, round robin from a random start), and the clock.
MASKED = frozenset({PROP_UNIQ_KEY, PROP_TRANSACTION_ID, "REAL_QID"})


def _plan(store: Path) -> list[list[str]]:
    return [line.split("\t")[1:] for line in (store / "plan.tsv").read_text().splitlines()
            if line.startswith("msg\t")]


def _records(store: Path) -> list:
    return [e.record for e in StoreReader(store).records()]


def _by_message(records) -> tuple[dict[str, list[tuple]], list[tuple]]:
    """Per message (its KEYS), each record's shape in store order; and the op records' shapes."""
    offsets = {r.phys_offset: r for r in records}
    out: dict[str, list[tuple]] = {}
    ops = []
    for r in records:
        if r.topic == TRANS_OP_HALF_TOPIC:
            ops.append((r.queue_id, r.queue_offset, decode_op_body(r.body).offsets,
                        list(r.properties.items()), r.sys_flag))
            continue
        props = [(k, "*" if k in MASKED else v) for k, v in r.properties.items()]
        system = r.topic in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)
        target = None
        if r.sys_flag == SYSFLAG_TRANSACTION_COMMIT:
            half = offsets[r.prepared_tx_offset]
            target = (half.topic, half.queue_offset)
        out.setdefault(r.keys, []).append((
            r.topic, r.queue_id if system else "*", r.queue_offset if system else "*", r.sys_flag, r.flag,
            r.reconsume_times, target, r.body, props))
    return out, ops


@pytest.mark.parametrize("version", sorted(SEMANTICS))
def test_the_model_stores_what_a_real_broker_stored_for_the_same_transactions(version, make_broker):
    """Played the real run's plan, the model writes the same half, check-copy, commit, discard and op records as the real broker did, in the same order per message."""
    store = DATA / f"rocketmq-{version}-transactions"
    broker, sim, rows = make_broker(
        semantics=SEMANTICS[version], store_host="127.0.0.1:10911",
        transaction_check_interval_ms=CHECK_INTERVAL_MS, transaction_timeout_ms=TIMEOUT_MS,
        transaction_check_max=CHECK_MAX)
    broker.create_topic("TxTopic", 2)

    class Recorder:
        def emit(self, table: str, row: dict) -> None:
            rows.append((table, row))

    listener = TransactionListener("tx-producer", sim, Recorder())
    producer = TransactionProducer(sim, broker, broker.streams.fork("producer.0"), producer_group="tx-producer",
                                   born_host="127.0.0.1:54274", uniq_keys=UniqKeyGenerator("127.0.0.1", 1, 1),
                                   recorder=Recorder(), listener=listener)
    start = sim.now()
    def send(topic, body, tags, keys, level, answers):
        if answers == "-":
            producer.send(topic, body, tags=tags, keys=keys)
        else:
            producer.send_in_transaction(topic, body, tags=tags, keys=keys, delay_level=level,
                                         answers=tuple(answers.split(",")))

    for m in _plan(store):
        # AT_MS PRODUCER PRODUCER_GROUP TOPIC TAGS KEYS DELAY_LEVEL UNIQ_KEY BODY_HEAD BODY_SIZE ... TRANSACTION
        sim.at(start + int(m[0]), send, m[3], m[8].encode().ljust(int(m[9]), b"."), m[4], m[5], int(m[6]), m[12])
    sim.run(until_ms=start + SETTLE_MS)
    broker.shutdown()

    real, real_ops = _by_message(_records(store))
    model, model_ops = _by_message(_records(broker.root))
    assert set(model) == set(real)
    for keys in sorted(real):
        assert model[keys] == real[keys], keys
    assert [(q, o, offsets) for q, o, offsets, _, _ in model_ops] == [(q, o, offsets) for q, o, offsets, _, _ in real_ops]
    assert {(str(p), f) for *_, p, f in model_ops} == {(str(p), f) for *_, p, f in real_ops}
    # The listener was asked what the real one was asked: each message's checks, with their answers.
    calls = [r for t, r in rows if t == "transaction_calls"]
    clients = [json.loads(line) for line in (store / "clients.jsonl").read_text().splitlines()]
    by_keys = {m[7]: m[5] for m in _plan(store)}
    real_checks = Counter((by_keys[c["uniq_key"]], c["n"], c["answer"]) for c in clients
                          if c["ev"] == "txn" and c["stage"] == "check")
    model_keys = {r.uniq_key: r.keys for r in _records(broker.root) if r.uniq_key}
    model_checks = Counter((model_keys[c["uniq_key"]], c["check_times"], c["answer"]) for c in calls
                           if c["stage"] == "check")
    assert model_checks == real_checks and sum(real_checks.values()) == 9


def _undecided_half(make_broker, semantics: str, name: str):
    """A broker (2 s checks after 3 s, at most 3) holding one half message nobody will decide."""
    broker, sim, rows = make_broker(name, semantics=semantics, transaction_check_interval_ms=CHECK_INTERVAL_MS,
                                    transaction_timeout_ms=TIMEOUT_MS, transaction_check_max=CHECK_MAX)
    broker.create_topic("TxTopic", 1)

    class Recorder:
        def emit(self, table: str, row: dict) -> None:
            rows.append((table, row))

    producer = TransactionProducer(sim, broker, broker.streams.fork("p"), producer_group="tx",
                                   born_host="10.0.1.1:50000", uniq_keys=UniqKeyGenerator("10.0.1.1", 1, 1),
                                   recorder=Recorder(), listener=TransactionListener("tx", sim, Recorder()))
    producer.send_in_transaction("TxTopic", b"x" * 8, answers=("UNKNOW",))
    return broker, sim


def _half_records(root: Path) -> list:
    return [r for r in _records(root) if r.topic in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)]


@pytest.mark.parametrize("semantics", ["4.9", "5.x"])
def test_a_broker_restarted_between_checks_goes_on_from_its_offsets(semantics, make_broker):
    """A broker restarted (cleanly) between two checks of an undecided half checks it again from its CID_RMQ_SYS_TRANS offsets: three copies and one discard in all, as without the restart."""
    broker, sim = _undecided_half(make_broker, semantics, f"restart-{semantics}")
    start = sim.now()
    sim.run(until_ms=start + 6_500)
    broker.shutdown()
    broker.start()
    assert broker.transactions.pending()
    sim.run(until_ms=start + 60_000)
    assert not broker.transactions.pending()
    broker.shutdown()
    records = _half_records(broker.root)
    assert [(r.topic, r.properties.get("TRANSACTION_CHECK_TIMES")) for r in records] == [
        (TRANS_HALF_TOPIC, None), (TRANS_HALF_TOPIC, "1"), (TRANS_HALF_TOPIC, "2"), (TRANS_HALF_TOPIC, "3"),
        (TRANS_CHECK_MAX_TIME_TOPIC, "3")]


def test_a_half_no_producer_is_asked_about_is_still_copied_and_discarded(make_broker):
    """With no producer of its group connected, a half is copied at every check all the same and discarded after transactionCheckMax of them."""
    broker, sim = _undecided_half(make_broker, "4.9", "nobody")
    broker.transaction_checkers.clear()
    sim.run(until_ms=sim.now() + 30_000)
    broker.shutdown()
    assert [r.topic for r in _half_records(broker.root)] == [TRANS_HALF_TOPIC] * 4 + [TRANS_CHECK_MAX_TIME_TOPIC]
