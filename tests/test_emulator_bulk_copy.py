"""Bulk asynchronous copies (cp.async.bulk without a tensor map) on the emulator:
global -> shared completing on an mbarrier's transaction count, shared -> global
in a bulk group, element-wise bulk reductions into global memory and into another
block's shared memory, a multicast into every block of a cluster, a copy from
one block's shared memory into another's; and the misaligned copy a GPU refuses.
Checked against numpy."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.protocol.errors import DeviceError

CUDA_ERROR_MISALIGNED_ADDRESS = 716

SOURCE = r"""#include <cooperative_groups.h>
#include <stdint.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void init_expecting(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(bar)) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void wait_phase0(uint64_t* bar) {
  asm volatile("{ .reg .pred p;\nW_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W_%=; }"
               :: "r"(smem(bar)) : "memory");
}

// 64 ints in, doubled in shared memory, out again; and a bulk add of the
// doubled words into `sums` (global), which starts at sums_in.
extern "C" __global__ void roundtrip(const int* in, int* out, int* sums) {
  __shared__ alignas(128) int buf[64];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    init_expecting(&bar, sizeof buf);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem(buf)), "l"(in), "r"((unsigned)sizeof buf), "r"(smem(&bar)) : "memory");
  }
  __syncthreads();
  wait_phase0(&bar);
  buf[threadIdx.x] *= 2;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(out), "r"(smem(buf)), "r"((unsigned)sizeof buf) : "memory");
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32 [%0], [%1], %2;"
                 :: "l"(sums), "r"(smem(buf)), "r"((unsigned)sizeof buf) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// Clusters of 4: rank 0 multicasts 32 ints of `in` into every block's `buf`;
// then rank 1 copies its `buf` (plus 1000 each) into rank 2's `got`, and rank 3
// adds its buf into rank 0's `got` with a bulk reduction. out[block * 32 + i]:
// buf for ranks 1 and 3, got for ranks 0 and 2.
extern "C" __global__ void __cluster_dims__(4, 1, 1) cluster_copies(const int* in, int* out) {
  __shared__ alignas(128) int buf[32];
  __shared__ alignas(128) int got[32];
  __shared__ uint64_t bar, got_bar;
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    init_expecting(&bar, sizeof buf);
    if (rank == 0 || rank == 2) init_expecting(&got_bar, sizeof got);
  }
  got[threadIdx.x] = rank == 0 ? 5 : 0;
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    uint16_t all = 0xf;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1], %2, [%3], %4;"
                 :: "r"(smem(buf)), "l"(in + 32 * (blockIdx.x / 4)), "r"((unsigned)sizeof buf), "r"(smem(&bar)),
                    "h"(all) : "memory");
  }
  wait_phase0(&bar);
  buf[threadIdx.x] += rank == 1 ? 1000 : 0;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0 && (rank == 1 || rank == 3)) {
    unsigned to = rank == 1 ? 2 : 0, dst, dst_bar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(smem(got)), "r"(to));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst_bar) : "r"(smem(&got_bar)), "r"(to));
    if (rank == 1) {
      asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(dst), "r"(smem(buf)), "r"((unsigned)sizeof buf), "r"(dst_bar) : "memory");
    } else {
      asm volatile("cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32"
                   " [%0], [%1], %2, [%3];"
                   :: "r"(dst), "r"(smem(buf)), "r"((unsigned)sizeof buf), "r"(dst_bar) : "memory");
    }
  }
  if (rank == 0 || rank == 2) wait_phase0(&got_bar);
  out[blockIdx.x * 32 + threadIdx.x] = (rank == 0 || rank == 2) ? got[threadIdx.x] : buf[threadIdx.x];
  cluster.sync();
}

extern "C" __global__ void misaligned(const int* in) {
  __shared__ alignas(128) int buf[64];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    init_expecting(&bar, 64);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];"
                 :: "r"(smem(buf)), "l"(in + 1), "r"(smem(&bar)) : "memory");
  }
}
"""


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_bulk_copy.cu", SOURCE, "sm_90a")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


def run(device, kernel, grid, block, arrays, read_back):
    """Copies `arrays` to the device, launches with their pointers, returns the
    arrays at the indices in `read_back` as the kernel left them."""
    backend, module = device
    s = backend.stream_create()
    arrays = [a.copy() for a in arrays]
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    try:
        for p, a in zip(ptrs, arrays):
            backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
        backend.launch(backend.module_function(module, kernel), grid, block, 0, s,
                       b"".join(struct.pack("<Q", p) for p in ptrs))
        for i in read_back:
            backend.memcpy_dtoh_async(memoryview(arrays[i]).cast("B"), ptrs[i], s)
        backend.stream_synchronize(s)
    finally:
        for p in ptrs:
            backend.mem_free(p)
        backend.stream_destroy(s)
    return [arrays[i] for i in read_back]


def test_global_to_shared_and_back_and_a_bulk_reduction(device):
    rng = np.random.default_rng(11)
    x = rng.integers(-10**6, 10**6, size=64).astype(np.int32)
    sums = rng.integers(-10**6, 10**6, size=64).astype(np.int32)
    out, got_sums = run(device, "roundtrip", (3, 1, 1), (64, 1, 1), [x, np.zeros(64, np.int32), sums], [1, 2])
    assert out.tolist() == (2 * x).tolist()
    assert got_sums.tolist() == (sums + 3 * 2 * x).tolist()      # three blocks each added


def test_multicast_and_copies_between_the_blocks_of_a_cluster(device):
    rng = np.random.default_rng(12)
    x = rng.integers(0, 10**6, size=64).astype(np.int32)
    (out,) = run(device, "cluster_copies", (8, 1, 1), (32, 1, 1), [x, np.zeros(8 * 32, np.int32)], [1])
    rows = out.reshape(8, 32)
    for block in range(8):
        tile = x[32 * (block // 4):32 * (block // 4) + 32]
        rank = block % 4
        expected = {0: tile + 5, 1: tile + 1000, 2: tile + 1000, 3: tile}[rank]
        assert rows[block].tolist() == expected.tolist(), block


def test_a_misaligned_bulk_copy_faults_and_the_device_carries_on(device):
    with pytest.raises(DeviceError) as e:
        run(device, "misaligned", (1, 1, 1), (32, 1, 1), [np.zeros(64, np.int32)], [])
    assert e.value.code == CUDA_ERROR_MISALIGNED_ADDRESS
    assert "not a multiple of 16 bytes" in str(e.value)
    x = np.arange(64, dtype=np.int32)
    out, _ = run(device, "roundtrip", (1, 1, 1), (64, 1, 1), [x, np.zeros(64, np.int32), np.zeros(64, np.int32)],
                 [1, 2])
    assert out.tolist() == (2 * x).tolist()
