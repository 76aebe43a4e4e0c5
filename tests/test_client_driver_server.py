"""The server side of the driver API (tally/server/handlers), spoken to over the
wire protocol from Python against a real tally-server with the emulator
backend: error paths a C program reaches only with effort, pinned regions, and
the stream rules (host functions holding a stream, the legacy default stream
waiting for blocking streams)."""
from __future__ import annotations

import ctypes
import mmap
import os
import struct
import time

import pytest
from server_harness import PyClient
from e2e_helpers import emulator_server_process

from tally import protocol
from tally.protocol.spec import (
    DEST_ARENA,
    DEST_PINNED,
    PER_THREAD_STREAM_BIT,
    SOURCE_INLINE,
    SOURCE_PINNED,
)

INVALID_VALUE, INVALID_IMAGE, ALREADY_MAPPED, INVALID_HANDLE, NOT_READY = 1, 200, 208, 400, 600
LEGACY = 0


@pytest.fixture(scope="module")
def server():
    s = emulator_server_process()
    yield s
    s.stop()


class Client(PyClient):
    """PyClient that keeps records the server sends on its own (tag 0) aside."""

    def __init__(self, socket_path, **options):
        super().__init__(socket_path, **options)
        self.unsolicited: list[tuple[str, dict]] = []
        self.printed = ""                   # KernelOutput text, in arrival order

    def call(self, name, tail=b"", timeout=10, **fields):
        self._tag += 1
        c = protocol.codec(name)
        self.segment.request_ring.push(c.kind, self._tag, c.pack(tail, **fields))
        while True:
            got = self.segment.completion_ring.pop(timeout)
            assert got is not None, f"no reply to {name} within {timeout} s"
            kind, tag, payload = got
            reply = protocol.BY_KIND[kind]
            values, rest = reply.unpack(payload)
            if tag == 0:
                self.unsolicited.append((reply.message.name, values))
                if reply.message.name == "KernelOutput":
                    self.printed += bytes(rest).decode()
                continue
            assert tag == self._tag
            return reply.message.name, values, bytes(rest)

    def status_of(self, name, **fields) -> int:
        """0 for Done, else the Error's status."""
        kind, values, _ = self.call(name, **fields)
        return 0 if kind == "Done" else values["status"]

    def next_unsolicited(self, timeout=10):
        deadline = time.monotonic() + timeout
        while not self.unsolicited:
            got = self.segment.completion_ring.pop(max(deadline - time.monotonic(), 0))
            assert got is not None, "the server posted nothing"
            kind, tag, payload = got
            assert tag == 0, "a reply nobody asked for"
            reply = protocol.BY_KIND[kind]
            self.unsolicited.append((reply.message.name, reply.unpack(payload)[0]))
        return self.unsolicited.pop(0)

    def alloc(self, nbytes) -> int:
        kind, values, _ = self.call("MemAlloc", bytes=nbytes)
        assert kind == "MemAllocReply"
        return values["dptr"]

    def upload(self, dst, data: bytes, stream=LEGACY):
        assert self.call("MemcpyHtoD", data, dst=dst, width=len(data), height=1, dst_pitch=len(data),
                         stream=stream, source=SOURCE_INLINE)[0] == "Done"

    def download(self, src, nbytes, stream=LEGACY) -> bytes:
        kind, values, _ = self.call("MemcpyDtoH", src=src, width=nbytes, height=1, src_pitch=nbytes, stream=stream,
                                    dest=DEST_ARENA)
        assert kind == "MemcpyDtoHReply", values
        data = self.segment.download.read(values["arena_offset"], values["size"])
        self.segment.download.release(values["arena_offset"], values["size"])
        return data


@pytest.fixture
def client(server):
    c = Client(server.socket)
    yield c
    c.close()


def test_asynchronous_failure_is_reported_once_at_the_next_sync(client):
    client.send("LaunchKernel", b"", function=12345, stream=LEGACY, grid=(1, 1, 1), block=(1, 1, 1))
    kind, values, text = client.call("CtxSynchronize")
    assert (kind, values["status"]) == ("Error", INVALID_HANDLE)
    assert b"function 12345" in text
    assert client.status_of("CtxSynchronize") == 0


def test_bad_module_images_and_handles(client):
    kind, values, text = client.call("ModuleLoad", b"not a module", size=12)
    assert (kind, values["status"]) == ("Error", INVALID_IMAGE), text
    kind, values, _ = client.call("ModuleLoad", b"short", size=99)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE)
    kind, values, _ = client.call("GetFunction", b"kernel", module=777)
    assert (kind, values["status"]) == ("Error", INVALID_HANDLE)
    assert client.status_of("ModuleUnload", module=777) == INVALID_HANDLE


def test_function_layout_and_attributes_from_ptx(client):
    ptx = (b".version 8.0\n.target sm_80\n.address_size 64\n"
           b".visible .entry k(.param .u8 a, .param .align 8 .b8 s[24], .param .u64 p)\n{ ret; }\n\0")
    kind, values, _ = client.call("ModuleLoad", ptx, size=len(ptx))
    assert kind == "ModuleLoadReply"
    kind, fn, layout = client.call("GetFunction", b"k", module=values["module"])
    assert kind == "FunctionReply"
    assert (fn["param_count"], fn["param_total"]) == (3, 40)
    assert list(struct.iter_unpack("<II", layout)) == [(0, 1), (8, 24), (32, 8)]
    assert fn["attributes"][0] == 1024                     # MAX_THREADS_PER_BLOCK
    kind, again, _ = client.call("GetFunction", b"k", module=values["module"])
    assert again["function"] == fn["function"]            # resolved once per module and name
    kind, err, _ = client.call("GetFunction", b"missing", module=values["module"])
    assert kind == "Error"
    # A launch must carry exactly the parameter block the layout describes.
    client.send("LaunchKernel", bytes(39), function=fn["function"], stream=LEGACY, grid=(1, 1, 1),
                block=(1, 1, 1))
    kind, err, text = client.call("CtxSynchronize")
    assert (kind, err["status"]) == ("Error", INVALID_VALUE) and b"carries 39 parameter bytes" in text


def test_stream_and_event_ids(client):
    client.send("StreamCreate", stream=5, flags=0, priority=0)
    client.send("StreamCreate", stream=5, flags=0, priority=0)           # twice: deferred error
    kind, values, text = client.call("CtxSynchronize")
    assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"already exists" in text
    assert client.status_of("StreamCreate", stream=PER_THREAD_STREAM_BIT | 3, flags=0, priority=0) == INVALID_VALUE
    assert client.status_of("StreamSynchronize", stream=99) == INVALID_HANDLE
    assert client.status_of("StreamSynchronize", stream=PER_THREAD_STREAM_BIT | 9) == 0   # made on first use
    assert client.status_of("EventQuery", event=42) == INVALID_HANDLE
    assert client.status_of("EventCreate", event=42, flags=0) == 0
    assert client.status_of("EventQuery", event=42) == 0                   # never recorded: complete
    kind, values, _ = client.call("EventElapsedTime", start=42, end=42)
    assert (kind, values["status"]) == ("Error", INVALID_HANDLE)          # never recorded
    assert client.status_of("EventDestroy", event=42) == 0
    assert client.status_of("EventDestroy", event=42) == INVALID_HANDLE


def test_event_times_answers_many_events_in_one_request(client):
    """EventTimes (tally's CUPTI reads its timing events with it): milliseconds from the
    reference per event, +inf for one that cannot be timed; a tail that does not match
    its count, or a reference without a completed record, is refused with the reason."""
    for event in (60, 61, 62):
        assert client.status_of("EventCreate", event=event, flags=0) == 0
    client.send("EventRecord", event=60, stream=LEGACY)
    client.send("EventRecord", event=61, stream=LEGACY)
    assert client.status_of("CtxSynchronize") == 0
    ids = struct.pack("<4Q", 60, 61, 62, 999)          # 62 never recorded, 999 unknown
    kind, values, tail = client.call("EventTimes", reference=60, count=4, _pad0=0, tail=ids)
    assert (kind, values["count"]) == ("EventTimesReply", 4)
    times = struct.unpack("<4d", bytes(tail))
    assert times[0] == 0.0 and times[1] >= 0.0 and times[2] == times[3] == float("inf")
    kind, values, text = client.call("EventTimes", reference=60, count=3, _pad0=0, tail=ids)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"names 3 events in 32 bytes" in text
    kind, values, text = client.call("EventTimes", reference=62, count=1, _pad0=0, tail=ids[:8])
    assert (kind, values["status"]) == ("Error", INVALID_HANDLE) and b"reference event" in text
    assert client.status_of("CtxSynchronize") == 0       # the session carries on


def test_memset_checks(client):
    p = client.alloc(64)
    assert client.status_of("Memset", dst=p, value=0x1FF, element_size=1, width=4, height=1, pitch=4,
                            stream=LEGACY) == INVALID_VALUE
    assert client.status_of("Memset", dst=p, value=1, element_size=3, width=4, height=1, pitch=12,
                            stream=LEGACY) == INVALID_VALUE
    assert client.status_of("Memset", dst=p, value=1, element_size=4, width=4, height=2, pitch=8,
                            stream=LEGACY) == INVALID_VALUE      # pitch smaller than a row
    # 2-D: rows of 3 x u16 every 8 bytes, the rest untouched.
    client.upload(p, bytes(range(64)))
    assert client.status_of("Memset", dst=p, value=0xBEEF, element_size=2, width=3, height=2, pitch=8,
                            stream=LEGACY) == 0
    got = client.download(p, 16)
    assert got == bytes.fromhex("efbeefbeefbe0607" "efbeefbeefbe0e0f")


def test_download_larger_than_the_arena_is_refused(client):
    p = client.alloc(1 << 20)
    capacity = client.segment.download.capacity
    kind, values, _ = client.call("MemcpyDtoH", src=p, width=capacity + 1, height=1, src_pitch=capacity + 1,
                                  stream=LEGACY, dest=DEST_ARENA)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE)


def _shared_object(name: str, size: int, mode: int = 0o600) -> mmap.mmap:
    fd = os.open("/dev/shm" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode)
    os.fchmod(fd, mode)
    os.ftruncate(fd, size)
    mapping = mmap.mmap(fd, size)
    os.close(fd)
    return mapping


def test_pinned_regions(client):
    pid = os.getpid()
    other = f"/tally-pin-{pid + 1}-1"
    kind, values, text = client.call("HostRegister", other.encode(), size=4096, flags=0)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"not this client's" in text
    loose = f"/tally-pin-{pid}-900"
    _shared_object(loose, 4096, mode=0o644)
    try:
        kind, values, text = client.call("HostRegister", loose.encode(), size=4096, flags=0)
        assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"mode-0600" in text
    finally:
        os.unlink("/dev/shm" + loose)

    name = f"/tally-pin-{pid}-901"
    pinned = _shared_object(name, 8192)
    kind, values, _ = client.call("HostRegister", name.encode(), size=8192, flags=0)
    assert kind == "HostRegisterReply"
    region = values["region"]
    assert not os.path.exists("/dev/shm" + name)           # the server removed the name once mapped
    p = client.alloc(4096)
    pinned[100:356] = bytes(range(256))
    assert client.status_of("MemcpyHtoD", dst=p, width=256, height=1, dst_pitch=256, stream=LEGACY,
                            source=SOURCE_PINNED, region=region, region_offset=100) == 0
    assert client.download(p, 256) == bytes(range(256))
    # Device -> pinned, synchronous: answered once the bytes are in our mapping.
    assert client.status_of("MemcpyDtoH", src=p + 16, width=32, height=1, src_pitch=32, stream=LEGACY,
                            dest=DEST_PINNED, region=region, region_offset=4096) == 0
    assert pinned[4096:4128] == bytes(range(16, 48))
    assert client.status_of("MemcpyDtoH", src=p, width=64, height=1, src_pitch=64, stream=LEGACY,
                            dest=DEST_PINNED, region=region, region_offset=8192 - 32) == INVALID_VALUE
    assert client.status_of("HostUnregister", region=region) == 0
    assert client.status_of("HostUnregister", region=region) == INVALID_HANDLE


def test_mapped_pinned_memory_takes_memsets_and_copies_at_its_device_pointer(client):
    # cuMemHostGetDevicePointer gives the job's host address: the server takes ranges of
    # a region the device reaches there as the job's memory, and finishes a synchronous
    # memset or copy into it before answering (CUDA: host memory).
    pid, page = os.getpid(), mmap.PAGESIZE
    name = f"/tally-pin-{pid}-920"
    pinned = _shared_object(name, 2 * page)
    address = ctypes.addressof(ctypes.c_char.from_buffer(pinned))
    kind, values, _ = client.call("HostRegister", name.encode(), size=2 * page, address=address, flags=1)
    assert kind == "HostRegisterReply"
    region = values["region"]
    assert client.status_of("Memset", dst=address + 10, value=0x5A, element_size=1, width=100, height=1,
                            pitch=100, stream=LEGACY) == 0
    assert pinned[10:110] == b"\x5a" * 100 and pinned[110] == 0
    p = client.alloc(page)
    client.upload(p, bytes(range(256)))
    assert client.status_of("MemcpyDtoD", dst=address + page, src=p, width=256, height=1, dst_pitch=256,
                            src_pitch=256, stream=LEGACY) == 0
    assert pinned[page:page + 256] == bytes(range(256))
    assert client.download(address + page + 1, 3) == bytes([1, 2, 3])
    kind, values, text = client.call("Memset", dst=address + 2 * page - 8, value=0, element_size=1, width=16,
                                     height=1, pitch=16, stream=LEGACY)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"not memory this client owns" in text
    assert client.status_of("HostUnregister", region=region) == 0
    kind, values, _ = client.call("Memset", dst=address, value=0, element_size=1, width=16, height=1, pitch=16,
                                  stream=LEGACY)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE)        # gone with its region

    # A region whose address the device uses for other memory is not reachable there: refused, saying why.
    name = f"/tally-pin-{pid}-921"
    _shared_object(name, 2 * page)
    kind, values, _ = client.call("HostRegister", name.encode(), size=2 * page, address=p, flags=1)
    assert kind == "HostRegisterReply"
    kind, values_err, text = client.call("Memset", dst=p + page, value=0, element_size=1, width=16, height=1,
                                         pitch=16, stream=LEGACY)
    assert (kind, values_err["status"]) == ("Error", INVALID_VALUE) and b"cannot reach" in text
    assert client.status_of("HostUnregister", region=values["region"]) == 0
    assert client.status_of("MemFree", dptr=p) == 0


def test_managed_memory_is_the_clients_object_at_the_clients_address(client):
    pid, page = os.getpid(), mmap.PAGESIZE
    name = f"/tally-pin-{pid}-910"
    view = _shared_object(name, 2 * page)
    address = 0x7F12_3456_0000                      # where "the job" mapped it (any free address)
    for fields, status, text in [
        (dict(dptr=address, bytes=0, flags=1), INVALID_VALUE, b"0 bytes"),
        (dict(dptr=address, bytes=page, flags=4), INVALID_VALUE, b"CU_MEM_ATTACH_GLOBAL"),
        (dict(dptr=address + 8, bytes=page, flags=1), INVALID_VALUE, b"page-aligned"),
        (dict(dptr=0x7E00_0000_0000, bytes=page, flags=1), ALREADY_MAPPED, b"generic address windows"),
        (dict(dptr=address, bytes=4 * page, flags=1), INVALID_VALUE, b"holds"),
    ]:
        kind, values, got = client.call("MemAllocManaged", name.encode(), **fields)
        assert (kind, values["status"]) == ("Error", status) and text in got, (fields, got)
        if not os.path.exists("/dev/shm" + name):    # opened, then refused: put the name back
            view = _shared_object(name, 2 * page)
    kind, values, got = client.call("MemAllocManaged", f"/tally-pin-{pid + 1}-1".encode(), dptr=address,
                                    bytes=page, flags=1)
    assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"not this client's" in got

    assert client.call("MemAllocManaged", name.encode(), dptr=address, bytes=2 * page, flags=1)[0] == "Done"
    assert not os.path.exists("/dev/shm" + name)
    view[:4] = b"\x01\x02\x03\x04"                      # our write is the device's bytes ...
    assert client.download(address, 4) == b"\x01\x02\x03\x04"
    assert client.status_of("Memset", dst=address + 8, value=0x77, element_size=1, width=8, height=1, pitch=8,
                            stream=LEGACY) == 0
    assert client.status_of("StreamSynchronize", stream=LEGACY) == 0
    assert view[8:16] == b"\x77" * 8                    # ... and the device's writes are ours
    # The same device addresses cannot be taken twice.
    other = f"/tally-pin-{pid}-911"
    _shared_object(other, page)
    kind, values, got = client.call("MemAllocManaged", other.encode(), dptr=address + page, bytes=page, flags=1)
    assert (kind, values["status"]) == ("Error", ALREADY_MAPPED) and b"taken" in got
    assert client.status_of("MemFree", dptr=address) == 0
    assert client.status_of("MemFree", dptr=address) == INVALID_VALUE
    view[:4] = b"\x00\x00\x00\x00"                      # our mapping outlives the server's


def test_host_function_holds_its_stream(client):
    p = client.alloc(64)
    client.send("StreamCreate", stream=7, flags=0, priority=0)
    client.send("LaunchHostFunc", stream=7, callback=1)
    client.send("Memset", dst=p, value=0x11, element_size=1, width=64, height=1, pitch=64, stream=7)
    name, values = client.next_unsolicited()
    assert (name, values["callback"]) == ("HostFuncReady", 1)
    time.sleep(0.2)
    assert client.status_of("StreamQuery", stream=7) == NOT_READY        # held until we answer
    client.send("HostFuncDone", callback=1)
    assert client.status_of("StreamSynchronize", stream=7) == 0
    assert client.download(p, 64) == b"\x11" * 64


def test_legacy_stream_waits_for_blocking_streams_only(client):
    p = client.alloc(64)
    client.send("StreamCreate", stream=8, flags=0, priority=0)            # blocking
    client.send("StreamCreate", stream=9, flags=1, priority=0)            # CU_STREAM_NON_BLOCKING
    client.send("LaunchHostFunc", stream=8, callback=2)                   # holds stream 8
    client.send("Memset", dst=p, value=0x55, element_size=1, width=32, height=1, pitch=32, stream=8)
    assert client.next_unsolicited()[1]["callback"] == 2
    # Submitted later on the legacy stream: must run after stream 8's memset.
    client.send("Memset", dst=p, value=0x22, element_size=1, width=32, height=1, pitch=32, stream=LEGACY)
    client.send("Memset", dst=p + 32, value=0x33, element_size=1, width=32, height=1, pitch=32, stream=9)
    assert client.status_of("StreamSynchronize", stream=9) == 0            # not held
    time.sleep(0.2)
    assert client.status_of("StreamQuery", stream=LEGACY) == NOT_READY   # behind stream 8
    client.send("HostFuncDone", callback=2)
    assert client.status_of("StreamSynchronize", stream=LEGACY) == 0
    assert client.download(p, 64) == b"\x22" * 32 + b"\x33" * 32


def test_blocking_stream_waits_for_the_legacy_stream(client):
    p = client.alloc(64)
    client.send("StreamCreate", stream=10, flags=0, priority=0)
    client.send("LaunchHostFunc", stream=LEGACY, callback=3)              # holds the legacy stream
    assert client.next_unsolicited()[1]["callback"] == 3
    client.send("Memset", dst=p, value=0x44, element_size=1, width=64, height=1, pitch=64, stream=10)
    time.sleep(0.2)
    assert client.status_of("StreamQuery", stream=10) == NOT_READY
    client.send("HostFuncDone", callback=3)
    assert client.status_of("StreamSynchronize", stream=10) == 0
    assert client.download(p, 64) == b"\x44" * 64


def test_large_module_arrives_staged_through_the_upload_arena(client):
    # ~100 KiB of PTX: more than the client sends inline, so it goes in chunks.
    entries = "".join(f".visible .entry k{i}(.param .u64 p{i})\n{{ ret; }}\n" for i in range(2500))
    ptx = f".version 8.0\n.target sm_80\n.address_size 64\n{entries}\0".encode()
    arena = client.segment.upload
    half = len(ptx) // 2
    for piece in (ptx[:half], ptx[half:]):
        offset = arena.reserve(len(piece))
        arena.write(offset, piece)
        client.send("StageBytes", arena_offset=offset, size=len(piece))
    # Loading 2,500 kernels (with their sliced and PTB variants) takes ~5 s of CPU here, and
    # over 10 s on a loaded 2-core machine: this test is about staging, so it waits long.
    kind, values, _ = client.call("ModuleLoad", size=len(ptx), staged=1, timeout=120)
    assert kind == "ModuleLoadReply", values
    kind, fn, _ = client.call("GetFunction", b"k2499", module=values["module"])
    assert kind == "FunctionReply" and fn["param_count"] == 1
    kind, values, _ = client.call("ModuleLoad", size=10, staged=1)       # nothing staged any more
    assert (kind, values["status"]) == ("Error", INVALID_VALUE)


def _corpus_module(client, source: str) -> int:
    from ptx_corpus import CORPUS_DIR, compile_ptx
    ptx = compile_ptx(CORPUS_DIR / source, arch="sm_90").encode() + b"\0"
    kind, values, _ = client.call("ModuleLoad", ptx, size=len(ptx))
    assert kind == "ModuleLoadReply", values
    return values["module"]


def _function(client, module: int, name: bytes) -> int:
    kind, fn, _ = client.call("GetFunction", name, module=module)
    assert kind == "FunctionReply", fn
    return fn["function"]


def _wait_idle(client, stream=LEGACY, timeout=30.0) -> None:
    deadline = time.monotonic() + timeout
    while client.status_of("StreamQuery", stream=stream) == NOT_READY:
        assert time.monotonic() < deadline, "the stream never went idle"
        time.sleep(0.01)


def test_kernel_output_reaches_a_sync_that_finds_the_streams_idle(client):
    # The kernel has finished (and printed) before the job synchronizes: the
    # synchronizing call still delivers its output, ahead of its reply.
    module = _corpus_module(client, "printf_kernel.cu")
    fn = _function(client, module, b"print_values")
    value, out = client.alloc(8), client.alloc(8)
    client.upload(value, struct.pack("<ii", 41, 42))
    client.send("LaunchKernel", struct.pack("<QQ", value, out), function=fn, stream=LEGACY,
                grid=(2, 1, 1), block=(32, 1, 1))
    _wait_idle(client)
    assert client.unsolicited == []                       # a query delivers nothing
    assert client.status_of("CtxSynchronize") == 0
    assert sorted(client.printed.splitlines()) == ["block 0 value 41", "block 1 value 42"]
    assert client.download(out, 8) == struct.pack("<ii", 82, 84)


def test_kernel_output_of_a_kernel_that_then_faults_comes_with_the_error(client):
    module = _corpus_module(client, "printf_kernel.cu")
    fn = _function(client, module, b"print_values")
    value = client.alloc(4)
    client.upload(value, struct.pack("<i", 7))
    # Thread 0 prints, then stores through a pointer no allocation covers.
    client.send("LaunchKernel", struct.pack("<QQ", value, 0x10), function=fn, stream=LEGACY,
                grid=(1, 1, 1), block=(32, 1, 1))
    time.sleep(1.0)                                       # long done: the sync finds the stream idle
    kind, values, _ = client.call("CtxSynchronize")
    assert (kind, values["status"]) == ("Error", 700)                 # CUDA_ERROR_ILLEGAL_ADDRESS
    assert client.printed == "block 0 value 7\n"
    assert client.status_of("CtxSynchronize") == 0


def test_module_unload_waits_for_queued_kernels_of_the_module(client):
    # cuModuleUnload with launches of the module still queued: they run as
    # launched, on the module's globals (CUDA finishes them before unloading).
    module = _corpus_module(client, "device_global.cu")
    use_globals = _function(client, module, b"use_globals")
    read_counter = _function(client, module, b"read_counter")
    n = 1000
    src, dst, counter = client.alloc(4 * n), client.alloc(4 * n), client.alloc(4)
    client.upload(src, bytes(4 * n))
    client.send("LaunchHostFunc", stream=LEGACY, callback=4)             # holds the legacy stream
    assert client.next_unsolicited()[1]["callback"] == 4
    client.send("LaunchKernel", struct.pack("<QQi", src, dst, n), function=use_globals,
                stream=LEGACY, grid=(8, 1, 1), block=(128, 1, 1))
    client.send("LaunchKernel", struct.pack("<Q", counter), function=read_counter, stream=LEGACY,
                grid=(1, 1, 1), block=(1, 1, 1))
    client.send("ModuleUnload", module=module)
    time.sleep(0.2)
    client.send("HostFuncDone", callback=4)
    assert client.status_of("CtxSynchronize") == 0
    assert struct.unpack("<i", client.download(counter, 4)) == (n,)
    assert struct.unpack("<8i", client.download(dst, 32)) == (0, 3, 3, 6, 9, 15, 24, 39)
    kind, values, _ = client.call("GetFunction", b"use_globals", module=module)
    assert (kind, values["status"]) == ("Error", INVALID_HANDLE)


def test_kernel_output_of_a_destroyed_stream_reaches_the_next_sync(client):
    # cuStreamDestroy returns at once; what the stream's kernels print still
    # comes out at the job's next synchronization, as with CUDA's context-wide
    # printf buffer.
    module = _corpus_module(client, "printf_kernel.cu")
    fn = _function(client, module, b"print_values")
    value, out = client.alloc(4), client.alloc(4)
    client.upload(value, struct.pack("<i", 5))
    client.send("StreamCreate", stream=11, flags=0, priority=0)
    client.send("LaunchKernel", struct.pack("<QQ", value, out), function=fn, stream=11,
                grid=(1, 1, 1), block=(32, 1, 1))
    assert client.status_of("StreamDestroy", stream=11) == 0
    time.sleep(0.5)
    assert client.status_of("CtxSynchronize") == 0
    assert client.printed == "block 0 value 5\n"
    assert client.download(out, 4) == struct.pack("<i", 10)


def _request(client, name, **fields) -> int:
    """Send a synchronous request without waiting for its reply; returns its tag."""
    client._tag += 1
    c = protocol.codec(name)
    client.segment.request_ring.push(c.kind, client._tag, c.pack(b"", **fields))
    return client._tag


def _reply(client, tag, timeout):
    """The reply to `tag` if it comes within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        got = client.segment.completion_ring.pop(max(deadline - time.monotonic(), 0))
        if got is None:
            return None
        kind, got_tag, payload = got
        reply = protocol.BY_KIND[kind]
        values, rest = reply.unpack(payload)
        if got_tag == 0:
            client.unsolicited.append((reply.message.name, values))
            continue
        assert got_tag == tag
        return reply.message.name, values, bytes(rest)


def test_work_of_a_destroyed_stream_still_orders_the_legacy_stream(client):
    p = client.alloc(64)
    client.upload(p, bytes(64))
    client.send("StreamCreate", stream=12, flags=0, priority=0)          # blocking
    client.send("LaunchHostFunc", stream=12, callback=5)                 # holds stream 12
    assert client.next_unsolicited()[1]["callback"] == 5
    client.send("Memset", dst=p, value=0x11, element_size=1, width=64, height=1, pitch=64, stream=12)
    assert client.status_of("StreamDestroy", stream=12) == 0             # returns; its work goes on
    tag = _request(client, "MemcpyDtoH", src=p, width=64, height=1, src_pitch=64, stream=LEGACY,
                   dest=DEST_ARENA)
    assert _reply(client, tag, 0.3) is None           # the legacy stream waits for stream 12's memset
    client.send("HostFuncDone", callback=5)
    kind, values, _ = _reply(client, tag, 10)
    assert kind == "MemcpyDtoHReply", values
    data = client.segment.download.read(values["arena_offset"], values["size"])
    client.segment.download.release(values["arena_offset"], values["size"])
    assert data == b"\x11" * 64


def test_context_synchronize_waits_for_a_destroyed_stream(client):
    p = client.alloc(64)
    client.upload(p, bytes(64))
    client.send("StreamCreate", stream=13, flags=1, priority=0)          # non-blocking
    client.send("LaunchHostFunc", stream=13, callback=6)
    assert client.next_unsolicited()[1]["callback"] == 6
    client.send("Memset", dst=p, value=0x22, element_size=1, width=64, height=1, pitch=64, stream=13)
    assert client.status_of("StreamDestroy", stream=13) == 0
    tag = _request(client, "CtxSynchronize")
    assert _reply(client, tag, 0.3) is None                              # stream 13's work is pending
    client.send("HostFuncDone", callback=6)
    assert _reply(client, tag, 10)[0] == "Done"
    assert client.download(p, 64) == b"\x22" * 64


def test_event_synchronize_delivers_kernel_output(client):
    # cuEventSynchronize is one of CUDA's printf flush points.
    module = _corpus_module(client, "printf_kernel.cu")
    fn = _function(client, module, b"print_values")
    value, out = client.alloc(4), client.alloc(4)
    client.upload(value, struct.pack("<i", 3))
    assert client.status_of("EventCreate", event=77, flags=2) == 0
    for wait_first in (False, True):
        client.printed = ""
        client.send("LaunchKernel", struct.pack("<QQ", value, out), function=fn, stream=LEGACY,
                    grid=(1, 1, 1), block=(32, 1, 1))
        client.send("EventRecord", event=77, stream=LEGACY)
        if wait_first:
            time.sleep(0.5)                     # complete before the call: answered at once
        assert client.status_of("EventSynchronize", event=77) == 0
        assert client.printed == "block 0 value 3\n"
    assert client.status_of("EventDestroy", event=77) == 0


# ---- requests the fuzz test (test_server_fuzz.py) found mishandled, one test each ----

OUT_OF_MEMORY = 2


def test_a_tagged_notify_is_answered(client):
    assert client.status_of("Notify", value=1) == 0


def test_default_streams_cannot_be_destroyed(client):
    # Used to crash the handler (KeyError) and answer "internal error".
    assert client.status_of("StreamDestroy", stream=LEGACY) == INVALID_HANDLE
    assert client.status_of("StreamDestroy", stream=PER_THREAD_STREAM_BIT | 3) == INVALID_HANDLE
    assert client.status_of("CtxSynchronize") == 0


def test_a_failed_async_free_leaves_the_memory_owned(client):
    # Used to forget the allocation without freeing it: leaked until the server stopped.
    p = client.alloc(4096)
    assert client.status_of("MemFreeAsync", dptr=p, stream=999) == INVALID_HANDLE
    assert client.status_of("MemFree", dptr=p) == 0


def test_zero_byte_rows_are_nothing_to_copy_however_many(client):
    # 10**14 empty rows used to become a list of 10**14 copies and kill the server.
    p = client.alloc(256)
    assert client.status_of("MemcpyDtoD", dst=p, src=p, width=0, height=10**14, dst_pitch=4, src_pitch=4,
                            stream=LEGACY) == 0
    kind, values, _ = client.call("MemcpyHtoD", b"", dst=p, width=0, height=10**14, dst_pitch=4, stream=LEGACY,
                                  source=SOURCE_INLINE)
    assert kind == "Done", values


def test_a_bogus_upload_chunk_is_the_jobs_error(client):
    # An arena chunk the client never reserved: INVALID_VALUE, not an internal error.
    assert client.status_of("StageBytes", arena_offset=579, size=12) == INVALID_VALUE
    assert client.status_of("CtxSynchronize") == 0


def test_one_job_cannot_reserve_the_whole_address_space(client):
    kind, values, text = client.call("MemAddressReserve", bytes=1 << 40, alignment=0, addr=0)
    assert (kind, values["status"]) == ("Error", OUT_OF_MEMORY), text
    assert b"address space" in text
    kind, values, _ = client.call("MemAddressReserve", bytes=2 << 20, alignment=0, addr=0)
    assert kind == "MemAddressReply"
    assert client.status_of("MemAddressFree", dptr=values["dptr"], bytes=2 << 20) == 0


def test_a_reservation_lands_on_its_address_hint_when_that_is_free(client):
    # What a cuda-backend tally-server relies on to place a migrated job's memory.
    _kind, first, _ = client.call("MemAddressReserve", bytes=4 << 20, alignment=0, addr=0)
    hint = first["dptr"] + (2 << 20)
    assert client.status_of("MemAddressFree", dptr=first["dptr"], bytes=4 << 20) == 0
    _kind, placed, _ = client.call("MemAddressReserve", bytes=2 << 20, alignment=0, addr=hint)
    assert placed["dptr"] == hint
    # Taken: the reservation lands elsewhere, as CUDA's would.
    _kind, other, _ = client.call("MemAddressReserve", bytes=2 << 20, alignment=0, addr=hint)
    assert other["dptr"] not in (0, hint)
    for ptr in (hint, other["dptr"]):
        assert client.status_of("MemAddressFree", dptr=ptr, bytes=2 << 20) == 0


def test_cluster_launches_the_client_did_not_check(server, client):
    # A client that skipped the driver's launch-time checks: the server's backend refuses
    # the shape with CUDA's code and the reason, and the job and the server go on.
    ptx = (b".version 8.0\n.target sm_90\n.address_size 64\n"
           b".visible .entry k(.param .u64 out)\n.reqnctapercluster 2, 1, 1\n{\n"
           b"\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [out];\n"
           b"\tmov.u32 %r1, %cluster_nctarank;\n\tst.global.u32 [%rd1], %r1;\n\tret;\n}\n\0")
    kind, values, _ = client.call("ModuleLoad", ptx, size=len(ptx))
    kind, fn, _ = client.call("GetFunction", b"k", module=values["module"])
    out = client.alloc(4)
    params = struct.pack("<Q", out)
    invalid_cluster_size = 912
    for cluster, grid, code, why in (
            ((3, 1, 1), (6, 1, 1), invalid_cluster_size, b"compiled for cluster 2x1x1"),
            ((0, 0, 0), (3, 1, 1), invalid_cluster_size, b"grid 3x1x1 is not a multiple of cluster 2x1x1"),
            ((0, 1, 1), (2, 1, 1), INVALID_VALUE, b"with cluster dimension (0, 1, 1)")):
        client.send("LaunchKernel", params, function=fn["function"], stream=LEGACY, grid=grid, block=(32, 1, 1),
                    cluster=cluster)
        kind, err, text = client.call("CtxSynchronize")
        assert (kind, err["status"], why in text) == ("Error", code, True), text
    # The kernel's own shape applies to a launch that names none.
    client.send("LaunchKernel", params, function=fn["function"], stream=LEGACY, grid=(4, 1, 1), block=(32, 1, 1))
    assert client.status_of("CtxSynchronize") == 0
    assert struct.unpack("<I", client.download(out, 4)) == (2,)
    assert b"compiled for cluster 2x1x1" in server.process.log().encode()
