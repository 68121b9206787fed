"""MappedFileQueue: naming, locating by offset, full-size files, flush and crash (MappedFileQueueTest)."""

from __future__ import annotations

import pytest

from broker_core.errors import CorruptStoreError
from broker_core.store import mapped_file
from broker_core.store.mapped_file import MappedFileQueue, offset_to_file_name


def fill(queue: MappedFileQueue, chunk: bytes, times: int) -> None:
    for _ in range(times):
        if queue.space_in_last_file() < len(chunk):
            queue.ensure_writable_file(queue.wrote_offset)
        queue.append(chunk)


def test_find_mapped_file_by_offset(tmp_path):
    """testFindMappedFileByOffset: 1024 appends of 4 bytes in 1024-byte files give 4 files located by offset."""
    queue = MappedFileQueue(tmp_path / "q", 1024)
    fill(queue, b"abcd", 1024)
    assert [f.start for f in queue.files] == [0, 1024, 2048, 3072]
    assert queue.find_file(0).start == 0
    assert queue.find_file(100).start == 0
    assert queue.find_file(1124).start == 1024
    assert queue.find_file(2148).start == 2048
    assert queue.find_file(4096) is None
    assert queue.find_file(4196) is None


def test_get_last_mapped_file(tmp_path):
    """testGetLastMappedFile: 1024 appends of 16 bytes all succeed, each at the previous end."""
    queue = MappedFileQueue(tmp_path / "q", 1024)
    offsets = []
    for _ in range(1024):
        if queue.space_in_last_file() < 16:
            queue.ensure_writable_file(queue.wrote_offset)
        offsets.append(queue.append(b"0123456789abcdef"))
    assert offsets == [16 * i for i in range(1024)]
    assert len(queue.files) == 16


def test_files_are_named_by_start_offset_and_have_their_full_size(tmp_path):
    """Files are named by their 20-digit start offset and are the configured size on disk from creation."""
    queue = MappedFileQueue(tmp_path / "q", 1000)
    fill(queue, b"x" * 10, 150)
    names = sorted(p.name for p in (tmp_path / "q").iterdir())
    assert names == ["00000000000000000000", "00000000000000001000"]
    assert all((tmp_path / "q" / n).stat().st_size == 1000 for n in names)
    assert offset_to_file_name(1073741824) == "00000000001073741824"


def test_first_file_starts_at_the_file_boundary_below_the_hint(tmp_path):
    """getLastMappedFile(startOffset): the first file starts at startOffset - startOffset % fileSize."""
    queue = MappedFileQueue(tmp_path / "q", 100)
    first = queue.ensure_writable_file(250)
    assert first.start == 200 and queue.wrote_offset == 200


def test_flush_writes_and_crash_loses_exactly_the_unflushed_tail(tmp_path):
    """Bytes appended after the last flush are lost on crash; flushed bytes survive a reload."""
    queue = MappedFileQueue(tmp_path / "q", 64)
    fill(queue, b"A" * 16, 3)  # 48 bytes
    queue.flush()
    fill(queue, b"B" * 16, 3)  # crosses into the second file
    assert queue.read(48, 16) == b"B" * 16  # readable from the buffer before a flush
    assert queue.flushed_offset == 48 and queue.wrote_offset == 96
    lost = queue.drop_unflushed()
    assert lost == 48
    queue.close()
    again = MappedFileQueue(tmp_path / "q", 64)
    again.load()
    assert again.read(0, 48) == b"A" * 48
    assert again.read(48, 16) == bytes(16)
    assert again.read(64, 32) == bytes(32)


def test_read_spans_disk_and_write_buffer(tmp_path):
    """A read starting in flushed bytes and ending in buffered bytes returns both parts in order."""
    queue = MappedFileQueue(tmp_path / "q", 64)
    fill(queue, b"12345678", 1)
    queue.flush()
    fill(queue, b"abcdefgh", 1)
    assert queue.read(4, 8) == b"5678abcd"
    assert queue.read(0, 1000) == b"12345678abcdefgh"


def test_load_rejects_a_file_of_the_wrong_size(tmp_path):
    """A file whose length differs from the configured size fails the load (MappedFileQueue.doLoad)."""
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / "00000000000000000000").write_bytes(bytes(100))
    with pytest.raises(CorruptStoreError, match="does not match the configured size"):
        MappedFileQueue(directory, 64).load()


def test_truncate_deletes_later_files_and_sets_the_write_position(tmp_path):
    """truncateDirtyFiles: files starting after the offset go; the write position moves to the offset."""
    queue = MappedFileQueue(tmp_path / "q", 32)
    fill(queue, b"z" * 8, 12)
    queue.truncate_to(40)
    assert [f.start for f in queue.files] == [0, 32]
    assert queue.wrote_offset == queue.flushed_offset == 40
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == [
        "00000000000000000000", "00000000000000000032"]


def test_write_buffer_is_written_out_before_it_passes_its_bound(tmp_path, monkeypatch):
    """The open buffer never grows past WRITE_BUFFER_SPILL_BYTES_MAX, and spilled bytes read back in order."""
    monkeypatch.setattr(mapped_file, "WRITE_BUFFER_SPILL_BYTES_MAX", 100)
    queue = MappedFileQueue(tmp_path / "q", 256)
    chunks = [bytes([65 + i % 26]) * 32 for i in range(30)]  # 960 bytes over 4 files
    for chunk in chunks:
        if queue.space_in_last_file() < len(chunk):
            queue.ensure_writable_file(queue.wrote_offset)
        queue.append(chunk)
        assert queue.tail is None or len(queue.tail) <= 100
        assert queue.tail is None or queue.tail_end <= queue.files[-1].end
    assert 0 < queue.flushed_offset < queue.wrote_offset  # spilled, but the last bytes still buffered
    expected = b"".join(chunks)
    assert queue.read(0, 256) == expected[:256]
    queue.flush()
    queue.close()
    again = MappedFileQueue(tmp_path / "q", 256)
    again.load()
    got = b"".join(again.read(f.start, 256) for f in again.files)
    assert got[:len(expected)] == expected
