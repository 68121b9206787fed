"""RocketMQ's own jars from Maven Central, one lib directory per release, resolved on demand.

Nothing is downloaded when the package is imported: :func:`resolve` runs ``mvn`` the first time a
release is asked for, copies the runtime dependency closure into ``<cache>/<version>/lib`` and
writes a marker once the copy is complete, so a half-copied directory is never taken for a whole
one. Maven keeps its own cache in ``~/.m2``; a second resolve of a release is a directory listing.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from broker_core.errors import BadInputError, RetryAuditError

CACHE_ENV = "RETRY_AUDIT_ROCKETMQ_CACHE"  # where lib directories live (default ~/.cache/retry-audit/rocketmq)
GROUP_ID = "org.apache.rocketmq"
# The name server depends on tools; the broker on store, remoting, client, common. The client is
# listed too because the driver compiles against it.
ARTIFACTS = ("rocketmq-namesrv", "rocketmq-broker", "rocketmq-client", "rocketmq-tools")
# Closures kept apart from a release's lib directory (their dependency versions differ from the
# broker's): the gRPC proxy of the same release, and the Java gRPC client, which has its own
# version line and ships shaded.
PROXY_ARTIFACTS = ("rocketmq-proxy",)
GRPC_CLIENT_ARTIFACT, GRPC_CLIENT_VERSION = "rocketmq-client-java", "5.0.7"
# Releases Maven Central serves only in part. The broker side (the modules that write the store) is
# taken at the release; the modules it does not serve (clients, name server, tools and what only
# they need) at the newest release it serves whole, pinned so that Maven never asks for the missing
# ones. On 2026-11-26 5.5.1's broker, store, common, remoting, tiered-store and controller jars
# resolved, its client, namesrv, srvutil, filter, auth, acl and tools jars were "not found".
BROKER_SIDE = ("rocketmq-broker", "rocketmq-store", "rocketmq-common", "rocketmq-remoting",
               "rocketmq-tiered-store", "rocketmq-controller")
CLIENT_SIDE = ("rocketmq-client", "rocketmq-namesrv", "rocketmq-srvutil", "rocketmq-filter",
               "rocketmq-auth", "rocketmq-acl", "rocketmq-tools")
PARTIAL_RELEASES = {"5.5.1": "5.5.0"}  # release -> the release its client side comes from
MARKER = "COMPLETE"
VERSION_PATTERN = re.compile(r"^\d+\.\d+\.\d+$")
MVN_TIMEOUT_S = 900  # a cold ~/.m2 fetches about 30 MB per release

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>retry-audit</groupId>
  <artifactId>rocketmq-lib</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
{managed}
    </dependencies>
  </dependencyManagement>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "retry-audit" / "rocketmq")


def lib_dir(version: str) -> Path:
    return cache_root() / version / "lib"


def check_version(version: str) -> str:
    if not VERSION_PATTERN.match(version):
        raise BadInputError(f"not a RocketMQ release number: {version!r}", where="--rocketmq",
                            hint="for example 4.9.4")
    return version


def resolve(version: str, *, log=None) -> Path:
    """The lib directory of RocketMQ ``version``, resolving it with Maven if it is not there yet."""
    check_version(version)
    client_side = PARTIAL_RELEASES.get(version)
    if client_side is None:
        return _resolve_closure(lib_dir(version), [(a, version) for a in ARTIFACTS], f"RocketMQ {version}", log)
    pins = [(a, version) for a in BROKER_SIDE] + [(a, client_side) for a in CLIENT_SIDE]
    return _resolve_closure(lib_dir(version), [(a, dict(pins)[a]) for a in ARTIFACTS],
                            f"RocketMQ {version} (its client side from {client_side})", log, managed=pins)


def client_side_release(version: str) -> str:
    """The release whose clients, name server and tools run with ``version``'s broker: itself, or
    for a release served only in part (:data:`PARTIAL_RELEASES`) the one its client side comes from."""
    return PARTIAL_RELEASES.get(version, version)


def resolve_proxy(version: str, *, log=None) -> Path:
    """The lib directory of RocketMQ ``version``'s proxy (``<cache>/<version>/proxy-lib``), apart from
    the broker's. The proxy is a client of the brokers: for a release served only in part it is the
    proxy of the release its client side comes from."""
    check_version(version)
    proxy = client_side_release(version)
    return _resolve_closure(cache_root() / version / "proxy-lib", [(a, proxy) for a in PROXY_ARTIFACTS],
                            f"the RocketMQ {proxy} proxy", log)


def resolve_grpc_client(version: str = GRPC_CLIENT_VERSION, *, log=None) -> Path:
    """The lib directory of the Java gRPC client (``<cache>/grpc-client-<version>/lib``)."""
    check_version(version)
    return _resolve_closure(cache_root() / f"grpc-client-{version}" / "lib", [(GRPC_CLIENT_ARTIFACT, version)],
                            f"the RocketMQ gRPC client {version}", log)


def _dependencies(artifacts: list[tuple[str, str]], indent: str) -> str:
    return "\n".join(f"{indent}<dependency><groupId>{GROUP_ID}</groupId><artifactId>{a}</artifactId>"
                     f"<version>{v}</version></dependency>" for a, v in artifacts)


def _resolve_closure(lib: Path, artifacts: list[tuple[str, str]], what: str, log,
                     managed: list[tuple[str, str]] = ()) -> Path:
    if (lib / MARKER).exists():
        return lib
    # Processes resolving at once (the test suite's workers, two conformance runs) take turns: one
    # runs Maven (whose ~/.m2 is not safe for concurrent writers), the others then find its marker.
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (lib / MARKER).exists():
            return lib
        return _resolve_with_maven(lib, artifacts, what, log, managed)


def _resolve_with_maven(lib: Path, artifacts: list[tuple[str, str]], what: str, log,
                        managed: list[tuple[str, str]]) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RetryAuditError("Maven (mvn) is needed to fetch RocketMQ's jars and was not found",
                              hint="apt-get install maven (make conformance and .ci/run do it)")
    if log:
        log(f"resolving {what} with Maven into {lib}")
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rocketmq-pom-") as tmp:
        (Path(tmp) / "pom.xml").write_text(_POM.format(dependencies=_dependencies(artifacts, "    "),
                                                        managed=_dependencies(managed, "      ")))
        partial = Path(tempfile.mkdtemp(prefix="lib-", dir=lib.parent))
        try:
            proc = subprocess.run(
                [mvn, "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime",
                 f"-DoutputDirectory={partial}"],
                cwd=tmp, capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
            if proc.returncode != 0:
                raise RetryAuditError(f"Maven could not resolve {what}: "
                                      f"{maven_failure(proc.stdout + proc.stderr)}",
                                      where="mvn dependency:copy-dependencies",
                                      hint="a release the registry serves only in part runs only with its "
                                           "client side from another release (conformance/jars.py "
                                           "PARTIAL_RELEASES, docs/rocketmq-5x.md); try another release")
            (partial / MARKER).write_text(" ".join(f"{a}:{v}" for a, v in (managed or artifacts)) + "\n")
            move_into_place(partial, lib)
        finally:
            if partial.exists():
                shutil.rmtree(partial, ignore_errors=True)
    return lib


_UNRESOLVED = re.compile(r"The following artifacts could not be resolved: ((?:[\w.-]+:[\w.-]+:jar:[\w.-]+(?:, )?)+)"
                         r"|Could not find artifact (\S+)")
_ARTIFACT = re.compile(r"[\w.-]+:([\w.-]+):jar:[\w.-]+")
MAVEN_ERROR_CHARS_MAX = 400  # a Maven failure's first error line is cut to this in the message


def maven_failure(output: str) -> str:
    """What a failed ``mvn`` run could not do, in one line: the artifacts it could not find (by
    artifactId), else its first non-empty error line; Maven's closing advice is left out."""
    match = _UNRESOLVED.search(output)
    if match:
        names = _ARTIFACT.findall(match.group(1) or match.group(2))
        if names:
            return "not found: " + ", ".join(names)
    errors = [line.removeprefix("[ERROR]").strip() for line in output.splitlines() if line.startswith("[ERROR]")]
    first = next((e for e in errors if e), None)
    if first is None:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return tail[0][:MAVEN_ERROR_CHARS_MAX]
    return first[:MAVEN_ERROR_CHARS_MAX]


def move_into_place(partial: Path, final: Path) -> None:
    """Replace ``final`` with the finished directory ``partial`` (a half-built one is never ``final``)."""
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
