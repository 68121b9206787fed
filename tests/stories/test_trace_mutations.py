"""The trace checks fail on a real store with client trace broken on purpose, and pass on it clean.

The input is two stores real RocketMQ 4.9.4 brokers wrote with the trace topic on and every client
tracing (tests/data/rocketmq-4.9.4-trace). Clean, they pass every check they can judge, the three
trace checks judging what the trace holds. Then the bytes are broken, each breakage on its own
message: a stored record's store host (so the offset msgId a traced SEND_OK names holds nothing),
a traced SubAfter's outcome (a consume that now reads failed, with no retry after it), and a
transaction op record's topic (so the rollback the producer's trace sent is not in the store).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from test_store_mutations import (
    BODY_CRC_AT,
    NOT_JUDGED_ON_IMPORTS,
    assert_clean,
    peek,
    poke,
    record_at,
    replace_in_record,
    reported,
    rows,
    verdicts,
    writable_copy,
)
from testdata import data_path

from assets import checks as c
from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse
from broker_core.export.store_import import import_store

TRACE_STORES = data_path("rocketmq-4.9.4-trace")
BROKERS = ("broker-a", "broker-b")
STORE_HOST_PORT_AT = 68  # store host 64..72 (IPv4 address, then the port as an int)
BODY_LENGTH_AT = 84  # after the prepared transaction offset (76..84); the body follows


def stores(root: Path) -> dict[str, Path]:
    return {b: root / b for b in BROKERS}


def audit(tmp_path: Path, root: Path, name: str) -> Path:
    """Import both brokers' stores under ``root`` as one run, its lineage (DuckDB: the SQL Spark
    runs) and warehouse."""
    run = tmp_path / f"run-{name}"
    for broker, store in stores(root).items():
        import_store(store, run, name=name, broker=broker)
    run_lineage_duckdb(run)
    db = tmp_path / f"{name}.duckdb"
    build_warehouse([run], db)
    return db


def fix_body_crc(store: Path, phys: int) -> None:
    """Write the body CRC of the (v1, IPv4) record at ``phys`` again, after its body was changed."""
    path, pos = record_at(store, phys)
    size = peek(path, pos + BODY_LENGTH_AT, ">i")
    with open(path, "rb") as fh:
        fh.seek(pos + BODY_LENGTH_AT + 4)
        body = fh.read(size)
    poke(path, pos + BODY_CRC_AT, ">i", zlib.crc32(body) & 0x7FFFFFFF)


def lose_a_sent_record(root: Path, db: Path) -> tuple[str, str]:
    # A message consumed at once: its record's store host port changes, so its offset msgId does.
    key, broker, phys = rows(db, """SELECT l.message_key, h.broker, h.phys_offset FROM message_lineage l
        JOIN message_hops h ON h.run_id = l.run_id AND h.message_key = l.message_key AND h.hop_kind = 'PUBLISH'
        WHERE l."group" = 'order-service' AND l.final_state = 'CONSUMED' AND l.retries = 0
        ORDER BY l.message_key LIMIT 1""")[0]
    path, pos = record_at(root / broker, phys)
    poke(path, pos + STORE_HOST_PORT_AT, ">i", peek(path, pos + STORE_HOST_PORT_AT, ">i") + 1)
    return key, f"broker {broker} holds no record at that offset"


def fail_a_traced_consume(root: Path, db: Path) -> tuple[str, str]:
    # The SubAfter of a message consumed once now reads failed (FAILED), and nothing retried it.
    key, broker, phys, cost, keys = rows(db, """SELECT t.msg_id, t.broker, t.phys_offset, t.cost_ms, t.keys
        FROM client_trace t WHERE t.trace_type = 'SubAfter' AND t."group" = 'tx-service' AND t.success
        ORDER BY t.msg_id LIMIT 1""")[0]
    old = f"{key}\x01{cost}\x01true\x01{keys}\x010\x01".encode()
    replace_in_record(root / broker, phys, old, old.replace(b"\x01true\x01", b"\x01null\x01").replace(
        f"{keys}\x010\x01".encode(), f"{keys}\x014\x01".encode()))
    fix_body_crc(root / broker, phys)
    return key, "failed (FAILED) at reconsume 0"


def lose_a_rollback(root: Path, db: Path) -> tuple[str, str]:
    # The op record that decided the rolled-back message is renamed out of the op topic.
    key, broker, phys = rows(db, """SELECT h.uniq_key, o.broker, o.phys_offset FROM transaction_ops o
        JOIN commitlog h ON h.run_id = o.run_id AND h.broker = o.broker AND h.topic = 'RMQ_SYS_TRANS_HALF_TOPIC'
         AND h.queue_id = o.queue_id AND list_contains(o.half_queue_offsets, h.queue_offset)
        JOIN transactions x ON x.run_id = h.run_id AND x.message_key = h.uniq_key
        WHERE x.transaction_state = 'ROLLED_BACK' ORDER BY h.uniq_key LIMIT 1""")[0]
    replace_in_record(root / broker, phys, b"RMQ_SYS_TRANS_OP_HALF_TOPIC", b"RMQ_SYS_TRANS_OP_HALF_TOPIX")
    return key, "answered ROLLBACK_MESSAGE to a check"


# Each trace check, the breakage of the stores' bytes it must report, and its anomaly kind.
TRACE_BREAKAGES = {
    c.TRACE_SEND_OK_STORED: (lose_a_sent_record, "SENT_NOT_STORED"),
    c.TRACE_FAILED_CONSUME_RETRIED: (fail_a_traced_consume, "FAILURE_NOT_RETRIED"),
    c.TRACE_DECISION_STORED: (lose_a_rollback, "DECISION_NOT_STORED"),
}


@pytest.fixture(scope="module")
def clean_trace(tmp_path_factory) -> Path:
    return audit(tmp_path_factory.mktemp("clean-trace"), TRACE_STORES, "clean-trace")


def test_the_clean_traced_stores_pass_every_check_and_the_trace_checks_judge_them(clean_trace):
    """The real traced stores: no false alarm; every traced SEND_OK, failure and decision is judged."""
    found = verdicts(clean_trace)
    assert_clean(found, NOT_JUDGED_ON_IMPORTS)
    assert (found[c.TRACE_SEND_OK_STORED].judged, found[c.TRACE_DECISION_STORED].judged) == (40, 5)
    failures = rows(clean_trace, "SELECT count(*) FROM traced_attempts WHERE NOT success")[0][0]
    assert found[c.TRACE_FAILED_CONSUME_RETRIED].judged == failures > 0
    assert rows(clean_trace, "SELECT trace_type, count(*) FROM client_trace GROUP BY 1 ORDER BY 1") == [
        ("EndTransaction", 27), ("Pub", 40), ("SubAfter", 49), ("SubBefore", 49)]
    assert rows(clean_trace, "SELECT count(*) FROM anomalies") == [(0,)]
    assert rows(clean_trace, "SELECT count(*) FROM message_hops h JOIN commitlog c ON c.run_id = h.run_id "
                             "AND c.broker = h.broker AND c.phys_offset = h.phys_offset "
                             "WHERE c.topic = 'RMQ_SYS_TRACE_TOPIC'") == [(0,)]


@pytest.fixture(scope="module")
def broken_trace(clean_trace, tmp_path_factory) -> tuple[Path, dict[str, tuple[str, str]]]:
    tmp = tmp_path_factory.mktemp("broken-trace")
    root = tmp / "stores"
    for broker, store in stores(TRACE_STORES).items():
        writable_copy(store, root / broker)
    broken = {check: breakage(root, clean_trace) for check, (breakage, _kind) in TRACE_BREAKAGES.items()}
    assert len({key for key, _ in broken.values()}) == len(broken), broken
    return audit(tmp, root, "broken-trace"), broken


@pytest.mark.parametrize("check", sorted(TRACE_BREAKAGES))
def test_a_broken_traced_store_fails_the_trace_check_that_guards_it(broken_trace, check):
    """Each trace check fails on its breakage, naming the broken message and what is wrong, and the
    anomalies list the message under the check's kind."""
    db, broken = broken_trace
    key, detail = broken[check]
    outcome = verdicts(db)[check]
    assert not outcome.passed and reported(outcome, key, detail), outcome.metadata()
    kind = TRACE_BREAKAGES[check][1]
    assert rows(db, "SELECT message_key FROM anomalies WHERE kind = ?", [kind]) == [(key,)]


def test_the_body_crc_helper_matches_the_broker_s(clean_trace):
    """fix_body_crc writes what the broker wrote: on an untouched record it changes nothing."""
    broker, phys = rows(clean_trace, "SELECT broker, phys_offset FROM client_trace ORDER BY 1, 2 LIMIT 1")[0]
    path, pos = record_at(TRACE_STORES / broker, phys)
    stored = peek(path, pos + BODY_CRC_AT, ">i")
    size = peek(path, pos + BODY_LENGTH_AT, ">i")
    with open(path, "rb") as fh:
        fh.seek(pos + BODY_LENGTH_AT + 4)
        assert zlib.crc32(fh.read(size)) & 0x7FFFFFFF == stored
