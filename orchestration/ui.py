"""``make ui``: the Dagster UI on http://127.0.0.1:3000 over this project's definitions.

Runs ``dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000`` in place of this process (so Ctrl-C
and SIGTERM reach it directly), with ``DAGSTER_HOME`` at ``<data home>/dagster_home`` (absolute,
with telemetry and the intro modal off) so runs and check results persist across restarts. The
instance's run partitions are brought up to date with the disk before the UI starts; while it runs,
the ``runs_on_disk`` sensor keeps them so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from orchestration.partitions import HOME_ENV, data_home, project_root, scenarios_dir, sync_run_partitions
from orchestration.resources import dagster_home

UI_HOST = "127.0.0.1"  # never listen on a public interface by default
UI_PORT_DEFAULT = 3000
UI_PORT_ENV = "RETRY_AUDIT_UI_PORT"


def ui_command(workspace: Path, port: int) -> list[str]:
    dagster = Path(sys.executable).with_name("dagster")
    program = [str(dagster)] if dagster.exists() else [sys.executable, "-m", "dagster"]
    return [*program, "dev", "-w", str(workspace), "-h", UI_HOST, "-p", str(port)]


def ui_environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[HOME_ENV] = str(home)
    env["DAGSTER_HOME"] = str(dagster_home(home))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def sync_partitions(home: Path, dagster_home_dir: Path) -> None:
    """The run partitions of the instance at ``dagster_home_dir``, made the runs on disk now."""
    import dagster as dg

    from assets.run_source import discover_runs

    with dg.DagsterInstance.from_config(str(dagster_home_dir)) as instance:
        sync_run_partitions(instance, discover_runs(home, scenarios_dir()))


def main() -> int:
    home = data_home()
    root = project_root()
    port = int(os.environ.get(UI_PORT_ENV, UI_PORT_DEFAULT))
    command = ui_command(root / "workspace.yaml", port)
    env = ui_environment(home)
    print(f"Dagster UI on http://{UI_HOST}:{port}  (DAGSTER_HOME={env['DAGSTER_HOME']})", flush=True)
    os.chdir(root)  # where the code location runs, so the scenarios found here are its own
    sync_partitions(home, Path(env["DAGSTER_HOME"]))
    os.execve(command[0], command, env)
    return 0  # not reached: execve replaced this process


if __name__ == "__main__":
    sys.exit(main())
