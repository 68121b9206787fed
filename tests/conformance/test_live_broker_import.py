"""A real 4.9.4 broker's store imported while a producer writes to it, then once more after the
broker stopped: the continued run equals a fresh import of the final store.

Needs java, javac and mvn (the jars come from the conformance cache); skips without them.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pyarrow.parquet as pq
from java_driver import DRIVER_JVM_FLAGS, compile_driver, needs_real_rocketmq

from broker_core.export.schema import RAW_TABLES
from broker_core.export.store_import import import_store

pytestmark = needs_real_rocketmq

VERSION = "4.9.4"
PRODUCER = Path(__file__).with_name("LiveProducer.java")
MESSAGES = 1500
# The producer says how many it sent every 100; the imports run once it passed these counts.
IMPORT_AFTER = (300, 900)
# A limit on the whole send, so a stuck producer or broker fails the test with the producer's
# output instead of hanging it until the suite's timeout: a timer kills the producer, which ends
# its output.
PRODUCER_TIMEOUT_S = 180


def _rows(run: Path) -> dict[str, list[str]]:
    out = {}
    for table in RAW_TABLES:
        rows = pq.read_table(run / "parquet" / table).to_pylist()
        for row in rows:
            row.pop("wall_seconds", None)
        out[table] = sorted(map(repr, rows))
    return out


def test_a_live_broker_imported_while_a_producer_writes_equals_a_fresh_import(tmp_path):
    """Two live imports while a real producer sends (256 KiB commit-log files, so the log rolls over,
    and delayed messages, so the schedule service re-puts) find no damage and each goes on from the
    last; after the broker stops cleanly a third import continues them, and every table equals a
    fresh import of the stopped broker's store."""
    from conformance.cluster import BrokerSpec, Cluster
    from conformance.jars import resolve

    lib = resolve(VERSION)
    classpath = compile_driver(PRODUCER, str(lib / "*"), tmp_path / "classes")
    run = tmp_path / "runs" / "live"
    spec = BrokerSpec("broker-a", "1s 5s 10s", commitlog_file_size_bytes=1 << 18)
    with Cluster(tmp_path / "cluster", lib, [spec]) as cluster:
        store = cluster.procs["broker-a"].store
        producer = subprocess.Popen(
            ["java", *DRIVER_JVM_FLAGS, "-cp", classpath, "LiveProducer", cluster.namesrv_addr, "LiveTopic", str(MESSAGES)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        live = []
        marks, behind = [], []
        output = []
        deadline = threading.Timer(PRODUCER_TIMEOUT_S, producer.kill)
        deadline.start()
        try:
            for line in producer.stdout:
                output.append(line)
                if line.startswith("sent ") and int(line.split()[1]) in IMPORT_AFTER:
                    summary = import_store(store, run, broker="broker-a", live=True)
                    assert summary.errors == [], summary.errors
                    live.append(summary)
                    marks.append(_cq_marked(run))
                    behind.append(_cq_behind(run))
            producer.wait()
        finally:
            deadline.cancel()
            if producer.poll() is None:
                producer.kill()
                producer.wait()
        assert producer.returncode == 0, (f"the producer exited {producer.returncode} (killed after "
                                          f"{PRODUCER_TIMEOUT_S} s if negative):\n" + "".join(output[-30:]))
        cluster.stop("broker-a")
    assert [s.resumed_from is None for s in live] == [True, False]
    assert live[1].resumed_from == live[0].next_offset and live[1].records_added > 0
    final = import_store(store, run, broker="broker-a")
    assert final.resumed_from == live[1].next_offset, final.full_import_reason
    marks.append(_cq_marked(run))
    behind.append(_cq_behind(run))
    # Each increment read the commit-log bytes and consume-queue units the store gained, the
    # config files and checkpoint, and a fixed allowance (per queue the unit a live import's mark
    # stands at and the zeros where a queue behind its records ends, the last record's header for
    # its fingerprint, the zeros after the data in their extent): not the queues whole.
    config = sum(p.stat().st_size for p in [*(store / "config").glob("*.json"), store / "checkpoint"])
    queues = sum(1 for q in (store / "consumequeue").glob("*/*") if q.is_dir())
    for summary, before, after, lag in zip([live[1], final], marks[:-1], marks[1:], behind[1:], strict=True):
        read = summary.store_bytes_read
        # Per queue, the unit a live import's mark stands at (read again) and, for a queue whose units
        # were behind its records, the zeros where it ended.
        # Plus, where the broker had not yet dispatched units its log's records name (a live
        # broker's queues run behind its log; on a loaded host by more than one unit), the zeros
        # where those units will be: read now, and again by the next import.
        assert read["consumequeue"] <= after - before + 2 * CQ_UNIT_BYTES * queues + lag, \
            (read, after - before, lag)
        assert sum(read.values()) <= (summary.bytes_read + after - before + 2 * CQ_UNIT_BYTES * queues + config
                                      + INCREMENT_ALLOWANCE_BYTES), read
    assert live[0].store_bytes_read["consumequeue"] >= marks[0]
    fresh = import_store(store, tmp_path / "fresh" / "live", broker="broker-a")
    assert final.records == fresh.records >= MESSAGES + MESSAGES // 10  # each delayed one is stored twice
    assert fresh.commitlog_files >= 2 and final.errors == []
    assert _rows(run) == _rows(tmp_path / "fresh" / "live")
    print(f"live imports read {[s.bytes_read for s in live]} bytes, the last {final.bytes_read}; "
          f"a fresh import {fresh.bytes_read}; from the store: {[s.store_bytes_read for s in (*live, final, fresh)]}")


CQ_UNIT_BYTES = 20
# Beyond the bytes the store gained: the last record's header for its fingerprint, and the zeros
# after the data that the file system holds as data (the rest of
# the extent it allocated for the broker's writes: 18 KiB once in bench/results/import_increment.md).
INCREMENT_ALLOWANCE_BYTES = 64 * 1024


def _cq_behind(run: Path) -> int:
    """The consume-queue bytes of the units the run's records name past each queue's mark: the
    units a live broker had not dispatched yet when the run's last import read its queues."""
    queues = json.loads((run / "import_state" / "broker-a.json").read_text())["queues"]
    named: dict[str, int] = {}
    for row in pq.read_table(run / "parquet" / "commitlog", columns=["topic", "queue_id", "queue_offset"]).to_pylist():
        key = f"{row['topic']}/{row['queue_id']}"
        named[key] = max(named.get(key, 0), row["queue_offset"] + 1)
    return sum(max(0, named.get(key, 0) * CQ_UNIT_BYTES - (int(m["file"]) + m["position"]))
               for key, m in queues.items())


def _cq_marked(run: Path) -> int:
    """The consume-queue bytes the run's last import had read up to, summed over the queues."""
    queues = json.loads((run / "import_state" / "broker-a.json").read_text())["queues"]
    return sum(int(m["file"]) + m["position"] for m in queues.values())
