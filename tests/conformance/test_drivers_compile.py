"""Every Java driver compiles against each release's jars it runs with: the real-broker tests' drivers
(with DriverSupport.java and PlanSupport.java, as java_driver.compile_driver builds them) and the
product's (conformance/driver.py). A driver meets its jars only when its test starts brokers; this
says in a minute which driver a shared helper broke, for every jar set at once (make test-long).
Needs javac and mvn (the jars come from the conformance cache); skips without them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grpc_run import GRPC_PLAN_DRIVER
from java_driver import compile_driver, needs_real_rocketmq

HERE = Path(__file__).resolve().parent
# The jar sets the drivers run with, and the drivers run with each: a test driver in none is an
# error below (add it where its test runs it). The gRPC drivers also get the gRPC client's jars, and
# the product's GrpcPlanDriver.java, whose retry-policy parser GrpcDriver uses.
GRPC_CLIENT = "grpc"
JAR_SETS = {
    "4.9.4": ("LmqFixtureDriver", "DLedgerFixtureDriver", "LiveProducer"),
    "5.3.3": ("PopDriver", "PopHoldDriver", "RecordFormsDriver", "TieredDriver", "TimerDriver",
              "DLedgerFixtureDriver"),
    "5.5.0": ("LiteDriver", "RecordFormsDriver", "TimerDriver"),
    "5.5.1": ("LiteDriver", "RecordFormsDriver", "TimerDriver"),
    f"5.3.3+{GRPC_CLIENT}": ("GrpcDriver",),
    f"5.5.1+{GRPC_CLIENT}": ("GrpcDriver",),
}
PRODUCT_VERSIONS = ("4.9.4", "5.3.3", "5.5.1")


def test_every_test_driver_runs_with_a_jar_set_listed_here():
    """Each Java file beside the tests but DriverSupport is listed with the jars it compiles against."""
    listed = {name for names in JAR_SETS.values() for name in names}
    on_disk = {p.stem for p in HERE.glob("*.java")} - {"DriverSupport"}
    assert on_disk == listed


@needs_real_rocketmq
@pytest.mark.long
@pytest.mark.parametrize("jar_set", sorted(JAR_SETS))
def test_the_test_drivers_compile_against_their_jars(tmp_path, jar_set):
    """The drivers of a jar set compile with DriverSupport and PlanSupport, in one javac run."""
    from conformance.jars import resolve, resolve_grpc_client

    version, _, client = jar_set.partition("+")
    classpath = str(resolve(version) / "*")
    first, *rest = (HERE / f"{name}.java" for name in JAR_SETS[jar_set])
    if client == GRPC_CLIENT:
        classpath = f"{resolve_grpc_client() / '*'}:{classpath}"
        rest.append(GRPC_PLAN_DRIVER)
    compile_driver(first, classpath, tmp_path / "classes", also=tuple(rest))
    assert {p.stem for p in (tmp_path / "classes").glob("*.class")} >= {*JAR_SETS[jar_set], "DriverSupport", "PlanSupport"}


@needs_real_rocketmq
@pytest.mark.long
@pytest.mark.parametrize("version", PRODUCT_VERSIONS)
def test_the_product_drivers_compile_against_a_release(version):
    """Driver.java compiles against the release's jars (4.x's imports or 5.x's) and, from 5.x on,
    GrpcPlanDriver.java against them and the gRPC client's; both with PlanSupport (cached by hash)."""
    from conformance.driver import MAIN_CLASS, compile_grpc_driver
    from conformance.driver import compile_driver as compile_product_driver
    from conformance.jars import resolve, resolve_grpc_client

    lib = resolve(version)
    assert (compile_product_driver(lib, version) / f"{MAIN_CLASS}.class").is_file()
    if int(version.split(".")[0]) >= 5:
        assert compile_grpc_driver(lib, resolve_grpc_client())
