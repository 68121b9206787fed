"""A real run's rows for the audit-vs-clients comparison, without a real broker: a real DuckDB holding
the few columns ``conformance.compare.lineage_vs_clients`` reads (message_hops, commitlog,
message_lineage) for one message of one group, and the clients' attempts at its deliveries."""

from __future__ import annotations

import duckdb


def real_run(run: str, key: str, group: str, hops: list[tuple], retries: int,
             statuses: list[str], outcomes: list[str], forks: int = 0,
             final_state: str = "DLQ", client_built: frozenset[int] = frozenset(), body_size: int = 100
             ) -> tuple[duckdb.DuckDBPyConnection, list[dict]]:
    """``hops`` as (kind, topic, delay level, reconsume times), stored on broker-a in that order; the
    message ends in ``final_state`` after ``retries`` with ``forks`` copies in its chain; one attempt
    per PUBLISH or RETRY hop, with its status and outcome. The hops at the indexes ``client_built``
    carry CONSUME_START_TIME, as a retry a client sent itself does; each record's body is
    ``body_size`` bytes."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE message_hops (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   message_key VARCHAR, "group" VARCHAR, hop_index INT, hop_kind VARCHAR, topic VARCHAR,
                   queue_id INT, delay_level INT, reconsume_times INT, dwell_ms BIGINT, store_ts TIMESTAMP)""")
    con.execute("""CREATE TABLE commitlog (run_id VARCHAR, broker VARCHAR, phys_offset BIGINT,
                   properties MAP(VARCHAR, VARCHAR), msg_id VARCHAR, topic VARCHAR, uniq_key VARCHAR)""")
    con.execute("""CREATE TABLE message_lineage (run_id VARCHAR, message_key VARCHAR, "group" VARCHAR,
                   final_state VARCHAR, retries INT, path VARCHAR, forks INT)""")
    for i, (kind, topic, level, times) in enumerate(hops):
        hop_group = None if kind == "PUBLISH" else group
        con.execute("INSERT INTO message_hops VALUES (?, 'broker-a', ?, ?, ?, ?, ?, ?, 0, ?, ?, NULL, NULL)",
                    [run, i * 100, key, hop_group, i, kind, topic, level, times])
        props = {"UNIQ_KEY": key, **({"CONSUME_START_TIME": "1"} if i in client_built else {}),
                 **({"REAL_TOPIC": f"%RETRY%{group}"} if kind == "SCHEDULE" else {})}
        con.execute("INSERT INTO commitlog VALUES (?, 'broker-a', ?, MAP(?, ?), ?, ?, ?)",
                    [run, i * 100, list(props), list(props.values()), f"M{i}", topic, key])
    con.execute(f"ALTER TABLE commitlog ADD COLUMN body_size INT DEFAULT {int(body_size)}")
    con.execute("INSERT INTO message_lineage VALUES (?, ?, ?, ?, ?, '', ?)",
                [run, key, group, final_state, retries, forks])
    consumed = [h for h in hops if h[0] in ("PUBLISH", "RETRY")]
    attempts = [{"uniq_key": key, "group": group, "model": "CLUSTERING", "queue_topic": topic,
                 "queue_id": 0, "queue_offset": n, "phys_offset": n, "reconsume_times": times,
                 "status": status, "outcome": outcome, "start_ts": n, "consumer_id": "c0", "msg_id": f"M{n}"}
                for n, ((_, topic, _, times), status, outcome)
                in enumerate(zip(consumed, statuses, outcomes, strict=True))]
    return con, attempts
