"""numba-cuda kernels for tools/ptx_sweep.py: our own kernels in the spirit of
numba-cuda's test suite (arithmetic, math, atomics, shared and local arrays,
warp intrinsics, random numbers, complex and half types, printing, device
functions, grid sync), compiled to PTX with numba.cuda.compile_ptx for
compute_80. Needs `pip install numba-cuda` and the CUDA toolkit's NVVM
(CUDA_HOME)."""
from __future__ import annotations

import math
import os

os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")

from numba import cuda, float32, float64, int32  # noqa: E402
from numba.cuda.random import xoroshiro128p_type, xoroshiro128p_uniform_float32  # noqa: E402

CC = (8, 0)


def vector_add(a, b, c):
    i = cuda.grid(1)
    if i < c.size:
        c[i] = a[i] + b[i]


def atomics(counts, values, out):
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(counts, values[i] % counts.size, 1)
        cuda.atomic.max(out, 0, values[i])
        cuda.atomic.min(out, 1, values[i])
        cuda.atomic.compare_and_swap(out[2:], 0, values[i])
        cuda.atomic.exch(out, 3, i)


def atomics_float(acc, x):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(acc, 0, x[i])
        cuda.atomic.max(acc, 1, x[i])


def shared_reduce(x, out):
    buf = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = 64
    while step > 0:
        if t < step:
            buf[t] += buf[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = buf[0]


def local_array(x, out):
    tmp = cuda.local.array(8, int32)
    i = cuda.grid(1)
    for k in range(8):
        tmp[k] = x[(i + k) % x.size]
    acc = 0
    for k in range(8):
        acc += tmp[7 - k] * k
    out[i] = acc


def math64(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = (math.sin(v) + math.exp(-v) + math.sqrt(abs(v)) + math.pow(v, 1.5) + math.erf(v)
                  + math.atan2(v, 2.0) + math.log1p(abs(v)) + math.floor(v) + math.tanh(v))


def math32(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = math.cos(v) * math.exp(v) / (1 + math.fabs(v)) + math.isnan(v) + math.copysign(1.0, v)


def integers(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i] // (b[i] | 1) + a[i] % (b[i] | 1) + cuda.popc(a[i]) + cuda.clz(b[i]) + cuda.brev(a[i]) \
                 + (a[i] << 3) + (b[i] >> 2) + min(a[i], b[i]) + max(a[i], b[i])


def warps(x, out):
    i = cuda.grid(1)
    v = x[i]
    mask = cuda.activemask()
    s = v
    offset = 16
    while offset > 0:
        s += cuda.shfl_down_sync(mask, s, offset)
        offset //= 2
    ballot = cuda.ballot_sync(mask, v > 0)
    out[i] = s + ballot + cuda.laneid + cuda.shfl_xor_sync(mask, v, 1) + cuda.all_sync(mask, v > -100)


def random_numbers(states, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = xoroshiro128p_uniform_float32(states, i)


def complex_math(z, out):
    i = cuda.grid(1)
    if i < z.size:
        out[i] = z[i] * z[i].conjugate() + abs(z[i]) + z[i] / (z[i] + 1j)


def half_precision(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = cuda.fp16.hfma(a[i], b[i], a[i]) + cuda.fp16.hmax(a[i], b[i])


def printing(x):
    i = cuda.grid(1)
    if i < 2:
        print("element", i, x[i])


@cuda.jit(device=True)
def clamp(v, lo, hi):
    return lo if v < lo else (hi if v > hi else v)


def device_function(x, out):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        out[i, j] = clamp(x[i, j], -1.0, 1.0)


def grid_sync(x):
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1
    g.sync()
    if i < x.size:
        x[i] *= 2


KERNELS = [
    (vector_add, "void(float32[:], float32[:], float32[:])"),
    (atomics, "void(int32[:], int32[:], int32[:])"),
    (atomics_float, "void(float64[:], float64[:])"),
    (shared_reduce, "void(float32[:], float32[:])"),
    (local_array, "void(int32[:], int32[:])"),
    (math64, "void(float64[:], float64[:])"),
    (math32, "void(float32[:], float32[:])"),
    (integers, "void(int32[:], int32[:], int32[:])"),
    (warps, "void(int32[:], int32[:])"),
    (random_numbers, (xoroshiro128p_type[::1], float32[::1])),
    (complex_math, "void(complex128[:], complex128[:])"),
    (half_precision, "void(float16[:], float16[:], float16[:])"),
    (printing, "void(float64[:])"),
    (device_function, "void(float64[:, :], float64[:, :])"),
    (grid_sync, "void(int32[:])"),
]


def compile_all() -> list[tuple[str, str | None, str]]:
    """(kernel name, PTX or None, why not) for each kernel."""
    out = []
    for fn, signature in KERNELS:
        try:
            ptx, _ = cuda.compile_ptx(fn, signature, cc=CC)
            out.append((fn.__name__, ptx, ""))
        except Exception as e:  # noqa: BLE001 - a kernel numba cannot compile is reported, not fatal
            out.append((fn.__name__, None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
    return out


_ = (float64,)   # the signatures name types by string
