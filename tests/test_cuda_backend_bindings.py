"""The `cuda` backend's cuda-bindings calls without a GPU: a job run under
tally-run constructs CudaBackend, so cuda-bindings loads tally's own
libcuda.so.1, which forwards every call to a tally-server on the emulator.
Argument order, argument types (enums where ints are expected), and the shapes
of the returned tuples are checked by a real driver-API implementation."""
from __future__ import annotations

from ptx_corpus import CORPUS_DIR, compile_ptx
from e2e_helpers import emulator_server, run_job  # noqa: F401  (fixture)

import cuda.bindings.driver  # noqa: E402,F401  (a test dependency: this file must run, not skip)

JOB = r"""
import array, struct, sys
from tally.backends.base import ModuleSource
from tally.protocol.errors import DeviceError
from tally.backends.cuda import CudaBackend

b = CudaBackend(0)
d = b.describe()
assert d.name == "tally emulator" and d.compute_capability == (9, 0) and d.sm_count > 0, d
assert len(d.uuid) == 16 and d.total_memory > 0 and d.driver_version > 0, d
m = b.module_load(ModuleSource(original=b"", ptx=open(sys.argv[1]).read()))
fn = b.module_function(m, "vector_add")
assert [(p.offset, p.size) for p in fn.params] == [(0, 8), (8, 8), (16, 8), (24, 4)], fn.params
n = 1024
x, y, out = b.mem_alloc(4 * n), b.mem_alloc(4 * n), b.mem_alloc(4 * n)
free, total = b.mem_info()
assert 0 < free < total, (free, total)
s, s2 = b.stream_create(0), b.stream_create(-1)
data = array.array("f", range(n)).tobytes()
b.memcpy_htod_async(x, memoryview(data), s)
b.memset_async(y, 0x3F800000, 4, n, s)                       # 1.0f
start, end, untimed = b.event_create(True), b.event_create(True), b.event_create(False)
b.event_record(start, s)
b.launch(fn, (n // 128, 1, 1), (128, 1, 1), 0, s, struct.pack("<QQQi", x, y, out, n))
b.event_record(end, s)
ran = []
b.host_callback(s, lambda: ran.append(True))
b.stream_wait_event(s2, end)
b.event_record(untimed, s2)
b.memcpy_dtod_async(y, out, 4 * n, s2)
b.memset_async(out, 0, 1, 4 * n, s2)
b.memset_async(out, 7, 2, 2, s2)
b.stream_synchronize(s2)
b.event_synchronize(untimed)
assert b.event_query(end)
b.stream_synchronize(s)                                      # the host function runs in this process
assert b.stream_query(s) and ran == [True]
assert b.event_elapsed_ms(start, end) >= 0.0
host = bytearray(4 * n)
b.memcpy_dtoh_async(memoryview(host), y, s)
b.synchronize()
assert array.array("f", bytes(host)).tolist() == [i + 1.0 for i in range(n)]
b.memcpy_dtoh_async(memoryview(host), out, s)
b.stream_synchronize(s)
assert bytes(host[:8]) == bytes([7, 0, 7, 0, 0, 0, 0, 0])
try:
    b.mem_free(x + 4)
except DeviceError as e:
    assert e.code == 1 and "CUDA_ERROR_INVALID_VALUE" in e.message, e.message
else:
    raise AssertionError("freeing a pointer that is no allocation succeeded")
# Virtual memory: two chunks mapped side by side, a copy across the seam, unmapped and freed.
G = 2 << 20
base = b.vmm_reserve(4 * G, G)
chunks = [b.vmm_create(G), b.vmm_create(G)]
b.vmm_map(base, G, 0, chunks[0])
b.vmm_map(base + G, G, 0, chunks[1])
b.vmm_set_access(base, 2 * G, True)
b.memcpy_htod_async(base + G - 2048, memoryview(data), s)
b.memcpy_dtoh_async(memoryview(host), base + G - 2048, s)
b.stream_synchronize(s)
assert bytes(host) == data
b.vmm_unmap(base, 2 * G)
for chunk in chunks:
    b.vmm_release(chunk)
b.vmm_free(base, 4 * G)
# Pinned memory the server registers for DMA, copied to and from in place.
import mmap as mmap_module
pinned = mmap_module.mmap(-1, 8192)
pinned_view = memoryview(pinned)
b.host_register(pinned_view)
pinned_view[:16] = bytes(range(16))
b.memcpy_htod_async(x, pinned_view[:16], s)
b.memcpy_dtoh_async(pinned_view[4096:4112], x, s)
b.stream_synchronize(s)
assert bytes(pinned_view[4096:4112]) == bytes(range(16))
b.host_unregister(pinned_view)
# Managed memory: the job's object mapped at the job's address here too and registered
# (tally's driver answers the same pointer, as a GPU that can use host pointers does).
import ctypes, os
from tally.backends import cuda_host_memory
fd = os.memfd_create("managed")
os.ftruncate(fd, 8192)
address = cuda_host_memory._libc.mmap(None, 8192, 3, 0x22, -1, 0)      # a free address: map, then unmap
cuda_host_memory._libc.munmap(address, 8192)
b.managed_alloc(address, 5000, fd)
ctypes.memmove(address + 4096, b"seen", 4)                          # mapped here, shared with the object
assert os.pread(fd, 4, 4096) == b"seen"
try:
    b.managed_alloc(address, 4096, fd)
except DeviceError as e:
    assert e.code == 208, e.message                                 # CUDA_ERROR_ALREADY_MAPPED
else:
    raise AssertionError("mapping managed memory over managed memory succeeded")
b.mem_free(address)
again = cuda_host_memory._libc.mmap(address, 4096, 3, 0x22 | 0x100000, -1, 0)   # the range is free again
assert again == address, (again, address)
cuda_host_memory._libc.munmap(again, 4096)
os.close(fd)
for ev in (start, end, untimed):
    b.event_destroy(ev)
for st in (s, s2):
    b.stream_destroy(st)
for p in (x, y, out):
    b.mem_free(p)
b.module_unload(m)
b.close()
print("cuda backend ok")
"""


def test_cuda_backend_calls_through_tallys_own_driver(emulator_server, tmp_path):  # noqa: F811
    ptx = tmp_path / "vector_add.ptx"
    ptx.write_text(compile_ptx(CORPUS_DIR / "vector_add.cu", arch="sm_90"))
    script = tmp_path / "job.py"
    script.write_text(JOB)
    import sys
    job = run_job(emulator_server.socket, sys.executable, str(script), str(ptx), priority="high")
    assert job.returncode == 0, job.stdout + job.stderr
    assert "cuda backend ok" in job.stdout
