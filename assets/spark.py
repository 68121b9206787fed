"""The Spark session the lineage runs on: local by default, any Spark cluster when configured.

The master URL comes from the caller, else ``RETRY_AUDIT_SPARK_MASTER``, else ``local[*]``. The
session is sized for a small machine (two cores, a few GiB): the default 200 shuffle partitions
made the lineage 1.5-2x slower than 4 there. A process holds at most one SparkContext, so the
session is created once and cached; asking for a different master afterwards is an error rather
than a silent reuse of the wrong cluster.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
from contextlib import contextmanager

from broker_core.errors import BadInputError

SPARK_MASTER_ENV = "RETRY_AUDIT_SPARK_MASTER"
SPARK_UI_ENV = "RETRY_AUDIT_SPARK_UI"  # "1" turns the Spark web UI on (off by default: no port 4040 fights)
SPARK_MASTER_DEFAULT = "local[*]"
APP_NAME_DEFAULT = "retry-audit"

# Shuffle partitions: a few per core on the two-core machines this runs on; a cluster job with
# much more data sets spark.sql.shuffle.partitions through SPARK_CONF_OVERRIDES_ENV.
SHUFFLE_PARTITIONS = 4
# ...and more for a bigger input: one partition per this much compressed commit-log Parquet (about
# 200k records), so a task's sort buffers and cached batches stay well inside a 1 GiB heap whatever
# the run's size (10M records in 4 partitions ran out of heap; in 40 they did not).
SHUFFLE_INPUT_BYTES_PER_PARTITION = 8 * 2**20
SHUFFLE_PARTITIONS_KEY = "spark.sql.shuffle.partitions"
DRIVER_MEMORY = "1g"  # the driver only plans and collects row counts; the data stays in executors
EXECUTOR_MEMORY = "1g"  # per executor on a standalone cluster; fits a 2 GiB worker
# Compiled classes of generated code a session keeps (Spark's default: 100). One lineage run
# generates more than 100, so a session running it again compiled everything again: a warm
# session's runs of a 98,310-record lineage took 13.3-15.8 s with 100, 9.6-13.3 s with 2,000,
# then 12.4 -> 10.7 s median from 100 to 1,000 (each pair one sitting, alternating; docs/lineage.md).
# A class is a few tens of KiB of driver memory.
CODEGEN_CACHE_ENTRIES = 1000
# A JVM started for one small job compiles with C1 only: the job is over before C2's optimized code
# pays back what compiling it costs on two cores. Fresh processes, `retry-audit lineage --engine
# spark`, alternating (docs/lineage.md, "The first run in a fresh process"): 223 records, median
# wall 31.5 -> 24.6 s (5 pairs); 98,310 records (5.5 MiB), 46-50 -> 39-42 s; 991,075 records
# (60 MiB) even (88/96 and 104/93 s). A JVM that runs many jobs keeps tiered compilation: the
# lineage tests on the suite's one session took 82 s with it and 105 s with C1 only.
SMALL_JOB_INPUT_BYTES = 16 * 2**20
JVM_OPTIONS = "-Duser.timezone=UTC -XX:+UseParallelGC"
SMALL_JOB_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
SPARK_LOCAL_IP_DEFAULT = "127.0.0.1"  # never bind the driver on a public interface by accident
# Extra Spark settings, "key=value;key=value", for clusters that need more than the master URL.
SPARK_CONF_OVERRIDES_ENV = "RETRY_AUDIT_SPARK_CONF"

_lock = threading.Lock()
_session = None  # the one cached SparkSession of this process
_session_master: str | None = None


def resolve_master(master: str | None = None) -> str:
    """The master URL to use: the argument, else RETRY_AUDIT_SPARK_MASTER, else local[*]."""
    if master:
        return master
    return os.environ.get(SPARK_MASTER_ENV) or SPARK_MASTER_DEFAULT


def _conf_overrides() -> dict[str, str]:
    raw = os.environ.get(SPARK_CONF_OVERRIDES_ENV, "").strip()
    overrides: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(";"))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"expected key=value, got {item!r}", where=SPARK_CONF_OVERRIDES_ENV)
        overrides[key.strip()] = value.strip()
    return overrides


def shuffle_partitions_for(input_bytes: int) -> int | None:
    """Shuffle partitions for a job reading ``input_bytes`` of Parquet; None when the user set
    spark.sql.shuffle.partitions through RETRY_AUDIT_SPARK_CONF (their number stands)."""
    if SHUFFLE_PARTITIONS_KEY in _conf_overrides():
        return None
    return max(SHUFFLE_PARTITIONS, math.ceil(input_bytes / SHUFFLE_INPUT_BYTES_PER_PARTITION))


def _is_alive(session) -> bool:
    """True while the session's SparkContext is running (stop() clears its Java handle)."""
    context = session.sparkContext
    return getattr(context, "_jsc", None) is not None


def spark_running() -> bool:
    """True when this process already has a live SparkContext, whoever started it."""
    if _session is not None and _is_alive(_session):
        return True
    if "pyspark" not in sys.modules:
        return False  # nothing can have started Spark without importing it
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # getActiveSession() is per thread on the JVM side (a session made in another thread, as a
    # Dagster step's may be, is not "active" here); the context is one per process.
    return SparkSession.getActiveSession() is not None or SparkContext._active_spark_context is not None


@contextmanager
def spark_session(master: str | None = None, app_name: str = APP_NAME_DEFAULT, *, quiet: bool = False,
                  input_bytes: int | None = None):
    """This process's SparkSession for one command; stopped at the end only if the command started it.

    ``input_bytes``, the size of the command's one job (its commit-log Parquet), sizes the JVM when
    this command starts it (``get_spark``).

    A command run inside a process that already has a session (a test run's shared one, a
    notebook's) leaves it running for whoever started it: stopping it would break every later
    user of the one SparkContext a process may hold.
    """
    started_here = not spark_running()
    session = get_spark(master, app_name, quiet=quiet, input_bytes=input_bytes)
    try:
        yield session
    finally:
        if started_here:
            stop_spark()


def get_spark(master: str | None = None, app_name: str = APP_NAME_DEFAULT, *, quiet: bool = False,
              input_bytes: int | None = None):
    """Return this process's SparkSession, creating it on first use.

    ``master`` is a Spark master URL (``local[2]``, ``spark://host:7077``, ...); when omitted the
    environment variable ``RETRY_AUDIT_SPARK_MASTER`` decides, else ``local[*]``. Times are UTC
    in the session so that timestamps round-trip unchanged between Parquet, Spark and DuckDB.
    ``quiet`` sends the JVM's own stderr (its start-up warnings and log lines) to /dev/null when
    this call starts the JVM; errors still reach Python as exceptions. ``input_bytes`` is the
    size of the one job the caller starts the JVM for (None: unknown, or many jobs): below
    ``SMALL_JOB_INPUT_BYTES`` the driver's JVM compiles with C1 only (``driver_jvm_options``).
    """
    global _session, _session_master
    wanted = resolve_master(master)
    # Only an explicit choice (argument or environment) can conflict with the running session;
    # a caller that leaves the master open gets whatever this process already runs.
    explicit = bool(master) or bool(os.environ.get(SPARK_MASTER_ENV))
    with _lock:
        if _session is not None and _is_alive(_session):
            if explicit and wanted != _session_master:
                raise BadInputError(
                    f"this process already runs Spark on {_session_master!r}; cannot switch to "
                    f"{wanted!r}", where="spark master",
                    hint="one SparkContext per process: run the other master in a new process")
            return _session
        _session = _build_session(wanted, app_name, quiet=quiet, input_bytes=input_bytes)
        _session_master = wanted
        return _session


def _launch_jvm_quietly(conf) -> None:
    """Start the Spark JVM with its stderr on /dev/null, unless this process already has one.

    The JVM prints before any Spark setting can reach it: the JDK's "WARNING: Using incubator
    modules", log4j's default-profile notice and the warnings logged while the context starts.
    PySpark starts the JVM on first use with our stderr; starting it here first, with the same
    settings on its command line, is the one place its stderr can be chosen.
    """
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is None:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.DEVNULL})
        SparkContext._ensure_initialized(gateway=gateway)


def driver_jvm_options(input_bytes: int | None = None) -> str:
    """The driver JVM's options: UTC times; the parallel collector (the lineage is a batch job where
    throughput matters, and G1's collector threads took 10-13% of the JVM's CPU on 1M records, the
    parallel one 5%); C1 only for one small job (``SMALL_JOB_INPUT_BYTES``)."""
    options = JVM_OPTIONS
    if input_bytes is not None and input_bytes < SMALL_JOB_INPUT_BYTES:
        options += " " + SMALL_JOB_JVM_OPTIONS
    return options


def _build_session(master: str, app_name: str, *, quiet: bool = False, input_bytes: int | None = None):
    # The environment must be set before the JVM starts: Spark reads it once at launch.
    os.environ.setdefault("SPARK_LOCAL_IP", SPARK_LOCAL_IP_DEFAULT)
    # Executors (local or on a cluster's workers) must run the same Python as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf  # imported late: importing pyspark costs ~1 s
    from pyspark.sql import SparkSession

    ui_enabled = os.environ.get(SPARK_UI_ENV, "0") == "1"
    # One SparkConf for the JVM's launch and the session: a quiet launch starts the JVM itself and
    # must hand it the same settings getOrCreate() would.
    conf = (
        SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
        .set(SHUFFLE_PARTITIONS_KEY, str(SHUFFLE_PARTITIONS))
        .set("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
        .set("spark.driver.memory", DRIVER_MEMORY)
        .set("spark.executor.memory", EXECUTOR_MEMORY)
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.driver.extraJavaOptions", driver_jvm_options(input_bytes))
        .set("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .set("spark.ui.enabled", "true" if ui_enabled else "false")
        .set("spark.ui.showConsoleProgress", "false")
        # The data contract's times are timestamp[ms, UTC]: write them as Parquet TIMESTAMP_MILLIS.
        .set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
        # Writes go to a temp dir that is renamed into place; no _SUCCESS marker files are needed.
        .set("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        .set("spark.sql.adaptive.enabled", "true")
        .set("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE_ENTRIES))
        # The lineage keeps its classified hops between its two writes. Kept uncompressed they
        # cost less CPU to build and read: warm runs on 991,075 records 23.1-23.3 -> 21.7-22.3 s
        # (task CPU -10 %), 9,867,014 records 206 -> 198 s, the JVM's peak the same (1,549 vs
        # 1,561 MiB: the heap is capped and the rest spills to local disk). A cluster short of
        # memory can turn compression back on through RETRY_AUDIT_SPARK_CONF.
        .set("spark.sql.inMemoryColumnarStorage.compressed", "false")
    )
    for key, value in _conf_overrides().items():
        conf.set(key, value)
    if quiet:
        _launch_jvm_quietly(conf)
    session = SparkSession.builder.config(conf=conf).getOrCreate()
    # The CLI prints progress itself; Spark's INFO/WARN chatter would drown it.
    session.sparkContext.setLogLevel("ERROR")
    return session


def stop_spark() -> None:
    """Stop this process's cached session (a new get_spark() call starts a fresh one)."""
    global _session, _session_master
    with _lock:
        if _session is not None:
            _session.stop()
        _session = None
        _session_master = None
