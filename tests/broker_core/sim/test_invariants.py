"""Each invariant check catches the damage it exists for, on a real run broken on purpose."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.sim import invariants
from broker_core.sim.invariants import RunData, check_run


def rewrite(run_dir: Path, table: str, change) -> None:
    """Apply ``change(rows) -> rows`` to one table of a run directory."""
    path = next((run_dir / "parquet" / table).glob("*.parquet"))
    data = pq.read_table(path)
    rows = change(data.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=data.schema), path)


def first_index(rows, predicate) -> int:
    return next(i for i, r in enumerate(rows) if predicate(r))


def messages_of(violations) -> set[str]:
    return {v.message for v in violations}


def test_untouched_run_passes_every_checker(small_run):
    """The small run, as simulated, breaks no invariant (the baseline for the cases below)."""
    assert check_run(small_run) == []


def test_terminal_catches_a_message_nobody_consumed(small_copy):
    """A message with no successful consume and no DLQ record, in a run that ended terminal, is reported."""
    run = RunData(small_copy)
    dlq_keys = {k for t, k in zip(run.commitlog["topic"], run.commitlog["uniq_key"], strict=True)
                if t.startswith("%DLQ%")}
    victim = next(k for g, k, s in zip(run.attempts["group"], run.attempts["uniq_key"], run.attempts["status"],
                                       strict=True)
                  if g == "order-service" and s == "CONSUME_SUCCESS" and k not in dlq_keys)
    rewrite(small_copy, "consume_attempts",
            lambda rows: [r for r in rows if not (r["group"] == "order-service" and r["uniq_key"] == victim)])
    found = invariants.check_terminal(RunData(small_copy))
    assert [v.key for v in found] == [victim]
    assert "neither consumed nor dead-lettered" in found[0].message


def test_terminal_catches_an_acknowledged_send_that_was_never_stored(small_copy):
    """A SEND_OK in the produced table with no commit-log record is a loss (no crash to excuse it)."""
    def add(rows):
        fake = dict(rows[0], uniq_key="00000000000000000000000000000000", status="SEND_OK")
        return rows + [fake]
    rewrite(small_copy, "produced", add)
    found = invariants.check_terminal(RunData(small_copy))
    assert messages_of(found) == {"terminal: acknowledged send never stored"}


def test_hop_grammar_catches_a_retry_beyond_the_maximum(small_copy):
    """A %RETRY% record whose reconsume count exceeds the group's maximum is reported."""
    def change(rows):
        i = first_index(rows, lambda r: r["topic"] == "%RETRY%pay-service")
        rows[i]["reconsume_times"] = 99
        return rows
    rewrite(small_copy, "commitlog", change)
    assert "hop grammar: retry beyond the maximum" in messages_of(invariants.check_hop_grammar(RunData(small_copy)))


def test_hop_grammar_catches_a_retry_that_skipped_the_schedule(small_copy):
    """A %RETRY% record that no schedule delivery produced is reported."""
    run = RunData(small_copy)
    retry_ids = {m for t, m in zip(run.commitlog["topic"], run.commitlog["msg_id"], strict=True)
                 if t.startswith("%RETRY%")}
    rewrite(small_copy, "schedule_deliveries",
            lambda rows: [r for r in rows if r["delivered_msg_id"] not in retry_ids])
    found = messages_of(invariants.check_hop_grammar(RunData(small_copy)))
    assert "hop grammar: %RETRY% record not delivered from the schedule" in found


def test_hop_grammar_catches_a_wrong_retry_level(small_copy):
    """A retry scheduled at a level other than 3 + reconsume count (or 3) is reported."""
    def change(rows):
        i = first_index(rows, lambda r: r["topic"] == "SCHEDULE_TOPIC_XXXX"
                        and (r["real_topic"] or "").startswith("%RETRY%"))
        rows[i]["delay_level"] = 17
        return rows
    rewrite(small_copy, "commitlog", change)
    found = messages_of(invariants.check_hop_grammar(RunData(small_copy)))
    assert "hop grammar: retry scheduled at the wrong level" in found


def test_dlq_only_at_the_max(small_copy):
    """A %DLQ% record whose reconsume count is below the maximum is reported."""
    def change(rows):
        i = first_index(rows, lambda r: r["topic"] == "%DLQ%pay-service")
        rows[i]["reconsume_times"] = 0
        return rows
    rewrite(small_copy, "commitlog", change)
    assert "DLQ before the maximum" in messages_of(invariants.check_hop_grammar(RunData(small_copy)))


def test_no_delivery_before_its_due_time(small_copy):
    """A schedule delivery earlier than its due time is reported."""
    def change(rows):
        rows[0]["delivered_ts"] = rows[0]["due_ts"] - timedelta(seconds=1)
        return rows
    rewrite(small_copy, "schedule_deliveries", change)
    assert "early delivery" in messages_of(invariants.check_delivery_times(RunData(small_copy)))


def test_origin_message_id_is_stable_along_a_chain(small_copy):
    """A chain whose ORIGIN_MESSAGE_ID changes between hops is reported."""
    def change(rows):
        i = first_index(rows, lambda r: r["topic"] == "%RETRY%pay-service")
        rows[i]["origin_msg_id"] = "0A00000100002A9F0000000000000000"
        return rows
    rewrite(small_copy, "commitlog", change)
    found = messages_of(invariants.check_stable_pointers(RunData(small_copy)))
    assert "ORIGIN_MESSAGE_ID changed along a chain" in found


def test_retry_topic_is_stable_along_a_chain(small_copy):
    """A chain whose RETRY_TOPIC is not the message's real topic is reported."""
    def change(rows):
        i = first_index(rows, lambda r: r["topic"] == "%RETRY%pay-service")
        rows[i]["retry_topic"] = "OrderTopic"
        return rows
    rewrite(small_copy, "commitlog", change)
    assert "RETRY_TOPIC changed along a chain" in messages_of(invariants.check_stable_pointers(RunData(small_copy)))


def test_consume_queue_offsets_are_dense(small_copy):
    """A gap in one consume queue's offsets is reported with the queue's name."""
    def change(rows):
        i = first_index(rows, lambda r: r["topic"] == "OrderTopic" and r["queue_offset"] == 5)
        rows[i]["queue_offset"] = 6
        return rows
    rewrite(small_copy, "commitlog", change)
    found = invariants.check_dense_offsets(RunData(small_copy))
    assert found and found[0].message == "consume-queue offsets not dense"
    assert found[0].key.startswith("OrderTopic/")


def test_broadcasting_failures_are_dropped(small_copy):
    """A broadcasting consumer's failed delivery that was sent back instead of dropped is reported."""
    def change(rows):
        i = first_index(rows, lambda r: r["group"] == "audit-broadcast" and r["status"] != "CONSUME_SUCCESS")
        rows[i]["outcome"] = "SENT_BACK"
        return rows
    rewrite(small_copy, "consume_attempts", change)
    found = messages_of(invariants.check_broadcasting(RunData(small_copy)))
    assert found == {"broadcasting failure not dropped"}


def test_orderly_queue_is_consumed_in_offset_order(small_copy):
    """An orderly delivery of offset n+1 that starts before offset n was done is reported."""
    def change(rows):
        seq = [r for r in rows if r["group"] == "seq-service"]
        done = {(r["queue_topic"], r["queue_id"], r["queue_offset"]): r["start_ts"] for r in seq
                if r["outcome"] == "ACKED"}
        i = first_index(rows, lambda r: r["group"] == "seq-service"
                        and (r["queue_topic"], r["queue_id"], r["queue_offset"] - 1) in done)
        prev = done[(rows[i]["queue_topic"], rows[i]["queue_id"], rows[i]["queue_offset"] - 1)]
        rows[i]["start_ts"] = prev - timedelta(seconds=1)
        return rows
    rewrite(small_copy, "consume_attempts", change)
    found = messages_of(invariants.check_orderly(RunData(small_copy)))
    assert found == {"orderly delivery out of order"}


def test_deliveries_name_stored_records(small_copy):
    """A delivery whose queue slot holds another record (or none) is reported."""
    def change(rows):
        rows[0]["queue_offset"] = 10_000
        return rows
    rewrite(small_copy, "consume_attempts", change)
    found = messages_of(invariants.check_deliveries_match_store(RunData(small_copy)))
    assert found == {"delivery of a record the store does not hold"}
