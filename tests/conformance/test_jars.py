"""Resolving RocketMQ's jars: a release the registry cannot serve whole fails with a message that
names what is missing, and a version that is no release number is refused before Maven runs."""

from __future__ import annotations

import shutil

import pytest

from broker_core.errors import BadInputError
from conformance.jars import check_version, maven_failure

# What `mvn dependency:copy-dependencies` printed for RocketMQ 5.5.1 here (2026-11-26; the
# repository address replaced by <central>): the broker resolved, six other artifacts did not.
MVN_5_5_1 = """\
[WARNING] The POM for org.apache.rocketmq:rocketmq-namesrv:jar:5.5.1 is missing, no dependency information available
[ERROR] Failed to execute goal on project rocketmq-lib: Could not resolve dependencies for project \
retry-audit:rocketmq-lib:pom:1: The following artifacts could not be resolved: \
org.apache.rocketmq:rocketmq-namesrv:jar:5.5.1, org.apache.rocketmq:rocketmq-srvutil:jar:5.5.1, \
org.apache.rocketmq:rocketmq-filter:jar:5.5.1, org.apache.rocketmq:rocketmq-auth:jar:5.5.1, \
org.apache.rocketmq:rocketmq-client:jar:5.5.1, org.apache.rocketmq:rocketmq-tools:jar:5.5.1: \
org.apache.rocketmq:rocketmq-namesrv:jar:5.5.1 was not found in <central> during a previous attempt. \
This failure was cached in the local repository -> [Help 1]
[ERROR]
[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.
[ERROR] Re-run Maven using the -X switch to enable full debug logging.
[ERROR] [Help 1] http://cwiki.apache.org/confluence/display/MAVEN/DependencyResolutionException
"""


def test_a_release_served_in_part_names_the_missing_artifacts():
    """Maven's failure for 5.5.1 becomes the list of artifacts it could not find, not its advice."""
    assert maven_failure(MVN_5_5_1) == ("not found: rocketmq-namesrv, rocketmq-srvutil, rocketmq-filter, "
                                        "rocketmq-auth, rocketmq-client, rocketmq-tools")


def test_another_maven_failure_is_its_first_error_line():
    """A failure of another kind is told by Maven's first non-empty error line."""
    out = "[INFO] x\n[ERROR] Failed to execute goal: network is unreachable\n[ERROR] \n[ERROR] [Help 1] http://h\n"
    assert maven_failure(out) == "Failed to execute goal: network is unreachable"
    assert maven_failure("") == "no output"


@pytest.mark.parametrize("version", ["5.5", "latest", "5.5.1-SNAPSHOT", ""])
def test_a_version_that_is_no_release_number_is_bad_input(version):
    """Only N.N.N release numbers reach Maven."""
    with pytest.raises(BadInputError, match="not a RocketMQ release number"):
        check_version(version)


def test_a_first_attempt_names_every_missing_artifact_too():
    """Maven's wording on a first (uncached) attempt names the same artifacts."""
    out = ("[ERROR] Failed to execute goal on project p: Could not resolve dependencies for project p: The "
           "following artifacts could not be resolved: org.apache.rocketmq:rocketmq-client:jar:5.5.1, "
           "org.apache.rocketmq:rocketmq-tools:jar:5.5.1: Could not find artifact "
           "org.apache.rocketmq:rocketmq-client:jar:5.5.1 in central (<central>) -> [Help 1]\n")
    assert maven_failure(out) == "not found: rocketmq-client, rocketmq-tools"
    assert maven_failure("[ERROR] Could not find artifact org.apache.rocketmq:rocketmq-client:jar:5.5.1 in c\n") \
        == "not found: rocketmq-client"


def test_the_proxy_and_the_grpc_client_have_lib_directories_of_their_own(tmp_path, monkeypatch):
    """The proxy's and the gRPC client's closures live beside a release's lib directory, never in
    it (their dependency versions differ from the broker's); a finished one is taken as it is,
    without Maven."""
    import conformance.jars as jars

    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(jars.shutil, "which", lambda _name: None)  # Maven is not called
    broker, proxy = jars.lib_dir("5.3.3"), tmp_path / "5.3.3" / "proxy-lib"
    client = tmp_path / f"grpc-client-{jars.GRPC_CLIENT_VERSION}" / "lib"
    for lib in (proxy, client):
        lib.mkdir(parents=True)
        (lib / jars.MARKER).write_text("done\n")
    assert jars.resolve_proxy("5.3.3") == proxy != broker
    assert jars.resolve_grpc_client() == client
    # Without its marker a closure is resolved, and without Maven that is refused.
    with pytest.raises(jars.RetryAuditError, match="Maven"):
        jars.resolve("5.3.3")
    with pytest.raises(BadInputError):
        jars.resolve_proxy("5.3")


@pytest.mark.skipif(not shutil.which("mvn"), reason="resolving jars needs mvn (apt-get install maven)")
def test_a_release_served_in_part_runs_its_broker_side_with_the_client_side_of_the_last_whole_one(
        tmp_path, monkeypatch):
    """5.5.1's lib directory (resolved by Maven from Central, into a fresh cache): the modules that
    write the store are 5.5.1's, the clients, name server and tools 5.5.0's, and no 5.5.1 jar that
    Central does not serve is asked for; the marker names every pinned module."""
    import conformance.jars as jars

    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path))
    lib = jars.resolve("5.5.1")
    rocketmq = {p.name.rsplit("-", 1)[0]: p.name.rsplit("-", 1)[1].removesuffix(".jar")
                for p in lib.glob("rocketmq-*.jar")}
    for module in ("rocketmq-broker", "rocketmq-store", "rocketmq-common", "rocketmq-remoting"):
        assert rocketmq[module] == "5.5.1", rocketmq
    for module in ("rocketmq-client", "rocketmq-namesrv", "rocketmq-tools", "rocketmq-srvutil"):
        assert rocketmq[module] == "5.5.0", rocketmq
    assert jars.client_side_release("5.5.1") == "5.5.0" and jars.client_side_release("5.3.3") == "5.3.3"
    pins = (lib / jars.MARKER).read_text().split()
    assert "rocketmq-broker:5.5.1" in pins and "rocketmq-client:5.5.0" in pins
