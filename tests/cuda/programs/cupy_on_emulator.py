"""CuPy, unmodified, under tally-run (NVRTC's cubins run on the emulator from the
PTX tally records for them): an elementwise expression, a reduction
kernel and a raw kernel (NVRTC), and cupy.max and cupy.sum, which go through
CUB's precompiled module. Prints
one JSON line: for each case the value CuPy computed, numpy's, and the error
CuPy raised (None when it raised none)."""
import json

import cupy as cp
import numpy as np

results = {}


def case(name, compute, expected):
    try:
        got, error = np.asarray(compute()).tolist(), None
    except Exception as e:  # noqa: BLE001 - CuPy's errors are what the test checks
        got, error = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    results[name] = {"got": got, "expected": np.asarray(expected).tolist(), "error": error}


x = np.arange(1000, dtype=np.float32)
case("elementwise", lambda: cp.asnumpy(cp.asarray(x) * 2 + 1)[:5], (x * 2 + 1)[:5])
sum_of_squares = cp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "sum_of_squares")
case("reduction_kernel", lambda: float(sum_of_squares(cp.asarray(x))), (x.astype(np.float64) ** 2).sum())
case("max", lambda: float(cp.asarray(x).max()), x.max())
square = cp.RawKernel(r"""extern "C" __global__ void square(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i] * a[i];
}""", "square")


def raw():
    a = cp.asarray(x)
    b = cp.empty_like(a)
    square((4,), (256,), (a, b, np.int32(x.size)))
    return cp.asnumpy(b)[-5:]


case("raw_kernel", raw, (x * x)[-5:])
for n in (1000, 10000):
    y = np.arange(n, dtype=np.float32) % 7
    case(f"sum_{n}", lambda: float(cp.asarray(y).sum()), y.sum())
print(json.dumps(results))
