"""Remembering what was computed from a PTX text, bounded by the bytes of PTX behind
what is held, not by a count of entries.

A count bound does not bound memory: parsed PTX takes about 13 bytes of Python
objects per byte of text (measured on tests/cuda/corpus/math_ops.cu), so 64
remembered modules cost a few MiB when they are small kernels and more than
half a GiB when each links numba's 780 KB of libcudadevrt PTX (a long-lived
tally-server grew from 40 to 500 MiB that way over numba's test suite).
Least recently used entries go first; a text larger than the whole budget is
computed every time. Exceptions are not remembered. Thread-safe; the
computation itself runs outside the lock (two threads may both compute a miss).
"""
from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass
from typing import Any, Callable

from cachetools import LRUCache


@dataclass(frozen=True)
class _Held:
    ptx_bytes: int
    value: Any


def memo_by_ptx_bytes(max_ptx_bytes: int) -> Callable[[Callable], Callable]:
    """Decorates fn(ptx: str, *hashable) so that its results are remembered while the
    PTX texts behind them add up to at most max_ptx_bytes. Callers must not change
    what it returns (it is shared)."""
    def decorate(fn: Callable) -> Callable:
        cache: LRUCache = LRUCache(maxsize=max_ptx_bytes, getsizeof=lambda held: held.ptx_bytes)
        lock = threading.Lock()

        @functools.wraps(fn)
        def remembered(ptx: str, *rest):
            key = (hashlib.sha256(ptx.encode()).digest(), *rest)
            with lock:
                held = cache.get(key)
            if held is not None:
                return held.value
            value = fn(ptx, *rest)
            if len(ptx) <= max_ptx_bytes:
                with lock:
                    cache[key] = _Held(len(ptx), value)
            return value

        def held_ptx_bytes() -> int:
            with lock:
                return int(cache.currsize)

        def clear() -> None:
            with lock:
                cache.clear()

        remembered.held_ptx_bytes = held_ptx_bytes
        remembered.cache_clear = clear
        return remembered

    return decorate
