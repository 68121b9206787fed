"""The clients' message trace, as the audit imported it, against the driver's own log.

With ``--client-trace`` every real client writes its trace (docs/client-trace.md), and the import
reads it into ``client_trace``. The driver prints, independently, each send result, each listener
call and each transaction listener answer. This module pairs them, kind by kind, as multisets:

* a send the driver saw answered SEND_OK and the ``Pub`` records with its UNIQ_KEY (success, and
  the same offset msgId, which a transactional half's send has none of);
* a listener call (group, UNIQ_KEY, reconsume times, succeeded or not) and the consumes the trace
  holds (``SubBefore`` with its ``SubAfter``: the same four);
* a transaction listener's answer (UNIQ_KEY, execution or check, the answer) and the
  ``EndTransaction`` records (the same three).

``agree`` counts driver events the trace holds alike, ``missing`` those it does not hold at all
(the trace is lossy: none is expected on a quiet run), ``disagree`` those it holds otherwise;
``extra`` counts trace records no driver event matches.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb

EXAMPLES_MAX = 5
SUCCESS = "CONSUME_SUCCESS"


def _counts(events: list[tuple], traced: list[tuple], key_len: int) -> dict:
    """Pair two multisets of tuples whose first ``key_len`` items identify the event."""
    want, have = Counter(events), Counter(traced)
    agree = sum((want & have).values())
    left, extra = want - have, have - want
    keys_left = Counter(t[:key_len] for t in left.elements())
    keys_extra = Counter(t[:key_len] for t in extra.elements())
    disagree = sum((keys_left & keys_extra).values())
    examples = [{"driver": list(t), "trace": [list(x) for x in extra if x[:key_len] == t[:key_len]][:2]}
                for t in sorted(left, key=repr)[:EXAMPLES_MAX]]
    return {"driver_events": len(events), "agree": agree, "disagree": disagree,
            "missing": sum(left.values()) - disagree, "extra": sum(extra.values()) - disagree,
            "examples": examples}


def _sends(seen, con, run_id: str) -> dict:
    transactional = {t["uniq_key"] for t in seen.transactions}
    events = [(s["uniq_key"], True, None if s["uniq_key"] in transactional else s.get("msg_id"))
              for s in seen.sends if s.get("status") == "SEND_OK"]
    # A half's send result names the half record, which the driver's TransactionSendResult does not
    # carry: a transactional send is compared by its id and status.
    traced = [tuple(r) for r in con.execute(
        "SELECT msg_id, success, CASE WHEN msg_type = 'Trans_Msg_Half' THEN NULL ELSE offset_msg_id END "
        "FROM client_trace WHERE run_id = ? AND trace_type = 'Pub'", [run_id]).fetchall()]
    return _counts(events, traced, 1)


def _consumes(seen, con, run_id: str) -> dict:
    events = [(c["group"], c["uniq_key"], c["reconsume_times"], c["status"] == SUCCESS) for c in seen.consumes]
    traced = [tuple(r) for r in con.execute(
        'SELECT "group", message_key, reconsume_times, success FROM traced_attempts WHERE run_id = ?',
        [run_id]).fetchall()]
    return _counts(events, traced, 3)


def _decisions(seen, con, run_id: str) -> dict:
    events = [(t["uniq_key"], t["stage"] == "check", t["answer"]) for t in seen.transactions]
    traced = [tuple(r) for r in con.execute(
        "SELECT msg_id, from_transaction_check, transaction_state FROM client_trace "
        "WHERE run_id = ? AND trace_type = 'EndTransaction'", [run_id]).fetchall()]
    return _counts(events, traced, 2)


def trace_vs_clients(db: Path, run_id: str, seen) -> dict:
    """What the imported trace of run ``run_id`` holds against the driver's log ``seen``."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        by_type = dict(con.execute("SELECT trace_type, count(*) FROM client_trace WHERE run_id = ? GROUP BY 1",
                                   [run_id]).fetchall())
        by_broker = dict(con.execute("SELECT broker, count(*) FROM client_trace WHERE run_id = ? GROUP BY 1",
                                     [run_id]).fetchall())
        messages = con.execute("SELECT count(DISTINCT (broker, phys_offset)) FROM client_trace WHERE run_id = ?",
                               [run_id]).fetchone()[0]
        return {"records": by_type, "records_by_broker": by_broker, "trace_messages": messages,
                "sends": _sends(seen, con, run_id), "consumes": _consumes(seen, con, run_id),
                "transaction_decisions": _decisions(seen, con, run_id)}
    finally:
        con.close()
