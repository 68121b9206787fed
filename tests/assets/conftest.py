"""Fixtures for the asset tests: one Spark session shared by the whole test run.

Starting the JVM costs about 7 s, so every test (in this package or any other that imports this
fixture) uses the same session; ``assets.spark.get_spark`` caches it per process, so even two
fixtures defined in different conftest files get the one SparkContext.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The process's SparkSession (local unless RETRY_AUDIT_SPARK_MASTER says otherwise)."""
    from assets.spark import get_spark

    return get_spark(app_name="retry-audit-tests")
