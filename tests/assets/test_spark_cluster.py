"""The Spark session's configuration, and the lineage on a real standalone cluster (one master,
one worker on 127.0.0.1).

A process holds one SparkContext, and this test run's is local: the cluster lineage runs in a
subprocess (`retry-audit lineage RUN_DIR --spark-master spark://...`) and its Parquet output is
compared with the local session's.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from assets.lineage import run_lineage
from assets.spark import (
    SHUFFLE_INPUT_BYTES_PER_PARTITION,
    SMALL_JOB_INPUT_BYTES,
    SMALL_JOB_JVM_OPTIONS,
    SPARK_CONF_OVERRIDES_ENV,
    SPARK_MASTER_ENV,
    driver_jvm_options,
    get_spark,
    resolve_master,
    shuffle_partitions_for,
)
from broker_core.errors import BadInputError
from broker_core.export.parquet import write_rows
from tests.assets.test_lineage import (
    DELAYED,
    DELAYED_ATTEMPTS,
    NO_UNIQ,
    NO_UNIQ_ATTEMPTS,
    PLAIN,
    STATES,
    STATES_ATTEMPTS,
    STATES_PRODUCED,
    TWO_GROUPS,
    TWO_GROUPS_ATTEMPTS,
)

PROJECT = Path(__file__).resolve().parents[2]
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
READY_WAIT_S = 180  # master/worker JVM start: ~7 s on an idle 2-core machine, far more when busy
LINEAGE_WAIT_S = 600  # the cluster lineage job, driver and executor JVM starts included
STOP_WAIT_S = 30
WORKER_CORES = 2
WORKER_MEMORY = "2g"  # holds one 1 GiB executor (assets.spark.EXECUTOR_MEMORY)
MASTER_READY = "I have been elected leader! New state: ALIVE"
WORKER_READY = "Successfully registered with master"



def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    """Start a Spark daemon in the foreground (spark-class execs the JVM, so the PID is the JVM's)."""
    with open(log, "wb") as out:
        return subprocess.Popen([str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def wait_for(marker: str, log: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline:
        if marker in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"{log.name} exited early:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"no {marker!r} in {log} after {READY_WAIT_S} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def make_run_dir(root: Path) -> Path:
    parquet = root / "parquet"
    write_rows(parquet, "commitlog", PLAIN + DELAYED + TWO_GROUPS + NO_UNIQ + STATES)
    write_rows(parquet, "consume_attempts",
               DELAYED_ATTEMPTS + TWO_GROUPS_ATTEMPTS + NO_UNIQ_ATTEMPTS + STATES_ATTEMPTS)
    write_rows(parquet, "consumer_offsets", [])
    write_rows(parquet, "produced", STATES_PRODUCED)
    return root


def test_master_comes_from_argument_then_environment_then_local(monkeypatch):
    """The Spark master is the argument, else RETRY_AUDIT_SPARK_MASTER, else local[*]."""
    monkeypatch.delenv(SPARK_MASTER_ENV, raising=False)
    assert resolve_master() == "local[*]"
    monkeypatch.setenv(SPARK_MASTER_ENV, "spark://10.1.2.3:7077")
    assert resolve_master() == "spark://10.1.2.3:7077"
    assert resolve_master("local[2]") == "local[2]"


def test_one_cached_session_per_process_sized_for_a_small_machine(spark, monkeypatch):
    """get_spark returns the one cached session (UTC, 4 shuffle partitions, no UI) and refuses to
    switch an explicitly different master in the same process."""
    monkeypatch.delenv(SPARK_MASTER_ENV, raising=False)
    assert get_spark() is spark
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark.conf.get("spark.ui.enabled") == "false"
    with pytest.raises(BadInputError, match="one SparkContext per process|cannot switch"):
        get_spark("spark://127.0.0.1:1")
    assert get_spark() is spark


def test_shuffle_partitions_grow_with_the_input_unless_the_user_set_them(monkeypatch):
    """4 partitions for small runs, one per 8 MiB of commit-log Parquet beyond that; a number
    given in RETRY_AUDIT_SPARK_CONF stands."""
    monkeypatch.delenv(SPARK_CONF_OVERRIDES_ENV, raising=False)
    assert shuffle_partitions_for(0) == 4
    assert shuffle_partitions_for(4 * SHUFFLE_INPUT_BYTES_PER_PARTITION) == 4
    assert shuffle_partitions_for(46 * SHUFFLE_INPUT_BYTES_PER_PARTITION + 1) == 47
    monkeypatch.setenv(SPARK_CONF_OVERRIDES_ENV, "spark.sql.shuffle.partitions=200")
    assert shuffle_partitions_for(10**12) is None


def test_a_jvm_started_for_one_small_job_compiles_with_c1_only(spark):
    """Below SMALL_JOB_INPUT_BYTES of commit-log Parquet the driver's JVM stops its tiered
    compilation at C1; a larger job, or one of unknown size (a session many jobs share, as the
    suite's), keeps C2: the suite's lineage tests took 82 s with it and 105 s without."""
    assert driver_jvm_options(0).split()[-1] == SMALL_JOB_JVM_OPTIONS
    assert driver_jvm_options(SMALL_JOB_INPUT_BYTES - 1).split()[-1] == SMALL_JOB_JVM_OPTIONS
    assert SMALL_JOB_JVM_OPTIONS not in driver_jvm_options(SMALL_JOB_INPUT_BYTES)
    assert SMALL_JOB_JVM_OPTIONS not in driver_jvm_options(None)
    assert "-Duser.timezone=UTC" in driver_jvm_options(0)
    assert SMALL_JOB_JVM_OPTIONS not in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")


# Measured at 350 s on the shared 2-core machine (four JVM starts under heavy load): slow.
@pytest.mark.slow
def test_lineage_on_a_standalone_cluster_equals_local_mode(spark, tmp_path):
    """The lineage built by executors of a standalone Spark cluster is row for row the one built in
    local mode."""
    local_run = make_run_dir(tmp_path / "local-run")
    cluster_run = make_run_dir(tmp_path / "cluster-run")
    local_counts = run_lineage(local_run, spark)

    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_WORKER_DIR=str(tmp_path / "work"))
    env.pop("RETRY_AUDIT_SPARK_MASTER", None)
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    master = start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                    "--webui-port", str(free_port())], master_log, env)
    worker = None
    try:
        wait_for(MASTER_READY, master_log, master)
        worker = start(["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                        "--port", str(free_port()), "--webui-port", str(free_port()),
                        "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
                        "--work-dir", str(work_dir)], worker_log, env)
        wait_for(WORKER_READY, worker_log, worker)
        done = subprocess.run([sys.executable, "-m", "orchestration.cli", "lineage", str(cluster_run),
                               "--spark-master", master_url], cwd=PROJECT, env=env, capture_output=True,
                              text=True, timeout=LINEAGE_WAIT_S)
        assert done.returncode == 0, done.stderr[-5000:]
    finally:
        if worker is not None:
            stop(worker)
        stop(master)

    counts = re.search(r"message_hops ([\d,]+) rows, message_lineage ([\d,]+) rows", done.stdout)
    assert counts, done.stdout
    assert {"message_hops": int(counts[1].replace(",", "")),
            "message_lineage": int(counts[2].replace(",", ""))} == local_counts
    # The work was done by an executor the worker launched, not by a local fallback.
    assert list(work_dir.glob("app-*/*/stderr")), "no executor ran on the worker"
    for table, keys in (("message_hops", ["message_key", "group", "hop_index"]),
                        ("message_lineage", ["message_key", "group"])):
        local = pq.read_table(local_run / "lineage" / table)
        cluster = pq.read_table(cluster_run / "lineage" / table)
        assert cluster.schema.equals(local.schema, check_metadata=False), table
        order = [(k, "ascending") for k in keys]
        assert cluster.sort_by(order).equals(local.sort_by(order)), table
