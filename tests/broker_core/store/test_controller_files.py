"""A 5.x controller-mode store's epochFileCheckpoint and brokerIdentity: the real files of a 5.3.3
master and slave (tests/data/rocketmq-controller-5.3.3/README.md), and copies with bytes changed."""

from __future__ import annotations

import shutil
import zlib

import pytest
from testdata import CONTROLLER_FIXTURES, CONTROLLER_NEW_MASTER, CONTROLLER_OLD_MASTER

from broker_core.store.controller_files import (
    EPOCH_FILE,
    IDENTITY_FILE,
    KIND_EPOCH_FILE_BAD,
    KIND_EPOCH_ORDER,
    KIND_EPOCH_PAST_END,
    KIND_IDENTITY_BAD,
    parse_epoch_text,
    read_controller_files,
)
from broker_core.store.problem import ERROR, WARNING


def _copy(tmp_path, node):
    dest = tmp_path / node
    shutil.copytree(CONTROLLER_FIXTURES / node, dest)
    return dest


def _with_crc(lines: list[str]) -> str:
    body = "".join(f"{line}\n" for line in lines)
    return f"{len(lines)}\n{zlib.crc32(body.encode()) & 0x7FFFFFFF}\n{body}"


def test_the_javadoc_example_checks():
    """CheckpointFile's own example (2 entries, CRC 773307083) is read as RocketMQ reads it."""
    entries = parse_epoch_text("2\n773307083\n7-7000\n8-8000\n")
    assert [(e.epoch, e.start_offset) for e in entries] == [(7, 7000), (8, 8000)]


def test_the_real_files_of_the_promoted_slave_and_the_killed_master():
    """The promoted slave's epochs are epoch 1 from 0 and its own from where its copy ended; the
    killed master's epoch 1 only; both name the cluster and broker, each with its own id."""
    new = read_controller_files(CONTROLLER_FIXTURES / CONTROLLER_NEW_MASTER)
    old = read_controller_files(CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER)
    assert new.problems == [] and old.problems == []
    assert new.epoch_file == EPOCH_FILE == old.epoch_file
    assert [e.epoch for e in old.epochs] == [1] and old.epochs[0].start_offset == 0
    assert new.epochs[0].epoch == 1 and new.epochs[0].start_offset == 0 and len(new.epochs) == 2
    assert new.epochs[1].epoch > 1 and new.epochs[1].start_offset > 0
    assert (new.identity.cluster, new.identity.broker) == (old.identity.cluster, old.identity.broker) \
        == ("DefaultCluster", "broker-a")
    assert new.identity.broker_id != old.identity.broker_id


def test_a_store_without_the_files_is_not_controller_mode(tmp_path):
    assert read_controller_files(tmp_path) is None


def test_a_refused_epoch_file_is_read_from_its_backup_as_rocketmq_does(tmp_path):
    """The CRC line changed: RocketMQ refuses the file and reads the .bak (the content before the
    last write); so does the reader, with a warning. Both refused: an error and no epochs."""
    store = _copy(tmp_path, CONTROLLER_NEW_MASTER)
    path = store / EPOCH_FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], str(int(lines[1]) ^ 1), *lines[2:]]) + "\n")
    found = read_controller_files(store)
    assert [p.kind for p in found.problems] == [KIND_EPOCH_FILE_BAD]
    backup = store / (EPOCH_FILE + ".bak")
    if backup.is_file():
        assert found.epoch_file == EPOCH_FILE + ".bak" and found.problems[0].severity == WARNING
        assert found.epochs == parse_epoch_text(backup.read_text())
        backup.write_text("3\n0\n1-0\n")
        found = read_controller_files(store)
    assert found.epochs == [] and found.epoch_file is None
    assert {p.severity for p in found.problems} == {ERROR}


def test_epochs_that_do_not_grow_are_an_error(tmp_path):
    store = _copy(tmp_path, CONTROLLER_NEW_MASTER)
    entries = read_controller_files(store).epochs
    (store / EPOCH_FILE).write_text(_with_crc([f"{entries[1].epoch}-0", f"1-{entries[1].start_offset}"]))
    found = read_controller_files(store)
    assert [p.kind for p in found.problems] == [KIND_EPOCH_ORDER]
    assert found.problems[0].severity == ERROR


def test_an_epoch_past_the_log_end_is_a_warning(tmp_path):
    store = _copy(tmp_path, CONTROLLER_OLD_MASTER)
    (store / EPOCH_FILE).write_text(_with_crc(["1-0", f"2-{1 << 40}"]))
    found = read_controller_files(store, log_end=1 << 20)
    assert [(p.kind, p.severity) for p in found.problems] == [(KIND_EPOCH_PAST_END, WARNING)]
    assert read_controller_files(CONTROLLER_FIXTURES / CONTROLLER_OLD_MASTER, log_end=1 << 20).problems == []


@pytest.mark.parametrize("text", ["DefaultCluster#broker-a", "DefaultCluster;broker-a;1", "a#b#one", ""])
def test_a_broker_identity_not_of_three_parts_is_an_error(tmp_path, text):
    store = _copy(tmp_path, CONTROLLER_OLD_MASTER)
    (store / IDENTITY_FILE).write_text(text)
    found = read_controller_files(store)
    assert found.identity is None
    assert [(p.kind, p.severity) for p in found.problems] == [(KIND_IDENTITY_BAD, ERROR)]


def test_a_crc_line_of_zero_is_not_checked():
    """CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE: 0 on the CRC line means the entries are not checked."""
    assert [(e.epoch, e.start_offset) for e in parse_epoch_text("2\n0\n1-0\n2-108535\n")] == [(1, 0), (2, 108535)]
    with pytest.raises(ValueError, match="says 3 entries"):
        parse_epoch_text("3\n0\n1-0\n2-108535\n")
