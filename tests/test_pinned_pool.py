"""PinnedPool: registered host buffers for the server's own device-to-host copies
(tally/scheduler/pinned_pool.py), checked against the null backend with its
registration calls recorded."""
from __future__ import annotations

import mmap

from tally.backends.null import NullBackend
from tally.scheduler.pinned_pool import PinnedPool


class RecordingBackend(NullBackend):
    def __init__(self):
        super().__init__()
        self.registered: list[int] = []
        self.unregistered: list[int] = []

    def host_register(self, view: memoryview) -> None:
        self.registered.append(len(view))

    def host_unregister(self, view: memoryview) -> None:
        self.unregistered.append(len(view))


def test_blocks_are_registered_once_reused_and_unregistered_at_close():
    backend = RecordingBackend()
    pool = PinnedPool(backend)
    a = pool.take(5)
    assert len(a) == 5 and bytes(a) == bytes(5)
    a[:] = b"hello"
    b = pool.take(8)                          # same size class: the same registered page
    assert backend.registered == [mmap.PAGESIZE]
    pool.give(a)
    again = pool.take(3)                      # reused, and zeroed
    assert bytes(again) == bytes(3) and backend.registered == [mmap.PAGESIZE]
    big = pool.take(3 * mmap.PAGESIZE)        # a block of its own: 4 pages
    assert backend.registered == [mmap.PAGESIZE, 4 * mmap.PAGESIZE] and len(big) == 3 * mmap.PAGESIZE
    for view in (b, again, big):
        pool.give(view)
    pool.close()
    assert sorted(backend.unregistered) == sorted(backend.registered)


def test_a_page_holds_many_small_blocks():
    backend = RecordingBackend()
    pool = PinnedPool(backend)
    views = [pool.take(8) for _ in range(mmap.PAGESIZE // 8 + 1)]
    assert backend.registered == [mmap.PAGESIZE, mmap.PAGESIZE]   # the last one needed a second page
    assert len({id(v.obj) for v in views}) == 2
    pool.close()
