"""``retry-audit report RUN_DIR --out report.html``: one self-contained HTML file with a run's plots.

The report reads the run's own Parquet (``parquet/`` and ``lineage/``) through an in-memory DuckDB
with the audit tables built on it (``assets.warehouse.run_warehouse``), or an existing warehouse
with ``--db``: either way the plots read the same warehouse tables. Images are embedded as data URIs, so the file can be
mailed or attached to a ticket as it is.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import duckdb

from assets.plots import all_plots
from assets.warehouse import TABLE_DIRS, run_warehouse
from broker_core.errors import BadInputError

# Tables a run directory must hold for a report; the others may be absent (an import has no
# consume_attempts) and read as empty.
REPORT_TABLES = ("message_lineage", "message_hops", "runs")


def _connect_run(run_dir: Path) -> duckdb.DuckDBPyConnection:
    for table in REPORT_TABLES:
        folder = TABLE_DIRS[table]
        if not (run_dir / folder / table).exists():
            hint = ("run `retry-audit lineage RUN_DIR` first" if folder == "lineage"
                    else "is this a run directory written by `simulate` or `import-store`?")
            raise BadInputError(f"missing table {folder}/{table}", where=str(run_dir), hint=hint)
    return run_warehouse(run_dir)


def _run_id(con, run_dir: Path) -> str:
    row = con.execute("select run_id from runs limit 1").fetchone()
    return row[0] if row else run_dir.name


def _summary_rows(con, run_id: str) -> list[tuple]:
    return con.execute(
        """
        select coalesce("group", '(no group)'), final_state, count(*)
        from message_lineage where run_id = ? group by all order by 1, 2
        """, [run_id]).fetchall()


def render_report(con, run_id: str) -> str:
    """The report's HTML text for one run in the connected warehouse."""
    plots = all_plots(con, run_id)
    rows = _summary_rows(con, run_id)
    esc = html.escape
    table = "\n".join(f"<tr><td>{esc(str(g))}</td><td>{esc(str(s))}</td><td>{n:,}</td></tr>"
                      for g, s, n in rows)
    figures = "\n".join(
        f'<h2>{esc(p.title)}</h2>\n<img alt="{esc(p.title)}" src="{p.data_uri()}">' for p in plots)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>retry-audit report: {esc(run_id)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:left}}
img{{max-width:100%}}</style></head>
<body><h1>retry-audit report: {esc(run_id)}</h1>
<h2>Messages by group and final state</h2>
<table><tr><th>group</th><th>final state</th><th>messages</th></tr>
{table}
</table>
{figures}
</body></html>
"""


def write_report(run_dir: Path, out: Path, db: Path | None = None) -> Path:
    """Write the HTML report of ``run_dir`` to ``out`` atomically and return its path."""
    run_dir = Path(run_dir)
    if db is not None:
        if not Path(db).exists():
            raise BadInputError("warehouse file not found", where=str(db),
                                hint="build it with `retry-audit warehouse RUN_DIR --db FILE`")
        con = duckdb.connect(str(db), read_only=True)
    else:
        if not run_dir.is_dir():
            raise BadInputError("run directory not found", where=str(run_dir))
        con = _connect_run(run_dir)
    try:
        run_id = _run_id(con, run_dir) if db is None else run_dir.name
        text = render_report(con, run_id)
    finally:
        con.close()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out


def report(args) -> int:
    """CLI handler for ``retry-audit report``."""
    path = write_report(Path(args.run_dir), Path(args.out), Path(args.db) if args.db else None)
    if not args.quiet:
        print(f"report written: {path}")
    return 0
