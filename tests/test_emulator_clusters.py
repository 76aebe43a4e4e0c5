"""Thread-block clusters on the emulator: nvcc-compiled kernels with __cluster_dims__
and cooperative_groups::this_cluster() (cluster special registers, barrier.cluster,
mapa and distributed shared memory loads, stores and atomics), a runtime cluster
shape, and the launches the driver refuses (with its codes)."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.protocol.errors import CUDA_ERROR_INVALID_CLUSTER_SIZE, DeviceError

SOURCE = r"""#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Every block writes 100 * rank + blockIdx.x into its shared memory; after
// cluster.sync each reads its right neighbour's through distributed shared
// memory, and all add 1 to rank 0's counter. Rank 0 writes the counter.
extern "C" __global__ void __cluster_dims__(4, 1, 1) neighbour(int* out) {
  __shared__ int mine[2];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) { mine[0] = 100 * (int)rank + (int)blockIdx.x; mine[1] = 0; }
  cluster.sync();
  int* theirs = cluster.map_shared_rank(mine, (rank + 1) % cluster.num_blocks());
  if (threadIdx.x == 0) {
    out[blockIdx.x] = theirs[0];
    atomicAdd(cluster.map_shared_rank(&mine[1], 0), 1);
  }
  cluster.sync();
  if (threadIdx.x == 0 && rank == 0) out[gridDim.x + blockIdx.x / 4] = mine[1];
}

// Cluster special registers of a 2-D cluster shape given at launch; 8 ints per block.
extern "C" __global__ void cluster_position(unsigned* out) {
  cg::cluster_group cluster = cg::this_cluster();
  unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
  if (threadIdx.x == 0) {
    dim3 at = cluster.block_index(), shape = cluster.dim_blocks();
    unsigned id_x, id_y, n_x, explicit_;
    asm("mov.u32 %0, %%clusterid.x;" : "=r"(id_x));
    asm("mov.u32 %0, %%clusterid.y;" : "=r"(id_y));
    asm("mov.u32 %0, %%nclusterid.x;" : "=r"(n_x));
    asm("{ .reg .pred p; mov.pred p, %%is_explicit_cluster; selp.u32 %0, 1, 0, p; }" : "=r"(explicit_));
    unsigned* o = out + 8 * b;
    o[0] = cluster.block_rank(); o[1] = cluster.num_blocks(); o[2] = at.x; o[3] = at.y;
    o[4] = shape.x * 10 + shape.y; o[5] = id_x; o[6] = id_y * 100 + n_x; o[7] = explicit_;
  }
}

// A block-wide sum through the cluster: each block adds its threads' values into
// rank 0's shared accumulator with shared::cluster atomics, between cluster
// barriers split into arrive and wait with work in between (relaxed arrive).
extern "C" __global__ void __cluster_dims__(2, 2, 1) cluster_sum(const int* x, int* out) {
  __shared__ int total;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) total = 0;
  cluster.sync();
  int* root = cluster.map_shared_rank(&total, 0);
  unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
  atomicAdd(root, x[b * blockDim.x + threadIdx.x]);
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  asm volatile("fence.acq_rel.cluster;" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    out[blockIdx.x / 2 + (gridDim.x / 2) * (blockIdx.y / 2)] = total;
  }
  cluster.sync();   // rank 0's memory must outlive the others' atomics
}

// Cluster code in a launch without clusters: every block is a cluster of one.
extern "C" __global__ void block_as_cluster(int* out) {
  __shared__ int v;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) v = (int)blockIdx.x;
  cluster.sync();
  if (threadIdx.x == 1) out[blockIdx.x] = *cluster.map_shared_rank(&v, 0) + 1000 * (int)cluster.num_blocks();
}
"""


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_clusters.cu", SOURCE, "sm_90")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


def run(device, kernel, grid, block, inputs, outputs, cluster=None):
    backend, module = device
    s = backend.stream_create()
    arrays = list(inputs) + [o.copy() for o in outputs]
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    try:
        for p, a in zip(ptrs, arrays):
            backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
        backend.launch(backend.module_function(module, kernel), grid, block, 0, s,
                       b"".join(struct.pack("<Q", p) for p in ptrs), cluster=cluster)
        for p, a in zip(ptrs[len(inputs):], arrays[len(inputs):]):
            backend.memcpy_dtoh_async(memoryview(a).cast("B"), p, s)
        backend.stream_synchronize(s)
    finally:
        for p in ptrs:
            backend.mem_free(p)
        backend.stream_destroy(s)
    return arrays[len(inputs):]


def test_compile_time_cluster_reads_its_neighbours_shared_memory(device):
    grid = 12
    (out,) = run(device, "neighbour", (grid, 1, 1), (64, 1, 1), [], [np.zeros(grid + grid // 4, np.int32)])
    expected = [100 * ((b % 4 + 1) % 4) + (b - b % 4 + (b % 4 + 1) % 4) for b in range(grid)]
    assert out[:grid].tolist() == expected
    assert out[grid:].tolist() == [4, 4, 4]      # every block of each cluster added 1 to rank 0's counter


def test_runtime_cluster_shape_sets_the_cluster_registers(device):
    grid = (4, 6, 1)
    (out,) = run(device, "cluster_position", grid, (32, 1, 1), [], [np.zeros(8 * 24, np.uint32)],
                 cluster=(2, 3, 1))
    rows = out.reshape(24, 8)
    for b, row in enumerate(rows):
        x, y = b % 4, b // 4
        at = (x % 2, y % 3)
        assert row.tolist() == [at[0] + 2 * at[1], 6, at[0], at[1], 23, x // 2, (y // 3) * 100 + 2, 1], b


def test_launch_without_cluster_is_one_block_clusters(device):
    (out,) = run(device, "cluster_position", (2, 1, 1), (32, 1, 1), [], [np.zeros(16, np.uint32)])
    assert out.reshape(2, 8).tolist() == [[0, 1, 0, 0, 11, 0, 2, 0], [0, 1, 0, 0, 11, 1, 2, 0]]


def test_cluster_code_without_clusters_runs_as_one_block_clusters(device):
    (out,) = run(device, "block_as_cluster", (3, 1, 1), (64, 1, 1), [], [np.zeros(3, np.int32)])
    assert out.tolist() == [1000, 1001, 1002]


def test_split_cluster_barrier_and_cluster_atomics(device):
    rng = np.random.default_rng(7)
    grid, block = (4, 4, 1), 96
    x = rng.integers(-1000, 1000, size=16 * block).astype(np.int32)
    (out,) = run(device, "cluster_sum", grid, (block, 1, 1), [x], [np.zeros(4, np.int32)])
    per_block = x.reshape(16, block).sum(axis=1).reshape(4, 4)   # [y][x]
    expected = [per_block[cy * 2:cy * 2 + 2, cx * 2:cx * 2 + 2].sum() for cy in range(2) for cx in range(2)]
    assert out.tolist() == expected


@pytest.mark.parametrize("kernel,grid,cluster,reason", [
    ("neighbour", (6, 1, 1), None, "not a multiple of cluster 4x1x1"),
    ("neighbour", (8, 1, 1), (2, 1, 1), "compiled for cluster 4x1x1"),
    ("cluster_position", (32, 1, 1), (32, 1, 1), "has 32 blocks, the device allows 16"),
    ("cluster_position", (9, 1, 1), (2, 1, 1), "grid 9x1x1 is not a multiple of cluster 2x1x1"),
])
def test_bad_cluster_launches_get_the_drivers_code(device, kernel, grid, cluster, reason):
    with pytest.raises(DeviceError) as e:
        run(device, kernel, grid, (32, 1, 1), [], [np.zeros(256, np.uint32)], cluster=cluster)
    assert e.value.code == CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert reason in str(e.value)
    # the device carries on
    (out,) = run(device, "cluster_position", (2, 1, 1), (32, 1, 1), [], [np.zeros(16, np.uint32)], cluster=(2, 1, 1))
    assert out.reshape(2, 8)[:, 0].tolist() == [0, 1]


def test_non_portable_cluster_of_sixteen_blocks(device):
    # The device's most; the portable most (8) is the client's check (cuFuncSetAttribute).
    (out,) = run(device, "cluster_position", (16, 1, 1), (32, 1, 1), [], [np.zeros(128, np.uint32)],
                 cluster=(16, 1, 1))
    assert out.reshape(16, 8)[:, 0].tolist() == list(range(16))


def test_handwritten_cluster_ptx_every_new_instruction():
    # tests/data/ptx/clusters.ptx also round-trips through the parser and printer
    # (tests/test_ptx_roundtrip.py assembles both with ptxas).
    from ptx_corpus import HANDWRITTEN_PTX
    ptx = next(p for p in HANDWRITTEN_PTX if p.name == "clusters.ptx").read_text()
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    try:
        module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
        (out,) = run((backend, module), "cluster_exchange", (6, 1, 1), (32, 1, 1), [],
                     [np.zeros(4 * 6, np.uint32)], cluster=(3, 1, 1))
        rows = out.reshape(6, 4).tolist()
        assert rows == [[b % 3, ((b % 3 + 1) % 3) * 10 + 7, 32 * (1 + 2 + 3), (b % 3 + 1) % 3] for b in range(6)]
        with pytest.raises(DeviceError) as e:   # .explicitcluster: a launch must give a shape
            run((backend, module), "cluster_exchange", (6, 1, 1), (32, 1, 1), [], [np.zeros(24, np.uint32)])
        assert e.value.code == CUDA_ERROR_INVALID_CLUSTER_SIZE and ".explicitcluster" in str(e.value)
    finally:
        backend.close()


# Rank 0's thread 0 waits at the cluster barrier while its other threads wait at bar.sync
# for it: neither barrier can ever complete. Rank 1 exits: exited threads never hold a
# cluster barrier back.
DEADLOCK_PTX = r"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry stuck()
.reqnctapercluster 2, 1, 1
{
	.reg .b32 %r<3>;
	.reg .pred %p<3>;
	mov.u32 %r1, %cluster_ctarank;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra done;
	mov.u32 %r2, %tid.x;
	setp.eq.u32 %p2, %r2, 0;
	@%p2 bra cluster_wait;
	bar.sync 0;
	bra done;
cluster_wait:
	barrier.cluster.arrive;
	barrier.cluster.wait;
done:
	ret;
}
"""


def test_a_cluster_that_can_never_continue_fails_with_the_waiting_threads_named():
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    try:
        module = backend.module_load(ModuleSource(original=DEADLOCK_PTX.encode(), ptx=DEADLOCK_PTX))
        s = backend.stream_create()
        backend.launch(backend.module_function(module, "stuck"), (4, 1, 1), (64, 1, 1), 0, s, b"")
        with pytest.raises(DeviceError) as e:
            backend.stream_synchronize(s)
        message = str(e.value)
        assert "block (0,0,0) can never continue" in message, message
        assert "threads 0 wait at line" in message and "barrier.cluster.wait" in message, message
        assert "threads 1-63 wait at line" in message and "bar.sync 0" in message, message
        assert "which waits with the other blocks of its cluster" in message, message
    finally:
        backend.close()


def test_sim_checks_and_null_accepts_cluster_launches():
    from tally.backends.null import NullBackend
    from tally.backends.sim import SimBackend
    sim = SimBackend()
    module = sim.module_load(ModuleSource(original=DEADLOCK_PTX.encode(), ptx=DEADLOCK_PTX))
    fn = sim.module_function(module, "stuck")
    s = sim.stream_create()
    sim.launch(fn, (8, 1, 1), (64, 1, 1), 0, s, b"", cluster=(8, 1, 1))
    for grid, cluster in (((32, 1, 1), (32, 1, 1)), ((6, 1, 1), (4, 1, 1))):
        with pytest.raises(DeviceError) as e:
            sim.launch(fn, grid, (64, 1, 1), 0, s, b"", cluster=cluster)
        assert e.value.code == CUDA_ERROR_INVALID_CLUSTER_SIZE
    sim.stream_synchronize(s)
    null = NullBackend()
    null_module = null.module_load(ModuleSource(original=DEADLOCK_PTX.encode(), ptx=DEADLOCK_PTX))
    null.launch(null.module_function(null_module, "stuck"), (8, 1, 1), (64, 1, 1), 0, null.stream_create(), b"",
                cluster=(8, 1, 1))


# Each block: threads 0-31 arrive at the cluster barrier and exit; thread 32 arrives at
# once (its code comes first, so it runs first), waits, and reads the other block's cell;
# threads 33-63 arrive after a loop longer than a warp's turn, thread 33 having stored its
# block's cell first. The phase must wait for the late threads (the
# exited threads' arrivals no longer count), so thread 32 reads the stored value.
EXITED_ARRIVALS_PTX = r"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry late_arrivals(.param .u64 out)
.reqnctapercluster 2, 1, 1
{
	.reg .b32 %r<12>;
	.reg .b64 %rd<4>;
	.reg .pred %p<4>;
	.shared .align 4 .b32 cell;
	mov.u32 %r1, %cluster_ctarank;
	mov.u32 %r2, %tid.x;
	setp.lt.u32 %p1, %r2, 32;
	@!%p1 bra stay;
	barrier.cluster.arrive;
	exit;
stay:
	setp.ne.u32 %p2, %r2, 32;
	@%p2 bra writers;
	barrier.cluster.arrive;
	barrier.cluster.wait;
	mov.u32 %r5, cell;
	add.u32 %r6, %r1, 1;
	rem.u32 %r6, %r6, 2;
	mapa.shared::cluster.u32 %r7, %r5, %r6;
	ld.shared::cluster.u32 %r8, [%r7];
	ld.param.u64 %rd1, [out];
	mov.u32 %r9, %ctaid.x;
	mul.wide.u32 %rd2, %r9, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r8;
	bra done;
writers:
	mov.u32 %r3, 0;
spin:
	add.u32 %r3, %r3, 1;
	setp.lt.u32 %p3, %r3, 20000;
	@%p3 bra spin;
	setp.ne.u32 %p3, %r2, 33;
	@%p3 bra late;
	add.u32 %r4, %r1, 40;
	st.shared.u32 [cell], %r4;
late:
	barrier.cluster.arrive;
	barrier.cluster.wait;
done:
	barrier.cluster.arrive;
	barrier.cluster.wait;
	ret;
}
"""


def test_threads_that_arrive_and_exit_do_not_complete_the_phase_early():
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    try:
        module = backend.module_load(ModuleSource(original=EXITED_ARRIVALS_PTX.encode(), ptx=EXITED_ARRIVALS_PTX))
        (out,) = run((backend, module), "late_arrivals", (4, 1, 1), (64, 1, 1), [], [np.zeros(4, np.uint32)])
        assert out.tolist() == [41, 40, 41, 40]
    finally:
        backend.close()
