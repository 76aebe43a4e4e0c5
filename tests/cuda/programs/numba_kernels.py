"""numba-cuda kernels for tests/test_e2e_numba.py, run under tally-run: numba
compiles each kernel to PTX with NVVM and links it with the driver's linker
(cuLinkCreate/AddData/Complete) before loading it. Each kernel's result is checked
against numpy here; the script prints key=value lines."""
import math

import numpy as np
from numba import cuda

THREADS = 128


@cuda.jit(device=True)
def squared_distance(x, y):
    return (x - y) * (x - y)


@cuda.jit(device=True)
def scaled_distance(x, y, scale):
    return scale * math.sqrt(squared_distance(x, y))


@cuda.jit
def elementwise(out, a, b, scale):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = scaled_distance(a[i], b[i], scale)


@cuda.jit
def block_sums(total, values):
    # Tree reduction in shared memory, one partial sum per block, combined atomically.
    partial = cuda.shared.array(THREADS, dtype=np.float64)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    partial[tid] = values[i] if i < values.size else 0.0
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if tid < stride:
            partial[tid] += partial[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        cuda.atomic.add(total, 0, partial[0])


@cuda.jit
def histogram(bins, values):
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(bins, values[i] % bins.size, 1)


def blocks(n):
    return (n + THREADS - 1) // THREADS


def main():
    rng = np.random.default_rng(7)
    n = 1000
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = cuda.device_array(n, dtype=np.float32)
    elementwise[blocks(n), THREADS](out, cuda.to_device(a), cuda.to_device(b), np.float32(0.5))
    expected = 0.5 * np.abs(a - b)
    print(f"elementwise_max_error={float(np.max(np.abs(out.copy_to_host() - expected))):.3g}")

    values = rng.random(n)
    total = cuda.to_device(np.zeros(1, dtype=np.float64))
    block_sums[blocks(n), THREADS](total, cuda.to_device(values))
    print(f"sum_error={abs(total.copy_to_host()[0] - values.sum()):.3g}")

    ints = rng.integers(0, 1 << 20, size=n).astype(np.int32)
    bins = cuda.to_device(np.zeros(16, dtype=np.int32))
    histogram[blocks(n), THREADS](bins, cuda.to_device(ints))
    got = bins.copy_to_host()
    print(f"histogram_matches={int(np.array_equal(got, np.bincount(ints % 16, minlength=16)))} "
          f"histogram_total={int(got.sum())}")


if __name__ == "__main__":
    main()
