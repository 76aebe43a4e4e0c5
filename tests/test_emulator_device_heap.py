"""The emulator's device heap at the backend level: the allocator (first fit, blocks
coalesce when freed, 16-byte alignment, NULL when full), the extern `malloc`/`free`
declarations nvcc and numba's runtime emit lowered to it, the heap a module's kernels
share (attached by the server, or the driver's default 8 MiB when the backend runs on
its own), and a kernel that calls malloc never taking the C++ data plane (its heap
goes with each launch)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tally._core import emulator as core
from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.protocol.errors import CUDA_ERROR_ILLEGAL_ADDRESS, DeviceError

PTX = """.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.extern .func free(.param .b64 free_param_0);

// out[tid] = the block malloc(size) returned for this thread (kept, not freed)
.visible .entry take(.param .u64 out, .param .u64 size)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [size];
    mov.u32 %r1, %tid.x;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd2;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd3, [retval0];
    }
    mul.wide.u32 %rd4, %r1, 8;
    add.s64 %rd5, %rd1, %rd4;
    st.global.u64 [%rd5], %rd3;
    ret;
}

// free(blocks[tid])
.visible .entry give(.param .u64 blocks)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [blocks];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 8;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u64 %rd3, [%rd5];
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd3;
    call.uni free, (param0);
    }
    ret;
}

.visible .entry plain(.param .u64 out)
{
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    st.global.u64 [%rd1], 7;
    ret;
}
"""


def test_allocator_first_fit_coalescing_and_exhaustion():
    memory = core.DeviceMemory(1 << 30)
    heap = core.DeviceHeap(memory, 1 << 20)
    assert memory.used == 1 << 20
    blocks = [heap.malloc(100) for _ in range(4)]
    assert all(b % 16 == 0 for b in blocks) and blocks == sorted(blocks)
    assert [b - blocks[0] for b in blocks] == [0, 112, 224, 336]      # 100 rounded up to 16
    assert heap.free(blocks[1]) and heap.free(blocks[2])
    assert heap.malloc(200) == blocks[1]                               # the two freed blocks, joined
    assert not heap.free(blocks[2])                                    # inside a live block: not one
    assert not heap.free(blocks[0] + 16) and heap.free(0)
    assert heap.malloc(1 << 20) == 0                                   # no free range that large
    for b in (blocks[0], blocks[1], blocks[3]):
        assert heap.free(b)
    assert heap.used == 0 and heap.malloc(1 << 20) == heap.base        # all of it coalesced again
    assert heap.malloc(0) == 0
    del heap
    assert memory.used == 0
    empty = core.DeviceHeap(memory, 0)
    assert empty.size == 0 and empty.malloc(16) == 0 and memory.used == 0


@pytest.fixture
def backend():
    b = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    yield b
    b.close()


def _run(backend, module, name, grid, block, *pointers):
    s = backend.stream_create()
    try:
        backend.launch(backend.module_function(module, name), grid, block, 0, s,
                       b"".join(struct.pack("<Q", p) for p in pointers))
        backend.stream_synchronize(s)
    finally:
        backend.stream_destroy(s)


def _read(backend, ptr, n):
    out = np.zeros(n, np.uint64)
    s = backend.stream_create()
    backend.memcpy_dtoh_async(memoryview(out).cast("B"), ptr, s)
    backend.stream_synchronize(s)
    backend.stream_destroy(s)
    return out


def test_kernels_of_a_module_share_the_attached_heap(backend):
    module = backend.module_load(ModuleSource(original=PTX.encode(), ptx=PTX))
    fns = {n: backend.module_function(module, n) for n in ("take", "give", "plain")}
    assert [backend.function_uses_heap(f) for f in fns.values()] == [True, True, False]
    heap = backend.heap_create(64 << 10)
    backend.heap_attach(module, heap)
    out = backend.mem_alloc(8 * 256)
    _run(backend, module, "take", (1, 1, 1), (256, 1, 1), out, 512)
    got = _read(backend, out, 256)
    taken = [int(v) for v in got if v]
    assert len(taken) == 128 and len(set(taken)) == 128          # 64 KiB in 512-byte blocks; the rest NULL
    assert all(heap.base <= p < heap.base + heap.size for p in taken) and heap.live_blocks == 128
    _run(backend, module, "give", (1, 1, 1), (256, 1, 1), out)                 # free(NULL) is fine too
    assert heap.used == 0


def test_free_of_an_unknown_pointer_fails_the_launch(backend):
    module = backend.module_load(ModuleSource(original=PTX.encode(), ptx=PTX))
    out = backend.mem_alloc(8 * 32)
    s = backend.stream_create()
    backend.memset_async(out, 0x40, 1, 8 * 32, s)
    backend.launch(backend.module_function(module, "give"), (1, 1, 1), (32, 1, 1), 0, s, struct.pack("<Q", out))
    with pytest.raises(DeviceError) as e:
        backend.stream_synchronize(s)
    assert e.value.code == CUDA_ERROR_ILLEGAL_ADDRESS
    assert "free(0x4040404040404040): not a block that malloc returned" in str(e.value)


def test_backend_on_its_own_gives_a_module_the_default_heap(backend):
    module = backend.module_load(ModuleSource(original=PTX.encode(), ptx=PTX))
    assert module.heap is None
    out = backend.mem_alloc(8)
    _run(backend, module, "take", (1, 1, 1), (1, 1, 1), out, 1 << 20)
    assert module.heap.size == 8 << 20 and int(_read(backend, out, 1)[0]) == module.heap.base
    used = backend.mem_info()[1] - backend.mem_info()[0]
    backend.module_unload(module)                       # the module's heap goes with it
    assert backend.mem_info()[1] - backend.mem_info()[0] == used - (8 << 20)


def test_heap_kernels_stay_off_the_data_plane(backend):
    module = backend.module_load(ModuleSource(original=PTX.encode(), ptx=PTX))
    register = backend.data_plane().register_function

    class Plane:
        added = []

        def add_emulator_function(self, *args):
            self.added.append(args[0])

    plane = Plane()
    assert not register(plane, 1, backend.module_function(module, "take"), 16)
    assert register(plane, 2, backend.module_function(module, "plain"), 8)
    assert plane.added == [2]
