"""TMA tensor copies end to end: tests/cuda/programs/tma_copies.cu encodes tensor maps
with cuTensorMapEncodeTiled (through cudaGetDriverEntryPoint, as CUTLASS does), and
its kernels copy boxes with cp.async.bulk.tensor under tally-run on the emulator, at
both priorities. Each swizzle mode's shared-memory layout, boxes hanging over the
tensor's edges (zero fill on load, nothing written on store), and the encodings the
driver refuses, against a numpy reference written from the PTX ISA's description."""
from __future__ import annotations

import numpy as np
import pytest
from e2e_helpers import best_effort_beside_inference, build_cuda, emulator_server, run_job  # noqa: F401

ROWS, COLS = 40, 48
CUDA_ERROR_INVALID_VALUE = 1
SWIZZLE_BITS = {0: 0, 1: 1, 2: 2, 3: 3}          # CU_TENSOR_MAP_SWIZZLE_{NONE,32B,64B,128B} -> row bits XORed


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "tma_copies.cu", flags=("-gencode", "arch=compute_90a,code=compute_90a"))


def tensor() -> np.ndarray:
    r, c = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
    return (r * 1000 + c).astype(np.float32)


def expected_shared(swizzle: int, cols: int, rows: int, x: int, y: int) -> np.ndarray:
    """The box as shared memory holds it: dense rows of `cols` floats (zero outside
    the tensor), then each 16-byte chunk moved to chunk ^ (its 128-byte row & mask)."""
    t = tensor()
    box = np.zeros((rows, cols), np.float32)
    for i in range(rows):
        for j in range(cols):
            if 0 <= y + i < ROWS and 0 <= x + j < COLS:
                box[i, j] = t[y + i, x + j]
    dense = box.reshape(-1)
    placed = np.empty_like(dense)
    mask = (1 << SWIZZLE_BITS[swizzle]) - 1
    for k in range(dense.size):
        byte = 4 * k
        moved = byte ^ (((byte >> 7) & mask) << 4)
        placed[moved // 4] = dense[k]
    return placed


def values(job) -> list[float]:
    assert job.returncode == 0, job.stdout + job.stderr
    return [float(v) for v in job.value("values").split(",")]


@pytest.mark.parametrize("swizzle,cols,rows,x,y", [
    (0, 16, 8, 4, 3),          # inside the tensor, no swizzle
    (3, 32, 8, 8, 16),         # 128-byte rows, the 128B pattern
    (2, 16, 16, 0, 0),         # 64-byte rows, the 64B pattern
    (1, 8, 16, 40, 32),        # 32-byte rows, the 32B pattern; the box overhangs the last rows
    (3, 32, 8, -8, -3),        # a box starting before the tensor: zeros where it is outside
])
@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_a_box_lands_in_shared_memory_as_the_hardware_lays_it_out(program, emulator_server, priority,
                                                                   swizzle, cols, rows, x, y):
    job = run_job(emulator_server.socket, program, "load", swizzle, cols, rows, x, y, priority=priority)
    assert values(job) == expected_shared(swizzle, cols, rows, x, y).tolist()


@pytest.mark.parametrize("x,y", [(8, 4), (40, 36)])
def test_a_store_writes_the_box_and_nothing_outside_the_tensor(program, emulator_server, x, y):
    got = np.array(values(run_job(emulator_server.socket, program, "store", x, y)), np.float32).reshape(ROWS, COLS)
    want = np.full((ROWS, COLS), -1.0, np.float32)
    for i in range(8):
        for j in range(16):
            if y + i < ROWS and x + j < COLS:
                want[y + i, x + j] = 1000000 + i * 16 + j
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("x,y", [(8, 4), (40, 36)])
def test_a_tensor_reduction_adds_into_the_box_and_takes_the_max_of_a_row(program, emulator_server, x, y):
    got = np.array(values(run_job(emulator_server.socket, program, "reduce", x, y)), np.float32).reshape(ROWS, COLS)
    want = tensor().copy()
    for i in range(8):
        for j in range(16):
            if y + i < ROWS and x + j < COLS:
                want[y + i, x + j] += 1000000 + i * 16 + j
                if i == 0:
                    want[y, x + j] = max(want[y, x + j], 2000000 + j)
    assert got.tolist() == want.tolist()


def test_encodings_the_driver_refuses(program, emulator_server):
    job = run_job(emulator_server.socket, program, "bad")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("misaligned", "box", "swizzle_span", "rank") == [CUDA_ERROR_INVALID_VALUE] * 4
    assert job.ints("good") == [0]
    # the first refusal's reason, once (the log shows each request kind and error once)
    assert "cuTensorMapEncodeTiled: globalAddress" in job.stderr and "16-byte aligned" in job.stderr


@pytest.mark.parametrize("mode", ["slice", "ptb"])
def test_a_warp_specialized_tma_kernel_best_effort_next_to_a_high_priority_job(nvcc, tmp_path, mode):
    """Best effort, next to the demo's inference job: the sliced variant of a kernel with
    TMA copies and mbarriers (a producer warp, consumer warps) computes exactly what it
    computes whole. PTB refuses it (its consumers' warp shuffles follow a branch that the
    producer warp leaves by another way), so under --be-transform ptb it runs whole with
    the reason in the server's log, and is still exact."""
    pipeline = build_cuda(nvcc, "tma_pipeline.cu", flags=("-gencode", "arch=compute_90a,code=compute_90a"))
    run = best_effort_beside_inference(nvcc, tmp_path, mode, pipeline, 150)
    assert "results correct" in run.best_effort, run.best_effort
    if mode == "slice":
        assert run.scheduler["kernels_sliced"] > 0 and run.scheduler["slice_launches"] > 0, run.scheduler
    else:
        assert run.scheduler["kernels_ptb"] == 0 and run.scheduler["untransformable"] > 0, run.scheduler
        assert "row_sums14CUtensorMap_stPff has no ptb variant" in run.log
