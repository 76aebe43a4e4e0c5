"""Arrive-wait barriers (mbarrier) on the emulator: nvcc-compiled kernels with the
instructions in inline PTX, checked against numpy: phases and their parity, the
state an arrive returns (test_wait, pending_count), transaction counts
(arrive.expect_tx, complete_tx), arrive_drop, a producer warp feeding consumer
warps through a two-slot ring guarded by full/empty barriers, an arrive on
another block's barrier of the cluster, and a misuse that faults with the
driver's code while the device carries on."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.protocol.errors import DeviceError

CUDA_ERROR_LAUNCH_FAILED = 719

SOURCE = r"""#include <cooperative_groups.h>
#include <stdint.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mb_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem(b)), "r"(count) : "memory");
}
__device__ __forceinline__ uint64_t mb_arrive(uint64_t* b) {
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(smem(b)) : "memory");
  return state;
}
__device__ __forceinline__ uint64_t mb_arrive_count(uint64_t* b, unsigned n) {
  uint64_t state;
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(smem(b)), "r"(n) : "memory");
  return state;
}
__device__ __forceinline__ bool mb_test(uint64_t* b, uint64_t state) {
  unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(smem(b)), "l"(state) : "memory");
  return done;
}
__device__ __forceinline__ void mb_wait_parity(uint64_t* b, unsigned parity) {
  asm volatile("{ .reg .pred p;\n"
               "WAIT_%=: mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra WAIT_%=; }" :: "r"(smem(b)), "r"(parity) : "memory");
}

// One thread: a barrier of count 2 arrived on once (not complete: test_wait says
// no, the state says 2 were pending), then once more (the first state's phase
// is now complete); then 3 arrivals at once on a fresh phase of count 2 would
// overflow, so it arrives 2 at once. out: 6 words.
extern "C" __global__ void states(unsigned* out) {
  __shared__ uint64_t bar;
  mb_init(&bar, 2);
  uint64_t first = mb_arrive(&bar);
  out[0] = mb_test(&bar, first);
  unsigned pending;
  asm volatile("mbarrier.pending_count.b64 %0, %1;" : "=r"(pending) : "l"(first));
  out[1] = pending;
  uint64_t second = mb_arrive(&bar);
  out[2] = mb_test(&bar, first);
  out[3] = mb_test(&bar, second);
  uint64_t third = mb_arrive_count(&bar, 2);   // the whole next phase at once
  out[4] = mb_test(&bar, third);
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" :: "r"(smem(&bar)) : "memory");
  out[5] = 1;
}

// Every thread of the block, three phases: write, arrive, wait for the others,
// read the neighbour's word. out[phase * n + t] = what thread t read.
extern "C" __global__ void phases(const int* in, int* out) {
  __shared__ uint64_t bar;
  __shared__ int words[3][256];
  unsigned t = threadIdx.x, n = blockDim.x;
  if (t == 0) mb_init(&bar, n);
  __syncthreads();
  for (int phase = 0; phase < 3; ++phase) {
    words[phase][t] = in[phase * n + t];
    uint64_t state = mb_arrive(&bar);
    while (!mb_test(&bar, state)) {
      asm volatile("nanosleep.u32 20;");
    }
    out[phase * n + t] = words[phase][(t + 1) % n];
  }
}

// Warp 0 produces `rounds` tiles of 64 ints into a two-slot ring; warps 1..3
// consume them. full[s]: one arrival (the producer's lane 0, with the tile's
// bytes as a transaction count that complete_tx pays off), empty[s]: one arrival
// per consumer warp. out[c * 32 + lane] = the sum consumer thread (c, lane) saw.
extern "C" __global__ void pipeline(const int* in, int* out, int rounds) {
  __shared__ uint64_t full[2], empty[2];
  __shared__ int tiles[2][64];
  unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) { mb_init(&full[s], 1); mb_init(&empty[s], 3); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {
    for (int r = 0; r < rounds; ++r) {
      int s = r % 2;
      if (r >= 2) mb_wait_parity(&empty[s], ((r / 2) - 1) & 1);
      if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(&full[s])), "r"(256) : "memory");
      }
      __syncwarp();
      tiles[s][lane] = in[r * 64 + lane];
      tiles[s][lane + 32] = in[r * 64 + lane + 32];
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();
      if (lane == 0) {
        asm volatile("mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: "r"(smem(&full[s])), "r"(256) : "memory");
      }
    }
  } else {
    int sum = 0;
    for (int r = 0; r < rounds; ++r) {
      int s = r % 2;
      mb_wait_parity(&full[s], (r / 2) & 1);
      sum += tiles[s][(lane + warp) % 64] * (int)warp;
      __syncwarp();
      if (lane == 0) mb_arrive(&empty[s]);
    }
    out[(warp - 1) * 32 + lane] = sum;
  }
}

// 64 threads on a barrier of 64: in phase 0 the upper warp arrives and drops
// out (arrive_drop), so phase 1 completes with the lower warp's 32 arrivals.
// out[t] = 1 where thread t saw its phase-1 state complete.
extern "C" __global__ void drop(unsigned* out) {
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) mb_init(&bar, 64);
  __syncthreads();
  if (threadIdx.x >= 32) {
    asm volatile("mbarrier.arrive_drop.shared::cta.b64 _, [%0];" :: "r"(smem(&bar)) : "memory");
    out[threadIdx.x] = 2;
    return;
  }
  uint64_t s0 = mb_arrive(&bar);
  while (!mb_test(&bar, s0)) {}
  uint64_t s1 = mb_arrive(&bar);
  while (!mb_test(&bar, s1)) {}
  out[threadIdx.x] = 1;
}

// A cluster of two: block rank 1 arrives on rank 0's barrier through its
// .shared::cluster address; rank 0 waits, then reads the word rank 1 wrote
// into its shared memory before arriving. out[cluster] = that word.
extern "C" __global__ void __cluster_dims__(2, 1, 1) remote(int* out) {
  __shared__ uint64_t bar;
  __shared__ int word;
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) { mb_init(&bar, 1); word = 0; }
  cluster.sync();
  if (cluster.block_rank() == 1 && threadIdx.x == 0) {
    *cluster.map_shared_rank(&word, 0) = 4000 + (int)blockIdx.x;
    unsigned local = smem(&bar), remote_addr;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote_addr) : "r"(local));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote_addr) : "memory");
  }
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    mb_wait_parity(&bar, 0);
    out[blockIdx.x / 2] = word;
  }
  cluster.sync();
}

// Warp-specialized register budgets (CUTLASS 3's producer/consumer split): warpgroup 0
// gives registers back, warpgroup 1 takes more; out[t] = t * 3.
extern "C" __global__ void register_budgets(unsigned* out) {
  if (threadIdx.x / 128 == 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  out[threadIdx.x] = threadIdx.x * 3;
}

// Misuse: arriving on a barrier nobody initialized.
extern "C" __global__ void uninitialized(unsigned* out) {
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    bar = 0;
    out[0] = (unsigned)mb_arrive(&bar);
  }
}
"""


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_mbarrier.cu", SOURCE, "sm_90a")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


def run(device, kernel, grid, block, inputs, outputs, scalars=b""):
    backend, module = device
    s = backend.stream_create()
    arrays = list(inputs) + [o.copy() for o in outputs]
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    try:
        for p, a in zip(ptrs, arrays):
            backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
        backend.launch(backend.module_function(module, kernel), grid, block, 0, s,
                       b"".join(struct.pack("<Q", p) for p in ptrs) + scalars)
        for p, a in zip(ptrs[len(inputs):], arrays[len(inputs):]):
            backend.memcpy_dtoh_async(memoryview(a).cast("B"), p, s)
        backend.stream_synchronize(s)
    finally:
        for p in ptrs:
            backend.mem_free(p)
        backend.stream_destroy(s)
    return arrays[len(inputs):]


def test_arrive_states_test_wait_and_pending_count(device):
    (out,) = run(device, "states", (1, 1, 1), (1, 1, 1), [], [np.zeros(6, np.uint32)])
    # not complete after one of two; 2 pending before it; complete after the second;
    # the second state's phase is complete too; the double arrival completes phase 2
    assert out.tolist() == [0, 2, 1, 1, 1, 1]


def test_every_thread_waits_for_the_others_over_three_phases(device):
    n = 128
    x = np.random.default_rng(3).integers(-10**6, 10**6, size=3 * n).astype(np.int32)
    (out,) = run(device, "phases", (2, 1, 1), (n, 1, 1), [x], [np.zeros(3 * n, np.int32)])
    expected = np.roll(x.reshape(3, n), -1, axis=1).reshape(-1)
    assert out.tolist() == expected.tolist()


def test_producer_warp_feeds_consumer_warps_through_full_and_empty_barriers(device):
    rounds = 9
    x = np.random.default_rng(5).integers(-1000, 1000, size=rounds * 64).astype(np.int32)
    (out,) = run(device, "pipeline", (3, 1, 1), (128, 1, 1), [x], [np.zeros(96, np.int32)],
                 scalars=struct.pack("<i", rounds))
    tiles = x.reshape(rounds, 64)
    expected = [int(sum(tiles[r][(lane + warp) % 64] * warp for r in range(rounds)))
                for warp in (1, 2, 3) for lane in range(32)]
    assert out.tolist() == expected


def test_arrive_drop_lowers_the_expected_count(device):
    (out,) = run(device, "drop", (1, 1, 1), (64, 1, 1), [], [np.zeros(64, np.uint32)])
    assert out.tolist() == [1] * 32 + [2] * 32


def test_a_block_arrives_on_another_blocks_barrier_of_its_cluster(device):
    (out,) = run(device, "remote", (6, 1, 1), (32, 1, 1), [], [np.zeros(3, np.int32)])
    assert out.tolist() == [4001, 4003, 4005]


def test_setmaxnreg_is_accepted(device):
    (out,) = run(device, "register_budgets", (1, 1, 1), (256, 1, 1), [], [np.zeros(256, np.uint32)])
    assert out.tolist() == [3 * t for t in range(256)]


def test_arriving_on_an_uninitialized_barrier_faults_and_the_device_carries_on(device):
    with pytest.raises(DeviceError) as e:
        run(device, "uninitialized", (1, 1, 1), (32, 1, 1), [], [np.zeros(2, np.uint32)])
    assert e.value.code == CUDA_ERROR_LAUNCH_FAILED
    assert "mbarrier arrive" in str(e.value) and "pending arrivals" in str(e.value)
    (out,) = run(device, "states", (1, 1, 1), (1, 1, 1), [], [np.zeros(6, np.uint32)])
    assert out.tolist() == [0, 2, 1, 1, 1, 1]


def test_handwritten_ptx_every_mbarrier_form():
    # tests/data/ptx/mbarriers.ptx also round-trips through the parser and printer and
    # is assembled with ptxas (tests/test_ptx_roundtrip.py).
    from ptx_corpus import HANDWRITTEN_PTX
    ptx = next(p for p in HANDWRITTEN_PTX if p.name == "mbarriers.ptx").read_text()
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    try:
        module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
        (out,) = run((backend, module), "mbarrier_forms", (2, 1, 1), (64, 1, 1), [], [np.zeros(8, np.uint32)])
        assert out.tolist() == [1, 1, 1, 0, 1, 1, 1, 7]
    finally:
        backend.close()
