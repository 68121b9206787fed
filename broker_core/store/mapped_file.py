"""A queue of fixed-size files named by their start offset (RocketMQ MappedFile / MappedFileQueue).

The commit log and every consume queue are such a queue: file ``N`` holds the bytes of the logical
range ``[N, N + file_size)`` and is named by ``N`` zero-padded to 20 digits. RocketMQ memory-maps
them; this model uses plain file I/O (``os.pwrite`` / ``os.pread``) because it must decide exactly
which bytes survive a crash. Appended bytes stay in an in-memory write buffer until ``flush()``
writes them; ``crash()`` drops that buffer, which is what an unflushed tail means after kill -9 in
this model. Every file is created at its full size with ``ftruncate`` (sparse), because
RocketMQ's load check rejects a file whose length differs from the configured size (§1.1).
"""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.constants import FILE_NAME_DIGITS
from broker_core.errors import CorruptStoreError

# A buffered segment is written out once it grows past this, so a store on "async" flush with a
# caller that rarely flushes keeps bounded memory. This does not change what counts as flushed.
WRITE_BUFFER_SPILL_BYTES_MAX = 64 * 1024 * 1024


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the decimal offset zero-padded to 20 digits."""
    assert offset >= 0, f"negative file offset {offset}"
    return str(offset).zfill(FILE_NAME_DIGITS)


class MappedFile:
    """One fixed-size file of the queue; ``start`` is the logical offset of its first byte."""

    __slots__ = ("path", "start", "size", "end", "_fd")

    def __init__(self, path: Path, start: int, size: int):
        self.path = path
        self.start = start
        self.size = size
        self.end = start + size  # a plain attribute: the append path reads it on every record
        self._fd: int | None = None

    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def create(self) -> None:
        """Create the file at its full size; the bytes read as zero until written (sparse)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, self.size)
        self._fd = fd

    def pread(self, pos: int, n: int) -> bytes:
        return os.pread(self.fd(), n, pos)

    def pwrite(self, pos: int, data) -> None:
        assert 0 <= pos and pos + len(data) <= self.size, (
            f"write [{pos}, {pos + len(data)}) outside file {self.path.name} of {self.size} bytes")
        written = os.pwrite(self.fd(), data, pos)
        assert written == len(data), f"short write to {self.path}: {written} of {len(data)}"

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, start={self.start}, size={self.size})"


class MappedFileQueue:
    """Fixed-size files in one directory, written only at the end, read anywhere.

    ``wrote_offset`` is the logical end of written data (RocketMQ's write position of the last file
    plus its start); ``flushed_offset`` is how much of it is on disk. Bytes between the two live
    in ``_segments``: a list of ``[file, position_in_file, bytearray]`` (more than one only when
    the queue rolled over to a new file since the last flush).

    ``tail`` is the last segment's buffer while it is open (else None) and ``tail_end`` the
    logical offset it may grow to: its file's end, or sooner where the buffer would pass
    WRITE_BUFFER_SPILL_BYTES_MAX. Bytes that end at or before ``tail_end`` may be added to
    ``tail`` by the caller itself, moving ``wrote_offset`` to their end: that is :meth:`append`'s
    common case, and the store's put path does it inline (a Python call is a few percent of a
    record's append; bench/store_append.py). Everything else goes through :meth:`append`.
    """

    def __init__(self, directory: Path, file_size: int):
        assert file_size > 0, f"file size must be positive, got {file_size}"
        self.directory = Path(directory)
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.wrote_offset = 0
        self.flushed_offset = 0
        self._segments: list[list] = []
        self.tail: bytearray | None = None
        self.tail_end = 0

    # --- loading ------------------------------------------------------------------------------

    def load(self) -> None:
        """Open the existing files in name order; every one must have the configured size.

        Like RocketMQ, a loaded queue starts with its positions at the end of the last file;
        recovery then sets them with :meth:`truncate_to`.
        """
        self.files = []
        if self.directory.is_dir():
            for path in sorted(self.directory.iterdir(), key=lambda p: p.name):
                if not path.is_file():
                    continue
                if not (path.name.isdigit() and len(path.name) == FILE_NAME_DIGITS):
                    continue  # RocketMQ ignores nothing, but stray files must not break a load
                length = path.stat().st_size
                if length != self.file_size:
                    raise CorruptStoreError(
                        f"file length {length} does not match the configured size {self.file_size}",
                        where=str(path))
                start = int(path.name)
                if start % self.file_size != 0:
                    raise CorruptStoreError(
                        f"file start {start} is not a multiple of the file size {self.file_size}",
                        where=str(path))
                if self.files and start != self.files[-1].end:
                    raise CorruptStoreError(
                        f"file does not follow {self.files[-1].path.name} (gap in the queue)",
                        where=str(path))
                self.files.append(MappedFile(path, start, self.file_size))
        end = self.files[-1].end if self.files else 0
        self.wrote_offset = self.flushed_offset = end
        self._segments = []
        self.tail = None

    # --- locating -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding ``offset`` (``start <= offset < end``), or None outside the queue."""
        files = self.files
        if not files or offset < files[0].start or offset >= files[-1].end:
            return None
        index = (offset - files[0].start) // self.file_size
        found = files[index]
        assert found.start <= offset < found.end, f"file index broken at {offset}: {found}"
        return found

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def space_in_last_file(self) -> int:
        """Bytes left in the file being written; 0 when there is none or it is full."""
        if not self.files:
            return 0
        return self.files[-1].end - self.wrote_offset

    def ensure_writable_file(self, start_hint: int = 0) -> MappedFile:
        """The file to append to, creating the next (or the first, at ``start_hint``) if needed.

        The first file starts at ``start_hint - start_hint % file_size``
        (MappedFileQueue.getLastMappedFile(startOffset)).
        """
        if self.files and self.wrote_offset < self.files[-1].end:
            return self.files[-1]
        if self.files:
            start = self.files[-1].end
        else:
            start = start_hint - start_hint % self.file_size
            self.wrote_offset = self.flushed_offset = start
        self.directory.mkdir(parents=True, exist_ok=True)
        mapped = MappedFile(self.directory / offset_to_file_name(start), start, self.file_size)
        mapped.create()
        self.files.append(mapped)
        self.wrote_offset = start
        return mapped

    # --- writing ------------------------------------------------------------------------------

    def append(self, data) -> int:
        """Buffer ``data`` at the write position of the last file; return its logical offset."""
        offset = self.wrote_offset
        end = offset + len(data)
        tail = self.tail
        if tail is not None and end <= self.tail_end:
            # The common case: the last file's segment is open and the bytes fit in it.
            tail += data
            self.wrote_offset = end
            return offset
        mapped = self.files[-1]
        assert end <= mapped.end, (
            f"append of {len(data)} bytes at {offset} crosses the end of {mapped.path.name}")
        segments = self._segments
        if segments and segments[-1][0] is mapped \
                and len(segments[-1][2]) + len(data) > WRITE_BUFFER_SPILL_BYTES_MAX:
            self._spill()
            segments = self._segments
        if segments and segments[-1][0] is mapped:
            tail = segments[-1][2]
            tail += data
        else:
            tail = bytearray(data)
            segments.append([mapped, offset - mapped.start, tail])
        self.wrote_offset = end
        if len(tail) > WRITE_BUFFER_SPILL_BYTES_MAX:
            self._spill()  # one append larger than the whole buffer
            return offset
        self.tail = tail
        segment_start = mapped.start + segments[-1][1]
        self.tail_end = min(mapped.end, segment_start + WRITE_BUFFER_SPILL_BYTES_MAX)
        return offset

    def mark_file_full(self) -> None:
        """Move the write position to the end of the last file (after its BLANK end record)."""
        assert self.files, "no file to mark full"
        self.wrote_offset = self.files[-1].end
        self.tail = None

    def _spill(self) -> None:
        """Write buffered bytes to the files without moving the flushed position backwards."""
        for mapped, pos, buf in self._segments[:-1]:
            mapped.pwrite(pos, buf)
        last = self._segments[-1]
        last[0].pwrite(last[1], last[2])
        # Spilled bytes are on disk already; they count as flushed from here on.
        self._segments = []
        self.tail = None
        self.flushed_offset = self.wrote_offset

    def flush(self) -> int:
        """Write every buffered byte to its file; return the new flushed offset."""
        if self.tail is not None:
            # Callers add to ``tail`` themselves: the open buffer must end where writing did.
            last_file, last_pos, last_buf = self._segments[-1]
            buffered_end = last_file.start + last_pos + len(last_buf)
            assert last_buf is self.tail and buffered_end == self.wrote_offset, (
                f"{self.directory}: the open buffer ends at {buffered_end}, writing at {self.wrote_offset}")
        for mapped, pos, buf in self._segments:
            if buf:
                mapped.pwrite(pos, buf)
        self._segments = []
        self.tail = None
        self.flushed_offset = self.wrote_offset
        return self.flushed_offset

    def drop_unflushed(self) -> int:
        """Forget the buffered tail (kill -9); return how many bytes were lost."""
        lost = sum(len(seg[2]) for seg in self._segments)
        self._segments = []
        self.tail = None
        self.wrote_offset = self.flushed_offset
        return lost

    # --- reading ------------------------------------------------------------------------------

    def read(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset``, never past the end of its file or of written data."""
        mapped = self.find_file(offset)
        if mapped is None or n <= 0:
            return b""
        end = min(offset + n, mapped.end, self.wrote_offset)
        if end <= offset:
            return b""
        for seg_file, pos, buf in self._segments:
            if seg_file is mapped:
                seg_start = mapped.start + pos
                if offset >= seg_start:
                    return bytes(buf[offset - seg_start:end - seg_start])
                if end > seg_start:
                    head = mapped.pread(offset - mapped.start, seg_start - offset)
                    return head + bytes(buf[:end - seg_start])
        return mapped.pread(offset - mapped.start, end - offset)

    def read_file_bytes(self, mapped: MappedFile) -> bytes:
        """The whole file as this queue sees it (disk bytes overlaid with the write buffer)."""
        data = mapped.pread(0, mapped.size)
        for seg_file, pos, buf in self._segments:
            if seg_file is mapped and buf:
                data = data[:pos] + bytes(buf) + data[pos + len(buf):]
        return data

    # --- truncating and closing ---------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Set the write and flush positions to ``offset``; delete files that start after it.

        MappedFileQueue.truncateDirtyFiles: the bytes after ``offset`` in its file are left as
        they are; later appends overwrite them.
        """
        self.flush()
        keep = []
        for mapped in self.files:
            if mapped.start > offset:
                mapped.close()
                mapped.path.unlink()
            else:
                keep.append(mapped)
        self.files = keep
        if not keep:
            offset = 0
        self.wrote_offset = self.flushed_offset = offset

    def delete_last_file(self) -> None:
        mapped = self.files.pop()
        self._segments = [seg for seg in self._segments if seg[0] is not mapped]
        self.tail = None
        mapped.close()
        mapped.path.unlink()

    def zero_range(self, offset: int, end: int) -> None:
        """Write zeros over ``[offset, end)`` of the file holding ``offset`` (flushed first)."""
        self.flush()
        mapped = self.find_file(offset)
        if mapped is None:
            return
        end = min(end, mapped.end)
        if end > offset:
            mapped.pwrite(offset - mapped.start, bytes(end - offset))

    def destroy(self) -> None:
        """Delete every file (the queue becomes empty at offset 0)."""
        for mapped in self.files:
            mapped.close()
            mapped.path.unlink()
        self.files = []
        self._segments = []
        self.tail = None
        self.wrote_offset = self.flushed_offset = 0

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()
