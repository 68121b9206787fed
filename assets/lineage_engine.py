"""Which engine builds a run's lineage: Spark (the pipeline's), DuckDB, or the one that suits its size.

Both run the same SQL files (``assets/sql/lineage/``) and write the same tables. Spark is the
pipeline's engine: it runs on a cluster and reads a run directory given as a URI. DuckDB runs in
this process: no JVM to start, so on a small run it is done before Spark has planned its first job.
``auto`` sends a local run whose commit-log Parquet is below ``AUTO_DUCKDB_COMMITLOG_BYTES_MAX`` to
DuckDB and every other run to Spark (docs/lineage.md, "Choosing the engine", says how the number
was measured).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

SPARK_ENGINE = "spark"
DUCKDB_ENGINE = "duckdb"
AUTO_ENGINE = "auto"
ENGINES = (SPARK_ENGINE, DUCKDB_ENGINE, AUTO_ENGINE)
ENGINE_DEFAULT = SPARK_ENGINE
# auto: the largest commit-log Parquet (bytes, summed over its files) DuckDB gets: the largest run
# measured (one broker's store of 9,876,645 records, 593 MiB), rounded up. DuckDB was the faster
# engine at every size measured on the project's 2-core machine, a JVM's start included: on that
# run 176 s against Spark's 342 s (since then 131 s), written in slices of about 1M hops
# (assets.lineage_duckdb), its peak 9.2 GiB (since then 6.4 GiB) under DuckDB's default memory
# limit (80 % of RAM; 216 s and 3.2 GiB under a 3 GB limit, spilling). Above it DuckDB was not
# measured; Spark's bounded heap is the known quantity there (docs/lineage.md, "Choosing the engine").
AUTO_DUCKDB_COMMITLOG_BYTES_MAX = 640 * 2**20

Progress = Callable[[str], None]


def is_uri(run_dir: str | Path) -> bool:
    """True for a run directory given as a URI (hdfs://, s3a://, file://...) rather than a path."""
    return "://" in str(run_dir)


def commitlog_parquet_bytes(run_dir: str | Path) -> int:
    """Bytes of a local run directory's commit-log Parquet (what sizes the work)."""
    return sum(f.stat().st_size for f in (Path(run_dir) / "parquet" / "commitlog").glob("*.parquet"))


def pick_engine(run_dir: str | Path, engine: str = ENGINE_DEFAULT) -> str:
    """The engine that builds ``run_dir``'s lineage: ``engine`` itself, or for ``auto``, DuckDB
    for a local run whose commit-log Parquet is below ``AUTO_DUCKDB_COMMITLOG_BYTES_MAX``."""
    assert engine in ENGINES, f"unknown lineage engine {engine!r}; one of {ENGINES}"
    if engine != AUTO_ENGINE:
        return engine
    if is_uri(run_dir) or commitlog_parquet_bytes(run_dir) >= AUTO_DUCKDB_COMMITLOG_BYTES_MAX:
        return SPARK_ENGINE
    return DUCKDB_ENGINE
