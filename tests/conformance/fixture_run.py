"""What the scripts that write a real RocketMQ store fixture share (make_lmq_fixture.py,
make_dledger_fixture.py, make_lite_store.py): a scratch directory with their driver compiled against
the release's jars, the driver's steps run there, and the manifest; and the audit their long tests
make of a store one of them wrote afresh.

A maker's work directory is removed once the store is written; after a failure it is kept (the
brokers' logs, ``driver.err``) and its path is the one the failure names.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from java_driver import DRIVER_JVM_FLAGS, compile_driver, run_driver

from conformance import jars


@dataclass(frozen=True)
class FixtureDriver:
    """A fixture maker's driver, compiled: ``driver(STEP, ARGS...)`` runs one of its steps to its end
    and returns its JSON lines; a step that exits non-zero is an error naming it."""
    main: str
    classpath: str
    work: Path
    timeout_s: float
    flags: tuple[str, ...]

    def __call__(self, *args) -> list[dict]:
        return run_driver(self.classpath, self.main, args, cwd=self.work, timeout_s=self.timeout_s, flags=self.flags)


@contextmanager
def fixture_driver(source: Path, version: str, *, timeout_s: float,
                   flags: tuple[str, ...] = DRIVER_JVM_FLAGS) -> Iterator[tuple[Path, Path, FixtureDriver]]:
    """A new work directory, the lib directory of RocketMQ ``version`` and the driver ``source``
    compiled against it (with DriverSupport and PlanSupport); the directory goes once the block ends
    without an error."""
    lib = jars.resolve(version, log=print)
    work = Path(tempfile.mkdtemp(prefix=f"{source.stem}-"))
    classpath = compile_driver(source, str(lib / "*"), work / "classes")
    yield work, lib, FixtureDriver(source.stem, classpath, work, timeout_s, flags)
    shutil.rmtree(work, ignore_errors=True)


def write_manifest(out: Path, manifest: dict) -> None:
    """The fixture's ``manifest.json`` (what the clients saw, the settings), written last."""
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {out}")


def audit_written_store(tmp: Path, write, broker: str, name: str) -> Iterator[tuple]:
    """Write a store afresh with a maker's ``write`` (its main) into ``tmp/store``, import the store of
    ``broker`` as run ``name``, build its lineage (DuckDB) and warehouse; yields the run directory, the
    import's summary, the warehouse open read-only and the clients' events, and closes the warehouse
    after (a module fixture's body: ``yield from audit_written_store(...)``)."""
    from assets.lineage_duckdb import run_lineage_duckdb
    from assets.warehouse import build_warehouse, open_read_only
    from broker_core.export.store_import import import_store

    write(tmp / "store")
    events = json.loads((tmp / "store" / "manifest.json").read_text())["events"]
    run = tmp / "run"
    summary = import_store(tmp / "store" / broker, run, name=name)
    run_lineage_duckdb(run)
    db = tmp / f"{name}.duckdb"
    build_warehouse([run], db)
    con = open_read_only(db)
    yield run, summary, con, events
    con.close()
