"""Each check passes on the clean hand-built run and fails on data broken on purpose."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from assets import checks as c
from assets.audit import build_audit_tables
from assets.warehouse import run_views

sys.path.insert(0, str(Path(__file__).parent))
from tiny_runs import DLQ, RUN, ts, write_tiny_run  # noqa: E402


def outcomes(tmp_path, change=None):
    """Every check's outcome on the tiny run after ``change``, by check name."""
    con = run_views(write_tiny_run(tmp_path / "run", change))
    build_audit_tables(con)
    try:
        return {o.check.name: o for o in c.run_checks(con, run_id=RUN)}
    finally:
        con.close()


def failing(tmp_path, change):
    return {name for name, o in outcomes(tmp_path, change).items() if not o.passed}


def test_clean_run_passes_every_invariant(tmp_path):
    """On clean data every blocking invariant passes."""
    result = outcomes(tmp_path)
    assert all(result[k.name].passed for k in c.INVARIANTS), {
        k: o.examples for k, o in result.items() if not o.passed}


def test_every_check_has_a_distinct_name_and_severity():
    """Invariants are ERROR, drifts WARN, and names are unique."""
    assert {k.severity for k in c.INVARIANTS} == {c.ERROR}
    assert {k.severity for k in c.DRIFTS} == {c.WARN}
    assert len(c.CHECKS_BY_NAME) == len(c.ALL_CHECKS)


def _swap_hop_kinds(tables):
    hops = [h for h in tables["message_hops"] if h["message_key"] == "UB" and h["group"]]
    hops[0]["hop_kind"], hops[1]["hop_kind"] = hops[1]["hop_kind"], hops[0]["hop_kind"]


def test_hop_grammar_fails_on_retry_before_schedule(tmp_path):
    """A RETRY hop before its SCHEDULE breaks real -> (SCHEDULE -> RETRY)* -> DLQ?."""
    result = outcomes(tmp_path, _swap_hop_kinds)[c.HOP_GRAMMAR]
    assert not result.passed and result.violations == 1
    assert result.examples[0]["message_key"] == "UB"
    assert "RETRY > SCHEDULE > DLQ is not" in result.examples[0]["detail"]


def test_hop_grammar_accepts_a_dlq_through_the_schedule(tmp_path):
    """A client-side DLQ send keeps its DELAY in 4.9.4, so SCHEDULE -> DLQ ends a valid chain."""
    def via_schedule(tables):
        hops = [h for h in tables["message_hops"] if h["message_key"] == "UB" and h["group"]]
        hops[1]["hop_kind"], hops[1]["topic"] = "SCHEDULE", "SCHEDULE_TOPIC_XXXX"
        tables["message_hops"].remove(hops[0])
        for h in hops[1:]:
            h["hop_index"] -= 1
        tables["commitlog"] = [r for r in tables["commitlog"] if r["phys_offset"] != hops[0]["phys_offset"]]
    assert c.HOP_GRAMMAR not in failing(tmp_path, via_schedule)


def test_dlq_after_a_client_send_counts_the_reconsume_time_property(tmp_path):
    """On a client's send to %RETRY%, RECONSUME_TIME (not the binary count - 1) is the reconsume count."""
    def client_send(tables):
        dlq = next(r for r in tables["commitlog"] if r["topic"] == DLQ)
        dlq["reconsume_times"] = 1
        dlq["properties"] = [*dlq["properties"], ("RECONSUME_TIME", "1")]
    assert c.DLQ_AFTER_MAX_RETRIES not in failing(tmp_path, client_send)

    def too_early(tables):
        client_send(tables)
        dlq = next(r for r in tables["commitlog"] if r["topic"] == DLQ)
        dlq["properties"] = [*dlq["properties"][:-1], ("RECONSUME_TIME", "0")]
    assert c.DLQ_AFTER_MAX_RETRIES in failing(tmp_path, too_early)


def _second_sendback(tables):
    """UB delivered twice from its PUBLISH record: two send-backs with one ORIGIN_MESSAGE_ID interleave."""
    cl = tables["commitlog"]
    sched, retry = (next(r for r in cl if r["phys_offset"] == p) for p in (200, 300))
    cl.append(dict(sched, phys_offset=250, msg_id="0A00000100002A9F00000000000000FA"))
    cl.append(dict(retry, phys_offset=350, msg_id="0A00000100002A9F000000000000015E"))
    hops = tables["message_hops"]
    for h in hops:
        if h["message_key"] == "UB" and h["group"]:
            h["hop_index"] = {1: 1, 2: 3, 3: 5}[h["hop_index"]]
    base = {h["hop_index"]: h for h in hops if h["message_key"] == "UB" and h["group"]}
    hops.append(dict(base[1], hop_index=2, phys_offset=250))
    hops.append(dict(base[3], hop_index=4, phys_offset=350))
    next(r for r in tables["message_lineage"] if r["message_key"] == "UB")["hops"] = 6


def test_interleaved_send_backs_pass_where_a_redelivery_explains_them(tmp_path):
    """S S R R DLQ under one origin is two interleaved retries: valid after a crash."""
    assert c.HOP_GRAMMAR not in failing(tmp_path, _second_sendback)


def test_interleaved_send_backs_fail_without_a_crash_or_redelivery(tmp_path):
    """Without a crash or a repeated delivery, one branch must be one strict sequence."""
    def no_crash(tables):
        _second_sendback(tables)
        tables["faults"].clear()
        tables["produced"] = [p for p in tables["produced"] if p["uniq_key"] != "UD"]
        tables["message_lineage"] = [r for r in tables["message_lineage"] if r["message_key"] != "UD"]
    result = outcomes(tmp_path, no_crash)[c.HOP_GRAMMAR]
    assert result.violations == 1 and "SCHEDULE > SCHEDULE > RETRY > RETRY > DLQ" in result.examples[0]["detail"]


def _imported(tables):
    """The tiny run as an import would have it: a store, with no faults and no client tables."""
    tables["runs"][0]["source"] = "import"
    tables["faults"].clear()
    tables["produced"] = [p for p in tables["produced"] if p["uniq_key"] != "UD"]
    tables["message_lineage"] = [r for r in tables["message_lineage"] if r["message_key"] != "UD"]
    tables["consume_attempts"].clear()


def test_interleaved_send_backs_pass_in_an_imported_store(tmp_path):
    """A store does not record its consumers' deliveries: a record sent back twice (a consumer
    killed with it in flight, as a real 4.9.4 broker showed) is judged as after a crash."""
    def imported(tables):
        _second_sendback(tables)
        _imported(tables)
    assert c.HOP_GRAMMAR not in failing(tmp_path, imported)


def _reput(tables, **retry_changes):
    """UB's SCHEDULE record delivered twice: a second RETRY copy after the first (phys 350)."""
    cl = tables["commitlog"]
    retry = next(r for r in cl if r["phys_offset"] == 300)
    cl.append(dict(retry, phys_offset=350, msg_id="0A00000100002A9F000000000000015E",
                   store_ts=ts(10_025), **retry_changes))
    hops = tables["message_hops"]
    dlq = next(h for h in hops if h["message_key"] == "UB" and h["hop_kind"] == "DLQ")
    base = next(h for h in hops if h["message_key"] == "UB" and h["hop_kind"] == "RETRY")
    hops.append(dict(base, hop_index=3, phys_offset=350, store_ts=ts(10_025),
                     **{k: v for k, v in retry_changes.items() if k in base}))
    dlq["hop_index"] = 4
    next(r for r in tables["message_lineage"] if r["message_key"] == "UB")["hops"] = 5


def test_a_schedule_record_re_put_twice_passes_only_where_the_broker_may_have_crashed(tmp_path):
    """S R R (the same level and reconsume times) is a schedule record re-put by a restarted broker:
    valid in an imported store and after a crash, not in a simulation without one; a second RETRY
    with another reconsume count has no SCHEDULE before it anywhere."""
    def imported(tables):
        _reput(tables)
        _imported(tables)
    assert c.HOP_GRAMMAR not in failing(tmp_path / "imported", imported)
    assert c.HOP_GRAMMAR not in failing(tmp_path / "crashed", _reput)

    def no_crash(tables):
        _reput(tables)
        tables["faults"].clear()
        tables["produced"] = [p for p in tables["produced"] if p["uniq_key"] != "UD"]
        tables["message_lineage"] = [r for r in tables["message_lineage"] if r["message_key"] != "UD"]
    result = outcomes(tmp_path / "simulated", no_crash)[c.HOP_GRAMMAR]
    assert result.violations == 1 and "SCHEDULE > RETRY > RETRY > DLQ" in result.examples[0]["detail"]

    def not_a_copy(tables):
        _reput(tables, reconsume_times=2)
        _imported(tables)
    result = outcomes(tmp_path / "other", not_a_copy)[c.HOP_GRAMMAR]
    assert result.violations == 1 and "SCHEDULE > RETRY > RETRY > DLQ" in result.examples[0]["detail"]


def test_origin_may_name_a_retry_record_left_without_one_by_a_client_fallback(tmp_path):
    """A 4.9.x client's fallback send carries no ORIGIN_MESSAGE_ID (it replaces the properties it
    had just set), so the broker's next send-back names the RETRY record it re-puts; naming a RETRY
    record that carries an ORIGIN_MESSAGE_ID of its own is still a foreign origin."""
    def fallback(tables):
        for rec in tables["commitlog"]:
            if rec["phys_offset"] in (200, 300):
                rec["origin_msg_id"] = None
            elif rec["phys_offset"] == 400:
                rec["origin_msg_id"] = "0A00000100002A9F000000000000012C"  # UB's RETRY record, phys 300
    assert c.ORIGIN_STABLE not in failing(tmp_path / "fallback", fallback)

    def retry_with_its_own(tables):
        for rec in tables["commitlog"]:
            if rec["phys_offset"] == 400:
                rec["origin_msg_id"] = "0A00000100002A9F000000000000012C"
    result = outcomes(tmp_path / "own", retry_with_its_own)[c.ORIGIN_STABLE]
    assert result.violations == 1 and "012C is neither the UNIQ_KEY" in result.examples[0]["detail"]


def test_origin_message_id_must_name_the_message(tmp_path):
    """An ORIGIN_MESSAGE_ID that is neither the UNIQ_KEY nor a real record of the message fails."""
    def foreign(tables):
        for rec in tables["commitlog"]:
            if rec["uniq_key"] == "UB" and rec["origin_msg_id"]:
                rec["origin_msg_id"] = "0A00000100002A9F0000000000000000"  # UA's record
    result = outcomes(tmp_path, foreign)[c.ORIGIN_STABLE]
    assert result.violations == 1 and "neither the UNIQ_KEY" in result.examples[0]["detail"]


def test_hop_grammar_fails_on_a_gap_in_hop_index(tmp_path):
    """hop_index must count 0..n-1 along a chain."""
    def gap(tables):
        tables["message_hops"][-1]["hop_index"] = 5
    assert c.HOP_GRAMMAR in failing(tmp_path, gap)


def test_unexplained_loss_fails_without_a_crash(tmp_path):
    """A SEND_OK message missing from the commit log with no broker crash is an unexplained loss."""
    def no_crash(tables):
        tables["faults"].clear()
    result = outcomes(tmp_path, no_crash)[c.NO_UNEXPLAINED_LOSS]
    assert result.violations == 1 and result.examples[0]["message_key"] == "UD"


def test_loss_under_sync_flush_is_not_explained(tmp_path):
    """A crash under sync flush loses nothing acknowledged, so it explains no loss."""
    def sync(tables):
        tables["run.json"]["flush"] = "sync"
    assert c.NO_UNEXPLAINED_LOSS in failing(tmp_path, sync)


def test_loss_before_the_send_is_not_explained(tmp_path):
    """A crash before the send cannot have lost the message."""
    def early(tables):
        tables["faults"][0]["ts"] = ts(1)
    assert c.NO_UNEXPLAINED_LOSS in failing(tmp_path, early)


def test_dlq_before_max_retries_fails(tmp_path):
    """A message in the DLQ after fewer reconsumes than the maximum breaks the retry rule."""
    def raise_max(tables):
        for rec in tables["commitlog"]:
            if rec["max_reconsume_times"] is not None:
                rec["max_reconsume_times"] = 16
    result = outcomes(tmp_path, raise_max)[c.DLQ_AFTER_MAX_RETRIES]
    assert result.violations == 1 and "maximum is 16" in result.examples[0]["detail"]


def test_dlq_before_the_configured_max_fails(tmp_path):
    """Without a MAX_RECONSUME_TIMES property the group's configured maximum decides."""
    def configured(tables):
        for rec in tables["commitlog"]:
            rec["max_reconsume_times"] = None
        tables["run.json"]["groups"][0]["max_reconsume_times"] = 3
    result = outcomes(tmp_path, configured)[c.DLQ_AFTER_MAX_RETRIES]
    assert result.violations == 1 and "maximum is 3" in result.examples[0]["detail"]


def test_dlq_of_an_import_is_judged_against_its_peers(tmp_path):
    """Without any configured maximum, a DLQ record with fewer reconsumes than its group's others fails."""
    def imported(tables):
        tables["run.json"] = None
        for rec in tables["commitlog"]:
            rec["max_reconsume_times"] = None
        dlq = next(r for r in tables["commitlog"] if r["topic"] == DLQ)
        tables["commitlog"].append(dict(dlq, phys_offset=700, uniq_key="UE", reconsume_times=1,
                                        msg_id="0A00000100002A9F00000000000002BC"))
        tables["message_hops"].append({**tables["message_hops"][4], "message_key": "UE",
                                       "hop_index": 0, "phys_offset": 700})
    result = outcomes(tmp_path, imported)[c.DLQ_AFTER_MAX_RETRIES]
    assert result.violations == 1 and result.examples[0]["message_key"] == "UE"


def test_early_delivery_fails(tmp_path):
    """A delivery before the due time (negative lateness) fails."""
    def early(tables):
        row = tables["schedule_deliveries"][0]
        row["delivered_ts"], row["lateness_ms"] = ts(10_015), -5
    assert failing(tmp_path, early) >= {c.NO_EARLY_DELIVERY}


def test_origin_message_id_change_fails(tmp_path):
    """An ORIGIN_MESSAGE_ID changing to a value that is not the message's own fails."""
    def change(tables):
        rec = next(r for r in tables["commitlog"] if r["topic"] == DLQ)
        rec["origin_msg_id"] = "FFFF"
    result = outcomes(tmp_path, change)
    assert result[c.ORIGIN_STABLE].violations == 1 and "FFFF" in result[c.ORIGIN_STABLE].examples[0]["detail"]
    # The DLQ record now starts a branch of its own that holds only a DLQ: still valid grammar.
    assert result[c.HOP_GRAMMAR].passed


def test_retry_topic_change_fails(tmp_path):
    """RETRY_TOPIC changing along a chain fails."""
    def change(tables):
        next(r for r in tables["commitlog"] if r["topic"] == DLQ)["retry_topic"] = "OtherTopic"
    assert c.ORIGIN_STABLE in failing(tmp_path, change)


@pytest.mark.parametrize("breakage", ["drop_hop", "duplicate_hop", "phantom_hop"])
def test_lineage_must_match_the_commitlog(tmp_path, breakage):
    """Every commit-log record is in exactly one hop row, and no hop row lacks a record."""
    def change(tables):
        hops = tables["message_hops"]
        if breakage == "drop_hop":
            tables["commitlog"].append(dict(tables["commitlog"][0], phys_offset=9_000, uniq_key="UZ"))
        elif breakage == "duplicate_hop":
            hops.append(dict(hops[0], group="g2"))
        else:
            hops.append(dict(hops[0], message_key="UZ", phys_offset=9_999))
    result = outcomes(tmp_path, change)[c.LINEAGE_MATCHES_COMMITLOG]
    assert not result.passed


def test_duplicate_rate_warns_above_the_threshold(tmp_path):
    """One duplicate in four messages is above the duplicate-rate limit: a WARN, not an ERROR."""
    result = outcomes(tmp_path)[c.DUPLICATE_RATE]
    assert not result.passed and not result.blocking


def test_duplicate_rate_passes_without_duplicates(tmp_path):
    """Without a second successful consume the duplicate rate is zero."""
    def single(tables):
        tables["consume_attempts"].pop()
    assert c.DUPLICATE_RATE not in failing(tmp_path, single)


def test_lateness_p99_warns_when_a_level_stalls(tmp_path):
    """A level whose p99 lateness is above the limit warns."""
    def stall(tables):
        row = tables["schedule_deliveries"][1]
        row["lateness_ms"] = c.LATENESS_P99_MS_MAX + 1
    result = outcomes(tmp_path, stall)[c.LATENESS_P99]
    assert not result.passed and result.violations == 1


def test_evidence_lists_counts_and_first_keys(tmp_path):
    """A failing check's metadata holds the violation count and the first offending keys."""
    meta = outcomes(tmp_path, _swap_hop_kinds)[c.HOP_GRAMMAR].metadata()
    assert meta["violations"] == 1 and meta["first_offending_keys"] == "UB"


def test_per_run_verdicts_match_checking_each_run(tmp_path):
    """run_checks_per_run (one query per check) gives each run the verdict run_checks gives it alone."""
    from assets.warehouse import build_warehouse, open_read_only

    def broken(tables):
        _swap_hop_kinds(tables)
        tables["message_hops"].append(dict(tables["message_hops"][0], message_key="UZ", phys_offset=9_999))

    dirs = [write_tiny_run(tmp_path / "a"), write_tiny_run(tmp_path / "b", broken, run_id="tiny-2")]
    summary = build_warehouse(dirs, tmp_path / "w.duckdb")
    con = open_read_only(summary.db_path)
    try:
        together = c.run_checks_per_run(con, summary.run_ids)
        alone = {r: c.run_checks(con, run_id=r) for r in summary.run_ids}
    finally:
        con.close()
    assert sorted(together) == sorted(summary.run_ids) == ["tiny", "tiny-2"]
    for run_id in summary.run_ids:
        assert [(o.check.name, o.violations, o.examples) for o in together[run_id]] == \
               [(o.check.name, o.violations, o.examples) for o in alone[run_id]]
    failed = {o.check.name for o in together["tiny-2"] if not o.passed}
    assert {c.HOP_GRAMMAR, c.LINEAGE_MATCHES_COMMITLOG} <= failed
    assert all(o.passed for o in together["tiny"] if o.check in c.INVARIANTS)


def _shared_hop_details(tmp_path, change):
    """hop_grammar's 'shared hops' verdicts for UC (a delayed publish: SCHEDULE, then DELIVER)."""
    result = outcomes(tmp_path, change)[c.HOP_GRAMMAR]
    return [e["detail"] for e in result.examples
            if e["message_key"] == "UC" and e["detail"].startswith("shared hops")]


def _uc_shared(tables):
    hops = {h["hop_kind"]: h for h in tables["message_hops"] if h["message_key"] == "UC" and h["group"] is None}
    return hops["SCHEDULE"], hops["DELIVER"]


@pytest.mark.parametrize("case, expected", [
    # hop_index alone orders them.
    ("deliver index first", ["shared hops DELIVER > SCHEDULE are not PUBLISH, SCHEDULE -> DELIVER, "
        "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"]),
    # A tie on hop_index: store_ts orders them.
    ("tie, schedule stored first", []),
    ("tie, deliver stored first", ["shared hops DELIVER > SCHEDULE are not PUBLISH, SCHEDULE -> DELIVER, "
        "TIMER+ -> DELIVER or HALF+ -> DISCARD? -> PUBLISH"]),
])
def test_hop_grammar_orders_a_delayed_publish_by_index_then_store_time(tmp_path, case, expected):
    """SCHEDULE -> DELIVER must come in hop order (hop_index, store_ts, phys_offset)."""
    def change(tables):
        schedule, deliver = _uc_shared(tables)
        if case == "deliver index first":
            schedule["hop_index"], deliver["hop_index"] = 1, 0
        else:
            deliver["hop_index"] = schedule["hop_index"]
            if case == "tie, deliver stored first":
                deliver["store_ts"] = schedule["store_ts"] - (deliver["store_ts"] - schedule["store_ts"])
    assert _shared_hop_details(tmp_path, change) == expected


# --- an import whose oldest commit-log files retention deleted ----------------------------------

def _renumber(tables):
    """hop_index 0..n-1 along every chain (shared hops first) and each lineage row's hop count, as
    the lineage writes them for the hops that are left."""
    chains: dict = {}
    for h in tables["message_hops"]:
        chains.setdefault((h["message_key"], h["group"]), []).append(h)
    for (key, group), hops in sorted(chains.items(), key=lambda kv: kv[0][1] is not None):
        start = 0 if group is None else len(chains.get((key, None), []))
        for i, h in enumerate(sorted(hops, key=lambda h: (h["store_ts"], h["phys_offset"])), start):
            h["hop_index"] = i
    for row in tables["message_lineage"]:
        if row["final_state"] != "LOST":
            row["hops"] = (len(chains.get((row["message_key"], None), []))
                           + len(chains.get((row["message_key"], row["group"]), [])))


def _drop_record(tables, phys):
    """The record at ``phys`` and its hop row are gone (renumbered as the lineage would)."""
    tables["commitlog"] = [r for r in tables["commitlog"] if r["phys_offset"] != phys]
    tables["message_hops"] = [h for h in tables["message_hops"] if h["phys_offset"] != phys]
    _renumber(tables)


def _cut_at(first_offset):
    """The tiny run as an import whose commit log starts at ``first_offset``: every record below
    was in a file retention deleted, a message left without records has no lineage row, and the
    lineage marks the chains that lost a record truncated. An import has no deliveries, sends,
    faults or manifest."""
    def cut(tables):
        gone = {r["phys_offset"] for r in tables["commitlog"] if r["phys_offset"] < first_offset}
        lost = {h["message_key"] for h in tables["message_hops"] if h["phys_offset"] in gone}
        for phys in sorted(gone):
            _drop_record(tables, phys)
        left = {h["message_key"] for h in tables["message_hops"]}
        tables["message_lineage"] = [r for r in tables["message_lineage"] if r["message_key"] in left]
        for row in tables["message_lineage"]:
            row["truncated"] = row["message_key"] in lost
        for table in ("consume_attempts", "schedule_deliveries", "faults", "produced"):
            tables[table] = []
        tables["run.json"] = None
        tables["runs"][0].update(scenario=None, seed=None, source="import", first_offset=first_offset)
    return cut


def _two_retries(tables):
    """UB retried twice before the DLQ: P S R S R DLQ (records 100, 200, 300, 320, 340, 400)."""
    cl = tables["commitlog"]
    sched, retry, dlq = (next(r for r in cl if r["phys_offset"] == p) for p in (200, 300, 400))
    cl.append(dict(sched, phys_offset=320, msg_id="0A00000100002A9F0000000000000140", store_ts=ts(10_024),
                   reconsume_times=2, delay_level=4, queue_id=3))
    cl.append(dict(retry, phys_offset=340, msg_id="0A00000100002A9F0000000000000154", store_ts=ts(10_026),
                   reconsume_times=2, delay_level=4))
    dlq["reconsume_times"] = 3
    # Two retries before the DLQ: the client's maximum (carried on every record) is 2.
    for rec in cl:
        if rec["uniq_key"] == "UB" and rec["max_reconsume_times"] is not None:
            rec["max_reconsume_times"] = 2
    hops = tables["message_hops"]
    base = {h["phys_offset"]: h for h in hops}
    hops.append(dict(base[200], phys_offset=320, store_ts=ts(10_024), reconsume_times=2, delay_level=4))
    hops.append(dict(base[300], phys_offset=340, store_ts=ts(10_026), reconsume_times=2, delay_level=4))
    _renumber(tables)


def _then(*changes):
    def change(tables):
        for step in changes:
            step(tables)
    return change


@pytest.mark.parametrize("first_offset", [150, 550], ids=["publish-gone", "schedule-of-a-delayed-publish-gone"])
def test_a_head_retention_deleted_passes_every_invariant(tmp_path, first_offset):
    """A chain that starts after its first hop, in a run whose log starts there, breaks no invariant:
    group hops with no PUBLISH before them, an ORIGIN_MESSAGE_ID below the first offset, a DELIVER
    whose SCHEDULE is gone."""
    result = outcomes(tmp_path, _then(_two_retries, _cut_at(first_offset)))
    assert all(result[k.name].passed for k in c.INVARIANTS), {
        k: o.examples for k, o in result.items() if not o.passed}


def test_a_missing_head_still_fails_where_the_log_starts_at_zero(tmp_path):
    """In a run whose commit log starts at 0 (a simulation) a chain without its head is broken,
    whatever the lineage's truncated says."""
    def simulated(tables):
        _cut_at(150)(tables)
        tables["runs"][0].update(source="simulation", first_offset=None)
    result = outcomes(tmp_path, simulated)
    details = {e["detail"] for e in result[c.HOP_GRAMMAR].examples if e["message_key"] == "UB"}
    assert details == {"group hops without a real record before them",
                       "truncated, but its first hop is in the commit log"}
    assert not result[c.ORIGIN_STABLE].passed


@pytest.mark.parametrize("phys", [300, 320], ids=["middle", "end"])
def test_a_record_missing_inside_a_truncated_chain_still_fails(tmp_path, phys):
    """Only the head of a truncated chain is forgiven: losing its first RETRY (S S R DLQ: the second
    SCHEDULE has no RETRY to be sent back from) or the SCHEDULE before its last RETRY (S R R DLQ: the
    second RETRY, of another reconsume count, is no copy of the first) breaks the grammar, even
    judged as an import (an interleaving of sequences, since a store does not show its deliveries)."""
    result = outcomes(tmp_path, _then(_two_retries, _cut_at(150), lambda t: _drop_record(t, phys)))
    hop_grammar = result[c.HOP_GRAMMAR]
    assert [(e["message_key"], e["detail"].split(": ")[1]) for e in hop_grammar.examples] == [
        ("UB", {300: "SCHEDULE > SCHEDULE > RETRY > DLQ", 320: "SCHEDULE > RETRY > RETRY > DLQ"}[phys]
         + " is not (SCHEDULE -> RETRY)* -> DLQ? nor an interleaving of such sequences")]


def test_truncated_must_say_what_the_hops_say(tmp_path):
    """A chain that lost its head must be marked truncated, and one that starts at its first hop must not."""
    def swapped(tables):
        _cut_at(150)(tables)
        for row in tables["message_lineage"]:
            if row["message_key"] in ("UB", "UC"):
                row["truncated"] = not row["truncated"]
    result = outcomes(tmp_path, swapped)[c.HOP_GRAMMAR]
    assert {(e["message_key"], e["detail"]) for e in result.examples} == {
        ("UB", "not truncated, but its first hops are before the commit log's first offset"),
        ("UC", "truncated, but its first hop is in the commit log")}


def test_an_origin_is_forgiven_only_below_the_first_offset(tmp_path):
    """An ORIGIN_MESSAGE_ID below the first offset names a deleted record; one at or past it must
    still name a real record of the message."""
    assert outcomes(tmp_path / "below", _cut_at(150))[c.ORIGIN_STABLE].passed

    def inside(tables):
        _cut_at(150)(tables)
        for rec in tables["commitlog"]:
            if rec["uniq_key"] == "UB":
                rec["origin_msg_id"] = "0A00000100002A9F00000000000000A0"  # phys 160: no record
    result = outcomes(tmp_path / "inside", inside)[c.ORIGIN_STABLE]
    assert [e["message_key"] for e in result.examples] == ["UB"]
    assert "0A00000100002A9F00000000000000A0 is neither the UNIQ_KEY" in result.examples[0]["detail"]


def test_a_check_with_nothing_to_judge_is_not_applicable_not_passed(tmp_path):
    """The tiny run has no producer log once it is taken away: nothing_lost_unexplained judged
    nothing, blocks nothing, and says what the run lacks, in its metadata, checks.json's fields and
    the Dagster result's description; a check that judged something says passed."""
    from assets.raw import check_result

    def imported(tables):
        tables["produced"].clear()
    with run_views(write_tiny_run(tmp_path / "run", imported)) as con:
        found = {o.check.name: o for o in c.run_checks(con, c.INVARIANTS, RUN)}
    lost = found[c.NO_UNEXPLAINED_LOSS]
    assert lost.passed and not lost.applicable and lost.judged == 0
    assert lost.verdict == ("not applicable: no producer record of what was sent "
                            "(an imported store holds only what was stored)")
    assert lost.metadata()["verdict"] == lost.verdict
    result = check_result(lost)
    assert result.passed and result.description == lost.verdict
    assert result.metadata["verdict"].value == lost.verdict
    grammar = found[c.HOP_GRAMMAR]
    assert grammar.applicable and grammar.verdict == "passed" and grammar.judged > 0
    assert check_result(grammar).description is None
