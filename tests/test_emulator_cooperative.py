"""Cooperative launches and programmatic dependent launch at the PTX level on the
emulator backend: cooperative groups' grid.sync() (nvcc reads the grid workspace
from %envreg1:%envreg2) across more blocks than the emulator has workers, which
only works when every block is resident at once; the same kernel launched
without `cooperative` finds no workspace and traps, as on a GPU; and
griddepcontrol.wait / launch_dependents (what cudaGridDependencySynchronize and
cudaTriggerProgrammaticLaunchCompletion compile to) run under full
serialization. The CUDA source is compiled by nvcc (cached like the corpus)."""
from __future__ import annotations

import struct
import time

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from ptx_passes import parse_module, print_module
from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.protocol.errors import DeviceError

SOURCE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Round r: every thread adds its block's value of round r - 1 from the block to its
// left; a grid barrier separates the rounds, so each round reads what the whole
// grid wrote in the previous one. After `rounds` rounds, block b holds
// sum over k of C(rounds, k) * (b - k mod nblocks) for the start values v[b] = b.
extern "C" __global__ void ring_rounds(int* values, int* scratch, int rounds)
{
    cg::grid_group grid = cg::this_grid();
    const int b = blockIdx.x, n = gridDim.x;
    if (threadIdx.x == 0) values[b] = b;
    grid.sync();
    for (int r = 0; r < rounds; ++r) {
        if (threadIdx.x == 0) scratch[b] = values[b] + values[(b + n - 1) % n];
        grid.sync();
        if (threadIdx.x == 0) values[b] = scratch[b];
        grid.sync();
    }
}

// One block writes through a null pointer before the grid barrier, which the others
// then wait at for a block that never comes.
extern "C" __global__ void fault_before_sync(int* values, int bad_block)
{
    cg::grid_group grid = cg::this_grid();
    if (blockIdx.x == bad_block && threadIdx.x == 0) *(volatile int*)nullptr = 1;
    grid.sync();
    values[blockIdx.x] = 1;
}

// Programmatic dependent launch: the primary lets its dependents start early, the
// secondary waits for the primary's memory before reading it.
extern "C" __global__ void pdl_primary(int* data)
{
    data[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x * blockDim.x + threadIdx.x;
    cudaTriggerProgrammaticLaunchCompletion();
}

extern "C" __global__ void pdl_secondary(const int* data, int* out)
{
    cudaGridDependencySynchronize();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 2 * data[i];
}
"""

CUDA_ERROR_LAUNCH_FAILED = 719     # what a GPU reports for `trap`
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_NOT_SUPPORTED = 801


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_cooperative.cu", SOURCE, "sm_90")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module, ptx
    backend.close()


def launch(device, kernel, grid, block, arrays, scalars=b"", cooperative=False, cluster=None):
    """Runs `kernel` on device copies of `arrays` (pointer parameters first, then the
    packed `scalars`); returns the arrays read back."""
    backend, module, _ = device
    s = backend.stream_create()
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    try:
        for p, a in zip(ptrs, arrays):
            backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
        params = b"".join(struct.pack("<Q", p) for p in ptrs) + scalars
        fn = backend.module_function(module, kernel)
        if cooperative:
            backend.launch(fn, grid, block, 0, s, params, cooperative=True, cluster=cluster)
        else:
            backend.launch(fn, grid, block, 0, s, params)
        out = [a.copy() for a in arrays]
        for p, a in zip(ptrs, out):
            backend.memcpy_dtoh_async(memoryview(a).cast("B"), p, s)
        backend.stream_synchronize(s)
        return out
    finally:
        for p in ptrs:
            backend.mem_free(p)
        backend.stream_destroy(s)


def ring_expected(blocks: int, rounds: int) -> np.ndarray:
    v = np.arange(blocks, dtype=np.int64)
    for _ in range(rounds):
        v = v + np.roll(v, 1)
    return v.astype(np.int32)


def test_the_grid_barrier_reads_envreg1_and_envreg2(device):
    assert "%envreg1" in device[2] and "%envreg2" in device[2]


@pytest.mark.parametrize("blocks", [3, 40])
def test_grid_sync_with_every_block_resident(device, blocks):
    # 40 blocks of 64 threads: five times the emulator's 8 workers, each holding
    # several blocks that wait at the barrier for each other.
    backend = device[0]
    memory_before = backend.mem_info()
    values, _ = launch(device, "ring_rounds", (blocks, 1, 1), (64, 1, 1),
                       [np.zeros(blocks, np.int32), np.zeros(blocks, np.int32)], struct.pack("<i", 5),
                       cooperative=True)
    np.testing.assert_array_equal(values, ring_expected(blocks, 5))
    assert backend.mem_info() == memory_before          # the grid workspace went with the launch


def test_grid_sync_without_a_cooperative_launch_traps(device):
    with pytest.raises(DeviceError) as e:
        launch(device, "ring_rounds", (4, 1, 1), (32, 1, 1), [np.zeros(4, np.int32), np.zeros(4, np.int32)],
               struct.pack("<i", 1))
    assert e.value.code == CUDA_ERROR_LAUNCH_FAILED and "trap" in e.value.message, e.value
    # The device goes on: the next (cooperative) launch is right.
    values, _ = launch(device, "ring_rounds", (4, 1, 1), (32, 1, 1), [np.zeros(4, np.int32), np.zeros(4, np.int32)],
                       struct.pack("<i", 2), cooperative=True)
    np.testing.assert_array_equal(values, ring_expected(4, 2))


def test_a_fault_stops_the_whole_cooperative_grid(device):
    # The other 31 blocks would wait at the grid barrier until the launch's time limit
    # (60 s here); the fault ends the launch at once instead, and the device goes on.
    started = time.monotonic()
    with pytest.raises(DeviceError) as e:
        launch(device, "fault_before_sync", (32, 1, 1), (32, 1, 1), [np.zeros(32, np.int32)], struct.pack("<i", 17),
               cooperative=True)
    assert e.value.code == CUDA_ERROR_ILLEGAL_ADDRESS and "block (17,0,0)" in e.value.message, e.value
    assert time.monotonic() - started < 30
    values, _ = launch(device, "ring_rounds", (8, 1, 1), (32, 1, 1), [np.zeros(8, np.int32), np.zeros(8, np.int32)],
                       struct.pack("<i", 3), cooperative=True)
    np.testing.assert_array_equal(values, ring_expected(8, 3))


def test_a_cooperative_launch_with_clusters_is_refused(device):
    # A cooperative worker holds each block apart; a cluster's blocks share one worker.
    with pytest.raises(DeviceError) as e:
        launch(device, "ring_rounds", (4, 1, 1), (32, 1, 1), [np.zeros(4, np.int32), np.zeros(4, np.int32)],
               struct.pack("<i", 1), cooperative=True, cluster=(2, 1, 1))
    assert e.value.code == CUDA_ERROR_NOT_SUPPORTED and "clusters of more than one block" in e.value.message


def test_griddepcontrol_runs_serialized(device):
    ptx = device[2]
    assert "griddepcontrol.launch_dependents" in ptx and "griddepcontrol.wait" in ptx
    (data,) = launch(device, "pdl_primary", (4, 1, 1), (64, 1, 1), [np.zeros(256, np.int32)])
    np.testing.assert_array_equal(data, np.arange(256))
    _, out = launch(device, "pdl_secondary", (4, 1, 1), (64, 1, 1), [data, np.zeros(256, np.int32)])
    np.testing.assert_array_equal(out, 2 * np.arange(256))


def test_griddepcontrol_round_trips_through_the_ptx_parser(device):
    ptx = device[2]
    printed = print_module(parse_module(ptx))
    for line in ("griddepcontrol.launch_dependents;", "griddepcontrol.wait;"):
        assert line in printed
    assert print_module(parse_module(printed)) == printed
