"""LZ4 for chunks of device memory on their way to host memory (a suspension,
tally/server/saved_log.py) or to another server (a migration): only where it
pays.

A chunk is compressed when that at least halves it: below that, the CPU time
(LZ4 compresses at roughly the speed of a copy here) buys too little memory or
transfer. A probe of the chunk's first bytes decides whether to try at all, so
incompressible data (weights, random bytes) costs one small compression per
chunk, not a full pass.
"""
from __future__ import annotations

import lz4.frame

COMPRESS_BELOW = 0.5
PROBE_BYTES = 64 << 10


def compress_if_it_pays(view: memoryview) -> bytes | None:
    """The chunk LZ4-compressed (frame format) when that at least halves it, else None."""
    n = len(view)
    if n < PROBE_BYTES:
        return None                    # small pieces: nothing worth the call
    probe = view[:PROBE_BYTES]
    if len(lz4.frame.compress(probe)) >= PROBE_BYTES * COMPRESS_BELOW:
        return None
    packed = lz4.frame.compress(view)
    return packed if len(packed) < n * COMPRESS_BELOW else None


def decompress(data) -> bytes:
    return lz4.frame.decompress(data)
