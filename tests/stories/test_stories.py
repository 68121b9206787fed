"""Known RocketMQ failure stories, each a scenario, each detected by a query on the audit warehouse.

Every scenario in ``scenarios/story-*.yaml`` runs simulate -> lineage (Spark) -> warehouse (DuckDB)
through the functions the CLI calls; the tests below only read the warehouse, the way an operator
would. docs/failure-stories.md tells each story and names the query that finds it.
"""

from __future__ import annotations


def rows(con, query: str, params: dict | None = None) -> list[tuple]:
    return con.execute(query, params or {}).fetchall()


def one(con, query: str, params: dict | None = None):
    return con.execute(query, params or {}).fetchone()[0]


# --- #3473: delay offsets not persisted -----------------------------------------------------------

DELAY_RUN = "story-delay-offset-not-persisted"


def test_delay_offset_not_persisted_redelivers_scheduled_messages(story_warehouse):
    """A kill -9 before delayOffset.json is persisted makes the schedule deliver one schedule offset twice."""
    con = story_warehouse
    twice = rows(con, """
        SELECT delay_level, schedule_queue_offset, count(*) AS n, min(delivered_ts) AS first_ts,
               max(delivered_ts) AS second_ts
        FROM schedule_deliveries WHERE run_id = $run
        GROUP BY delay_level, schedule_queue_offset HAVING count(*) > 1""", {"run": DELAY_RUN})
    assert twice, "no schedule offset was delivered twice"
    crash_ts = one(con, "SELECT ts FROM faults WHERE run_id = $run AND kind = 'broker_crash'",
                   {"run": DELAY_RUN})
    restart_ts = one(con, "SELECT ts FROM faults WHERE run_id = $run AND kind = 'broker_start'",
                     {"run": DELAY_RUN})
    for level, offset, n, first_ts, second_ts in twice:
        assert n == 2, (level, offset, n)
        # The first delivery happened before the crash, the second after the restart.
        assert first_ts < crash_ts <= restart_ts <= second_ts, (level, offset, first_ts, second_ts)


def test_delay_offset_not_persisted_shows_two_deliver_hops_and_duplicates(story_warehouse):
    """Each redelivered schedule offset is a second DELIVER hop of its message and a duplicate consume."""
    con = story_warehouse
    redelivered_keys = {k for (k,) in rows(con, """
        SELECT message_key FROM message_hops WHERE run_id = $run AND hop_kind = 'DELIVER'
        GROUP BY message_key HAVING count(*) > 1""", {"run": DELAY_RUN})}
    schedule_twice = one(con, """
        SELECT count(*) FROM (SELECT 1 FROM schedule_deliveries WHERE run_id = $run
                              GROUP BY delay_level, schedule_queue_offset HAVING count(*) > 1)""",
                         {"run": DELAY_RUN})
    assert len(redelivered_keys) == schedule_twice > 0
    duplicates = {k for (k,) in rows(con, """
        SELECT message_key FROM anomalies WHERE run_id = $run AND kind = 'DUPLICATE_CONSUME'""",
                                     {"run": DELAY_RUN})}
    assert redelivered_keys <= duplicates
    causes = {k: d for k, d in rows(con, """
        SELECT message_key, detail FROM anomalies WHERE run_id = $run AND kind = 'DUPLICATE_CONSUME'""",
                                    {"run": DELAY_RUN})}
    assert all("cause: schedule offset window" in causes[k] for k in redelivered_keys)
    # Sync flush: the commit log survived the crash whole, so nothing is lost, only duplicated.
    lost, duplicated, exactly_once = rows(con, """
        SELECT lost, duplicated, exactly_once FROM delivery_accounting WHERE run_id = $run""",
                                          {"run": DELAY_RUN})[0]
    assert (lost, exactly_once) == (0, False)
    assert duplicated >= len(redelivered_keys)


# --- #1600: a consume longer than consume_timeout -------------------------------------------------

LONG_RUN = "story-long-consume"


def test_long_consume_is_sent_back_while_running_and_consumed_again(story_warehouse):
    """A delivery running past consume_timeout is EXPIRED, sent back before it ends, and consumed again."""
    con = story_warehouse
    found = rows(con, """
        SELECT e.uniq_key, e.start_ts, e.end_ts, r.start_ts AS retry_ts, r.queue_topic, r.reconsume_times,
               (SELECT min(h.store_ts) FROM message_hops h
                WHERE h.run_id = e.run_id AND h.message_key = e.uniq_key AND h.hop_kind = 'SCHEDULE')
                   AS sent_back_ts
        FROM consume_attempts e
        JOIN consume_attempts r ON r.run_id = e.run_id AND r."group" = e."group"
                               AND r.uniq_key = e.uniq_key AND r.start_ts > e.start_ts
        WHERE e.run_id = $run AND e.outcome = 'EXPIRED' AND e.status = 'CONSUME_SUCCESS'
          AND r.status = 'CONSUME_SUCCESS' AND r.outcome = 'ACKED'
        ORDER BY e.uniq_key""", {"run": LONG_RUN})
    assert found, "no expired delivery was consumed again"
    timeout_ms = 15 * 60 * 1000
    for key, start, end, retry_start, retry_topic, reconsume, sent_back in found:
        assert (end - start).total_seconds() * 1000 > timeout_ms, key
        assert start < sent_back < end, (key, "the send-back happened while the listener still ran")
        assert retry_topic == "%RETRY%order-service" and reconsume == 1, key
        assert retry_start > sent_back, key
    expired = {r[0] for r in found}
    duplicates = {k for (k,) in rows(con, """
        SELECT message_key FROM anomalies WHERE run_id = $run AND kind = 'DUPLICATE_CONSUME'""",
                                     {"run": LONG_RUN})}
    assert expired == duplicates
    details = [d for (d,) in rows(con, """
        SELECT detail FROM anomalies WHERE run_id = $run AND kind = 'DUPLICATE_CONSUME'""",
                                  {"run": LONG_RUN})]
    assert details and all("cause: consume timeout" in d for d in details)
    paths = {p for (p,) in rows(con, """
        SELECT DISTINCT path FROM message_lineage WHERE run_id = $run AND message_key IN
            (SELECT uniq_key FROM consume_attempts WHERE run_id = $run AND outcome = 'EXPIRED')""",
                                {"run": LONG_RUN})}
    assert paths == {"OrderTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%order-service"}


# --- #7182: repeated consumer restarts ------------------------------------------------------------

RESTARTS_RUN = "story-consumer-restarts"


def test_consumer_restarts_each_add_duplicates(story_warehouse):
    """Every consumer kill -9 adds duplicates, so the duplicated count grows with the number of restarts."""
    con = story_warehouse
    # Attribute each duplicate to the last crash before its second successful consume.
    per_crash = rows(con, """
        WITH crashes AS (
            SELECT ts, row_number() OVER (ORDER BY ts) AS crash_no
            FROM faults WHERE run_id = $run AND kind = 'consumer_crash'),
        second_consume AS (
            SELECT uniq_key, start_ts FROM (
                SELECT uniq_key, start_ts, row_number() OVER (PARTITION BY uniq_key ORDER BY start_ts) AS i
                FROM consume_attempts
                WHERE run_id = $run AND status = 'CONSUME_SUCCESS' AND outcome = 'ACKED')
            WHERE i = 2)
        SELECT c.crash_no,
               (SELECT count(*) FROM second_consume s
                WHERE s.start_ts >= c.ts
                  AND s.start_ts < coalesce((SELECT min(n.ts) FROM crashes n WHERE n.ts > c.ts),
                                            TIMESTAMPTZ '9999-01-01')) AS duplicates
        FROM crashes c ORDER BY c.crash_no""", {"run": RESTARTS_RUN})
    assert len(per_crash) == 4
    assert all(n > 0 for _, n in per_crash), per_crash
    before_first = one(con, """
        SELECT count(*) FROM (
            SELECT uniq_key, min(start_ts) FILTER (WHERE i = 2) AS second_ts FROM (
                SELECT uniq_key, start_ts, row_number() OVER (PARTITION BY uniq_key ORDER BY start_ts) AS i
                FROM consume_attempts
                WHERE run_id = $run AND status = 'CONSUME_SUCCESS' AND outcome = 'ACKED')
            GROUP BY uniq_key)
        WHERE second_ts < (SELECT min(ts) FROM faults WHERE run_id = $run AND kind = 'consumer_crash')""",
                       {"run": RESTARTS_RUN})
    assert before_first == 0, "no duplicate before the first restart"
    # The duplicated count after k restarts is the running sum: it grows with every restart.
    after_restarts = [sum(n for _, n in per_crash[:k]) for k in range(len(per_crash) + 1)]
    assert after_restarts == sorted(set(after_restarts)), after_restarts
    cumulative = after_restarts[-1]
    duplicated, lost = rows(con, """
        SELECT duplicated, lost FROM delivery_accounting WHERE run_id = $run AND "group" = 'order-service'""",
                            {"run": RESTARTS_RUN})[0]
    assert duplicated == cumulative and lost == 0
    details = [d for (d,) in rows(con, """
        SELECT detail FROM anomalies WHERE run_id = $run AND kind = 'DUPLICATE_CONSUME'""",
                                  {"run": RESTARTS_RUN})]
    assert len(details) == cumulative
    assert all("cause: offset window: consumer_" in d for d in details), details


# --- #6163: orderly consumer with a small max -----------------------------------------------------

ORDERLY_RUN = "story-orderly-small-max"


def test_orderly_small_max_goes_to_dlq_through_the_retry_topic_send(story_warehouse):
    """An orderly message failing max+1 times is sent to %RETRY%g by the client and stored in %DLQ%g."""
    con = story_warehouse
    dlq = rows(con, """
        SELECT message_key, path, retries, properties['RETRY_TOPIC'], properties['RECONSUME_TIME'],
               properties['DELAY']
        FROM dlq_messages WHERE run_id = $run AND "group" = 'seq-service' ORDER BY message_key""",
               {"run": ORDERLY_RUN})
    assert dlq, "no orderly message reached the DLQ"
    for key, path, retries, retry_topic, reconsume_time, delay in dlq:
        # 4.9.4 orderly send-back: a normal send to %RETRY%seq-service with DELAY = 3 + 2 = 5; the
        # broker's handleRetryAndDLQ turns it into %DLQ%, and the client DELAY parks it first.
        assert path == "SeqTopic > SCHEDULE_TOPIC_XXXX[5] > %DLQ%seq-service", (key, path)
        assert retries == 0 and retry_topic == "SeqTopic", key
        assert (reconsume_time, delay) == ("2", "5"), key
        attempts = rows(con, """
            SELECT reconsume_times, status, outcome FROM consume_attempts
            WHERE run_id = $run AND uniq_key = $key ORDER BY start_ts""", {"run": ORDERLY_RUN, "key": key})
        assert attempts == [(0, "RECONSUME_LATER", "LOCAL_RETRY"), (1, "RECONSUME_LATER", "LOCAL_RETRY"),
                            (2, "RECONSUME_LATER", "SENT_BACK_BY_CLIENT")], (key, attempts)
        real_topic = one(con, """
            SELECT properties['REAL_TOPIC'] FROM commitlog c JOIN message_hops h
                ON h.run_id = c.run_id AND h.phys_offset = c.phys_offset
            WHERE h.run_id = $run AND h.message_key = $key AND h.hop_kind = 'SCHEDULE'""",
                         {"run": ORDERLY_RUN, "key": key})
        assert real_topic == "%DLQ%seq-service", key


# --- #2724: a DLQ entry delayed by the schedule ---------------------------------------------------

DLQ_RUN = "story-dlq-via-schedule"


def _hop_kinds(con, group: str) -> set[tuple[str, ...]]:
    chains = rows(con, """
        SELECT message_key, list(hop_kind ORDER BY hop_index) FROM message_hops
        WHERE run_id = $run AND ("group" = $group OR "group" IS NULL)
          AND message_key IN (SELECT message_key FROM dlq_messages WHERE run_id = $run AND "group" = $group)
        GROUP BY message_key""", {"run": DLQ_RUN, "group": group})
    return {tuple(kinds) for _, kinds in chains}


def test_dlq_via_schedule_only_on_the_client_fallback_path(story_warehouse):
    """CONSUMER_SEND_MSG_BACK writes DELAY=0 straight to %DLQ%; a fallback send's DELAY parks the DLQ record in the schedule."""
    con = story_warehouse
    paths = dict(rows(con, """
        SELECT "group", list(DISTINCT path) FROM dlq_messages WHERE run_id = $run GROUP BY "group" """,
                      {"run": DLQ_RUN}))
    assert paths["pay-service"] == [
        "PayTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%pay-service > SCHEDULE_TOPIC_XXXX[4] > "
        "%RETRY%pay-service > %DLQ%pay-service"]
    assert paths["fallback-service"] == [
        "PayTopic > SCHEDULE_TOPIC_XXXX[3] > %RETRY%fallback-service > SCHEDULE_TOPIC_XXXX[4] > "
        "%DLQ%fallback-service"]
    assert _hop_kinds(con, "pay-service") == {
        ("PUBLISH", "SCHEDULE", "RETRY", "SCHEDULE", "RETRY", "DLQ")}
    assert _hop_kinds(con, "fallback-service") == {("PUBLISH", "SCHEDULE", "RETRY", "SCHEDULE", "DLQ")}
    delays = dict(rows(con, """
        SELECT "group", list(DISTINCT properties['DELAY']) FROM dlq_messages WHERE run_id = $run
        GROUP BY "group" """, {"run": DLQ_RUN}))
    assert delays == {"pay-service": ["0"], "fallback-service": ["4"]}


def test_dlq_via_schedule_is_late_by_the_delay_level(story_warehouse):
    """A DLQ record parked at level 4 is stored at least 30 s after the failed consume that sent it."""
    con = story_warehouse
    gaps = rows(con, """
        SELECT "group", min(epoch_ms(dlq_store_ts) - epoch_ms(last_failure_ts)),
               max(epoch_ms(dlq_store_ts) - epoch_ms(last_failure_ts))
        FROM dlq_messages WHERE run_id = $run GROUP BY "group" ORDER BY "group" """, {"run": DLQ_RUN})
    by_group = {g: (lo, hi) for g, lo, hi in gaps}
    level_4_ms = 30_000
    assert by_group["fallback-service"][0] >= level_4_ms
    assert by_group["pay-service"][1] < 1000, "the broker path stores the DLQ record at once"
