"""The Dagster UI works in a real browser: graph, partitions, a materialization, checks and plots.

Starts ``make ui``'s server (``python -m orchestration.ui``) on a free loopback port with a fresh data
home, drives Debian's headless Chromium with Playwright (no browser download: ``/usr/bin/chromium``),
clicks "Materialize all…" for one partition, waits for the run to succeed, and opens an audit
asset to see its checks and plots. Screenshots land in ``test-artifacts/ui/``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ports import free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "ui"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SERVER_START_S_MAX = 180
RUN_S_MAX = 900
# The partition materialized from the UI; the default scenario is the one a user clicks first.
PARTITION = os.environ.get("RETRY_AUDIT_UI_TEST_PARTITION", "default")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

# Minutes of a browser waiting on a materialization: make test-long (.ci/run runs it).
pytestmark = pytest.mark.long
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed")
# The warehouse the browser test's run built, by partition: the recipes reuse it when it is there.
UI_WAREHOUSES: dict[str, Path] = {}


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui-home")
    port = free_port()
    env = dict(os.environ, RETRY_AUDIT_HOME=str(home), RETRY_AUDIT_UI_PORT=str(port))
    log = open(home / "ui.log", "w")
    # A new session lets the test stop dagster dev and all its children with one signal.
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.ui"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + SERVER_START_S_MAX
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("dagster dev did not start:\n" + (home / "ui.log").read_text()[-3000:])
                time.sleep(1)
        yield {"port": port, "home": home}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def wait_for_run(port: int) -> dict:
    """Poll the UI's GraphQL endpoint until the launched run ends; return its id and status."""
    query = "{ runsOrError { ... on Runs { results { runId status } } } }"
    deadline = time.monotonic() + RUN_S_MAX
    while time.monotonic() < deadline:
        runs = graphql(port, query)["data"]["runsOrError"]["results"]
        done = [r for r in runs if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")]
        if done:
            return done[0]
        time.sleep(3)
    pytest.fail(f"no run finished within {RUN_S_MAX} s")


@needs_chromium
# Its own limits (the server's start, then the run) are inside the suite's per-test timeout.
@pytest.mark.timeout(SERVER_START_S_MAX + RUN_S_MAX + 120)
def test_materialize_a_partition_from_the_ui_and_see_checks_and_plots(ui_server):
    """A user can launch a partition from the asset graph, and sees checks and plots afterwards."""
    from playwright.sync_api import sync_playwright

    port = ui_server["port"]
    base = f"http://127.0.0.1:{port}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)

        page.goto(f"{base}/asset-groups", wait_until="networkidle")
        for group in ("raw", "lineage", "audit"):
            page.get_by_text(group, exact=True).first.wait_for()
        page.screenshot(path=ARTIFACTS / "01-asset-graph.png")

        page.get_by_role("button", name="Materialize all").click()
        dialog = page.locator("[role=dialog]")
        dialog.get_by_text("Select a partition or create one").click()
        page.get_by_text(PARTITION, exact=True).first.click()
        page.keyboard.press("Escape")  # close the partition list, keep the dialog
        launch = dialog.get_by_role("button", name="Launch 1 run")
        launch.wait_for()
        page.screenshot(path=ARTIFACTS / "02-launch-dialog.png")
        launch.click()

        run = wait_for_run(port)
        page.goto(f"{base}/runs/{run['runId']}", wait_until="networkidle")
        page.screenshot(path=ARTIFACTS / "03-run.png")
        assert run["status"] == "SUCCESS", f"run {run['runId']} ended {run['status']}"
        UI_WAREHOUSES[PARTITION] = ui_server["home"] / "warehouse.duckdb"

        page.goto(f"{base}/assets/audit/retry_funnel?partition={PARTITION}", wait_until="networkidle")
        page.get_by_text("[Show Markdown]").first.click()  # the plot is markdown metadata
        plot = page.locator("img[src^='data:image/png']").first
        plot.wait_for()
        assert plot.evaluate("img => img.naturalWidth") > 100, "the plot image did not render"
        page.screenshot(path=ARTIFACTS / "04-audit-asset-plot.png")

        page.goto(f"{base}/assets/lineage/message_hops?view=checks", wait_until="networkidle")
        page.get_by_text("hop_grammar_valid").first.wait_for()
        page.get_by_text("Succeeded").first.wait_for()
        page.screenshot(path=ARTIFACTS / "05-checks.png")
        summary = page.locator("body").inner_text()
        for check in ("hop_grammar_valid", "lineage_matches_commitlog", "no_delivery_before_due_time",
                      "origin_and_retry_topic_stable"):
            assert check in summary
        assert summary.count("Succeeded") >= 4 and "Failed" not in summary
        browser.close()


def readme_sql_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks, inside, current = [], False, []
    for line in text.splitlines():
        if line.strip() == "```sql":
            inside, current = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append("\n".join(current))
        elif inside:
            current.append(line)
    return blocks


@pytest.fixture(scope="module")
def default_warehouse(spark, tmp_path_factory) -> Path:
    """The default scenario's warehouse: the one the browser test built, else built here by the CLI.

    Never through ``dagster dev``: without a browser the UI server is not needed, and the CLI's
    lineage runs on the test run's shared Spark session (and leaves it running).
    """
    import duckdb

    db = UI_WAREHOUSES.get("default")
    if db is not None and db.exists():
        con = duckdb.connect(str(db), read_only=True)
        try:
            if con.execute("select count(*) from runs where run_id = 'default'").fetchone()[0]:
                return db
        finally:
            con.close()
    from orchestration.cli import main as cli

    work = tmp_path_factory.mktemp("default-run")
    run_dir, db = work / "default", work / "warehouse.duckdb"
    assert cli(["-q", "simulate", str(ROOT / "scenarios" / "default.yaml"), "--out", str(run_dir)]) == 0
    assert cli(["-q", "lineage", str(run_dir)]) == 0
    assert cli(["-q", "warehouse", str(run_dir), "--db", str(db)]) == 0
    return db


def test_every_readme_recipe_runs_on_the_default_scenario(default_warehouse):
    """Each SQL recipe in the README runs as written on the default scenario's warehouse and answers."""
    import duckdb

    blocks = readme_sql_blocks()
    assert len(blocks) >= 5, "the README lost its recipes"
    con = duckdb.connect(str(default_warehouse), read_only=True)
    try:
        for sql in blocks:
            rows = con.execute(sql).fetchall()
            assert rows, f"recipe returned no rows on the default scenario:\n{sql}"
    finally:
        con.close()
