"""Pictures of a run: the retry funnel per group, delay lateness per level, the hop flow, and the
transactional messages' checks and decision times.

Each plot reads warehouse tables and computes nothing the warehouse already holds: the funnel is
``retry_funnel`` summed over origin topics, the lateness is ``delay_accuracy`` (which measures an
imported store's delays from its commit log, where no ``schedule_deliveries`` exist), the hop
flow counts ``message_hops`` transitions. So a plot and the table beside it never disagree, for
simulated and imported runs alike. Each returns PNG bytes; the same PNGs go into Dagster asset
metadata (as markdown data URIs) and the one-file HTML report.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display here; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

FIGURE_DPI = 96
FUNNEL_ATTEMPTS_MAX = 18  # attempts shown; 16 retries + first delivery + DLQ fit
FLOW_LABELS = {
    "PUBLISH": "real topic",
    "SCHEDULE": "SCHEDULE_TOPIC_XXXX",
    "DELIVER": "real topic\n(after delay)",
    "RETRY": "%RETRY%group",
    "DLQ": "%DLQ%group",
    "END": "end of chain",
}


@dataclass(frozen=True)
class Plot:
    """A rendered plot: a title for headings and the PNG bytes."""

    name: str
    title: str
    png: bytes

    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")

    def markdown(self) -> str:
        return f"![{self.title}]({self.data_uri()})"


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight",
                metadata={"Software": None})  # no version string: identical inputs give identical bytes
    plt.close(fig)
    return buf.getvalue()


def _empty(title: str, text: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", color="#666666")
    return _png(fig)


def retry_funnel_data(con, run_id: str) -> dict[str, list[tuple[int, int, int, int]]]:
    """Per group: (attempt, reached, succeeded, to_dlq) for attempts 0..N, from ``retry_funnel``.

    Attempt 0 is the first delivery; attempt k is the k-th retry. The table counts per origin
    topic; a group's panel sums its origin topics.
    """
    rows = con.execute(
        """
        select "group", attempt, sum(reached), sum(succeeded), sum(to_dlq)
        from retry_funnel
        where run_id = ? and attempt <= ?
        group by all order by 1, 2
        """, [run_id, FUNNEL_ATTEMPTS_MAX]).fetchall()
    result: dict[str, list[tuple[int, int, int, int]]] = {}
    for group, attempt, reached, succeeded, to_dlq in rows:
        result.setdefault(group, []).append((int(attempt), int(reached), int(succeeded), int(to_dlq)))
    return result


def retry_funnel_plot(con, run_id: str) -> Plot:
    """Messages reaching attempt k, succeeding at k, and reaching the DLQ at k, one panel per group."""
    title = "Retry funnel per group"
    data = retry_funnel_data(con, run_id)
    if not data:
        return Plot("retry_funnel", title, _empty(title, "no consumer groups in this run"))
    groups = sorted(data)
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 2.4 * len(groups)), squeeze=False)
    for ax, group in zip(axes[:, 0], groups, strict=True):
        series = data[group]
        ks = [s[0] for s in series]
        ax.bar(ks, [s[1] for s in series], color="#9ecae1", label="reached attempt")
        ax.bar(ks, [s[2] for s in series], color="#31a354", label="succeeded at attempt")
        ax.bar(ks, [s[3] for s in series], bottom=[s[2] for s in series], color="#de2d26",
               label="to DLQ at attempt")
        ax.set_yscale("symlog")
        ax.set_title(group, fontsize=10, loc="left")
        ax.set_xlabel("attempt (0 = first delivery, k = k-th retry)")
        ax.set_ylabel("messages")
        ax.set_xticks(ks)
    axes[0, 0].legend(fontsize=8, loc="upper right")
    fig.suptitle(title)
    fig.tight_layout()
    return Plot("retry_funnel", title, _png(fig))


def lateness_data(con, run_id: str) -> list[tuple[int, int, int, int, int, int]]:
    """Per delay level: (level, deliveries, p50, p99, max lateness in ms, early count), from
    ``delay_accuracy``."""
    return [tuple(r) for r in con.execute(
        """
        select delay_level, deliveries, lateness_p50_ms, lateness_p99_ms, lateness_max_ms, early_count
        from delay_accuracy where run_id = ?
        order by delay_level
        """, [run_id]).fetchall()]


def lateness_plot(con, run_id: str) -> Plot:
    """Lateness of delayed deliveries per delay level: p50, p99 and max, with early deliveries marked."""
    title = "Delay lateness per level (ms after due time)"
    rows = lateness_data(con, run_id)
    if not rows:
        return Plot("lateness", title, _empty(title, "no delayed deliveries in this run"))
    levels = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.27
    ax.bar([x - width for x in levels], [r[2] for r in rows], width, label="p50", color="#6baed6")
    ax.bar(levels, [r[3] for r in rows], width, label="p99", color="#2171b5")
    ax.bar([x + width for x in levels], [r[4] for r in rows], width, label="max", color="#08306b")
    for level, row in zip(levels, rows, strict=True):
        if row[5]:
            ax.annotate(f"{row[5]} early", (level, 0), color="#de2d26", ha="center", va="bottom")
    ax.set_xticks(levels)
    ax.set_xlabel("delay level")
    ax.set_ylabel("lateness (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return Plot("lateness", title, _png(fig))


def hop_flow_data(con, run_id: str) -> dict[tuple[str, str], int]:
    """Counts of transitions between hop kinds along every chain (shared hops included once)."""
    rows = con.execute(
        """
        with ordered as (
            select message_key, "group", hop_index, hop_kind
            from message_hops where run_id = ?
        ), chains as (
            -- a group's chain is the shared hops (group null) followed by its own hops
            select g."group", o.message_key, o.hop_index, o.hop_kind
            from ordered o
            join (select distinct message_key, "group" from ordered where "group" is not null) g
              on o.message_key = g.message_key and (o."group" = g."group" or o."group" is null)
            union all
            select null, message_key, hop_index, hop_kind from ordered o
            where not exists (select 1 from ordered x
                              where x.message_key = o.message_key and x."group" is not null)
        ), steps as (
            select hop_kind as src,
                   coalesce(lead(hop_kind) over (partition by "group", message_key order by hop_index),
                            'END') as dst
            from chains
        )
        select src, dst, count(*) from steps group by all
        """, [run_id]).fetchall()
    return {(src, dst): n for src, dst, n in rows}


def hop_flow_plot(con, run_id: str) -> Plot:
    """real topic -> SCHEDULE -> %RETRY% -> %DLQ% as boxes and arrows labelled with counts."""
    title = "Hop flow (transitions along every message's chain, per group)"
    flows = hop_flow_data(con, run_id)
    if not flows:
        return Plot("hop_flow", title, _empty(title, "no hops in this run"))
    pos = {"PUBLISH": (0.0, 0.5), "SCHEDULE": (1.3, 0.9), "DELIVER": (2.8, 0.9),
           "RETRY": (2.2, 0.1), "DLQ": (4.0, 0.1), "END": (4.2, 0.9)}
    fig, ax = plt.subplots(figsize=(11, 4.4))
    ax.set_xlim(-0.5, 4.7)
    ax.set_ylim(-0.1, 1.1)
    ax.axis("off")
    totals = {}
    for (src, _dst), n in flows.items():
        totals[src] = totals.get(src, 0) + n
    for node, (x, y) in pos.items():
        label = FLOW_LABELS[node]
        count = totals.get(node)
        text = f"{label}\n{count:,}" if count is not None and node != "END" else label
        ax.text(x, y, text, ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round", "fc": "#f0f0f0", "ec": "#636363"})
    biggest = max(flows.values())
    for (src, dst), n in sorted(flows.items()):
        if src not in pos or dst not in pos:
            continue
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        # Opposite directions between two nodes bend to opposite sides, so they never overlap.
        rad = 0.3 if (src, dst) in {("SCHEDULE", "RETRY"), ("RETRY", "SCHEDULE")} else 0.1
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops={"arrowstyle": "-|>", "lw": 0.8 + 3.0 * n / biggest, "color": "#3182bd",
                                "connectionstyle": f"arc3,rad={rad}", "shrinkA": 28, "shrinkB": 28})
        # The label sits near the curve's midpoint: the chord's midpoint pushed along its normal.
        mx, my = (x0 + x1) / 2 + rad / 2 * (y1 - y0) * 3.0, (y0 + y1) / 2 - rad / 2 * (x1 - x0) / 3.0
        ax.text(mx, my, f"{n:,}", fontsize=8, color="#08519c", ha="center",
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none"})
    ax.set_title(title)
    return Plot("hop_flow", title, _png(fig))


# Colours of the transactions plot, by outcome (transactions.transaction_state).
TRANSACTION_COLORS = {"COMMITTED": "#31a354", "ROLLED_BACK": "#756bb1", "DISCARDED": "#de2d26",
                      "UNDECIDED": "#969696"}


def transactions_data(con, run_id: str) -> list[tuple[str, int, int | None]]:
    """Per transactional message: (outcome, checks, ms from its half to the decision), from
    ``transactions`` (no decision time for an undecided one)."""
    return [(r[0], int(r[1] or 0), r[2]) for r in con.execute(
        """
        select transaction_state, transaction_checks, decision_ms
        from transactions where run_id = ?
        order by transaction_state, transaction_checks, decision_ms, message_key
        """, [run_id]).fetchall()]


def transactions_plot(con, run_id: str) -> Plot:
    """Transactional messages: how many checks each took and how long from its half to the decision,
    one colour per outcome (undecided ones at the right edge, at the store's end)."""
    title = "Transactions: checks and time from half to decision"
    rows = transactions_data(con, run_id)
    if not rows:
        return Plot("transactions", title, _empty(title, "no transactional messages in this run"))
    decided = [r[2] for r in rows if r[2] is not None]
    right = (max(decided) if decided else 0) / 1000 * 1.1 + 1
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for state, color in TRANSACTION_COLORS.items():
        mine = [r for r in rows if r[0] == state]
        if not mine:
            continue
        xs = [r[2] / 1000 if r[2] is not None else right for r in mine]
        ax.scatter(xs, [r[1] for r in mine], color=color, alpha=0.6, label=f"{state.lower()} ({len(mine)})")
    ax.set_xlabel("seconds from the half to the decision (undecided: at the right edge)")
    ax.set_ylabel("checks by the broker")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return Plot("transactions", title, _png(fig))


def all_plots(con, run_id: str) -> list[Plot]:
    """Every plot of one run, in the order the report shows them (the transactions plot for a run
    with transactional messages)."""
    plots = [hop_flow_plot(con, run_id), retry_funnel_plot(con, run_id), lateness_plot(con, run_id)]
    if transactions_data(con, run_id):
        plots.append(transactions_plot(con, run_id))
    return plots
