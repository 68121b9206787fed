"""A resent retry that lost its count: the anomaly RETRY_COUNT_LOST, on stores in RocketMQ's format.

A 4.9.x consumer whose send-back the broker refuses sends the retry itself, RECONSUME_TIME = its
reconsume times + 1 among the properties; its producer moves that property into the request
header and clears it from the message (DefaultMQProducerImpl.sendKernelImpl). When that send
fails (the chosen broker is down) and the producer tries another broker, the second request has
neither, and the broker stores the retry with reconsume times 0: it counts the message's retries
from 0 again. A real 4.9.4 run with a broker killed mid-run wrote such a chain (docs/conformance.md,
"Broker outages"); here the model's store writes one, record by record, and the audit names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store
from broker_core.store.message_store import MessageInner, MessageStore, StoreConfig

GROUP = "notice-service"
RETRY = f"%RETRY%{GROUP}"
KEY = "0A00010381C00797E7BE000001C20009"
PROPS = {"KEYS": "p2-9", "UNIQ_KEY": KEY, "TAGS": "notice"}
STORE_MS = 1795813692000
ORIGIN = "7F000001000053AD0000000000001884"


def _retry(store: MessageStore, reconsume: int, extra: dict) -> None:
    """A retry of KEY as the broker stores it: the SCHEDULE_TOPIC_XXXX record its DELAY makes,
    then the schedule's %RETRY% record with the same properties and count."""
    sent = {**PROPS, "RETRY_TOPIC": "NoticeTopic", "ORIGIN_MESSAGE_ID": ORIGIN, "DELAY": "3", **extra}
    body = b"notice"
    assert store.put_message(MessageInner(RETRY, 0, body, sent, born_ts=STORE_MS,
                                          born_host="127.0.0.1:50000", reconsume_times=reconsume)).ok
    delivered = {**sent, "REAL_TOPIC": RETRY, "REAL_QID": "0"}
    assert store.put_message(MessageInner(RETRY, 0, body, delivered, born_ts=STORE_MS,
                                          born_host="127.0.0.1:50000", reconsume_times=reconsume,
                                          delay_level=0)).ok


def _store(root: Path, *, count_lost: bool) -> Path:
    """KEY published, retried once by the broker's send-back (count 1), then once by the client's
    own send: with ``count_lost`` the producer's second try (count 0, no RECONSUME_TIME), else
    its first (count 2, RECONSUME_TIME 2)."""
    times = iter(range(STORE_MS, STORE_MS + 100_000, 1_000))
    store = MessageStore(root, StoreConfig(store_host="127.0.0.1:10911"), lambda: next(times))
    assert store.load()
    store.start()
    assert store.put_message(MessageInner("NoticeTopic", 0, b"notice", dict(PROPS), born_ts=STORE_MS,
                                          born_host="127.0.0.1:50000")).ok
    _retry(store, 1, {})
    client = {"CONSUME_START_TIME": str(STORE_MS + 3_000), "MIN_OFFSET": "0", "MAX_OFFSET": "1"}
    if count_lost:
        _retry(store, 0, client)
    else:
        _retry(store, 2, {**client, "RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "2"})
    store.shutdown()
    return root


def _anomalies(tmp_path: Path, store: Path) -> list[tuple]:
    run = tmp_path / "run"
    import_store(store, run)
    run_lineage_duckdb(run)
    db = tmp_path / "warehouse.duckdb"
    build_warehouse([run], db)
    con = open_read_only(db)
    try:
        return con.execute("SELECT kind, message_key, \"group\", detail FROM anomalies "
                           "WHERE kind = 'RETRY_COUNT_LOST'").fetchall()
    finally:
        con.close()


def test_a_retry_stored_at_count_0_is_named_with_its_group_and_record(tmp_path):
    """The resent retry at count 0 is one RETRY_COUNT_LOST row: the message, its group, and the
    record (broker, topic, physical offset) that restarted the count."""
    rows = _anomalies(tmp_path, _store(tmp_path / "store", count_lost=True))
    assert len(rows) == 1
    kind, key, group, detail = rows[0]
    assert (kind, key, group) == ("RETRY_COUNT_LOST", KEY, GROUP)
    assert f" {RETRY} at physical offset " in detail
    assert "carries reconsume times 0" in detail


@pytest.mark.parametrize("fixture", ["store-clean", "store-crashed"])
def test_a_store_whose_retries_kept_their_counts_has_none(tmp_path, store_fixtures, fixture):
    """The same chain with the client's first try stored (count 2), and the real 4.9.4 fixture
    stores (their retries all broker send-backs): no RETRY_COUNT_LOST."""
    assert _anomalies(tmp_path / "model", _store(tmp_path / "store", count_lost=False)) == []
    assert _anomalies(tmp_path / "real", store_fixtures / fixture) == []
