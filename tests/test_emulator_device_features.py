"""Device features real compilers emit, at the PTX level on the emulator backend:
`warpSize` (the operand WARP_SZ), the reserved shared-memory registers
(%reserved_smem_offset_*, %aggr_smem_size) and the cooperative-groups tiles that
use them, and a failing `assert` (__assertfail). The CUDA source below is
compiled by nvcc (cached like the corpus); results are checked against Python."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.protocol.errors import CUDA_ERROR_ASSERT, DeviceError
from tally.backends.device_attributes import RESERVED_SHARED_MEMORY_PER_BLOCK
from tally.backends.emulator import EmulatorBackend

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF

SOURCE = r"""#include <cassert>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// out[i] = warpSize * 1000 + i % warpSize
extern "C" __global__ void warp_width(int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = warpSize * 1000 + i % warpSize;
}

// One thread reports the reserved region's registers, then every thread writes its id
// through a generic pointer at %reserved_smem_offset_1 + 4 * (tid % 64) and reads the
// neighbour's back after a barrier.
extern "C" __global__ void reserved_region(unsigned* regs, int* neighbours)
{
    __shared__ int own[40];
    extern __shared__ int dynamic[];
    unsigned begin, end, cap, slot0, slot1, aggr, total;
    asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(begin));
    asm volatile("mov.u32 %0, %%reserved_smem_offset_end;" : "=r"(end));
    asm volatile("mov.u32 %0, %%reserved_smem_offset_cap;" : "=r"(cap));
    asm volatile("mov.u32 %0, %%reserved_smem_offset_0;" : "=r"(slot0));
    asm volatile("mov.u32 %0, %%reserved_smem_offset_1;" : "=r"(slot1));
    asm volatile("mov.u32 %0, %%aggr_smem_size;" : "=r"(aggr));
    asm volatile("mov.u32 %0, %%total_smem_size;" : "=r"(total));
    own[threadIdx.x % 40] = 1;
    dynamic[threadIdx.x % 25] = 2;
    int* scratch = (int*)__cvta_shared_to_generic(slot1);
    scratch[threadIdx.x % 64] = (int)threadIdx.x;
    __syncthreads();
    // own and dynamic read back 1 and 2: they add nothing, but keep the arrays alive.
    neighbours[threadIdx.x] = scratch[(threadIdx.x + 1) % 64] + own[(threadIdx.x + 1) % 40] - 1 +
                              dynamic[(threadIdx.x + 1) % 25] - 2;
    if (threadIdx.x == 0) {
        regs[0] = begin; regs[1] = end; regs[2] = cap; regs[3] = slot0; regs[4] = slot1; regs[5] = aggr;
        regs[6] = total;
    }
}

// Sum of each tile of 64 threads (cooperative groups synchronize multi-warp tiles
// through the reserved region).
extern "C" __global__ void tile64_sums(const int* x, int* sums)
{
    cg::thread_block_tile<64> tile = cg::tiled_partition<64>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int s = cg::reduce(tile, x[i], cg::plus<int>());
    if (tile.thread_rank() == 0) sums[i / 64] = s;
}

// 64- and 128-bit a * b + c from 32- and 64-bit halves, through the carry chain
// (mad.lo.cc, madc.hi, madc.lo.cc, madc.hi.cc) NVVM emits for wide products.
extern "C" __global__ void wide_multiply_add(const unsigned long long* x, unsigned long long* out)
{
    int i = threadIdx.x;
    unsigned long long a = x[4 * i], b = x[4 * i + 1], c = x[4 * i + 2], d = x[4 * i + 3];
    unsigned lo, hi;
    asm("mad.lo.cc.u32 %0, %2, %3, %4;\n\tmadc.hi.u32 %1, %2, %3, %5;"
        : "=r"(lo), "=r"(hi) : "r"((unsigned)a), "r"((unsigned)b), "r"((unsigned)c), "r"((unsigned)d));
    out[3 * i] = ((unsigned long long)hi << 32) | lo;
    unsigned long long r0, r1, r2;
    // (a * b).lo + c with carry, (a * b).hi + d + carry with carry, then 0 + 0 + carry.
    asm("mad.lo.cc.u64 %0, %3, %4, %5;\n\tmadc.hi.cc.u64 %1, %3, %4, %6;\n\tmadc.lo.u64 %2, 0, 0, 0;"
        : "=l"(r0), "=l"(r1), "=l"(r2) : "l"(a), "l"(b), "l"(c), "l"(d));
    out[3 * i + 1] = r0;
    out[3 * i + 2] = r1 + (r2 << 63);
}

// bmsk (CUB's radix sort makes its digit masks with it): out[2i] clamp, out[2i+1] wrap.
extern "C" __global__ void bit_masks(const unsigned* start, const unsigned* width, unsigned* out)
{
    int i = threadIdx.x;
    unsigned clamp, wrap;
    asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(clamp) : "r"(start[i]), "r"(width[i]));
    asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(wrap) : "r"(start[i]), "r"(width[i]));
    out[2 * i] = clamp;
    out[2 * i + 1] = wrap;
}

// Threads whose x is negative fail the assert.
extern "C" __global__ void non_negative(const int* x, int* passed)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    assert(x[i] >= 0);
    atomicAdd(passed, 1);
}
"""


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_device_features.cu", SOURCE, "sm_90")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module, ptx
    backend.close()


def launch(device, kernel, grid, block, arrays, shared=0):
    """Runs `kernel` on device copies of `arrays` (in parameter order); returns them read back."""
    backend, module, _ = device
    s = backend.stream_create()
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    try:
        for p, a in zip(ptrs, arrays):
            backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
        backend.launch(backend.module_function(module, kernel), grid, block, shared, s,
                       b"".join(struct.pack("<Q", p) for p in ptrs))
        out = [a.copy() for a in arrays]
        for p, a in zip(ptrs, out):
            backend.memcpy_dtoh_async(memoryview(a).cast("B"), p, s)
        backend.stream_synchronize(s)
        return out
    finally:
        for p in ptrs:
            backend.mem_free(p)
        backend.stream_destroy(s)


def test_warp_size_operand(device):
    assert "WARP_SZ" in device[2]
    (out,) = launch(device, "warp_width", (2, 1, 1), (96, 1, 1), [np.zeros(192, np.int32)])
    np.testing.assert_array_equal(out, 32000 + np.arange(192) % 32)


def test_reserved_shared_memory_registers(device):
    regs, neighbours = launch(device, "reserved_region", (1, 1, 1), (128, 1, 1),
                              [np.zeros(7, np.uint32), np.zeros(128, np.int32)], shared=100)
    begin, end, cap, slot0, slot1, aggr, total = (int(v) for v in regs)
    assert total == 160 + 100                       # the kernel's own static and dynamic bytes
    assert cap == RESERVED_SHARED_MEMORY_PER_BLOCK and end - begin == cap
    assert begin >= total                            # after the kernel's own shared memory
    assert begin <= slot0 < slot1 and slot1 + 288 <= end   # cooperative groups need 288 bytes at slot 1
    assert aggr == end
    # Threads t and t + 64 share a slot; whichever wrote last, the value is one of them.
    want = (np.arange(128) + 1) % 64
    assert all(v in (w, w + 64) for v, w in zip(neighbours, want)), neighbours


def test_cooperative_groups_tile_of_64(device):
    x = np.random.default_rng(7).integers(-1000, 1000, 512).astype(np.int32)
    _, sums = launch(device, "tile64_sums", (2, 1, 1), (256, 1, 1), [x, np.zeros(8, np.int32)])
    np.testing.assert_array_equal(sums, x.reshape(8, 64).sum(1))


def test_failed_assert_prints_cuda_message_and_fails_with_assert(device):
    x = np.arange(256, dtype=np.int32)
    x[128 + 3] = -1
    x[128 + 7] = -2                                  # two threads of one warp of block 1
    with pytest.raises(DeviceError) as e:
        launch(device, "non_negative", (2, 1, 1), (128, 1, 1), [x, np.zeros(1, np.int32)])
    assert e.value.code == CUDA_ERROR_ASSERT
    assert "`x[i] >= 0`" in e.value.message and "block (1,0,0)" in e.value.message
    lines = e.value.stderr.splitlines()
    assert len(lines) == 2
    for line, thread in zip(lines, (3, 7)):
        assert line.endswith(f": void non_negative(const int *, int *): block: [1,0,0], thread: [{thread},0,0] "
                             "Assertion `x[i] >= 0` failed."), line
        assert line.split(":")[0].endswith("emulator_device_features.cu")
    # The device keeps working for the next launch.
    _, passed = launch(device, "non_negative", (2, 1, 1), (128, 1, 1), [np.arange(256, dtype=np.int32),
                                                                          np.zeros(1, np.int32)])
    assert passed[0] == 256


def test_multiply_add_carry_chains(device):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 2**64, size=4 * 32, dtype=np.uint64)
    x[:4] = 2**64 - 1                              # every carry set
    (_, out) = launch(device, "wide_multiply_add", (1, 1, 1), (32, 1, 1), [x, np.zeros(3 * 32, np.uint64)])
    for i in range(32):
        a, b, c, d = (int(v) for v in x[4 * i:4 * i + 4])
        product32 = (a & M32) * (b & M32)
        lo32 = (product32 & M32) + (c & M32)
        hi32 = (product32 >> 32) + (d & M32) + (lo32 >> 32)
        assert int(out[3 * i]) == ((hi32 & M32) << 32 | (lo32 & M32)), i
        product = a * b
        low = (product & M64) + c
        high = (product >> 64) + d + (low >> 64)
        assert int(out[3 * i + 1]) == low & M64, i
        assert int(out[3 * i + 2]) == ((high & M64) + ((high >> 64) << 63)) & M64, i


def test_bit_masks(device):
    pairs = [(0, 0), (0, 1), (3, 4), (0, 32), (31, 1), (31, 5), (32, 1), (33, 2), (4, 40), (40, 3), (0, 31),
             (16, 16), (7, 0), (100, 100), (1, 33)]
    start = np.array([a for a, _ in pairs], np.uint32)
    width = np.array([b for _, b in pairs], np.uint32)
    *_, out = launch(device, "bit_masks", (1, 1, 1), (len(pairs), 1, 1), [start, width, np.zeros(2 * len(pairs), np.uint32)])
    for i, (a, b) in enumerate(pairs):
        assert (int(out[2 * i]), int(out[2 * i + 1])) == (_bmsk(a, b, False), _bmsk(a, b, True)), (a, b)


def _bmsk(start: int, width: int, wrap: bool) -> int:
    if wrap:
        start, width = start & 31, width & 31
    else:
        start, width = min(start, 32), min(width, 32)
    return (((1 << width) - 1) << start) & M32
