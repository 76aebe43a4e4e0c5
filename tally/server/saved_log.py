"""A suspended job's device bytes in host memory (tally/server/suspend.py): one
stream of bytes, its regions (allocations, globals, physical memory) one after
the other, cut into slabs of CHUNK_BYTES.

A writer fills the slabs with copies from the device: each slab is a buffer of
the server's SavedMemoryStore (tally/server/saved_memory.py), so regions of any
size share full, reusable buffers and no byte is copied twice. Every WINDOW
slabs it waits for the copies and seals the slabs: a slab stays as it is, or is
kept LZ4-compressed where that halves it, or copied out when at most half of it
is filled (a job's last slab; either way its buffer goes on to the next slab),
or goes to the store's spill file when host memory has no room for it. A reader
gives the regions back in the same order (or skips one: a module unloaded while
its job was suspended), a view of each slab at a time, decompressed or read from
disk as needed.
"""
from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass

from tally.server import lz4_chunks
from tally.server.saved_memory import CHUNK_BYTES, HostMemoryFull, SavedMemoryStore

# Slabs copied before the writer waits for them and seals them (and, reading back,
# slabs decompressed or read from disk before the reader waits and frees them):
# copies queue up on the device while sealing stays close behind.
WINDOW = 4

# copy_out(view, offset): start a copy of the region's bytes [offset, offset + len(view)) into view.
CopyOut = Callable[[memoryview, int], None]
# copy_in(offset, view): start a copy of view into the region's bytes at offset.
CopyIn = Callable[[int, memoryview], None]


@dataclass
class RawSlab:
    buffer: mmap.mmap
    n: int


@dataclass
class PackedSlab:
    data: bytes | bytearray
    n: int
    compressed: bool = True       # False: a copy of a slab at most half full (its buffer went back)


@dataclass
class SpilledSlab:
    offset: int
    length: int
    packed: bool
    n: int


class SavedLog:
    def __init__(self, store: SavedMemoryStore):
        self.store = store
        self.slabs: list[RawSlab | PackedSlab | SpilledSlab] = []
        self.spill = None              # the spill file, once a slab went to disk
        self.nbytes = 0                # the regions' bytes

    @property
    def host_bytes(self) -> int:
        return sum(CHUNK_BYTES if isinstance(s, RawSlab) else len(s.data) for s in self.slabs
                   if not isinstance(s, SpilledSlab))

    @property
    def spilled_bytes(self) -> int:
        return sum(s.length for s in self.slabs if isinstance(s, SpilledSlab))

    def writer(self, sync: Callable[[], None], expected_bytes: int) -> LogWriter:
        return LogWriter(self, sync, expected_bytes)

    def reader(self, sync: Callable[[], None]) -> LogReader:
        return LogReader(self, sync)

    def release(self) -> None:
        """Everything goes back: buffers to the store, the spill file's space to the disk."""
        store = self.store
        for slab in self.slabs:
            if isinstance(slab, RawSlab):
                store.give_buffer(slab.buffer)
            elif isinstance(slab, PackedSlab):
                store.release_packed(len(slab.data))
        spilled = self.spilled_bytes
        self.slabs = []
        if self.spill is not None:
            store.note_spilled(-spilled)
            self.spill.close()
            self.spill = None


class LogWriter:
    def __init__(self, log: SavedLog, sync: Callable[[], None], expected_bytes: int):
        self.log = log
        self._sync = sync
        self._supply = log.store.supply(-(-expected_bytes // CHUNK_BYTES))
        self._staging: mmap.mmap | None = None    # the slab being filled when no buffer was left
        self._buffer: mmap.mmap | None = None
        self._filled = 0
        self._copied: list[tuple[mmap.mmap, int]] = []    # full slabs whose copies may still run

    def append(self, size: int, copy_out: CopyOut) -> None:
        """A region of `size` bytes, copied by copy_out piece by piece."""
        offset = 0
        while offset < size:
            if self._buffer is None or self._filled == CHUNK_BYTES:
                self._next_slab()
            n = min(CHUNK_BYTES - self._filled, size - offset)
            copy_out(memoryview(self._buffer)[self._filled:self._filled + n], offset)
            self._filled += n
            offset += n
        self.log.nbytes += size

    def _next_slab(self) -> None:
        if self._buffer is not None:
            self._copied.append((self._buffer, self._filled))
            self._buffer = None
            if len(self._copied) >= WINDOW:
                self._seal_copied()
        buffer = self._supply.take()
        if buffer is None and self._copied:
            self._seal_copied()               # compressed slabs give their buffers back
            buffer = self._supply.take()
        if buffer is None:
            why = self.log.store.why_no_room(CHUNK_BYTES) or "no host memory could be mapped"
            if self.log.store.policy.spill_dir is None:
                raise HostMemoryFull(f"{why}; set --suspend-spill-dir to let saved state go to disk, or raise "
                                     f"the limit")
            self._seal_copied()               # the staging buffer is free again
            if self._staging is None:
                self._staging = mmap.mmap(-1, CHUNK_BYTES)
            buffer = self._staging
        self._buffer, self._filled = buffer, 0

    def _seal_copied(self) -> None:
        self._sync()
        while self._copied:
            self._seal(*self._copied.pop(0))

    def _seal(self, buffer: mmap.mmap, n: int) -> None:
        log, store = self.log, self.log.store
        view = memoryview(buffer)[:n]
        packed = lz4_chunks.compress_if_it_pays(view)
        if packed is not None and store.charge_packed(len(packed)):
            log.slabs.append(PackedSlab(packed, n))
        elif packed is None and n <= CHUNK_BYTES // 2 and store.charge_packed(n):
            # A job's last, partly filled slab (a small job's only one): a copy of its bytes
            # instead of a whole buffer held for as long as the job stays suspended.
            log.slabs.append(PackedSlab(bytearray(view), n, compressed=False))
        elif buffer is not self._staging:
            log.slabs.append(RawSlab(buffer, n))      # its buffer was counted when it was made
            return
        else:
            self._spill(view if packed is None else packed, packed is not None, n)
            return
        self._supply.recycle(buffer)

    def _spill(self, data, packed: bool, n: int) -> None:
        log, store = self.log, self.log.store
        try:
            if log.spill is None:
                log.spill = store.spill_file()
            offset = log.spill.seek(0, os.SEEK_END)
            log.spill.write(data)
        except OSError as e:
            raise HostMemoryFull(f"saved state could not go to --suspend-spill-dir "
                                 f"{store.policy.spill_dir} ({e})") from None
        log.slabs.append(SpilledSlab(offset, len(data), packed, n))
        store.note_spilled(len(data))

    def finish(self) -> None:
        """Wait for every copy and seal what is left: the log is complete. After a
        failure (an exception), call abort()."""
        if self._buffer is not None:
            self._copied.append((self._buffer, self._filled))
            self._buffer = None
        self._seal_copied()
        if self.log.spill is not None:
            try:
                self.log.spill.flush()
            except OSError as e:
                raise HostMemoryFull(f"saved state could not go to --suspend-spill-dir "
                                     f"{self.log.store.policy.spill_dir} ({e})") from None
        self._close()

    def abort(self) -> None:
        """After a failure: copies still running end first, then every buffer goes back."""
        try:
            self._sync()
        except Exception:     # the device failed: the copies ended anyway
            pass
        for buffer, _n in self._copied:
            self._supply.recycle(buffer)
        if self._buffer is not None and self._buffer is not self._staging:
            self._supply.recycle(self._buffer)
        self._copied.clear()
        self._buffer = None
        self._close()
        self.log.release()

    def _close(self) -> None:
        self._supply.close()
        if self._staging is not None:
            self._staging.close()
            self._staging = None


class LogReader:
    def __init__(self, log: SavedLog, sync: Callable[[], None]):
        self.log = log
        self._sync = sync
        self._position = 0
        self._slab = -1
        self._view: memoryview | None = None
        self._temporary: list = []       # decompressed or read-back slabs the copies may still use

    def read(self, size: int, copy_in: CopyIn) -> None:
        """The next region, `size` bytes, handed to copy_in piece by piece."""
        offset = 0
        while offset < size:
            index, within = divmod(self._position, CHUNK_BYTES)
            view = self._slab_view(index)
            n = min(len(view) - within, size - offset)
            copy_in(offset, view[within:within + n])
            offset += n
            self._position += n

    def skip(self, size: int) -> None:
        self._position += size

    def _slab_view(self, index: int) -> memoryview:
        if index == self._slab:
            return self._view
        slab = self.log.slabs[index]
        if isinstance(slab, RawSlab):
            view = memoryview(slab.buffer)[:slab.n]
        else:
            if len(self._temporary) >= WINDOW:
                self._sync()
                self._temporary.clear()
            if isinstance(slab, PackedSlab):
                data = lz4_chunks.decompress(slab.data) if slab.compressed else slab.data
            else:
                data = bytearray(slab.length)
                self.log.spill.seek(slab.offset)
                self.log.spill.readinto(data)
                if slab.packed:
                    data = lz4_chunks.decompress(data)
            self._temporary.append(data)
            view = memoryview(data)[:slab.n]
        self._slab, self._view = index, view
        return view

    def finish(self) -> None:
        """Wait for every copy; the temporaries go."""
        try:
            self._sync()
        finally:
            self._temporary.clear()
            self._view = None
