"""An increment of a 5.x POP store keeps the POP bookkeeping rows of the records it read before and
reads only the new ones from the store."""

from __future__ import annotations

import shutil
from pathlib import Path

from growing_store import cut_in_half, fresh, rows_of

from broker_core.export.store_import import import_store
from broker_core.sim.run import simulate

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "pop-small.yaml"
# The tail's fingerprint, the BLANK after it and the end of the data; the zeros after the data in a
# file no import read before, to the end of its last block.
COMMITLOG_CHECK_BYTES_MAX = 64 + 8 + 8 + 4096


def test_a_pop_store_increment_reads_only_its_new_bookkeeping_records(tmp_path):
    """A store imported at a cut and again once grown past it: the second import reads of the commit
    log only the records after the cut (not the earlier checkpoints and acks again, nor the new ones
    twice), and every table, pop_evidence and retry_topics among them, equals a fresh import."""
    simulate(SCENARIO, tmp_path / "sim")
    store = tmp_path / "store"
    shutil.copytree(tmp_path / "sim" / "store", store)
    last, data, after = cut_in_half(store)
    run = tmp_path / "run"
    first = import_store(store, run, broker="broker-a")
    last.write_bytes(data)
    again = import_store(store, run, broker="broker-a")
    assert again.resumed_from == first.valid_end and again.records_added == after
    assert len(rows_of(run)["pop_evidence"]) > 0
    assert again.store_bytes_read["commitlog"] <= again.bytes_read + COMMITLOG_CHECK_BYTES_MAX, again.store_bytes_read
    assert rows_of(run) == rows_of(fresh(store, tmp_path, "run", broker="broker-a"))
