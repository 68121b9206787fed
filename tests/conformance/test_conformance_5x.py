"""Real RocketMQ 5.3.3 (a name server, two brokers, the 5.3.3 clients) against the audit and the
model under its "5.x" rules: scenarios/conformance-5x.yaml, the workload test_conformance.py plays
on 4.9.4 with 40 % of OrderTopic's messages sent as timer messages, and six more 7 s or 14 s ahead
that roll in a 5-slot wheel (the real brokers get the same timerRollWindowSlot), a remoting POP
group, four timers their producer recalls (the brokers get recallMessageEnable), and a listener
that sends some messages to the DLQ itself (setDelayLevelWhenNextConsume(-1)).

Marked slow (make test-all; about four minutes): docs/rocketmq-5x.md has the numbers it pins.
Without java, javac and mvn the module skips.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from java_driver import needs_real_rocketmq

from conformance.run import run_conformance
from orchestration.cmd_conformance import explain_failures, verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-5x.yaml"
REAL = "conformance-5x-real"

pytestmark = [
    needs_real_rocketmq,
    pytest.mark.slow,
]


def test_the_model_under_5x_rules_matches_a_real_5_3_3_broker(tmp_path, spark):
    """On real 5.3.3 brokers the audit agrees with the clients on every message, and the model
    played with the 5.x rules stores every hop and property as the real brokers did, timers and
    the retries of delivered timers included, and rolls each timer past the window as the real
    brokers do (the same roll records, TIMER_ROLL_TIMES, waits in the wheel)."""
    report = run_conformance("5.3.3", SCENARIO, tmp_path / "out", spark=spark)
    assert verdict_failures(report) == [], explain_failures(report)
    assert report["model_semantics"] == "5.x"
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    # Four recalled timers reach no listener: the clients saw 146 of the 150 messages.
    assert lvc["messages"] == 146 and lvc["disagree"] == 0
    assert mvr["messages"] == 150 and mvr["unexplained"] == 0
    assert report["driver"]["recalls"] == 4 and report["driver"]["recall_errors"] == []
    assert mvr["hops"]["model"] == mvr["hops"]["real"]
    # Six timers past the 5 s window, 7 s (one roll) or 14 s (two) ahead: 9 rolls on each side.
    assert mvr["timer_rolls"]["model"] == mvr["timer_rolls"]["real"] > 0
    assert mvr["timer_hops"]["model"] == mvr["timer_hops"]["real"]
    # The 5.x-only facts the rules stand for, in the real store the comparison read.
    import duckdb
    con = duckdb.connect(str(tmp_path / "out" / "warehouse.duckdb"), read_only=True)
    try:
        props = [p for (p,) in con.execute(
            "SELECT properties FROM commitlog WHERE run_id = ? AND topic = 'OrderTopic'", [REAL]).fetchall()]
        recalled = dict(con.execute("""SELECT run_id, count(DISTINCT message_key) FROM message_lineage
                                        WHERE final_state = 'RECALLED' GROUP BY run_id""").fetchall())
        client_dlq = con.execute("""SELECT count(*) FROM commitlog WHERE run_id = ?
                                    AND topic = '%DLQ%notice-service' AND properties['DELAY'] = '-1'""",
                                 [REAL]).fetchone()[0]
        # dlq-service's DLQ requests: per run, each DLQ record's reconsume times and DELAY.
        requested = {run: sorted(rows) for run, rows in _by_run(con.execute(
            """SELECT run_id, h.message_key, c.reconsume_times, c.properties['DELAY'] FROM commitlog c
               JOIN message_hops h USING (run_id, broker, phys_offset)
               WHERE c.topic = '%DLQ%dlq-service'""").fetchall()).items()}
        late_ms = [ts - int(p["TIMER_OUT_MS"]) for p, ts in con.execute(
            """SELECT c.properties, epoch_ms(c.store_ts) FROM message_hops h JOIN commitlog c
               USING (run_id, broker, phys_offset) WHERE h.run_id = ? AND h.hop_kind = 'DELIVER'
               AND c.topic = 'OrderTopic'""", [REAL]).fetchall()]
    finally:
        con.close()
    assert props and all(p["MSG_REGION"] == "DefaultRegion" and p["WAIT"] == "true" for p in props)
    assert client_dlq > 0
    # A listener's delay level -1 sends a message to the DLQ below the max (3), after 0, 1 or 2
    # retries: the same records (reconsume times + 1, DELAY=0, not -1) in the model and the store.
    assert requested[REAL] == requested["conformance-5x"]
    assert {delay for _, _, delay in requested[REAL]} == {"0"}
    assert {times for _, times, _ in requested[REAL]} == {1, 2, 3}
    # The recalled timers: RECALLED on both sides (the model's run id is the scenario's name).
    assert recalled == {"conformance-5x": 4, REAL: 4}
    # The wheel's deliveries: one slot (1 s) after TIMER_OUT_MS plus the put's own time.
    assert late_ms and all(1000 <= ms < 2000 for ms in late_ms), late_ms


def _by_run(rows):
    """Rows whose first column is a run id, grouped by it (without it)."""
    out: dict[str, list] = {}
    for run, *rest in rows:
        out.setdefault(run, []).append(tuple(rest))
    return out
