"""The server's own host memory stays bounded: glibc's arenas are capped at start
and the pages they hold free go back to the system when a job is released
(tally/server/c_allocator.py; the chaos campaign's RSS growth,
bench/results/chaos-2026-11-28.md)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tally.cli.server_main import query_status
from tally.server import c_allocator
from server_harness import PyClient, ServerProcess

MIB = 1 << 20

pytestmark = pytest.mark.skipif(c_allocator.allocator_stats() is None, reason="needs glibc's mallinfo2")

# What each job's thread does to an arena in the server: a burst of buffers, one
# chunk that outlives them (above them in the arena), then the buffers freed.
# Their 16 MiB stay resident in the arena until they are trimmed.
RETAINED = r"""
import ctypes, sys, threading
from tally.server import c_allocator
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
CHUNK = 64 << 10                     # under glibc's mmap threshold: from the thread's arena
pins = []

def job():
    chunks = [libc.malloc(CHUNK) for _ in range(256)]
    for c in chunks:
        ctypes.memset(c, 1, CHUNK)
    pins.append(libc.malloc(CHUNK))  # as big as they are: from the arena's top, not a hole between them
    for c in chunks:
        libc.free(c)

def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

t = threading.Thread(target=job)
t.start()
t.join()
before = resident()
if sys.argv[1] == "trim":
    c_allocator.release_free_memory()
print(before, resident(), c_allocator.allocator_stats()["trim_released_bytes"])
"""


def _retained(mode: str) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", RETAINED, mode], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    before, after, released = (int(x) for x in out.split())
    return before, after, released


def test_release_gives_back_what_a_finished_thread_left_in_its_arena():
    before, after, released = _retained("keep")
    assert before - after < 2 * MIB, "without a trim the freed 16 MiB stay resident"
    before, after, released = _retained("trim")
    assert before - after >= 14 * MIB and released >= 14 * MIB, (before, after, released)


CAP = r"""
import os, threading
from tally.server import c_allocator
capped = c_allocator.cap_arenas(2)
together = threading.Barrier(7)
def work():
    held = [bytearray(64 << 10) for _ in range(4)]   # malloc'd (PyMem_RawMalloc) in this thread's arena
    together.wait()         # all 6 hold theirs at once: none hands its arena on to the next
    together.wait()
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads:
    t.start()
together.wait()
arenas = len(c_allocator.arena_sizes())
together.wait()
for t in threads:
    t.join()
print(capped, arenas, c_allocator.cap_arenas(2))
"""


@pytest.mark.parametrize("env, expected", [({}, "True 2 False"), ({"MALLOC_ARENA_MAX": "3"}, "False 3 False"),
                                           ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}, "False 4 False")])
def test_arenas_are_capped_before_threads_start_unless_the_user_chose(env, expected):
    """6 threads allocating at once would get 6 arenas (up to 8 per core); capped,
    they share 2. A user's MALLOC_ARENA_MAX wins, and a late call changes nothing."""
    out = subprocess.run([sys.executable, "-c", CAP], capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, **env}).stdout.strip()
    assert out == expected


def test_the_server_caps_arenas_and_trims_after_each_job(tmp_path):
    server = ServerProcess(tmp_path / "tally.sock", backend="null")
    try:
        for i in range(4):
            c = PyClient(server.socket_path, program=f"job{i}")
            assert c.call("MemAlloc", bytes=1 << 20)[0] == "MemAllocReply"
            c.close()
        deadline = time.time() + 30
        while True:
            host = query_status(server.socket_path)["server"]["host_memory"]
            if host["trims"] >= 4 or time.time() > deadline:
                break
            time.sleep(0.05)
        assert host["trims"] >= 4, host                   # one per job released
        assert 1 <= len(host["arenas"]) <= c_allocator.SERVER_ARENAS, host
        assert 0 < host["in_use_bytes"] <= host["system_bytes"], host
    finally:
        server.stop()
