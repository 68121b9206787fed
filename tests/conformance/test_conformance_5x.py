"""Real RocketMQ 5.3.3 (a name server, two brokers, the 5.3.3 clients) against the audit and the
model under its "5.x" rules: scenarios/conformance.yaml, as test_conformance.py plays it on 4.9.4.

Marked slow (make test-all; about four minutes): docs/rocketmq-5x.md has the numbers it pins.
Without java, javac and mvn the module skips.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conformance.run import run_conformance
from orchestration.cmd_conformance import verdict_failures

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "conformance.yaml"

pytestmark = [
    pytest.mark.skipif(not (shutil.which("javac") and shutil.which("mvn") and shutil.which("java")),
                       reason="real RocketMQ needs java, javac and mvn"),
    pytest.mark.slow,
]


def test_the_model_under_5x_rules_matches_a_real_5_3_3_broker(tmp_path, spark):
    """On real 5.3.3 brokers the audit agrees with the clients on every message, and the model
    played with the 5.x rules stores every hop and property as the real brokers did."""
    report = run_conformance("5.3.3", SCENARIO, tmp_path / "out", spark=spark)
    assert verdict_failures(report) == [], json.dumps(report, indent=1, default=str)[:4000]
    assert report["model_semantics"] == "5.x"
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    assert lvc["messages"] == 86 and lvc["disagree"] == 0
    assert mvr["messages"] == 86 and mvr["unexplained"] == 0
    assert mvr["hops"]["model"] == mvr["hops"]["real"]
    # The 5.x-only facts the rules stand for, in the real store the comparison read.
    import duckdb
    con = duckdb.connect(str(tmp_path / "out" / "warehouse.duckdb"), read_only=True)
    try:
        props = [p for (p,) in con.execute(
            "SELECT properties FROM commitlog WHERE run_id = 'conformance-real' AND topic = 'OrderTopic'").fetchall()]
        client_dlq = con.execute("""SELECT count(*) FROM commitlog WHERE run_id = 'conformance-real'
                                    AND topic = '%DLQ%notice-service' AND properties['DELAY'] = '-1'""").fetchone()[0]
    finally:
        con.close()
    assert props and all(p["MSG_REGION"] == "DefaultRegion" and p["WAIT"] == "true" for p in props)
    assert client_dlq > 0
