"""The server process's own host memory, as the C allocator (glibc malloc) sees
it, and the two settings that keep it bounded.

Why the settings (bench/results/chaos-2026-11-28.md): glibc gives threads that
allocate at the same time arenas of their own, up to 8 per core, and a freed
chunk goes back to its arena's free lists, not to the system, unless it ends at
the top of the arena and the free top is over M_TRIM_THRESHOLD (which glibc
raises to twice the largest chunk it mmapped and freed: 816 KiB in the server).
Every job brings threads (its session thread, its streams' threads, its
blocking waiters) whose buffers come and go, so over the chaos campaign's 100
jobs each of the 15 extra arenas of a 2-core machine came to hold 2-5 MiB, free
but resident, in chunks of 1-2 MiB below a few small live ones, while the bytes
in use stayed at 9 MiB in all: RSS grew by ~50 MiB, the sum of the arenas'
high-water marks, with nothing leaked. So:

- `cap_arenas` (at start, before a second thread allocates: glibc fixes the
  limit when it makes the first arena after the main one) bounds how many
  arenas can each keep such a high-water mark;
- `release_free_memory` (malloc_trim(0), when a job's session is released)
  returns every whole free page of every arena to the system.

`allocator_stats` reads mallinfo2() and malloc_info(); both walk the arenas'
free lists under their locks: cheap (well under a millisecond here) but not
free, so they are asked for on demand (`tally-server status`), never on a hot
path. Elsewhere than glibc every function here does nothing and reports None.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import threading
import time

M_ARENA_MAX = -8                 # mallopt's parameter number (glibc malloc.h)
# Arenas the server keeps (cap_arenas). Threads share an arena's lock, but small
# allocations (the frequent ones) come from each thread's tcache without it.
# Measured (bench/results/chaos-2026-11-28.md): with the trims, 2 arenas kept
# ~1 MiB resident in the extra arena against 3-8 MiB in 15, and halved a trim
# (0.6-0.8 ms a job, against 1.6); `tally-bench demo` on the emulator showed no
# difference in latency and 306 against 329 best-effort kernels/s, within its
# noise on the loaded VM. MALLOC_ARENA_MAX in the environment overrides it.
SERVER_ARENAS = 2
# The user's own choice wins: glibc reads these from the environment at start.
_ARENA_ENV = ("MALLOC_ARENA_MAX",)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        libc.open_memstream.restype = ctypes.c_void_p
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):        # not glibc, or glibc before 2.33
        return None
    return libc


_LIBC = _libc()
_trim_lock = threading.Lock()
_trims = {"count": 0, "seconds": 0.0, "max_seconds": 0.0, "released_bytes": 0}


def cap_arenas(limit: int = SERVER_ARENAS) -> bool:
    """Limit glibc to `limit` arenas. Call before any thread but the main one has
    allocated; True when the limit is set (False: not glibc, the user chose one
    in the environment, or it is too late)."""
    if _LIBC is None or any(name in os.environ for name in _ARENA_ENV) \
            or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    # glibc fixes the limit when it makes the first arena after the main one; a
    # mallopt after that changes nothing.
    if len(arena_sizes()) > 1:
        return False
    return _LIBC.mallopt(M_ARENA_MAX, limit) == 1


def release_free_memory() -> None:
    """Give every whole free page of every arena back to the system (malloc_trim(0)).
    Called once a job's session is released, when what its threads held was freed."""
    if _LIBC is None:
        return
    with _trim_lock:              # one at a time: a second one right after finds nothing to do
        before = _resident_bytes()
        started = time.perf_counter()
        _LIBC.malloc_trim(0)
        took = time.perf_counter() - started
        _trims["seconds"] += took
        _trims["max_seconds"] = max(_trims["max_seconds"], took)
        _trims["count"] += 1
        _trims["released_bytes"] += max(0, before - _resident_bytes())


def allocator_stats() -> dict | None:
    """Bytes the C allocator holds from the system and bytes of it in use, over all
    arenas and per arena, and what release_free_memory did so far; None where
    glibc's mallinfo2 is missing."""
    if _LIBC is None:
        return None
    info = _LIBC.mallinfo2()
    with _trim_lock:
        trims = {"trims": _trims["count"], "trim_seconds": round(_trims["seconds"], 4),
                 "trim_max_seconds": round(_trims["max_seconds"], 4),
                 # RSS before minus after each trim: other threads' work in between blurs it
                 "trim_released_bytes": _trims["released_bytes"]}
    return {"system_bytes": info.arena + info.hblkhd,     # heaps + chunks mmapped on their own
            "in_use_bytes": info.uordblks + info.hblkhd,
            "free_bytes": info.fordblks,                  # held in the arenas' free lists and tops
            "mmapped_bytes": info.hblkhd,
            "arenas": arena_sizes(), **trims}


def malloc_info_xml() -> str:
    """glibc's malloc_info(): one <heap> element per arena with its sizes."""
    if _LIBC is None:
        return ""
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = _LIBC.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        return ""
    try:
        _LIBC.malloc_info(0, ctypes.c_void_p(stream))
    finally:
        _LIBC.fclose(ctypes.c_void_p(stream))
    text = ctypes.string_at(buf, size.value).decode(errors="replace")
    _LIBC.free(buf)
    return text


_HEAP = re.compile(r'<heap nr="\d+">.*?<total type="fast" count="\d+" size="(\d+)"/>\s*'
                   r'<total type="rest" count="\d+" size="(\d+)"/>\s*<system type="current" size="(\d+)"/>',
                   re.S)


def arena_sizes() -> list[list[int]]:
    """[bytes from the system, bytes free in its lists and top] of each arena, the main one first."""
    return [[int(system), int(fast) + int(rest)] for fast, rest, system in _HEAP.findall(malloc_info_xml())]


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
