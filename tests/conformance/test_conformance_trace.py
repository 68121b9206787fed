"""The clients' message trace on real RocketMQ 4.9.4 brokers, imported and held to the driver's log:
scenarios/conformance-trace.yaml played by `retry-audit conformance --client-trace` (two brokers
with traceTopicEnable=true; a transactional producer, a flaky concurrent group whose broker refuses
some send-backs, an orderly group, every client with message trace on).

The 4.9.4 case is marked long (`make test-long`, which CI runs): real clients for about 25 s,
brokers booting and stopping, the lineage with DuckDB (the same SQL as Spark); 56 s in all on an
idle machine, 1 min 52 s under load. 5.3.3 (its remoting clients trace alike; 41 s of real
clients, 17 s to stop its brokers) is marked slow. Without java, javac and mvn they skip.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from java_driver import needs_real_rocketmq

from assets import checks as c
from conformance.run import real_run_id, run_conformance
from orchestration.cmd_conformance import explain_failures, verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance-trace.yaml"
RUN_ID = real_run_id("conformance-trace")


@needs_real_rocketmq
@pytest.mark.parametrize("version", [pytest.param("4.9.4", marks=pytest.mark.long),
                                     pytest.param("5.3.3", marks=pytest.mark.slow)])
def test_the_trace_of_real_clients_agrees_with_their_log_and_the_store(version, tmp_path):
    """Every send, listener call and transaction answer the real clients made is in the trace the
    import read, alike; the three trace checks judge it and pass; and the trace shows what the
    store cannot: an orderly group's local retries and a producer answering UNKNOW to each check."""
    out = tmp_path / "out"
    report = run_conformance(version, SCENARIO, out, client_trace=True, lineage_engine="duckdb")
    assert verdict_failures(report) == [], explain_failures(report)
    assert report["model_vs_real"]["unexplained"] == 0  # trace records are no hops
    tvc = report["trace_vs_clients"]
    for kind in ("sends", "consumes", "transaction_decisions"):
        pair = tvc[kind]
        assert pair["driver_events"] > 0 and pair["agree"] == pair["driver_events"], (kind, pair)
        assert pair["disagree"] == pair["extra"] == pair["missing"] == 0, (kind, pair)
    assert set(tvc["records"]) == {"Pub", "SubBefore", "SubAfter", "EndTransaction"}
    for name in c.TRACE_CHECKS:
        verdict = report["checks"][RUN_ID][name]
        assert verdict["verdict"] == "passed", (name, verdict)
    con = duckdb.connect(str(out / "warehouse.duckdb"), read_only=True)
    try:
        judged = {name: c.run_check(con, c.CHECKS_BY_NAME[name], RUN_ID).judged for name in c.TRACE_CHECKS}
        # The orderly group's failures: the client retried them itself, so no record of them is in the store.
        local = con.execute("""SELECT count(*) FROM traced_attempts t WHERE t.run_id = ? AND t."group" = 'seq-service'
                               AND NOT t.success AND NOT EXISTS (SELECT 1 FROM message_hops h WHERE h.run_id = t.run_id
                               AND h.message_key = t.message_key AND h."group" = t."group" AND h.hop_kind = 'RETRY')""",
                            [RUN_ID]).fetchone()[0]
        # The discarded messages' producer was there: it answered every check UNKNOW.
        unknown = con.execute("""SELECT count(*) FROM client_trace t JOIN transactions x
                                 ON x.run_id = t.run_id AND x.message_key = t.msg_id
                                 WHERE t.run_id = ? AND t.trace_type = 'EndTransaction' AND t.from_transaction_check
                                 AND t.transaction_state = 'UNKNOW' AND x.transaction_state = 'DISCARDED'""",
                              [RUN_ID]).fetchone()[0]
    finally:
        con.close()
    assert all(n > 0 for n in judged.values()), judged
    assert local > 0 and unknown > 0, (local, unknown)
