"""The server process's own host memory, as the C allocator (glibc malloc) sees it.

RSS alone cannot tell a leak from an allocator that keeps what was freed: the
chaos campaign's RSS question (issue 15) needs both side by side.
`allocator_stats` reads mallinfo2() and malloc_info(); both walk the arenas'
free lists under their locks: cheap (well under a millisecond here) but not
free, so they are asked for on demand (`tally-server status`), never on a hot
path. Elsewhere than glibc it reports None.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import re


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        libc.open_memstream.restype = ctypes.c_void_p
    except (OSError, AttributeError):        # not glibc, or glibc before 2.33
        return None
    return libc


_LIBC = _libc()


def allocator_stats() -> dict | None:
    """Bytes the C allocator holds from the system and bytes of it in use, over all
    arenas and per arena; None where glibc's mallinfo2 is missing."""
    if _LIBC is None:
        return None
    info = _LIBC.mallinfo2()
    return {"system_bytes": info.arena + info.hblkhd,     # heaps + chunks mmapped on their own
            "in_use_bytes": info.uordblks + info.hblkhd,
            "free_bytes": info.fordblks,                  # held in the arenas' free lists and tops
            "mmapped_bytes": info.hblkhd,
            "arenas": arena_sizes()}


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
