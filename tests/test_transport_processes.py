"""The transport between two processes (multiprocessing spawn): long streams with
every record checked, bulk bytes through both arenas, and a peer that dies or
closes its side detected as PeerDead in bounded time."""
from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
import time

import pytest

from tally import _core
from tally._core import transport_bench as bench

SPAWN = multiprocessing.get_context("spawn")
_names = itertools.count()


def unique_name(tag: str) -> str:
    return f"/tally-pp-{os.getpid()}-{tag}-{next(_names)}"


@pytest.fixture
def server_segment():
    """server_segment(**sizes): a fresh server-side segment, unlinked afterwards."""
    made = []

    def make(request_bytes=1 << 16, completion_bytes=1 << 16, upload_bytes=1 << 20, download_bytes=1 << 20):
        seg = _core.Segment.create(unique_name("seg"), request_bytes, completion_bytes, upload_bytes, download_bytes)
        made.append(seg)
        return seg

    yield make
    for seg in made:
        seg.unlink()


def payload_for(i: int) -> bytes:
    return (i.to_bytes(8, "little") * 26)[: (i * 7919) % 201]


# ---- children (module level so spawn can import them) ----------------------------

def child_push_python(name: str, count: int) -> None:
    seg = _core.Segment.open(name)
    ring = seg.request_ring
    for i in range(count):
        ring.push(100 + i % 3, i, payload_for(i))


def child_produce_cpp(name: str, count: int, min_bytes: int, max_bytes: int) -> None:
    seg = _core.Segment.open(name)
    bench.produce_records(seg.request_ring, count, min_bytes, max_bytes)


def child_upload(name: str, total: int, chunk: int) -> None:
    seg = _core.Segment.open(name)
    bench.arena_send(seg.upload, seg.request_ring, total, chunk)


def child_download_and_check(name: str, total: int, chunk: int) -> None:
    seg = _core.Segment.open(name)
    _, received = bench.arena_receive(seg.download, seg.completion_ring, total, chunk, verify=True)
    assert received == total


def child_push_then_die(name: str, count: int) -> None:
    seg = _core.Segment.open(name)
    for i in range(count):
        seg.request_ring.push(1, i, b"last words")
    os.kill(os.getpid(), signal.SIGKILL)


def child_attach_and_wait(name: str, ready, close_side: bool) -> None:
    seg = _core.Segment.open(name)
    if close_side:
        seg.mark_closed()
    ready.set()
    time.sleep(60)


def child_serve(conn) -> None:
    seg = _core.Segment.create(unique_name("child"), 4096, 4096, 4096, 4096)
    conn.send(seg.name)
    conn.recv()  # "opened"
    seg.unlink()  # the name only had to live until the parent opened it
    time.sleep(60)


def start(target, *args):
    p = SPAWN.Process(target=target, args=args, daemon=True)
    p.start()
    return p


# ---- streams -----------------------------------------------------------------------

def test_python_api_stream_between_processes(server_segment):
    """200k records of 0..200 bytes pushed from a child with the Python API."""
    seg = server_segment(request_bytes=1 << 14)
    count = 200_000
    child = start(child_push_python, seg.name, count)
    ring = seg.request_ring
    i = 0
    while i < count:
        for kind, tag, payload in ring.pop_batch(256, timeout=30):
            assert (kind, tag) == (100 + i % 3, i)
            assert payload == payload_for(i)
            i += 1
    child.join(30)
    assert child.exitcode == 0
    assert ring.used == 0


def test_millions_of_records_between_processes(server_segment):
    """3 million records of 0..200 bytes through a 64 KiB ring, produced in C++ by a
    child process, every byte checked on arrival."""
    seg = server_segment(request_bytes=1 << 16)
    count = 3_000_000
    child = start(child_produce_cpp, seg.name, count, 0, 200)
    seconds, nbytes = bench.consume_records(seg.request_ring, count, 0, 200, verify=True, timeout=60)
    child.join(30)
    assert child.exitcode == 0
    assert nbytes > count * 90
    assert seg.request_ring.used == 0


def test_upload_arena_between_processes(server_segment):
    seg = server_segment(request_bytes=1 << 12, upload_bytes=1 << 20)
    total, chunk = 256 << 20, 192 << 10
    child = start(child_upload, seg.name, total, chunk)
    _, received = bench.arena_receive(seg.upload, seg.request_ring, total, chunk, verify=True, timeout=60)
    child.join(30)
    assert child.exitcode == 0
    assert received == total
    assert seg.upload.used == 0


def test_download_arena_between_processes(server_segment):
    seg = server_segment(completion_bytes=1 << 12, download_bytes=1 << 20)
    total, chunk = 64 << 20, 300 << 10
    child = start(child_download_and_check, seg.name, total, chunk)
    while seg.client_pid == 0:  # send only once the client is there to notice its death
        time.sleep(0.005)
    bench.arena_send(seg.download, seg.completion_ring, total, chunk)
    child.join(30)
    assert child.exitcode == 0


# ---- peers that go away -----------------------------------------------------------

def test_server_drains_then_sees_killed_client_as_peer_dead(server_segment):
    seg = server_segment()
    child = start(child_push_then_die, seg.name, 5)
    got = [seg.request_ring.pop(timeout=30) for _ in range(5)]
    assert [tag for _, tag, _ in got] == list(range(5))
    t0 = time.monotonic()
    with pytest.raises(_core.PeerDead, match="client exited or closed its side"):
        seg.request_ring.pop()  # no timeout: only peer detection can end it
    assert time.monotonic() - t0 < 1.0
    child.join(10)
    assert child.exitcode == -signal.SIGKILL


def test_blocked_server_sees_client_sigkilled_meanwhile(server_segment):
    seg = server_segment()
    ready = SPAWN.Event()
    child = start(child_attach_and_wait, seg.name, ready, False)
    assert ready.wait(30)
    killer = threading.Timer(0.2, child.kill)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(_core.PeerDead):
        seg.request_ring.pop_batch(16)
    waited = time.monotonic() - t0
    assert 0.15 < waited < 1.5
    killer.join()
    child.join(10)


def test_blocked_client_sees_server_sigkilled_meanwhile():
    parent_end, child_end = SPAWN.Pipe()
    server = start(child_serve, child_end)
    name = parent_end.recv()
    seg = _core.Segment.open(name)
    parent_end.send("opened")
    while seg.request_ring.try_push(1, 1, b""):
        pass
    errors = []

    def blocked_push():
        try:
            seg.request_ring.push(1, 2, b"")
        except _core.PeerDead as e:
            errors.append(e)

    pusher = threading.Thread(target=blocked_push)
    pusher.start()
    killer = threading.Timer(0.2, server.kill)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(_core.PeerDead, match="server exited or closed its side"):
        seg.completion_ring.pop()
    assert 0.15 < time.monotonic() - t0 < 1.5
    pusher.join(5)
    assert len(errors) == 1  # the producer blocked on a full ring woke too
    killer.join()
    server.join(10)


def test_closed_flag_ends_a_blocked_pop(server_segment):
    seg = server_segment()
    ready = SPAWN.Event()
    child = start(child_attach_and_wait, seg.name, ready, True)
    assert ready.wait(30)
    t0 = time.monotonic()
    with pytest.raises(_core.PeerDead):
        seg.request_ring.pop()
    assert time.monotonic() - t0 < 0.5
    assert not seg.peer_alive()
    child.kill()
    child.join(10)


def test_second_live_client_is_refused(server_segment):
    seg = server_segment()
    ready = SPAWN.Event()
    child = start(child_attach_and_wait, seg.name, ready, False)
    assert ready.wait(30)
    with pytest.raises(_core.TransportError, match=f"already attached by client pid {child.pid}"):
        _core.Segment.open(seg.name)
    child.kill()
    child.join(10)
    with _core.Segment.open(seg.name):  # the dead client's slot is free again
        assert seg.client_pid == os.getpid()


def test_a_watched_socket_decides_liveness_not_the_pid(server_segment):
    # A job in its own pid namespace (a container) writes a pid the server cannot see;
    # the socket both sides hold says who is still there. Here the client is this very
    # process, alive throughout: only the socket's hang-up ends it.
    import socket
    seg = server_segment()
    with _core.Segment.open(seg.name):
        server_end, client_end = socket.socketpair()
        seg.watch_peer_socket(server_end.fileno())
        client_end.sendall(b"unread data does not count as a hang-up")
        assert seg.peer_alive()
        client_end.close()
        t0 = time.monotonic()
        with pytest.raises(_core.PeerDead):
            seg.request_ring.pop()
        assert time.monotonic() - t0 < 0.5
        assert not seg.peer_alive()
        server_end.close()
