"""``retry-audit conformance``: real RocketMQ brokers and clients vs the audit and the model.

Exit 0 only when the audit agrees with the real clients on every message and the model's run
differs from the real one only in documented ways; 1 otherwise (the report is still written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from broker_core.errors import RetryAuditError


def _say(args, text: str) -> None:
    if not getattr(args, "quiet", False):
        print(text, file=sys.stderr, flush=True)


def format_summary(report: dict, out: Path) -> str:
    lvc, mvr = report["lineage_vs_clients"], report["model_vs_real"]
    t = report["timings"]
    lines = [
        f"conformance {report['scenario']} on RocketMQ {report['rocketmq_version']} "
        f"({', '.join(report['brokers'])}) -> {out}",
        f"  audit vs real clients: {lvc['messages']} messages, {lvc['agree']} agree, {lvc['disagree']} disagree"
        f" ({lvc['pairs_compared']} message/group pairs, {lvc['delayed_hops_checked']} delayed hops checked)",
        # Messages whose difference from the clients' log a documented cause explains (agreeing).
        *(f"    explained {kind}: {count}" for kind, count in sorted(lvc.get("explained", {}).items())),
        f"  model vs real broker:  {mvr['messages']} messages, {mvr['identical']} identical, "
        f"{mvr['explained']} explained, {mvr['unexplained']} unexplained "
        f"({mvr['hops']['model']} model hops, {mvr['hops']['real']} real hops)",
    ]
    tvp = report.get("transactions_vs_producers")
    if tvp and tvp["messages"]:
        states = ", ".join(f"{k} {v}" for k, v in tvp["audit_states"].items())
        lines.append(f"  audit vs producers' transaction decisions: {tvp['messages']} messages, "
                     f"{tvp['agree']} agree, {tvp['disagree']} disagree ({states})")
    tvc = report.get("trace_vs_clients")
    if tvc:
        pairs = ", ".join(f"{kind.replace('_', ' ')} {tvc[kind]['agree']}/{tvc[kind]['driver_events']} agree "
                          f"({tvc[kind]['disagree']} disagree, {tvc[kind]['missing']} missing)"
                          for kind in ("sends", "consumes", "transaction_decisions"))
        lines.append(f"  client trace vs real clients: {sum(tvc['records'].values())} records; {pairs}")
    if mvr.get("proxy_records"):
        lines.append(f"    the proxy's own records, left out: {mvr['proxy_records']}")
    for kind, info in mvr["explained_kinds"].items():
        lines.append(f"    explained {kind}: {info['count']}")
    for kind, count in mvr["unexplained_kinds"].items():
        lines.append(f"    UNEXPLAINED {kind}: {count}")
    dup = report.get("duplicates")
    if dup:
        lines.append(f"  duplicate consumes: model {dup['model']}, real {dup['real']}")
    for cut in report.get("rejoin_cuts", []):
        lines.append(f"  {cut['node']} cut its log from {cut['from_offset']:,} to {cut['to_offset']:,} "
                     "as it rejoined (records its slave never had)")
    if report.get("revives_lost"):
        lines.append(f"  revives the brokers dropped (anomaly REVIVE_LOST): {len(report['revives_lost'])}, "
                     f"e.g. {report['revives_lost'][0]['message_key']} ({report['revives_lost'][0]['group']})")
    for f in report.get("faults", []):
        when = f"at {f['at_ms'] / 1000:.1f} s" if 'at_ms' in f else f"{f['after_kill_ms'] / 1000:.1f} s after the kill"
        lines.append(f"  fault {when}: {f['kind']} {f.get('consumer') or f.get('broker')}{' ' + f['node'] if 'node' in f else ''}")
    for f in report.get("faults_not_played", []):
        lines.append(f"  NOT PLAYED at {f['at_ms'] / 1000:.1f} s (the clients had stopped): "
                     f"{f['kind']} {f.get('consumer') or f.get('broker')}")
    failed = [f"{run}: {name}" for run, checks in report["checks"].items()
              for name, c in checks.items() if c["blocking"] and not c["passed"]]
    lines.append(f"  blocking checks: {'all passed' if not failed else 'FAILED ' + '; '.join(failed)}")
    lines.append("  seconds: " + ", ".join(f"{k.removesuffix('_s')} {v}" for k, v in t.items()
                                          if not isinstance(v, dict)))
    rss = report.get("jvm_rss_mib", {})
    if rss:
        lines.append("  JVM resident MiB: " + ", ".join(f"{k} {v}" for k, v in sorted(rss.items())))
    return "\n".join(lines)


def verdict_failures(report: dict) -> list[str]:
    """Why a report is not a pass (empty when it is)."""
    out = []
    if report["lineage_vs_clients"]["disagree"]:
        out.append(f"{report['lineage_vs_clients']['disagree']} message(s) where the audit and the real clients disagree")
    tvp = report.get("transactions_vs_producers", {})
    if tvp.get("disagree"):
        out.append(f"{tvp['disagree']} transactional message(s) whose audited state is not what the producer decided")
    if report["model_vs_real"]["unexplained"]:
        out.append(f"{report['model_vs_real']['unexplained']} message(s) with unexplained model/real differences")
    for kind, pair in (report.get("trace_vs_clients") or {}).items():
        # Missing records are the trace's loss; a record that says otherwise than the client is not.
        if isinstance(pair, dict) and pair.get("disagree"):
            out.append(f"{pair['disagree']} traced {kind.replace('_', ' ')} the real clients' log says otherwise")
    errors = report.get("driver", {}).get("recall_errors")
    if errors:
        out.append(f"the real clients' recalls failed: {errors[0]}")
    for run, checks in report["checks"].items():
        for name, c in checks.items():
            if c["blocking"] and not c["passed"]:
                out.append(f"blocking check {name} failed on {run}")
    return out


def explain_failures(report: dict, limit: int = 6000) -> str:
    """The failures of a report and the evidence of each, short enough to survive a clipped log:
    the failures' lines first, then the first examples and differences, then each failed blocking
    check's verdict and first violation, the faults played, and last the trails of the first
    disagreement and of each failed check's first violation (what the store and the clients' log
    hold of that message), each up to half the limit."""
    parts = ["; ".join(verdict_failures(report)) or "no failure"]
    trails = []
    for section, key in (("lineage_vs_clients", "examples"), ("transactions_vs_producers", "examples"),
                         ("model_vs_real", "differences")):
        found = (report.get(section) or {}).get(key) or []
        if found:
            shown = [{k: v for k, v in f.items() if k != "trail"} for f in found[:3]]
            parts.append(f"{section} {key}: " + json.dumps(shown, default=str))
            if "trail" in found[0]:
                # The first one as the store and the clients' log saw it: enough to read a
                # failure from the log alone, where the run's own files are gone.
                trails.append(f"{section} first example's trail: " + json.dumps(found[0]["trail"], default=str))
    for run, checks in report["checks"].items():
        for name, c in checks.items():
            if c["blocking"] and not c["passed"]:
                parts.append(f"{run}.{name}: {c['verdict']}, {c['violations']} violation(s), first "
                             + json.dumps(c.get("first"), default=str))
                if c.get("trail"):
                    trails.append(f"{run}.{name} first violation's trail: " + json.dumps(c["trail"], default=str))
    parts.append("faults: " + json.dumps(report.get("faults"), default=str))
    return "\n".join([p[:limit // 4] for p in parts] + [t[:limit // 2] for t in trails])[:limit]


def conformance(args) -> int:
    from conformance.run import run_conformance

    out = Path(args.out)
    from conformance.play import Outage

    outages = tuple(Outage.parse(text) for text in args.broker_outage)
    report = run_conformance(args.rocketmq, args.scenario, out, log=lambda m: _say(args, m), outages=outages,
                             dledger_nodes=getattr(args, "dledger_nodes", 0),
                             controller_nodes=getattr(args, "controller_nodes", 0),
                             client_trace=getattr(args, "client_trace", False))
    print(format_summary(report, out))
    failures = verdict_failures(report)
    if failures:
        raise RetryAuditError("; ".join(failures), where=str(out / "report.json"),
                              hint="the report's examples and differences name each message")
    return 0
