"""Each invariant catches its kind of damage in real simulated runs, wherever the damage lands.

The story runs (simulated, with their Spark lineage) are copied into an in-memory DuckDB; one
row is broken, chosen by a seeded stream, and the check that guards that rule must name the
broken message. The hand-built cases in ``tests/assets/test_checks.py`` pin each rule's wording;
these show the rules hold on real journeys (retries, DLQ, schedule redeliveries, restarts).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from warehouse_copy import warehouse_copy

from assets import checks as c

SEEDS = (1, 2, 3)
REPRODUCE = "python -m pytest tests/stories/test_check_mutations.py -k '{name} and seed{seed}'"


@pytest.fixture
def story_copy(story_warehouse_path):
    """A writable in-memory copy of the story warehouse's loaded tables."""
    con = warehouse_copy(story_warehouse_path)
    yield con
    con.close()


def pick(con, rng: random.Random, query: str) -> tuple:
    """One row of ``query`` (ordered, so the seed alone decides which)."""
    rows = con.execute(f"SELECT * FROM ({query}) ORDER BY ALL").fetchall()
    assert rows, f"nothing to break: {query}"
    return rows[rng.randrange(len(rows))]


def offending(con, check: c.Check) -> list[tuple]:
    """Every row the check reports: (run_id, message_key, group, detail)."""
    with c.staged_inputs(con):
        return con.execute(f'SELECT run_id, message_key, "group", detail FROM ({check.sql})').fetchall()


# Each breakage edits one thing and returns (run_id, message_key, a piece of the detail the
# guarding check must report).

def drop_a_hop(con, rng):
    run, key, broker, phys = pick(con, rng, "SELECT run_id, message_key, broker, phys_offset FROM message_hops")
    con.execute("DELETE FROM message_hops WHERE run_id = ? AND phys_offset = ?", [run, phys])
    uniq = con.execute("SELECT uniq_key FROM commitlog WHERE run_id = ? AND phys_offset = ?",
                       [run, phys]).fetchone()[0]
    return run, uniq, f"commit-log record at {broker}@{phys} "


def repeat_a_hop(con, rng):
    run, key, broker, phys = pick(con, rng, "SELECT run_id, message_key, broker, phys_offset FROM message_hops")
    con.execute("INSERT INTO message_hops SELECT * FROM message_hops WHERE run_id = ? AND phys_offset = ?",
                [run, phys])
    return run, key, f"commit-log record at {broker}@{phys} is in 2 hop rows"


def point_a_hop_past_the_log(con, rng):
    run, key, broker, phys = pick(con, rng, "SELECT run_id, message_key, broker, phys_offset FROM message_hops")
    moved = phys + 10**12
    con.execute("UPDATE message_hops SET phys_offset = ? WHERE run_id = ? AND phys_offset = ?",
                [moved, run, phys])
    return run, key, f"hop row at {broker}@{moved} has no commit-log record"


def move_a_hop_to_another_broker(con, rng):
    # The offset exists, but on the hop's own broker only: a hop names (broker, offset), never an
    # offset alone, so the record is left without its hop and the hop without its record.
    run, key, broker, phys = pick(con, rng, "SELECT run_id, message_key, broker, phys_offset FROM message_hops")
    con.execute("UPDATE message_hops SET broker = 'broker-elsewhere' WHERE run_id = ? AND phys_offset = ?",
                [run, phys])
    return run, key, f"hop row at broker-elsewhere@{phys} has no commit-log record"


def miscount_a_chain(con, rng):
    run, key, group, hops = pick(con, rng, 'SELECT run_id, message_key, "group", hops FROM message_lineage '
                                           "WHERE final_state <> 'LOST' AND \"group\" IS NOT NULL")
    con.execute('UPDATE message_lineage SET hops = hops + 1 WHERE run_id = ? AND message_key = ? AND "group" = ?',
                [run, key, group])
    return run, key, f"lineage says {hops + 1} hops"


def list_a_chain_twice(con, rng):
    run, key, group = pick(con, rng, 'SELECT run_id, message_key, "group" FROM message_lineage '
                                     "WHERE final_state <> 'LOST' AND \"group\" IS NOT NULL")
    con.execute('INSERT INTO message_lineage SELECT * FROM message_lineage '
                'WHERE run_id = ? AND message_key = ? AND "group" = ?', [run, key, group])
    return run, key, "hop_index runs"


def skip_a_hop_index(con, rng):
    run, key, phys = pick(con, rng, "SELECT h.run_id, h.message_key, h.phys_offset FROM message_hops h "
                                    "SEMI JOIN message_lineage l ON l.run_id = h.run_id "
                                    "AND l.message_key = h.message_key AND l.final_state <> 'LOST'")
    con.execute("UPDATE message_hops SET hop_index = hop_index + 1000 WHERE run_id = ? AND phys_offset = ?",
                [run, phys])
    return run, key, ""


def claim_another_messages_origin(con, rng):
    run, key, phys = pick(con, rng, "SELECT h.run_id, h.message_key, h.phys_offset FROM message_hops h "
                                    "JOIN commitlog r ON r.run_id = h.run_id AND r.phys_offset = h.phys_offset "
                                    "WHERE r.origin_msg_id IS NOT NULL AND r.origin_msg_id <> r.uniq_key")
    (foreign,) = pick(con, rng, "SELECT r.msg_id FROM commitlog r JOIN message_hops h "
                                "ON h.run_id = r.run_id AND h.phys_offset = r.phys_offset "
                                f"WHERE r.run_id = '{run}' AND h.message_key <> '{key}'")
    con.execute("UPDATE commitlog SET origin_msg_id = ? WHERE run_id = ? AND phys_offset = ?",
                [foreign, run, phys])
    return run, key, f"ORIGIN_MESSAGE_ID {foreign}"


def change_a_retry_topic(con, rng):
    # A group hop holding RETRY_TOPIC in a chain where another of the group's hops holds it too.
    run, key, phys = pick(con, rng, """
        SELECT h.run_id, h.message_key, h.phys_offset
        FROM message_hops h JOIN commitlog r ON r.run_id = h.run_id AND r.phys_offset = h.phys_offset
        WHERE h."group" IS NOT NULL AND r.retry_topic IS NOT NULL
          AND (SELECT count(*) FROM message_hops o
               JOIN commitlog q ON q.run_id = o.run_id AND q.phys_offset = o.phys_offset
               WHERE o.run_id = h.run_id AND o.message_key = h.message_key AND o."group" = h."group"
                 AND q.retry_topic IS NOT NULL) >= 2""")
    con.execute("UPDATE commitlog SET retry_topic = '%RETRY%mutated' WHERE run_id = ? AND phys_offset = ?",
                [run, phys])
    return run, key, "RETRY_TOPIC changes along the chain"


def lose_a_message_without_a_crash(con, rng):
    run, key = pick(con, rng, f"""
        SELECT p.run_id, p.uniq_key FROM produced p
        WHERE p.status = 'SEND_OK' AND p.uniq_key IS NOT NULL
          AND p.run_id NOT IN (SELECT run_id FROM faults WHERE kind IN {c.LOSS_FAULT_KINDS!r})""")
    con.execute("DELETE FROM commitlog WHERE run_id = ? AND uniq_key = ?", [run, key])
    return run, key, "has no commit-log record"


def send_to_the_dlq_at_the_first_failure(con, rng):
    # The DLQ record reads as sent after 0 reconsumes: neither its count nor RECONSUME_TIME says more.
    run, key, phys = pick(con, rng, "SELECT run_id, message_key, phys_offset FROM message_hops "
                                    "WHERE hop_kind = 'DLQ'")
    con.execute("UPDATE commitlog SET reconsume_times = 1, properties = map_from_entries(list_filter("
                "map_entries(properties), lambda e: e.key <> 'RECONSUME_TIME')) "
                "WHERE run_id = ? AND phys_offset = ?", [run, phys])
    return run, key, "in the DLQ after 0 reconsumes"


def retry_past_the_maximum(con, rng):
    # A retry record whose count is past its group's maximum (the larger of the configured one and
    # the default, so whatever the group's setting the record reads deeper).
    run, key, phys, group = pick(con, rng, "SELECT run_id, message_key, phys_offset, \"group\" FROM message_hops "
                                           "WHERE hop_kind = 'RETRY'")
    deepest = 1000
    con.execute("UPDATE commitlog SET reconsume_times = ? WHERE run_id = ? AND phys_offset = ?", [deepest, run, phys])
    return run, key, f"{deepest} retries deep"


def deliver_a_delayed_message_early(con, rng):
    run, key, offset = pick(con, rng, "SELECT run_id, uniq_key, schedule_queue_offset FROM schedule_deliveries")
    con.execute("UPDATE schedule_deliveries SET delivered_ts = due_ts - INTERVAL 1 SECOND, lateness_ms = -1000 "
                "WHERE run_id = ? AND uniq_key = ? AND schedule_queue_offset = ?", [run, key, offset])
    return run, key, "delivered 1000 ms before its due time"


# Each breakage and the invariant that must catch it.
BREAKAGES: dict[str, tuple[str, Callable]] = {
    "drop_a_hop": (c.LINEAGE_MATCHES_COMMITLOG, drop_a_hop),
    "repeat_a_hop": (c.LINEAGE_MATCHES_COMMITLOG, repeat_a_hop),
    "point_a_hop_past_the_log": (c.LINEAGE_MATCHES_COMMITLOG, point_a_hop_past_the_log),
    "move_a_hop_to_another_broker": (c.LINEAGE_MATCHES_COMMITLOG, move_a_hop_to_another_broker),
    "miscount_a_chain": (c.LINEAGE_MATCHES_COMMITLOG, miscount_a_chain),
    "list_a_chain_twice": (c.HOP_GRAMMAR, list_a_chain_twice),
    "skip_a_hop_index": (c.HOP_GRAMMAR, skip_a_hop_index),
    "claim_another_messages_origin": (c.ORIGIN_STABLE, claim_another_messages_origin),
    "change_a_retry_topic": (c.ORIGIN_STABLE, change_a_retry_topic),
    "lose_a_message_without_a_crash": (c.NO_UNEXPLAINED_LOSS, lose_a_message_without_a_crash),
    "send_to_the_dlq_at_the_first_failure": (c.DLQ_AFTER_MAX_RETRIES, send_to_the_dlq_at_the_first_failure),
    "deliver_a_delayed_message_early": (c.NO_EARLY_DELIVERY, deliver_a_delayed_message_early),
    "retry_past_the_maximum": (c.RETRIES_WITHIN_MAX, retry_past_the_maximum),
}


def test_every_invariant_has_a_breakage():
    """No invariant is left without a breakage that it must catch (the transaction checks' are in
    test_store_mutations.py, the trace checks' in test_trace_mutations.py: the story runs hold no
    transactional message and no client trace; the LMQ check's in
    tests/broker_core/export/test_lmq_import.py, on a real LMQ store's bytes)."""
    assert {check for check, _ in BREAKAGES.values()} == ({k.name for k in c.INVARIANTS} - set(c.TRANSACTION_CHECKS)
                                                          - set(c.TRACE_CHECKS) - set(c.LMQ_CHECKS))


def test_the_story_runs_pass_every_invariant(story_copy):
    """The baseline: before anything is broken, no invariant reports a row."""
    for check in c.INVARIANTS:
        assert offending(story_copy, check) == [], check.name


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("name", list(BREAKAGES))
def test_each_breakage_is_reported_for_the_broken_message(story_copy, name, seed):
    """The guarding check fails and names the message that was broken, with the rule it broke."""
    check_name, breakage = BREAKAGES[name]
    run, key, detail = breakage(story_copy, random.Random(seed))
    rows = offending(story_copy, c.CHECKS_BY_NAME[check_name])
    named = [r for r in rows if r[0] == run and r[1] == key and detail in r[3]]
    assert named, (f"{check_name} did not report {key} ({detail!r}) after {name}; it reported "
                   f"{rows[:5]}. Seed {seed}; reproduce: {REPRODUCE.format(name=name, seed=seed)}")
