"""Host memory for suspended jobs' device bytes (tally/server/suspend.py): one
store per server. It hands out chunk buffers, counts what suspended jobs hold,
keeps that under a limit, and says when a chunk must go to disk instead.

Why buffers of CHUNK_BYTES, faulted in ahead and kept for a while (measured on
the 2-core development VM, 2026-11-28): host memory the process has not touched
costs far more than the copy into it. Each fresh page is a fault, and on a VM
that hands freed guest pages back to its host, a second one on the host: about
1.5-5 ms per MiB, against 0.3-0.5 ms per MiB to copy into pages the process
already has. Suspending into one zeroed buffer per allocation paid that twice
over for every byte. So:
- buffers are mmaps of CHUNK_BYTES, faulted in (MAP_POPULATE) on a helper
  thread while the device copies into the previous ones (`supply`);
- a resume gives its buffers back, and up to `keep_bytes` of them stay for
  KEEP_SECONDS, so the next suspension (--oversubscribe suspends every few
  seconds) copies into warm pages; then they go back to the system.

Bounds, for an operator whose node must not run out of memory (an OOM-killed
tally-server takes every job on its GPU with it): the host bytes of all saved
state (buffers in use or kept, compressed chunks) stay under `limit_bytes`
(--suspend-host-limit), and a fresh buffer is made only while the host keeps
HOST_RESERVE_BYTES available (MemAvailable). What does not fit goes to an
unlinked file in `spill_dir` (--suspend-spill-dir), or, without one, the
suspension is refused and the job runs on unchanged.
"""
from __future__ import annotations

import mmap
import queue
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tally.units import format_bytes

CHUNK_BYTES = 8 << 20
HOST_RESERVE_BYTES = 2 << 30
DEFAULT_KEEP_BYTES = 1 << 30
KEEP_SECONDS = 30.0
# Buffers the helper thread makes ahead of the copies: enough to keep it busy, few
# enough that a refused suspension has not faulted in much for nothing.
AHEAD = 4

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class HostMemoryFull(Exception):
    """No room for a chunk of saved state; the message says what to change."""


@dataclass(frozen=True)
class SavedMemoryPolicy:
    limit_bytes: int | None = None      # host bytes all saved state may take; None: only the reserve
    spill_dir: Path | None = None       # where chunks beyond it go; None: the suspension is refused
    keep_bytes: int = DEFAULT_KEEP_BYTES


def host_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo, or None where there is none (no check then)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_spill_dir(path: Path) -> None:
    """ValueError (saying what to do) unless spill files can be made in `path`."""
    try:
        with tempfile.TemporaryFile(dir=path, prefix="tally-suspended-"):
            pass
    except OSError as e:
        raise ValueError(f"--suspend-spill-dir {path}: cannot make files there ({e.strerror}); give a writable "
                         f"directory on a local disk") from None


class SavedMemoryStore:
    def __init__(self, policy: SavedMemoryPolicy = SavedMemoryPolicy(), available=host_available_bytes):
        self.policy = policy
        self._available = available
        self._lock = threading.Lock()
        self._kept: list[mmap.mmap] = []
        self._trim_timer: threading.Timer | None = None
        self._last_kept = 0.0
        self.buffer_bytes = 0        # every buffer alive: holding saved bytes, being filled, or kept
        self.packed_bytes = 0        # compressed chunks held
        self.spilled_bytes = 0       # bytes in spill files

    @property
    def host_bytes(self) -> int:
        return self.buffer_bytes + self.packed_bytes

    @property
    def kept_bytes(self) -> int:
        return len(self._kept) * CHUNK_BYTES

    def why_no_room(self, nbytes: int) -> str | None:
        """Why `nbytes` more of host memory may not be taken now; None if they may."""
        limit = self.policy.limit_bytes
        if limit is not None and self.host_bytes + nbytes > limit:
            return (f"suspended jobs' saved state would pass --suspend-host-limit "
                    f"({format_bytes(limit)}, {format_bytes(self.host_bytes)} held)")
        available = self._available()
        if available is not None and available - nbytes < HOST_RESERVE_BYTES:
            return (f"the host has {format_bytes(available)} of memory available and tally-server leaves "
                    f"{format_bytes(HOST_RESERVE_BYTES)} of it to everything else")
        return None

    # ---- buffers --------------------------------------------------------------------------
    def take_buffer(self) -> mmap.mmap | None:
        """A CHUNK_BYTES buffer: a kept one, or a fresh one while there is room (None: no room)."""
        with self._lock:
            if self._kept:
                return self._kept.pop()
            if self.why_no_room(CHUNK_BYTES) is not None:
                return None
            self.buffer_bytes += CHUNK_BYTES
        try:
            return mmap.mmap(-1, CHUNK_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
        except OSError:
            with self._lock:
                self.buffer_bytes -= CHUNK_BYTES
            return None

    def give_buffer(self, buffer: mmap.mmap) -> None:
        """A buffer no copy uses any more: kept for the next suspension while under
        keep_bytes, else given back to the system."""
        with self._lock:
            if self.kept_bytes + CHUNK_BYTES <= self.policy.keep_bytes:
                self._kept.append(buffer)
                self._arm_trim()
                return
            self.buffer_bytes -= CHUNK_BYTES
        _unmap(buffer)

    def _arm_trim(self) -> None:
        """Under the lock: the kept buffers go KEEP_SECONDS after the last one came back
        (one timer, moved on when it fires early; not a thread per buffer)."""
        self._last_kept = time.monotonic()
        if self._trim_timer is None:
            self._start_trim_timer(KEEP_SECONDS)

    def _start_trim_timer(self, seconds: float) -> None:
        self._trim_timer = threading.Timer(seconds, self._trim_when_idle)
        self._trim_timer.daemon = True
        self._trim_timer.start()

    def _trim_when_idle(self) -> None:
        with self._lock:
            self._trim_timer = None
            idle = time.monotonic() - self._last_kept
            if idle < KEEP_SECONDS and self._kept:
                self._start_trim_timer(KEEP_SECONDS - idle)
                return
        self.trim()

    def trim(self) -> None:
        """Give every kept buffer back to the system."""
        with self._lock:
            kept, self._kept = self._kept, []
            self.buffer_bytes -= len(kept) * CHUNK_BYTES
        for buffer in kept:
            _unmap(buffer)

    def supply(self, count: int) -> BufferSupply:
        return BufferSupply(self, count)

    # ---- compressed and spilled chunks -----------------------------------------------------
    def charge_packed(self, nbytes: int) -> bool:
        dropped = []
        with self._lock:
            limit = self.policy.limit_bytes
            while limit is not None and self.host_bytes + nbytes > limit and self._kept:
                dropped.append(self._kept.pop())          # kept buffers make room first
                self.buffer_bytes -= CHUNK_BYTES
            fits = limit is None or self.host_bytes + nbytes <= limit
            if fits:
                self.packed_bytes += nbytes
        for buffer in dropped:
            _unmap(buffer)
        return fits

    def release_packed(self, nbytes: int) -> None:
        with self._lock:
            self.packed_bytes -= nbytes

    def spill_file(self):
        """A new unlinked file for one suspension's spilled chunks (gone with the
        server, whatever happens), or None without a spill directory."""
        if self.policy.spill_dir is None:
            return None
        return tempfile.TemporaryFile(dir=self.policy.spill_dir, prefix="tally-suspended-")

    def note_spilled(self, nbytes: int) -> None:
        with self._lock:
            self.spilled_bytes += nbytes

    def to_json(self) -> dict:
        return {"saved_host_bytes": self.host_bytes - self.kept_bytes, "saved_spilled_bytes": self.spilled_bytes,
                "saved_kept_bytes": self.kept_bytes, "saved_host_limit": self.policy.limit_bytes}


def _unmap(buffer: mmap.mmap) -> None:
    try:
        buffer.close()
    except BufferError:
        pass             # a view of it is still alive: unmapped when the last one goes


class BufferSupply:
    """Buffers for one suspension, made ahead on a helper thread: it faults fresh
    pages in while the device copies into the buffers made before (both cores
    work). take() returns None once the store has no room left."""

    def __init__(self, store: SavedMemoryStore, count: int):
        self._store = store
        self._ready: queue.Queue = queue.Queue(AHEAD)
        self._recycled: list[mmap.mmap] = []
        self._stop = threading.Event()
        self._exhausted = False
        self._thread = threading.Thread(target=self._make, args=(count,), daemon=True, name="tally-saved-memory")
        self._thread.start()

    def _make(self, count: int) -> None:
        for _ in range(count):
            buffer = self._store.take_buffer()
            if not self._offer(buffer):
                if buffer is not None:
                    self._store.give_buffer(buffer)
                return
            if buffer is None:
                return
        self._offer(None)            # none beyond the count: take() asks the store itself

    def _offer(self, item) -> bool:
        """Queue it for take(); False once the supply is closed."""
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def take(self) -> mmap.mmap | None:
        if self._recycled:
            return self._recycled.pop()
        if self._exhausted:
            return self._store.take_buffer()
        buffer = self._ready.get()
        if buffer is None:
            self._exhausted = True
            return self._store.take_buffer()
        return buffer

    def recycle(self, buffer: mmap.mmap) -> None:
        """A buffer whose bytes went elsewhere (compressed, spilled): for the next chunk."""
        self._recycled.append(buffer)

    def close(self) -> None:
        """Every buffer not taken goes back to the store."""
        self._stop.set()
        self._thread.join()
        while True:
            try:
                buffer = self._ready.get_nowait()
            except queue.Empty:
                break
            if buffer is not None:
                self._store.give_buffer(buffer)
        for buffer in self._recycled:
            self._store.give_buffer(buffer)
        self._recycled.clear()
