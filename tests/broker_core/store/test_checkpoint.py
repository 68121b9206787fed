"""StoreCheckpoint: the 4096-byte page of three timestamps and the abort marker (StoreCheckpointTest)."""

from __future__ import annotations

import json

from testdata import STORE_FIXTURES

from broker_core.store.checkpoint import (
    StoreCheckpoint,
    abort_file_exists,
    create_abort_file,
    remove_abort_file,
)

STORE_DIR = STORE_FIXTURES


def test_write_and_read(tmp_path):
    """testWriteAndRead: physic 0xAABB, logics 0xCCDD flush; min timestamp is physic - 3000; reopening reads both."""
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp = 0xAABB
    cp.logics_msg_timestamp = 0xCCDD
    cp.flush()
    cp.close()
    assert cp.physic_msg_timestamp - cp.min_timestamp() == 3000
    again = StoreCheckpoint(tmp_path / "checkpoint")
    assert (again.physic_msg_timestamp, again.logics_msg_timestamp) == (0xAABB, 0xCCDD)
    assert (tmp_path / "checkpoint").stat().st_size == 4096


def test_min_timestamp_never_goes_below_zero(tmp_path):
    """getMinTimestamp is max(0, min(physic, logics) - 3000), and the index variant also takes the index time."""
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp, cp.logics_msg_timestamp = 1000, 5000
    assert cp.min_timestamp() == 0
    cp.physic_msg_timestamp, cp.index_msg_timestamp = 10_000, 4000
    assert cp.min_timestamp() == 2000 and cp.min_timestamp_index() == 2000


def test_reads_the_fixture_checkpoint():
    """The 4.9.4 fixture's checkpoint decodes to the manifest's three values."""
    manifest = json.loads((STORE_DIR / "manifest.json").read_text())["otherFiles"]["checkpoint"]
    cp = StoreCheckpoint(STORE_DIR / "store-clean" / "checkpoint")
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (
        manifest["physicMsgTimestamp"], manifest["logicsMsgTimestamp"], manifest["indexMsgTimestamp"])


def test_flush_keeps_the_rest_of_the_page(tmp_path):
    """Only the first 24 bytes are rewritten; later bytes of the page (5.x fields) stay as they were."""
    path = tmp_path / "checkpoint"
    page = bytearray(4096)
    page[24:32] = b"\x01" * 8
    path.write_bytes(bytes(page))
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp = 7
    cp.flush()
    cp.close()
    data = path.read_bytes()
    assert data[24:32] == b"\x01" * 8 and data[7] == 7


def test_abort_file_marks_an_unclean_exit(tmp_path):
    """The abort marker exists between create and remove, and nowhere else."""
    assert not abort_file_exists(tmp_path)
    create_abort_file(tmp_path)
    assert abort_file_exists(tmp_path)
    remove_abort_file(tmp_path)
    assert not abort_file_exists(tmp_path)
