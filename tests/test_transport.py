"""The transport's Python API within one process: a server handle (create) and a
client handle (open) on the same segment, so every ring has its real producer
and consumer. Cross-process behaviour is in test_transport_processes.py."""
from __future__ import annotations

import itertools
import mmap
import os
import stat
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally import _core

_names = itertools.count()
# SegmentLayout (csrc/include/tally/segment.h): magic, version, header bytes,
# reserved, total bytes, 4 x (control offset, data offset, capacity), creator pid.
LAYOUT = struct.Struct("<IIIIQ" + "QQQ" * 4 + "iI")
REQUEST_DATA_OFFSET = 16 + 8 + 8  # field offsets inside LAYOUT
VERSION_OFFSET = 4


def unique_name(tag: str) -> str:
    return f"/tally-pt-{os.getpid()}-{tag}-{next(_names)}"


@pytest.fixture
def make_pair():
    """make_pair(**sizes) -> (server, client) segments; unlinked afterwards."""
    created = []

    def make(request_bytes=4096, completion_bytes=4096, upload_bytes=1 << 16, download_bytes=1 << 16, **kw):
        name = unique_name("pair")
        server = _core.Segment.create(name, request_bytes, completion_bytes, upload_bytes, download_bytes, **kw)
        created.append(server)
        client = _core.Segment.open(name, **kw)
        return server, client

    yield make
    for s in created:
        if not s.closed:
            s.unlink()


def edit_shm(name: str, offset: int, data: bytes) -> None:
    with open("/dev/shm" + name, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[offset:offset + len(data)] = data


def read_layout(name: str) -> tuple:
    with open("/dev/shm" + name, "rb") as f:
        return LAYOUT.unpack(f.read(LAYOUT.size))


# ---- segment ---------------------------------------------------------------------

def test_create_gives_mode_0600_and_unlink_removes_it():
    name = unique_name("mode")
    old = os.umask(0)  # shm_open's mode alone would be 0600 & ~umask
    try:
        seg = _core.Segment.create(name, 4096, 4096, 4096, 4096)
    finally:
        os.umask(old)
    st = os.stat("/dev/shm" + name)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_size == seg.size
    assert seg.side == "server" and seg.creator_pid == os.getpid() and seg.client_pid == 0
    assert seg.unlink() is True
    assert not os.path.exists("/dev/shm" + name)
    assert seg.unlink() is False
    with pytest.raises(_core.TransportError, match="no shared-memory segment named"):
        _core.Segment.open(name)
    seg.close()


def test_open_records_client_and_sizes(make_pair):
    server, client = make_pair(request_bytes=1 << 14, completion_bytes=1 << 12)
    assert client.side == "client" and server.side == "server"
    assert server.client_pid == os.getpid()
    assert client.request_ring.capacity == 1 << 14
    assert client.completion_ring.capacity == 1 << 12
    assert client.request_ring.max_payload == (1 << 14) - 16
    assert client.upload.capacity == 1 << 16
    assert client.request_ring.is_producer and not server.request_ring.is_producer
    assert server.completion_ring.is_producer and server.download.is_producer
    assert repr(server).startswith(f"<tally._core.Segment {server.name} server")


def test_create_rejects_bad_arguments():
    name = unique_name("bad")
    with pytest.raises(_core.TransportError, match="must be a power of two"):
        _core.Segment.create(name, 5000, 4096, 4096, 4096)
    with pytest.raises(_core.TransportError, match="invalid segment name"):
        _core.Segment.create("nope", 4096, 4096, 4096, 4096)
    with pytest.raises(ValueError, match="spin_us"):
        _core.Segment.create(name, 4096, 4096, 4096, 4096, spin_us=-1)
    assert not os.path.exists("/dev/shm" + name)
    seg = _core.Segment.create(name, 4096, 4096, 4096, 4096)
    with pytest.raises(_core.TransportError, match="already exists"):
        _core.Segment.create(name, 4096, 4096, 4096, 4096)
    seg.unlink()


def test_an_endless_spin_polls_within_each_deadline(make_pair):
    """spin_us=inf (tally-server --hp-spin-us inf) is a day's spin: a timed wait still ends on time."""
    server, _client = make_pair(spin_us=float("inf"))
    assert server.spin_us == 86400e6
    t0 = time.monotonic()
    assert server.request_ring.pop(timeout=0.05) is None
    assert 0.05 <= time.monotonic() - t0 < 1.0


def test_corrupt_header_is_rejected_on_open():
    name = unique_name("corrupt")
    seg = _core.Segment.create(name, 4096, 4096, 4096, 4096)
    try:
        edit_shm(name, 0, struct.pack("<I", 0xDEADBEEF))
        with pytest.raises(_core.CorruptSegment, match="not a tally segment"):
            _core.Segment.open(name)
        edit_shm(name, 0, struct.pack("<I", _core.SEGMENT_MAGIC))
        edit_shm(name, VERSION_OFFSET, struct.pack("<I", _core.PROTOCOL_VERSION + 7))
        with pytest.raises(_core.ProtocolVersionMismatch,
                           match=f"protocol version mismatch: segment v{_core.PROTOCOL_VERSION + 7}, "
                                 f"this build v{_core.PROTOCOL_VERSION}"):
            _core.Segment.open(name)
        edit_shm(name, VERSION_OFFSET, struct.pack("<I", _core.PROTOCOL_VERSION))
        edit_shm(name, REQUEST_DATA_OFFSET, struct.pack("<Q", seg.size))  # ring data past the end
        with pytest.raises(_core.CorruptSegment, match="request ring lies outside"):
            _core.Segment.open(name)
    finally:
        seg.unlink()


def test_close_is_idempotent_and_later_calls_fail(make_pair):
    server, client = make_pair()
    ring = client.request_ring
    client.close()
    client.close()
    assert client.closed
    with pytest.raises(_core.TransportError, match="is closed in this process"):
        ring.push(1, 1, b"x")
    with pytest.raises(_core.TransportError, match="is closed"):
        client.size
    with _core.Segment.open(server.name) as again:
        again.request_ring.push(1, 2, b"y")
    assert again.closed
    assert server.request_ring.pop(0) == (1, 2, b"y")


def test_exception_hierarchy():
    assert issubclass(_core.TransportError, RuntimeError)
    for cls in (_core.RingFull, _core.RecordTooLarge, _core.PeerDead, _core.CorruptSegment,
                _core.ProtocolVersionMismatch):
        assert issubclass(cls, _core.TransportError)
    assert issubclass(_core.RingFull, TimeoutError)
    assert issubclass(_core.RecordTooLarge, ValueError)
    assert issubclass(_core.PeerDead, ConnectionError)


# ---- rings -----------------------------------------------------------------------

def test_push_pop_values(make_pair):
    server, client = make_pair()
    client.request_ring.push(7, 2**64 - 1, b"hello")
    client.request_ring.push(8, 0)
    client.request_ring.push(9, 5, bytearray(b"ab"))
    client.request_ring.push(10, 6, memoryview(b"xyz"))
    assert client.request_ring.used == 4 * 16 + 8 * 3
    assert server.request_ring.pop() == (7, 2**64 - 1, b"hello")
    assert server.request_ring.pop_batch(10) == [(8, 0, b""), (9, 5, b"ab"), (10, 6, b"xyz")]
    assert server.request_ring.pop(timeout=0) is None
    assert server.request_ring.pop_batch(4, timeout=0.01) == []
    assert server.request_ring.used == 0
    server.completion_ring.push(17, 3, b"pong")
    assert client.completion_ring.pop(1.0) == (17, 3, b"pong")


def test_pop_batch_takes_at_most_max_records(make_pair):
    server, client = make_pair()
    for i in range(10):
        client.request_ring.push(1, i, bytes([i]))
    assert [t for _, t, _ in server.request_ring.pop_batch(4)] == [0, 1, 2, 3]
    assert [t for _, t, _ in server.request_ring.pop_batch(100)] == list(range(4, 10))
    with pytest.raises(ValueError):
        server.request_ring.pop_batch(0)


def test_wrong_side_is_refused(make_pair):
    server, client = make_pair()
    with pytest.raises(_core.TransportError, match="cannot push on the consuming side"):
        server.request_ring.push(1, 1)
    with pytest.raises(_core.TransportError, match="cannot pop on the producing side"):
        client.request_ring.pop(0)
    with pytest.raises(_core.TransportError, match="reserved for ring padding"):
        client.request_ring.push(0xFFFFFFFF, 1)


def test_wrap_around_keeps_every_record(make_pair):
    server, client = make_pair(request_bytes=256)
    tx, rx = client.request_ring, server.request_ring
    expected = []
    got = []
    for i in range(5000):
        payload = bytes((i + j) % 256 for j in range((i * 37) % 100))
        while not tx.try_push(i % 7 + 1, i, payload):
            got.append(rx.pop(0))
        expected.append((i % 7 + 1, i, payload))
    while (rec := rx.pop(0)) is not None:
        got.append(rec)
    assert got == expected


def test_too_large_records_are_rejected(make_pair):
    server, client = make_pair(request_bytes=256, upload_bytes=4096)
    with pytest.raises(_core.RecordTooLarge, match="at most 240 payload bytes per record"):
        client.request_ring.push(1, 1, bytes(241))
    assert client.request_ring.try_push(1, 1, bytes(240))  # the whole ring
    assert server.request_ring.pop(0) == (1, 1, bytes(240))
    with pytest.raises(_core.RecordTooLarge, match="arena capacity 4096"):
        client.upload.reserve(4097)
    assert client.upload.used == 0


def test_full_ring_times_out_with_ring_full(make_pair):
    server, client = make_pair(request_bytes=256)
    n = 0
    while client.request_ring.try_push(1, n, b"12345678"):
        n += 1
    assert n == 256 // 24
    t0 = time.monotonic()
    with pytest.raises(_core.RingFull, match="stayed full"):
        client.request_ring.push(1, 99, b"x", timeout=0.05)
    assert 0.05 <= time.monotonic() - t0 < 1.0
    with pytest.raises(_core.RingFull):
        client.request_ring.push(1, 99, b"x", timeout=0)


def test_full_ring_back_pressure_producer_resumes(make_pair):
    """A producer thread blocks on the full ring and finishes once the consumer drains it."""
    server, client = make_pair(request_bytes=512, spin_us=5)
    total = 3000
    done = threading.Event()

    def produce():
        for i in range(total):
            client.request_ring.push(3, i, i.to_bytes(8, "little") * (i % 5))
        done.set()

    t = threading.Thread(target=produce)
    t.start()
    time.sleep(0.1)
    assert not done.is_set()  # blocked: 3000 records cannot fit in 512 bytes
    assert server.request_ring.used > 512 - 64
    got = []
    while len(got) < total:
        got.extend(server.request_ring.pop_batch(64, timeout=5))
    t.join(5)
    assert done.is_set()
    assert [tag for _, tag, _ in got] == list(range(total))
    assert all(p == tag.to_bytes(8, "little") * (tag % 5) for _, tag, p in got)


def test_blocked_pop_releases_the_gil_and_uses_no_cpu(make_pair):
    server, _client = make_pair()
    counter = 0
    stop = threading.Event()

    def count():
        nonlocal counter
        while not stop.is_set():
            counter += 1

    result = {}

    def waiter():
        t0, cpu0 = time.monotonic(), time.thread_time()
        result["record"] = server.request_ring.pop(timeout=0.5)
        result["wall"], result["cpu"] = time.monotonic() - t0, time.thread_time() - cpu0

    w = threading.Thread(target=waiter)
    w.start()
    c = threading.Thread(target=count)
    c.start()
    w.join()
    stop.set()
    c.join()
    assert result["record"] is None
    assert result["wall"] >= 0.5
    assert result["cpu"] < 0.05, result  # sleeping on the futex, not spinning
    assert counter > 10_000  # the other thread ran meanwhile: the GIL was released


def test_concurrent_use_of_one_end_is_refused(make_pair):
    server, _client = make_pair()
    t = threading.Thread(target=server.request_ring.pop, kwargs={"timeout": 0.5})
    t.start()
    time.sleep(0.1)
    with pytest.raises(_core.TransportError, match="already in use by another thread"):
        server.request_ring.pop(0)
    t.join()
    assert server.request_ring.pop(0) is None  # free again


def test_corrupt_record_is_detected_on_pop(make_pair):
    server, client = make_pair(request_bytes=256)
    client.request_ring.push(5, 1, b"abcd")
    data_offset = read_layout(server.name)[6]
    edit_shm(server.name, data_offset + 4, struct.pack("<I", 1000))  # size field of the header
    with pytest.raises(_core.CorruptSegment, match="crosses the ring's end"):
        server.request_ring.pop(0)


# ---- arenas ----------------------------------------------------------------------

def test_arena_reserve_write_view_release(make_pair):
    server, client = make_pair(upload_bytes=4096)
    up_tx, up_rx = client.upload, server.upload
    a = up_tx.reserve(1000)
    b = up_tx.reserve(100)
    assert (a, b) == (0, 1024)  # chunks are 64-byte aligned
    up_tx.write(a, b"x" * 1000)
    view = up_tx.view(b, 100)
    view[:5] = b"hello"  # zero-copy: lands in shared memory
    assert up_rx.read(b, 5) == b"hello"
    assert bytes(up_rx.view(a, 1000)) == b"x" * 1000
    assert up_tx.used == 1024 + 128
    up_rx.release(a, 1000)
    up_rx.release(b, 100)
    assert up_rx.used == 0
    with pytest.raises(ValueError, match="outside the arena"):
        up_tx.write(4000, b"x" * 200)
    with pytest.raises(ValueError, match="outside the arena"):
        up_rx.view(0, 5000)
    with pytest.raises(_core.TransportError, match="belongs to the producing side"):
        up_rx.reserve(64)


def test_arena_full_times_out_and_wraps(make_pair):
    server, client = make_pair(download_bytes=4096)
    tx, rx = server.download, client.download
    a = tx.reserve(3000)
    with pytest.raises(_core.RingFull, match="download arena"):
        tx.reserve(2000, timeout=0.02)
    rx.release(a, 3000)
    b = tx.reserve(2000)  # does not fit before the end: starts at 0
    assert b == 0
    with pytest.raises(_core.CorruptSegment, match="out of order"):
        rx.release(64, 10)
    rx.release(b, 2000)
    assert rx.used == 0


def test_arena_view_outlives_close(make_pair):
    server, client = make_pair()
    off = client.upload.reserve(16)
    view = client.upload.view(off, 16)
    client.close()  # the mapping stays while the view exists
    view[:3] = b"abc"
    assert server.upload.read(off, 3) == b"abc"
    del view


# ---- hostile bytes ------------------------------------------------------------------

def _interesting_offsets() -> list[int]:
    """Header fields, both position lines of each part, and the start of ring data."""
    name = unique_name("probe")
    seg = _core.Segment.create(name, 256, 256, 4096, 4096)
    layout = read_layout(name)
    seg.unlink()
    offsets = list(range(0, 128, 4))
    for part in range(4):
        control, data = layout[5 + 3 * part], layout[6 + 3 * part]
        offsets += [control, control + 4, control + 64, control + 68, data, data + 4, data + 8]
    return offsets


OFFSETS = _interesting_offsets()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(OFFSETS), st.integers(0, 7), st.binary(min_size=1, max_size=8)),
                      min_size=1, max_size=6))
def test_hostile_bytes_raise_transport_errors_never_crash(edits):
    """Whatever a peer scribbles over the header, the positions or a record header,
    open/pop/push/reserve/release either work or raise TransportError, without
    touching memory outside the segment (a crash would kill the test process)."""
    name = unique_name("hostile")
    server = _core.Segment.create(name, 256, 256, 4096, 4096)
    try:
        client = _core.Segment.open(name)
        client.request_ring.push(1, 1, b"abc")
        server.completion_ring.push(2, 2, b"defgh")
        off = client.upload.reserve(100)
        for offset, delta, data in edits:
            edit_shm(name, offset + delta, data)
        operations = [
            lambda: _core.Segment.open(name).close(),
            lambda: server.request_ring.pop_batch(8, timeout=0),
            lambda: client.completion_ring.pop_batch(8, timeout=0),
            lambda: client.request_ring.try_push(3, 3, bytes(100)),
            lambda: server.completion_ring.try_push(3, 3, bytes(100)),
            lambda: server.upload.release(off, 100),
            lambda: client.upload.reserve(1000, timeout=0),
            lambda: server.download.reserve(4096, timeout=0),
            lambda: client.download.release(0, 64),
        ]
        for op in operations:
            try:
                op()
            except _core.TransportError:
                pass
    finally:
        server.unlink()
