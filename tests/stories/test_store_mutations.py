"""Every check can fail on every kind of input it judges, and says "not applicable" where it has
nothing to judge: the store-side counterpart of ``test_check_mutations.py``.

The inputs are real: a simulated run (the story warehouse), the store a real RocketMQ 4.9.4
broker and its schedule service wrote (tests/data/rocketmq-store-4.9.4), and two stores of a real
RocketMQ 5.5.1 cluster serving POP and gRPC consumers (tests/data/rocketmq-5.5.1-lost-revive).
A clean copy of each passes every check it can judge. Then the store's own bytes are broken where
bytes can say it (a record's reconsume count, store time, topic or property; a schedule queue's due
time), the copy imported and audited through the same functions the CLI calls, and the guarding
check must fail naming the broken message with its rule, with anomalies of its kind where it has
one. What bytes cannot say (a lineage row the audit itself wrote, a consume the store never
records) is broken in the imported rows instead.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest
from testdata import CLEAN_STORE, data_path
from warehouse_copy import warehouse_copy

from assets import checks as c
from assets.audit import build_audit_tables
from assets.lineage_duckdb import run_lineage_duckdb
from assets.warehouse import build_warehouse, open_read_only
from broker_core.export.store_import import import_store

STORE_494 = CLEAN_STORE
STORES_5X = data_path("rocketmq-5.5.1-lost-revive")
# Transactional stores real brokers wrote (docs/transactions.md).
TX_STORES = {"4.9.4": data_path("rocketmq-4.9.4-transactions"), "5.3.3": data_path("rocketmq-5.3.3-transactions")}
BROKERS_5X = ("broker-a", "broker-b")

# Field positions in a commit-log record with IPv4 hosts (CommitLog.calMsgLength's order): total
# size 4, magic 4, body CRC 4, queue id 4, flag 4, queue offset 8, physical offset 8, sysFlag 4, born
# timestamp 8, born host 8, store timestamp 8, store host 8, reconsume times 4.
STORE_TS_AT = 56
RECONSUME_TIMES_AT = 72
PREPARED_TX_OFFSET_AT = 76  # after reconsume times: the commit's back-pointer, 8 bytes
BODY_CRC_AT = 8
CQ_UNIT_BYTES = 20  # physical offset 8, size 4, tags code 8 (a schedule unit's: its deliver time)
CQ_TAGS_AT = 12

# No store here had multi-dispatch (LMQ) on: tests/broker_core/export/test_lmq_import.py breaks a real one.
NO_LMQ = set(c.LMQ_CHECKS)
NOT_JUDGED_ON_IMPORTS = {c.NO_UNEXPLAINED_LOSS, c.DUPLICATE_RATE} | NO_LMQ
NO_TRANSACTIONS = set(c.TRANSACTION_CHECKS)
# The stores here hold no client trace (tests/stories/test_trace_mutations.py breaks one that does).
NO_TRACE = set(c.TRACE_CHECKS)
# What a transactional store (no retry, DLQ or delayed record) gives nothing to judge.
NOT_JUDGED_ON_TX_STORES = NOT_JUDGED_ON_IMPORTS | NO_TRACE | {c.DLQ_AFTER_MAX_RETRIES, c.NO_EARLY_DELIVERY, c.ORIGIN_STABLE,
                                                   c.LATENESS_P99, c.RETRIES_WITHIN_MAX}


# --- the audit of a store ------------------------------------------------------------------------

def audit(tmp_path: Path, stores: dict[str | None, Path], name: str) -> Path:
    """Import ``stores`` ({broker: store}, or {None: store}) as one run, its lineage and warehouse.

    The lineage runs on DuckDB, the same SQL as the pipeline's Spark (tests/bench/test_duckdb_lineage.py
    holds the two row-identical): what these tests judge is the checks on a broken store."""
    run = tmp_path / f"run-{name}"
    for broker, store in stores.items():
        import_store(store, run, name=name, broker=broker)
    run_lineage_duckdb(run)
    db = tmp_path / f"{name}.duckdb"
    build_warehouse([run], db)
    return db


def verdicts(db: Path) -> dict[str, c.CheckOutcome]:
    with open_read_only(db) as con:
        run_id = con.execute("SELECT DISTINCT run_id FROM runs").fetchone()[0]
        return {o.check.name: o for o in c.run_checks(con, c.ALL_CHECKS, run_id)}


def rows(db: Path, query: str, params=()) -> list[tuple]:
    with open_read_only(db) as con:
        return con.execute(query, list(params)).fetchall()


def reported(outcome: c.CheckOutcome, key: str, detail: str) -> bool:
    return any(e["message_key"] == key and detail in e["detail"] for e in outcome.examples)


def assert_clean(found: dict[str, c.CheckOutcome], not_applicable: set[str]) -> None:
    """Nothing fails; exactly ``not_applicable`` judged nothing, and says so; the rest judged something."""
    failed = {n: o.metadata()["evidence"] for n, o in found.items() if not o.passed}
    assert not failed, failed
    assert {n for n, o in found.items() if not o.applicable} == not_applicable
    for name in not_applicable:
        assert found[name].verdict == f"not applicable: {c.CHECKS_BY_NAME[name].no_evidence}"
    assert all(found[n].judged > 0 for n in set(found) - not_applicable)


# --- breaking a store's bytes --------------------------------------------------------------------

def record_at(store: Path, phys: int) -> tuple[Path, int]:
    """The commit-log file holding the record at ``phys`` and the record's position in it."""
    files = sorted((store / "commitlog").iterdir(), key=lambda p: int(p.name))
    path = [p for p in files if int(p.name) <= phys][-1]
    return path, phys - int(path.name)


def poke(path: Path, pos: int, fmt: str, value: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(struct.pack(fmt, value))


def peek(path: Path, pos: int, fmt: str) -> int:
    with open(path, "rb") as fh:
        fh.seek(pos)
        return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]


def set_reconsume_times(store: Path, phys: int, value: int) -> None:
    path, pos = record_at(store, phys)
    poke(path, pos + RECONSUME_TIMES_AT, ">i", value)


def shift_store_ts(store: Path, phys: int, delta_ms: int) -> None:
    path, pos = record_at(store, phys)
    poke(path, pos + STORE_TS_AT, ">q", peek(path, pos + STORE_TS_AT, ">q") + delta_ms)


def replace_in_record(store: Path, phys: int, old: bytes, new: bytes) -> None:
    """Overwrite ``old`` (once in the record) with ``new`` of the same length."""
    assert len(old) == len(new)
    path, pos = record_at(store, phys)
    data = bytearray(path.read_bytes())
    size = struct.unpack_from(">i", data, pos)[0]
    at = data.find(old, pos, pos + size)
    assert at >= 0, f"{old!r} not in the record at {phys}"
    data[at:at + len(old)] = new
    path.write_bytes(bytes(data))


def shift_due(store: Path, level: int, queue_offset: int, delta_ms: int) -> None:
    """Move a schedule queue unit's deliver time (its tags code) by ``delta_ms``."""
    queue = store / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / str(level - 1)
    files = sorted(queue.iterdir(), key=lambda p: int(p.name))
    at = queue_offset * CQ_UNIT_BYTES
    path = [p for p in files if int(p.name) <= at][-1]
    pos = at - int(path.name) + CQ_TAGS_AT
    poke(path, pos, ">q", peek(path, pos, ">q") + delta_ms)


def writable_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


# --- the clean audits, once per module -----------------------------------------------------------

@pytest.fixture(scope="module")
def clean_494(tmp_path_factory) -> Path:
    return audit(tmp_path_factory.mktemp("clean-494"), {None: STORE_494}, "clean-494")


@pytest.fixture(scope="module")
def clean_5x(tmp_path_factory) -> Path:
    return audit(tmp_path_factory.mktemp("clean-5x"), {b: STORES_5X / b for b in BROKERS_5X}, "clean-5x")


def test_a_clean_494_store_passes_every_check_it_can_judge(clean_494):
    """The real 4.9.4 store: delayed deliveries, retries and the DLQ are judged from its own bytes;
    what only a producer's log or a consumer's could say is not applicable, never passed."""
    found = verdicts(clean_494)
    assert_clean(found, NOT_JUDGED_ON_IMPORTS | NO_TRANSACTIONS | NO_TRACE)
    # 30 SCHEDULE records with a unit each; 8 DLQ records, each a send-back at GroupA's maximum;
    # 12 retried chains (GroupA's 8, GroupB's 4), none forked, none past its group's maximum.
    assert found[c.NO_EARLY_DELIVERY].judged == 30
    assert found[c.DLQ_AFTER_MAX_RETRIES].judged == 8
    assert found[c.RETRIES_WITHIN_MAX].judged == 12
    assert rows(clean_494, "SELECT sum(forks), count(*), count(DISTINCT message_key) FROM dlq_messages") == [
        (0, 8, 8)]
    assert rows(clean_494, "SELECT DISTINCT dlq_reason FROM dlq_messages") == [("MAX_RECONSUME_TIMES",)]
    # Each delivery measured against its record's own due time from the schedule queue.
    assert rows(clean_494, "SELECT delay_level, expected_delay_ms, early_count, measured_from FROM delay_accuracy "
                           "ORDER BY 1") == [
        (3, 3000, 0, "commitlog, due time from the schedule queue"),
        (4, 4000, 0, "commitlog, due time from the schedule queue")]
    assert rows(clean_494, "SELECT delay_level, period, delay_ms, records FROM delay_periods ORDER BY 1, 2") == [
        (3, 1, 3000, 22), (4, 1, 4000, 8)]


def test_a_clean_5x_store_passes_every_check_it_can_judge(clean_5x):
    """The real 5.5.1 stores: POP retries are judged against their checkpoints' revive times, and
    every DLQ record (the proxy's forwards at the policy's maximum) is explained."""
    found = verdicts(clean_5x)
    assert_clean(found, NOT_JUDGED_ON_IMPORTS | {c.LATENESS_P99} | NO_TRANSACTIONS | NO_TRACE)
    assert found[c.LATENESS_P99].verdict == "not applicable: no delayed delivery with a known due time"
    assert found[c.DLQ_AFTER_MAX_RETRIES].judged == 7
    assert rows(clean_5x, "SELECT count(*) FROM dlq_messages WHERE dlq_reason IS NULL") == [(0,)]


# --- 4.9.4: broken bytes -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broken_494(clean_494, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """One copy of the 4.9.4 store with one breakage per check, each on its own message."""
    tmp = tmp_path_factory.mktemp("broken-494")
    store = writable_copy(STORE_494, tmp / "store")
    units = rows(clean_494, """
        SELECT u.delay_level, u.queue_offset, h.message_key
        FROM schedule_units u JOIN message_hops h USING (run_id, broker, phys_offset)
        WHERE h.next_store_ts IS NOT NULL AND u.delay_level = 3 ORDER BY u.queue_offset""")
    dlq = rows(clean_494, "SELECT message_key, dlq_phys_offset FROM dlq_messages ORDER BY dlq_phys_offset")
    # GroupB's retries (PayTopic): each consumed at its first retry.
    retry = rows(clean_494, """
        SELECT h.message_key, h.phys_offset FROM message_hops h
        WHERE h.hop_kind = 'RETRY' AND h."group" = 'GroupB' ORDER BY h.phys_offset""")
    keys = {}
    # A schedule unit whose due time is a minute later than its record was delivered: early.
    level, offset, keys[c.NO_EARLY_DELIVERY] = units[0]
    shift_due(store, level, offset, 60_000)
    # Two units whose due times are 8 s earlier: their deliveries read 8 s late (the p99 of 22).
    for level, offset, key in units[1:3]:
        shift_due(store, level, offset, -8_000)
        keys[c.LATENESS_P99] = key
    # A DLQ record at a count no delivery of its chain had: no send-back made it.
    keys[c.DLQ_AFTER_MAX_RETRIES], phys = dlq[0]
    set_reconsume_times(store, phys, 9)
    # A retry record moved to another group's retry topic (same length): that chain starts RETRY.
    keys[c.HOP_GRAMMAR], phys = retry[0]
    replace_in_record(store, phys, b"%RETRY%GroupB", b"%RETRY%GroupA")
    # A retry record whose RETRY_TOPIC names another topic than its chain's other records.
    keys[c.ORIGIN_STABLE], phys = retry[-1]
    replace_in_record(store, phys, b"RETRY_TOPIC\x01PayTopic", b"RETRY_TOPIC\x01PayTopiX")
    # A retry record at reconsume 40: deeper than GroupB's maximum (the default 16).
    keys[c.RETRIES_WITHIN_MAX], phys = retry[1]
    set_reconsume_times(store, phys, 40)
    assert len(set(keys.values())) == len(keys), keys
    return audit(tmp, {None: store}, "broken-494"), keys


@pytest.mark.parametrize(("check", "detail", "anomaly"), [
    (c.NO_EARLY_DELIVERY, "ms before its SCHEDULE record's due time in the schedule queue", "EARLY_DELIVERY"),
    (c.DLQ_AFTER_MAX_RETRIES, "no delivery at reconsume 8 in its chain that a send-back could come from",
     "DLQ_UNEXPLAINED"),
    (c.HOP_GRAMMAR, "", None),
    (c.ORIGIN_STABLE, "", None),
    (c.RETRIES_WITHIN_MAX, "40 retries deep", None),
])
def test_a_broken_494_store_fails_the_check_that_guards_it(broken_494, check, detail, anomaly):
    db, keys = broken_494
    outcome = verdicts(db)[check]
    key = keys[check]
    assert not outcome.passed and reported(outcome, key, detail), outcome.metadata()
    if anomaly:
        assert rows(db, "SELECT count(*) FROM anomalies WHERE kind = ? AND message_key = ?", [anomaly, key]) == [(1,)]


def test_late_deliveries_in_a_494_store_fail_the_lateness_drift(broken_494):
    """The delay_accuracy drift, measured from each record's own due time, and LATE_DELIVERY."""
    db, keys = broken_494
    outcome = verdicts(db)[c.LATENESS_P99]
    assert not outcome.passed
    assert "delay level 3: p99 lateness" in outcome.examples[0]["detail"]
    assert rows(db, "SELECT early_count, lateness_max_ms >= 8000 FROM delay_accuracy WHERE delay_level = 3") == [
        (1, True)]
    assert rows(db, "SELECT count(*) FROM anomalies WHERE kind = 'LATE_DELIVERY'") == [(2,)]


def test_a_494_store_whose_delay_table_changed_is_read_per_period(clean_494, tmp_path):
    """A broker restarted with another messageDelayLevel: the records stored before the restart
    had level 3 at 10 s, the ones after at 3 s (runs.delay_levels_ms holds the newest table). The
    bytes are made so: the first SCHEDULE records of level 3 stored 7 s earlier, their deliveries
    and due times as they were. Each delivery is judged by its own record's due time: no early or
    late delivery, no alarm, and delay_periods shows the two periods."""
    store = writable_copy(STORE_494, tmp_path / "store")
    first = rows(clean_494, """
        SELECT h.phys_offset FROM schedule_units u JOIN message_hops h USING (run_id, broker, phys_offset)
        WHERE u.delay_level = 3 ORDER BY u.queue_offset LIMIT 2""")
    for (phys,) in first:
        shift_store_ts(store, phys, -7_000)
    db = audit(tmp_path, {None: store}, "periods-494")
    found = verdicts(db)
    assert_clean(found, NOT_JUDGED_ON_IMPORTS | NO_TRANSACTIONS | NO_TRACE)
    assert rows(db, "SELECT delay_level, period, delay_ms, records FROM delay_periods ORDER BY 1, 2") == [
        (3, 1, 10_000, 2), (3, 2, 3000, 20), (4, 1, 4000, 8)]
    assert rows(db, "SELECT count(*) FROM anomalies WHERE kind IN ('EARLY_DELIVERY', 'LATE_DELIVERY')") == [(0,)]


# --- 5.x: broken bytes ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broken_5x(clean_5x, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("broken-5x")
    stores = {b: writable_copy(STORES_5X / b, tmp / b) for b in BROKERS_5X}
    keys = {}
    # A POP retry stored a second before the revive time of its previous record's checkpoints.
    key, broker, phys, ahead_ms = rows(clean_5x, """
        SELECT h.message_key, h.broker, h.phys_offset,
               epoch_ms(h.store_ts) - epoch_ms(min(e.revive_ts)) + 1000 AS ahead_ms
        FROM message_hops h
        JOIN retry_topics r ON r.run_id = h.run_id AND r.broker = h.broker AND r.retry_topic = h.topic
             AND r.origin_topic IS NOT NULL
        JOIN message_hops p ON p.run_id = h.run_id AND p.message_key = h.message_key
             AND p.hop_index = h.hop_index - 1 AND (p."group" = h."group" OR p."group" IS NULL)
        JOIN commitlog pc ON pc.run_id = p.run_id AND pc.broker = p.broker AND pc.phys_offset = p.phys_offset
        JOIN pop_evidence e ON e.run_id = h.run_id AND e.broker = p.broker AND e.kind = 'ck'
             AND e."group" = h."group" AND e.topic = pc.topic AND e.queue_id = pc.queue_id
             AND list_contains(e.offsets, pc.queue_offset)
        WHERE h.hop_kind = 'RETRY'
        GROUP BY h.message_key, h.broker, h.phys_offset, h.store_ts, p.store_ts
        HAVING min(e.revive_ts) - INTERVAL 1 SECOND > p.store_ts
        ORDER BY 1, 3 LIMIT 1""")[0]
    keys[c.NO_EARLY_DELIVERY] = key
    shift_store_ts(stores[broker], phys, -ahead_ms)
    dlq = rows(clean_5x, """
        SELECT d.message_key, d.dlq_broker, d.dlq_phys_offset
        FROM dlq_messages d WHERE d.message_key <> ? ORDER BY 1""", [key])
    # A DLQ record (a proxy's forward) at a count no delivery of its chain had.
    keys[c.DLQ_AFTER_MAX_RETRIES], broker, phys = dlq[0]
    set_reconsume_times(stores[broker], phys, 9)
    # A revive retry without its 1ST_POP_TIME (same length): a RETRY no SCHEDULE came before.
    keys[c.HOP_GRAMMAR], broker, phys = rows(clean_5x, """
        SELECT h.message_key, h.broker, h.phys_offset FROM message_hops h
        WHERE h.hop_kind = 'RETRY' AND h.reconsume_times = 2 AND h.message_key NOT IN (?, ?)
        ORDER BY 1 LIMIT 1""", [keys[c.NO_EARLY_DELIVERY], keys[c.DLQ_AFTER_MAX_RETRIES]])[0]
    replace_in_record(stores[broker], phys, b"1ST_POP_TIME\x01", b"1ST_POP_TIMX\x01")
    # A DLQ record whose ORIGIN_MESSAGE_ID names an offset msgId none of its message's records has.
    key, broker, phys = rows(clean_5x, """
        SELECT message_key, dlq_broker, dlq_phys_offset FROM dlq_messages
        WHERE message_key NOT IN (?, ?, ?) ORDER BY 1 LIMIT 1""",
                             [keys[c.NO_EARLY_DELIVERY], keys[c.DLQ_AFTER_MAX_RETRIES], keys[c.HOP_GRAMMAR]])[0]
    keys[c.ORIGIN_STABLE] = key
    origin = rows(clean_5x, "SELECT origin_msg_id FROM commitlog WHERE broker = ? AND phys_offset = ?",
                  [broker, phys])[0][0]
    other = origin[:-1] + ("1" if origin[-1] != "1" else "2")
    replace_in_record(stores[broker], phys, b"ORIGIN_MESSAGE_ID\x01" + origin.encode(),
                      b"ORIGIN_MESSAGE_ID\x01" + other.encode())
    # A revive retry record at reconsume 40: deeper than its group's maximum.
    keys[c.RETRIES_WITHIN_MAX], broker, phys = rows(clean_5x, """
        SELECT h.message_key, h.broker, h.phys_offset FROM message_hops h
        WHERE h.hop_kind = 'RETRY' AND h.message_key NOT IN (?, ?, ?, ?)
        ORDER BY 1 LIMIT 1""", [keys[c.NO_EARLY_DELIVERY], keys[c.DLQ_AFTER_MAX_RETRIES], keys[c.HOP_GRAMMAR],
                                 keys[c.ORIGIN_STABLE]])[0]
    set_reconsume_times(stores[broker], phys, 40)
    assert len(set(keys.values())) == len(keys), keys
    return audit(tmp, stores, "broken-5x"), keys


@pytest.mark.parametrize(("check", "detail", "anomaly"), [
    (c.NO_EARLY_DELIVERY, "before the revive time of its previous record's checkpoints", "EARLY_DELIVERY"),
    (c.DLQ_AFTER_MAX_RETRIES, "no delivery at reconsume 8 in its chain that a send-back could come from",
     "DLQ_UNEXPLAINED"),
    (c.HOP_GRAMMAR, "", None),
    (c.ORIGIN_STABLE, "", None),
    (c.RETRIES_WITHIN_MAX, "40 retries deep", None),
])
def test_a_broken_5x_store_fails_the_check_that_guards_it(broken_5x, check, detail, anomaly):
    db, keys = broken_5x
    outcome = verdicts(db)[check]
    assert not outcome.passed and reported(outcome, keys[check], detail), outcome.metadata()
    if anomaly:
        assert rows(db, "SELECT count(*) FROM anomalies WHERE kind = ? AND message_key = ?",
                    [anomaly, keys[check]]) == [(1,)]


# --- what bytes cannot say: the imported rows, and a simulation's -------------------------------

@pytest.mark.parametrize("store", ["clean_494", "clean_5x"])
def test_a_lineage_row_dropped_from_an_import_fails_lineage_matches_commitlog(store, request):
    """The lineage is the audit's own output: no store byte can break it, its rows can."""
    con = warehouse_copy(request.getfixturevalue(store))
    key, phys = con.execute("SELECT message_key, phys_offset FROM message_hops ORDER BY ALL LIMIT 1").fetchone()
    con.execute("DELETE FROM message_hops WHERE message_key = ? AND phys_offset = ?", [key, phys])
    outcome = c.run_check(con, c.CHECKS_BY_NAME[c.LINEAGE_MATCHES_COMMITLOG])
    assert not outcome.passed
    assert any(f"@{phys} " in e["detail"] for e in outcome.examples), outcome.metadata()


def test_a_simulation_fails_each_drift_on_its_own_evidence(story_warehouse_path):
    """Duplicate consumes and late deliveries in a simulated run's own records fail the drifts,
    with DUPLICATE_CONSUME and LATE_DELIVERY anomalies."""
    con = warehouse_copy(story_warehouse_path)
    run, level = con.execute("SELECT run_id, delay_level FROM schedule_deliveries "
                             "GROUP BY ALL ORDER BY count(*) DESC, 1, 2 LIMIT 1").fetchone()
    group = con.execute("""SELECT "group" FROM consume_attempts WHERE run_id = ? AND status = 'CONSUME_SUCCESS'
                           GROUP BY ALL ORDER BY count(*) DESC, 1 LIMIT 1""", [run]).fetchone()[0]
    # Every successful consume of the group done twice: every message a duplicate.
    con.execute("""INSERT INTO consume_attempts SELECT * FROM consume_attempts
                   WHERE run_id = ? AND "group" = ? AND status = 'CONSUME_SUCCESS' AND outcome = 'ACKED'""",
                [run, group])
    con.execute("UPDATE schedule_deliveries SET lateness_ms = lateness_ms + 9000 WHERE run_id = ? AND delay_level = ?",
                [run, level])
    build_audit_tables(con)
    found = {o.check.name: o for o in c.run_checks(con, c.DRIFTS, run)}
    assert not found[c.DUPLICATE_RATE].passed and found[c.DUPLICATE_RATE].examples[0]["group"] == group
    assert not found[c.LATENESS_P99].passed
    assert f"delay level {level}: p99 lateness" in found[c.LATENESS_P99].examples[0]["detail"]
    kinds = dict(con.execute("SELECT kind, count(*) FROM anomalies WHERE run_id = ? GROUP BY kind", [run]).fetchall())
    assert kinds.get("DUPLICATE_CONSUME", 0) > 0 and kinds.get("LATE_DELIVERY", 0) > 0, kinds


def test_every_check_has_a_breakage_on_every_input_it_judges():
    """The matrix this file and test_check_mutations.py cover: (check, input) -> how it is broken,
    or that the input has no evidence for it (asserted above as 'not applicable')."""
    broken = {
        "simulation": {c.HOP_GRAMMAR, c.NO_UNEXPLAINED_LOSS, c.DLQ_AFTER_MAX_RETRIES, c.NO_EARLY_DELIVERY,
                       c.ORIGIN_STABLE, c.LINEAGE_MATCHES_COMMITLOG, c.DUPLICATE_RATE, c.LATENESS_P99,
                       c.RETRIES_WITHIN_MAX},
        "4.9.4": {c.NO_EARLY_DELIVERY, c.DLQ_AFTER_MAX_RETRIES, c.HOP_GRAMMAR, c.ORIGIN_STABLE,
                  c.LINEAGE_MATCHES_COMMITLOG, c.LATENESS_P99, c.RETRIES_WITHIN_MAX},
        "5.x": {c.NO_EARLY_DELIVERY, c.DLQ_AFTER_MAX_RETRIES, c.HOP_GRAMMAR, c.ORIGIN_STABLE,
                c.LINEAGE_MATCHES_COMMITLOG, c.RETRIES_WITHIN_MAX},
    }
    not_applicable = {"simulation": NO_TRANSACTIONS | NO_TRACE | NO_LMQ,
                      "4.9.4": NOT_JUDGED_ON_IMPORTS | NO_TRANSACTIONS | NO_TRACE,
                      "5.x": NOT_JUDGED_ON_IMPORTS | {c.LATENESS_P99} | NO_TRANSACTIONS | NO_TRACE}
    for kind in broken:
        assert broken[kind] | not_applicable[kind] <= {k.name for k in c.ALL_CHECKS}
        assert not broken[kind] & not_applicable[kind]
    assert broken["simulation"] | not_applicable["simulation"] == {k.name for k in c.ALL_CHECKS}
    # The transactional stores: every transaction check broken above; the rest judged as on any import.
    assert set(TX_BREAKAGES) == NO_TRANSACTIONS
    # The store with client trace: every trace check broken in test_trace_mutations.py.
    from test_trace_mutations import TRACE_BREAKAGES
    assert set(TRACE_BREAKAGES) == NO_TRACE
    assert broken["4.9.4"] | not_applicable["4.9.4"] == {k.name for k in c.ALL_CHECKS}
    assert broken["5.x"] | not_applicable["5.x"] == {k.name for k in c.ALL_CHECKS}


# --- transactions: the real 4.9.4 and 5.3.3 transactional stores ---------------------------------

@pytest.fixture(scope="module", params=sorted(TX_STORES))
def clean_tx(request, tmp_path_factory) -> tuple[str, Path]:
    version = request.param
    name = f"clean-tx{version.replace('.', '')}"
    return version, audit(tmp_path_factory.mktemp(name), {None: TX_STORES[version]}, name)


def test_a_clean_transactional_store_passes_every_check_it_can_judge(clean_tx):
    """The real transactional stores: every commit names its half copy, every op record a half,
    nothing is checked past the maximum or committed twice; the table says each outcome."""
    version, db = clean_tx
    found = verdicts(db)
    assert_clean(found, NOT_JUDGED_ON_TX_STORES)
    assert found[c.TX_COMMIT_HALF].judged == 6 and found[c.TX_OP_HALF].judged == {"4.9.4": 9, "5.3.3": 4}[version]
    assert rows(db, "SELECT transaction_state, count(*) FROM transactions GROUP BY 1 ORDER BY 1") == [
        ("COMMITTED", 6), ("DISCARDED", 1), ("ROLLED_BACK", 3)]
    assert rows(db, "SELECT count(*) FROM transactions WHERE decision_ms IS NULL OR decision_ms < 0") == [(0,)]
    assert rows(db, "SELECT count(*) FROM anomalies") == [(0,)]


def tx_record(db: Path, keys: str, where: str) -> tuple[str, int]:
    """(message_key, phys_offset) of the record of the message with KEYS ``keys`` matching ``where``."""
    return rows(db, f"SELECT uniq_key, phys_offset FROM commitlog WHERE keys = ? AND {where} "
                    "ORDER BY phys_offset DESC LIMIT 1", [keys])[0]


def check_past_the_maximum(store: Path, db: Path) -> tuple[str | None, str]:
    # The undecided message's last check copy says it was checked once more than the maximum.
    key, phys = tx_record(db, "p0-5", "topic = 'RMQ_SYS_TRANS_HALF_TOPIC'")
    replace_in_record(store, phys, b"TRANSACTION_CHECK_TIMES\x013", b"TRANSACTION_CHECK_TIMES\x014")
    return key, "checked 4 times"


def point_a_commit_elsewhere(store: Path, db: Path) -> tuple[str | None, str]:
    # A commit's back-pointer names the commit itself, not its half.
    key, phys = tx_record(db, "p0-0", "sys_flag = 8")
    path, pos = record_at(store, phys)
    assert peek(path, pos + PREPARED_TX_OFFSET_AT, ">q") == rows(
        db, "SELECT prepared_tx_offset FROM commitlog WHERE phys_offset = ?", [phys])[0][0]
    poke(path, pos + PREPARED_TX_OFFSET_AT, ">q", phys)
    return key, f"points at offset {phys}, a TxTopic record of {key}"


def decide_a_half_never_stored(store: Path, db: Path) -> tuple[str | None, str]:
    # The last op record's body names half queue offset 97 instead of 17 (its body CRC redone).
    _, phys = rows(db, "SELECT NULL, phys_offset FROM commitlog WHERE topic = 'RMQ_SYS_TRANS_OP_HALF_TOPIC' "
                       "ORDER BY phys_offset DESC LIMIT 1")[0]
    path, pos = record_at(store, phys)
    replace_in_record(store, phys, b"17", b"97")
    poke(path, pos + BODY_CRC_AT, ">i", zlib.crc32(b"97") & 0x7FFFFFFF)
    return None, "decided half queue offset 97 of queue 0, which the store never had"


def commit_a_message_twice(store: Path, db: Path) -> tuple[str | None, str]:
    # p0-8's commit record carries p0-9's UNIQ_KEY: p0-9 is committed twice.
    key8, phys = tx_record(db, "p0-8", "sys_flag = 8")
    key9, _ = tx_record(db, "p0-9", "sys_flag = 8")
    replace_in_record(store, phys, key8.encode(), key9.encode())
    return key9, "committed 2 times"


# Each transaction check and the breakage of a store's bytes it must report, with its anomaly kind.
TX_BREAKAGES = {
    c.TX_CHECK_MAX: (check_past_the_maximum, "TRANSACTION_PAST_CHECK_MAX"),
    c.TX_COMMIT_HALF: (point_a_commit_elsewhere, "COMMIT_WITHOUT_HALF"),
    c.TX_OP_HALF: (decide_a_half_never_stored, "OP_WITHOUT_HALF"),
    c.TX_COMMITTED_ONCE: (commit_a_message_twice, "COMMITTED_TWICE"),
}


@pytest.fixture(scope="module")
def broken_tx(tmp_path_factory) -> tuple[Path, dict[str, tuple[str | None, str]]]:
    """One copy of the 4.9.4 transactional store with one breakage per transaction check, each on
    its own message."""
    tmp = tmp_path_factory.mktemp("broken-tx")
    clean = audit(tmp, {None: TX_STORES["4.9.4"]}, "clean-tx")
    store = writable_copy(TX_STORES["4.9.4"], tmp / "store")
    expected = {check: breakage(store, clean) for check, (breakage, _) in TX_BREAKAGES.items()}
    return audit(tmp, {None: store}, "broken-tx"), expected


@pytest.mark.parametrize("check", sorted(TX_BREAKAGES))
def test_a_broken_transactional_store_fails_the_check_that_guards_it(broken_tx, check):
    """Each transaction check fails on the store bytes broken for it, naming the message (or the
    op record) with its rule, and lists an anomaly of its kind."""
    db, expected = broken_tx
    key, detail = expected[check]
    outcome = verdicts(db)[check]
    assert not outcome.passed and reported(outcome, key, detail), outcome.metadata()
    kind = TX_BREAKAGES[check][1]
    assert rows(db, "SELECT count(*) FROM anomalies WHERE kind = ? AND message_key IS NOT DISTINCT FROM ? "
                    "AND detail LIKE '%' || ? || '%'", [kind, key, detail]) == [(1,)]
