"""REVIVE_LOST on real bytes: two brokers' stores a RocketMQ 5.5.1 cluster wrote while its revive
service dropped two revives (tests/data/rocketmq-5.5.1-lost-revive/README.md says how).

Each of the two messages was popped from its group's POP retry topic and never acked; the revive
service then committed its revive queue past the checkpoint without writing the retry (the put
threw). The store shows it: the record is RETRYING with its revive time long past, and the
group CID_RMQ_SYS_REVIVE_GROUP's offset in consumerOffset.json is at or past the checkpoint.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from testdata import data_path

from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store

DATA = data_path("rocketmq-5.5.1-lost-revive")
BROKERS = ("broker-a", "broker-b")
# What the clients saw (the driver's record of that run): each message's last delivery failed and
# the next one never came. Push-service's was on broker-a, simple-service's on broker-b.
LOST = {("0A0001013A39415EBB5700000546001B", "push-service"),
        ("0A000102457567192D30000000960003", "simple-service")}


def _audit(stores: Path, tmp_path: Path) -> list[tuple]:
    run = tmp_path / "run"
    for broker in BROKERS:
        import_store(stores / broker, run, name="lost-revive", broker=broker)
    run_lineage_duckdb(run)  # the same SQL as Spark's: the anomaly is the warehouse's
    db = tmp_path / "w.duckdb"
    build_warehouse([run], db)
    with open_read_only(db) as con:
        return con.execute("""SELECT a.message_key, a."group", a.detail, l.final_state
                              FROM anomalies a JOIN message_lineage l USING (run_id, message_key, "group")
                              WHERE a.kind = 'REVIVE_LOST' ORDER BY 1""").fetchall()


def test_the_revives_the_broker_dropped_are_anomalies(tmp_path):
    """Exactly the two stuck messages are REVIVE_LOST, each naming its broker, its record, and the
    revive queue whose committed offset passed its checkpoint; they stay RETRYING."""
    rows = _audit(DATA, tmp_path)
    assert {(key, group) for key, group, _, _ in rows} == LOST
    assert {state for *_, state in rows} == {"RETRYING"}
    details = {group: detail for _, group, detail, _ in rows}
    assert details["push-service"].startswith("popped from broker-a %RETRY%push-service_PushTopic:0@")
    assert details["simple-service"].startswith("popped from broker-b %RETRY%simple-service_SimpleTopic:0@")
    for detail in details.values():
        committed, checkpoint = map(int, re.search(r"to (\d+) \(its checkpoint is at (\d+)\)", detail).groups())
        assert committed >= checkpoint


def test_a_revive_queue_not_yet_past_the_checkpoint_is_no_anomaly(tmp_path):
    """The same stores with the revive service's offsets put back to -1 (nothing read yet): the
    revives are pending, not lost, and no row is listed."""
    stores = tmp_path / "stores"
    shutil.copytree(DATA, stores)
    for broker in BROKERS:
        offsets = stores / broker / "config" / "consumerOffset.json"
        text = offsets.read_text()
        table = re.search(r'"rmq_sys_REVIVE_LOG_DefaultCluster@CID_RMQ_SYS_REVIVE_GROUP":\{[^}]*\}', text)
        assert table, offsets
        rewound = re.sub(r"(\d+):\d+", r"\1:-1", table.group(0))
        offsets.write_text(text.replace(table.group(0), rewound))
    assert _audit(stores, tmp_path) == []
