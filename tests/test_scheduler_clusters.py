"""Best-effort kernels launched with thread-block clusters (tally/scheduler/cluster_slices.py):
slices keep (w, 1, 1) clusters whole (every slice starts and ends on a cluster boundary and
is launched with the cluster), PTB never applies, and a cluster spanning y or z runs the
kernel whole; results stay exact while a high-priority job keeps arriving."""
from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
from ptx_corpus import CORPUS_DIR, compile_ptx

import tally.backends.emulator as emulator
from ptx_passes.launch_plan import SliceLaunch
from tally.backends.ptx_variants import PtxVariantProvider
from tally.scheduler import Launch, MemcpyDtoH, MemcpyHtoD, StreamExecutor, make_policy
from tally.scheduler.cluster_slices import cluster_slices, rest_of, sliceable_cluster_width
from tally.scheduler.profiler import TransparentProfiler
from tally.server.client.modules import ModuleRegistry

N, BLOCK = 65536, 128      # saxpy: 512 blocks


def test_slices_fall_on_cluster_boundaries():
    assert sliceable_cluster_width(None) == sliceable_cluster_width((1, 1, 1)) == 1
    assert sliceable_cluster_width((4, 1, 1)) == 4
    assert sliceable_cluster_width((2, 2, 1)) is None and sliceable_cluster_width((1, 1, 2)) is None
    slices = cluster_slices(48, 5, 4)          # 12 clusters in 5 slices
    assert slices == (SliceLaunch(0, 12), SliceLaunch(12, 12), SliceLaunch(24, 8), SliceLaunch(32, 8),
                      SliceLaunch(40, 8))
    assert cluster_slices(8, 10, 8) == (SliceLaunch(0, 8),)      # never less than a cluster
    assert rest_of(16, 48, 10, 4) == (SliceLaunch(16, 12), SliceLaunch(28, 12), SliceLaunch(40, 8))


@pytest.fixture(scope="module")
def device():
    backend = emulator.EmulatorBackend(printf_to_stdout=False, launch_timeout_s=120)
    yield backend
    backend.close()


class RecordingLaunches:
    """The backend's launches as the executor makes them: (grid, cluster)."""

    def __init__(self, backend):
        self.calls = []
        self._launch = backend.launch

        def launch(fn, grid, block, shared_bytes, stream, params, sm_cap=None, cluster=None):
            self.calls.append((fn.name, tuple(grid), cluster))
            return self._launch(fn, grid, block, shared_bytes, stream, params, sm_cap=sm_cap, cluster=cluster)

        backend.launch = launch
        self._backend = backend

    def restore(self):
        del self._backend.launch


def _functions(backend, variants):
    registry = ModuleRegistry(backend, variants)
    out = []
    for source, name in (("saxpy.cu", "saxpy"), ("vector_add.cu", "vector_add")):
        module = registry.load(compile_ptx(CORPUS_DIR / source, arch="sm_90").encode())
        out.append(registry.function(module.module_id, name).backend_function)
    return out


@pytest.mark.parametrize("be_transform", ["slice", "ptb"])
def test_cluster_launches_of_a_best_effort_job(device, be_transform):
    variants = PtxVariantProvider()
    saxpy, vector_add = _functions(device, variants)
    ex = StreamExecutor(device, make_policy("priority", idle_grace_ms=0), variants,
                        TransparentProfiler(device.describe().sm_count), be_transform=be_transform)
    ex.add_client("hp", "high")
    ex.add_client("be")
    recorder = RecordingLaunches(device)
    x = np.arange(N, dtype=np.float32)
    x_ptr, y_ptr = device.mem_alloc(4 * N), device.mem_alloc(4 * N)
    a, b, c = (device.mem_alloc(4 * 1024) for _ in range(3))
    stop = threading.Event()
    try:
        ex.submit("be", 0, MemcpyHtoD(x_ptr, x.tobytes()))
        ex.submit("be", 0, MemcpyHtoD(y_ptr, bytes(4 * N)))
        for alpha in (1.0, 2.0, 3.0):
            ex.submit("be", 0, Launch(saxpy, (N // BLOCK, 1, 1), (BLOCK, 1, 1), 0,
                                      struct.pack("<ifQQ", N, alpha, x_ptr, y_ptr), cluster=(4, 1, 1)))
        # clusters spanning y: whole (vector_add reads only blockIdx.x, so y repeats x's work)
        ex.submit("be", 0, Launch(vector_add, (8, 2, 1), (128, 1, 1), 0, struct.pack("<QQQi", a, b, c, 1024),
                                  cluster=(2, 2, 1)))
        y = bytearray(4 * N)
        ex.submit("be", 0, MemcpyDtoH(memoryview(y), y_ptr, 4 * N))

        def high_priority():
            while not stop.is_set():
                ex.submit("hp", 0, Launch(vector_add, (8, 1, 1), (128, 1, 1), 0,
                                          struct.pack("<QQQi", a, b, c, 1024)))
                ex.synchronize_stream("hp", 0)
                time.sleep(0.001)

        thread = threading.Thread(target=high_priority)
        thread.start()
        ex.synchronize_stream("be", 0)
    finally:
        stop.set()
        thread.join(timeout=60)
        recorder.restore()
    np.testing.assert_array_equal(np.frombuffer(y, np.float32), x * 6.0)
    counters = ex.counters()
    assert counters["kernels_ptb"] == 0
    saxpy_launches = [(name, grid, cluster) for name, grid, cluster in recorder.calls if "saxpy" in name]
    if be_transform == "slice":
        assert counters["kernels_sliced"] == 3
        assert len(saxpy_launches) >= 6
        for _name, grid, cluster in saxpy_launches:   # every slice whole clusters, launched as clusters
            assert cluster == (4, 1, 1) and grid[0] % 4 == 0, saxpy_launches
    else:
        assert counters["kernels_whole"] >= 4 and counters["untransformable"] >= 4
        assert [cluster for _n, _g, cluster in saxpy_launches] == [(4, 1, 1)] * 3
    assert ("vector_add", (8, 2, 1), (2, 2, 1)) in recorder.calls
    ex.close()


CLUSTER_FACTS = r"""#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// out[4b..4b+3] = %clusterid.x, %cluster_ctarank, %nclusterid.x, and the partner block's
// index read from its shared memory after a cluster barrier. Launched with (2, 1, 1) clusters.
extern "C" __global__ void cluster_facts(unsigned* out) {
  __shared__ unsigned v;
  cg::cluster_group cluster = cg::this_cluster();
  unsigned id, n;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(id));
  asm("mov.u32 %0, %%nclusterid.x;" : "=r"(n));
  if (threadIdx.x == 0) v = blockIdx.x;
  cluster.sync();
  unsigned* other = cluster.map_shared_rank(&v, cluster.block_rank() ^ 1);
  if (threadIdx.x == 0) {
    unsigned* o = out + 4 * blockIdx.x;
    o[0] = id; o[1] = cluster.block_rank(); o[2] = n; o[3] = *other;
  }
  cluster.sync();
}
"""


def test_a_kernel_using_its_cluster_is_sliced_on_cluster_boundaries(device):
    """Cluster registers, a cluster barrier and distributed shared memory in a best-effort
    kernel: sliced (the pass rebuilds %clusterid and %nclusterid), every slice launched with
    the 2-block clusters, and each block sees what it sees when the grid runs whole."""
    from ptx_corpus import compile_source_ptx
    variants = PtxVariantProvider()
    registry = ModuleRegistry(device, variants)
    module = registry.load(compile_source_ptx("scheduler_cluster_facts.cu", CLUSTER_FACTS, "sm_90").encode())
    facts = registry.function(module.module_id, "cluster_facts").backend_function
    saxpy, vector_add = _functions(device, variants)
    ex = StreamExecutor(device, make_policy("priority", idle_grace_ms=0), variants,
                        TransparentProfiler(device.describe().sm_count), be_transform="slice")
    ex.add_client("hp", "high")
    ex.add_client("be")
    recorder = RecordingLaunches(device)
    blocks = 64
    out = device.mem_alloc(16 * blocks)
    a, b, c = (device.mem_alloc(4 * 1024) for _ in range(3))
    stop = threading.Event()

    def high_priority():
        while not stop.is_set():
            ex.submit("hp", 0, Launch(vector_add, (8, 1, 1), (128, 1, 1), 0, struct.pack("<QQQi", a, b, c, 1024)))
            ex.synchronize_stream("hp", 0)
            time.sleep(0.001)

    thread = threading.Thread(target=high_priority)
    thread.start()
    got = bytearray(16 * blocks)
    try:
        for _ in range(3):
            ex.submit("be", 0, Launch(facts, (blocks, 1, 1), (64, 1, 1), 0, struct.pack("<Q", out),
                                      cluster=(2, 1, 1)))
        ex.submit("be", 0, MemcpyDtoH(memoryview(got), out, 16 * blocks))
        ex.synchronize_stream("be", 0)
    finally:
        stop.set()
        thread.join(timeout=60)
        recorder.restore()
    seen = np.frombuffer(got, np.uint32).reshape(blocks, 4)
    want = np.array([[blk // 2, blk % 2, blocks // 2, blk ^ 1] for blk in range(blocks)], np.uint32)
    np.testing.assert_array_equal(seen, want)
    assert ex.counters()["kernels_sliced"] >= 1
    launches = [(grid, cluster) for name, grid, cluster in recorder.calls if "cluster_facts" in name]
    assert any(grid[0] < blocks for grid, _c in launches), launches          # slices, not only whole runs
    assert all(cluster == (2, 1, 1) and grid[0] % 2 == 0 for grid, cluster in launches), launches
    ex.close()
