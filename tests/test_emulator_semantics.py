"""Instruction semantics on the emulator beyond the shared corpus: block-wide
reductions (bar.red), segmented shuffles, match/redux/activemask, divergent
loops that must reconverge before a shuffle, every atomic operation, directed
rounding and saturating conversions, integer intrinsics, sm_90's packed and .relu
min/max (DPX, as CUB's 16-bit reductions use them), local arrays, structs
through calls, recursion, warps that wait for each other, printf formats.
The CUDA source below is compiled by nvcc (cached like the corpus); each
kernel's outputs are checked against Python/numpy."""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend

SOURCE = r"""#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

// out[3*b + 0..2] = __syncthreads_count/and/or of (threadIdx.x % 3 == 0) for block b (thread 0 writes).
extern "C" __global__ void block_votes(const int* x, int* out)
{
    int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    int count = __syncthreads_count(v > 0);
    int all = __syncthreads_and(v > 0);
    int any = __syncthreads_or(v > 0);
    if (threadIdx.x == 0) { out[3 * blockIdx.x] = count; out[3 * blockIdx.x + 1] = all; out[3 * blockIdx.x + 2] = any; }
}

// Segmented shuffles: width 8 down by 1, width 16 xor 5, width 4 broadcast of lane 2.
extern "C" __global__ void segmented_shuffles(const int* x, int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    out[4 * i + 0] = __shfl_down_sync(0xffffffffu, v, 1, 8);
    out[4 * i + 1] = __shfl_xor_sync(0xffffffffu, v, 5, 16);
    out[4 * i + 2] = __shfl_sync(0xffffffffu, v, 2, 4);
    out[4 * i + 3] = __shfl_up_sync(0xffffffffu, v, 3, 8);
}

// match/reduce/activemask per lane.
extern "C" __global__ void warp_matching(const int* x, unsigned* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    out[5 * i + 0] = __match_any_sync(0xffffffffu, v);
    int pred;
    out[5 * i + 1] = __match_all_sync(0xffffffffu, v & 1, &pred);
    out[5 * i + 2] = pred;
    out[5 * i + 3] = __reduce_add_sync(0xffffffffu, (unsigned)v) + __reduce_min_sync(0xffffffffu, v);
    unsigned active = 0;
    if (v % 2 == 0) active = __activemask();
    out[5 * i + 4] = active;
}

// Lane l loops (l % 5) + 1 times with a branchy body, then the warp sums with shuffles.
extern "C" __global__ void divergent_loops(const int* x, int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int acc = 0;
    for (int k = 0; k <= lane % 5; ++k) {
        if ((k + lane) & 1) acc += x[i] * k;
        else if (lane > 16) acc -= k;
        else { acc ^= 3; __syncwarp(__activemask()); }
    }
    int sum = acc;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    out[2 * i] = acc;
    out[2 * i + 1] = sum;
}

// Atomics on globals (ints: slots 0..9, u64: ll[0..3], floats, doubles) and shared memory.
extern "C" __global__ void many_atomics(const int* x, int* ints, unsigned long long* ll, float* f, double* d, int* sh_out)
{
    __shared__ int s_sum;
    __shared__ unsigned s_max;
    if (threadIdx.x == 0) { s_sum = 0; s_max = 0; }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    atomicMin(&ints[0], v);
    atomicMax(&ints[1], v);
    atomicMin((unsigned*)&ints[2], (unsigned)v);
    atomicMax((unsigned*)&ints[3], (unsigned)v);
    atomicInc((unsigned*)&ints[4], 9u);
    atomicDec((unsigned*)&ints[5], 100u);
    atomicAnd(&ints[6], ~(1 << (i % 31)));
    atomicOr(&ints[7], 1 << (i % 29));
    atomicXor(&ints[8], v);
    if (i == 5) atomicExch(&ints[9], v);
    atomicAdd(&ll[0], (unsigned long long)(v & 0xff));
    atomicMin(&ll[1], (unsigned long long)(long long)v);
    atomicMax((long long*)&ll[2], (long long)v);
    unsigned long long old = ll[3], assumed;
    do { assumed = old; old = atomicCAS(&ll[3], assumed, assumed + 3); } while (old != assumed);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&d[0], 0.25);
    atomicAdd(&s_sum, v & 7);
    atomicMax(&s_max, (unsigned)(v & 0xffff));
    __syncthreads();
    if (threadIdx.x == 0) { atomicAdd(&sh_out[0], s_sum); atomicMax((unsigned*)&sh_out[1], s_max); }
}

// Conversions with explicit rounding and saturation; out is a float/int union row per input.
extern "C" __global__ void conversions(const float* x, const double* xd, int* out_i, float* out_f, unsigned short* out_h)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    double w = xd[i];
    out_i[8 * i + 0] = __float2int_rn(v);
    out_i[8 * i + 1] = __float2int_rz(v);
    out_i[8 * i + 2] = __float2int_rd(v);
    out_i[8 * i + 3] = __float2int_ru(v);
    out_i[8 * i + 4] = (int)__float2uint_rn(v);
    out_i[8 * i + 5] = (int)__float2ll_rz(v * 1e10f);
    out_i[8 * i + 6] = __double2int_rn(w);
    out_i[8 * i + 7] = (int)(short)__float2int_rz(v);
    out_f[4 * i + 0] = __double2float_rd(w);
    out_f[4 * i + 1] = __double2float_ru(w);
    out_f[4 * i + 2] = __int2float_rz(__float2int_rz(v) * 16777217);
    out_f[4 * i + 3] = __uint2float_rn((unsigned)i * 3000000007u);
    out_h[3 * i + 0] = __half_as_ushort(__float2half_rn(v));
    out_h[3 * i + 1] = __half_as_ushort(__float2half_rz(v));
    out_h[3 * i + 2] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Directed-rounding arithmetic and float special cases.
extern "C" __global__ void float_rounding(const float* a, const float* b, float* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = a[i], y = b[i];
    out[8 * i + 0] = __fadd_rz(x, y);
    out[8 * i + 1] = __fadd_ru(x, y);
    out[8 * i + 2] = __fmul_rd(x, y);
    out[8 * i + 3] = __fdiv_rn(x, y);
    out[8 * i + 4] = __fsqrt_rn(fabsf(x));
    out[8 * i + 5] = fminf(x, y);
    out[8 * i + 6] = fmaxf(x, y);
    out[8 * i + 7] = copysignf(x, y);
}

// Integer intrinsics.
extern "C" __global__ void int_intrinsics(const unsigned* a, const unsigned* b, unsigned long long* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = a[i], y = b[i];
    unsigned long long X = ((unsigned long long)x << 32) | y;
    out[10 * i + 0] = (unsigned)__mulhi((int)x, (int)y);
    out[10 * i + 1] = __umulhi(x, y);
    out[10 * i + 2] = __umul64hi(X, X + 12345);
    out[10 * i + 3] = __sad((int)x, (int)y, 7u);
    out[10 * i + 4] = __byte_perm(x, y, 0x7531);
    out[10 * i + 5] = __funnelshift_l(x, y, i);
    out[10 * i + 6] = __funnelshift_r(x, y, i);
    out[10 * i + 7] = __brevll(X);
    out[10 * i + 8] = __clzll(X >> (i % 64)) + 100 * __popcll(X) ;
    out[10 * i + 9] = __ffsll((long long)(X << (i % 64)));
}

struct Pair { int a; float b; double c; };

__device__ __noinline__ Pair combine(Pair p, int k)
{
    Pair r;
    r.a = p.a * k;
    r.b = p.b + k;
    r.c = p.c * 0.5;
    return r;
}

__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

// Local arrays with dynamic indexing, struct by value through a call, true recursion.
extern "C" __global__ void locals_and_calls(const int* x, int* out_i, double* out_d)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int arr[16];
    for (int k = 0; k < 16; ++k) arr[k] = x[i] * k + i;
    int idx = (x[i] + i) & 15;
    Pair p = {x[i], 1.5f, 3.0 + i};
    Pair r = combine(p, idx);
    out_i[3 * i + 0] = arr[idx];
    out_i[3 * i + 1] = r.a + (int)r.b;
    out_i[3 * i + 2] = fib(i % 12);
    out_d[i] = r.c;
}

// Warp 0 waits for warp 1 through a volatile shared flag (needs warps to take turns).
extern "C" __global__ void warps_take_turns(int* out)
{
    __shared__ volatile int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (threadIdx.x < 32) {
        while (flag == 0) { }
        out[threadIdx.x] = flag + threadIdx.x;
    } else if (threadIdx.x == 32) {
        flag = 42;
    }
}

__device__ __noinline__ int op_double(int v) { return 2 * v; }
__device__ __noinline__ int op_square(int v) { return v * v; }
__device__ __noinline__ int op_negate(int v) { return -v; }
typedef int (*unary_op)(int);
__device__ unary_op op_table[3] = {op_double, op_square, op_negate};

struct Shape { __device__ virtual int area(int s) const { return s * s; } };
struct Tri : Shape { __device__ int area(int s) const override { return s * s / 2; } };

// out[2i] = op_table[i % 3](x[i]); out[2i+1] = area through a virtual call (Tri for odd i).
extern "C" __global__ void function_pointers(const int* x, int* out)
{
    int i = threadIdx.x;
    unary_op f = op_table[i % 3];
    out[2 * i] = f(x[i]);
    Shape s;
    Tri t;
    const Shape* p = (x[i] & 1) ? static_cast<const Shape*>(&t) : &s;
    out[2 * i + 1] = p->area(x[i]);
}

// A dense switch (nvcc may emit a jump table: brx.idx).
extern "C" __global__ void dense_switch(const int* x, int* out)
{
    int v = x[threadIdx.x];
    int r;
    switch (v & 7) {
        case 0: r = v * 3; break;
        case 1: r = v + 11; break;
        case 2: r = v ^ 5; break;
        case 3: r = v - 7; break;
        case 4: r = v * v; break;
        case 5: r = v >> 1; break;
        case 6: r = ~v; break;
        default: r = 42;
    }
    out[threadIdx.x] = r;
}

// sm_90's min/max forms: both 16-bit halves at once (min/max.s16x2, .u16x2) and clamped
// at 0 (.relu on .s16x2 and .s32): out[8t..8t+7].
extern "C" __global__ void packed_min_max(const unsigned* a, const unsigned* b, unsigned* out)
{
    unsigned t = threadIdx.x, x = a[t], y = b[t];
    out[8 * t + 0] = __vmaxs2(x, y);
    out[8 * t + 1] = __vmins2(x, y);
    out[8 * t + 2] = __vmaxu2(x, y);
    out[8 * t + 3] = __vminu2(x, y);
    out[8 * t + 4] = __vimax_s16x2_relu(x, y);
    out[8 * t + 5] = __vimin_s16x2_relu(x, y);
    out[8 * t + 6] = (unsigned)__vimax_s32_relu((int)x, (int)y);
    out[8 * t + 7] = (unsigned)__vimin_s32_relu((int)x, (int)y);
}

// Stages x (64 int4) in shared memory with cp.async (then out[t] = sum of stage[63 - t]),
// and integer dot products: dots[3t..3t+2] = __dp4a (signed), __dp4a (unsigned), __dp2a_hi.
extern "C" __global__ void async_copy_and_dots(const int4* x, const int* a, const int* b, int* out, int* dots)
{
    __shared__ int4 stage[64];
    unsigned t = threadIdx.x;
    __pipeline_memcpy_async(&stage[t], &x[t], sizeof(int4));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    int4 v = stage[63 - t];
    out[t] = v.x + v.y + v.z + v.w;
    dots[3 * t] = __dp4a(a[t], b[t], 5);
    dots[3 * t + 1] = (int)__dp4a((unsigned)a[t], (unsigned)b[t], 5u);
    dots[3 * t + 2] = __dp2a_hi(a[t], b[t], -3);
}

__device__ __noinline__ int sum_through(const int* p, int n)
{
    int s = 0;
    for (int k = 0; k < n; ++k) s += p[k];
    return s;
}

// Generic pointers to shared, local and global memory through a non-inlined function, and
// the space tests: out[4t..4t+3] = sums of shared, local, global data; flags[t] = isShared |
// isLocal << 1 | isGlobal << 2 of the three pointers (shared, local, global in bits 0-2, 3-5, 6-8).
extern "C" __global__ void generic_pointers(const int* g, int* out, int* flags)
{
    __shared__ int sh[64];
    int loc[8];
    unsigned t = threadIdx.x;
    sh[t] = (int)t * 3;
    for (int k = 0; k < 8; ++k) loc[k] = (int)t + k;
    __syncthreads();
    const int* ptrs[3] = {sh + (t % 32), loc + (t % 4), g + t};
    out[4 * t + 0] = sum_through(ptrs[0], 32);
    out[4 * t + 1] = sum_through(ptrs[1], 4);
    out[4 * t + 2] = sum_through(ptrs[2], 4);
    out[4 * t + 3] = (int)__cvta_generic_to_shared(ptrs[0]) - (int)__cvta_generic_to_shared(sh);
    int f = 0;
    for (int k = 0; k < 3; ++k)
        f |= (__isShared(ptrs[k]) | __isLocal(ptrs[k]) << 1 | __isGlobal(ptrs[k]) << 2) << (3 * k);
    flags[t] = f;
}

// printf with several conversions.
extern "C" __global__ void printf_formats(const double* v)
{
    if (threadIdx.x == 0)
        printf("%d|%u|%x|%lld|%c|%5.2f|%s|%e|%%\n", -5, 7u, 255, -1234567890123ll, 'z', v[0], "str", v[1]);
}
"""

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_semantics.cu", SOURCE, "sm_90")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


def run(device, kernel, grid, block, inputs, outputs):
    """Launch `kernel` with device copies of `inputs` then `outputs` (in that
    parameter order); returns the outputs read back, and the stream's printf."""
    backend, module = device
    s = backend.stream_create()
    arrays = list(inputs) + [o.copy() for o in outputs]
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    for p, a in zip(ptrs, arrays):
        backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
    backend.launch(backend.module_function(module, kernel), grid, block, 0, s,
                   b"".join(struct.pack("<Q", p) for p in ptrs))
    for p, a in zip(ptrs[len(inputs):], arrays[len(inputs):]):
        backend.memcpy_dtoh_async(memoryview(a).cast("B"), p, s)
    backend.stream_synchronize(s)
    printed = backend.take_printf(s)
    for p in ptrs:
        backend.mem_free(p)
    backend.stream_destroy(s)
    return arrays[len(inputs):], printed


def test_block_reductions(device):
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 5, 3 * 128).astype(np.int32)
    x[128:256] = 3          # a block where every thread votes yes
    x[256:] = -1            # and one where none does
    (out,), _ = run(device, "block_votes", (3, 1, 1), (128, 1, 1), [x], [np.zeros(9, np.int32)])
    pos = (x > 0).reshape(3, 128)
    want = np.stack([pos.sum(1), pos.all(1), pos.any(1)], axis=1).reshape(-1)
    np.testing.assert_array_equal(out, want)


def _shfl(values, lane, mode, b, width, clamp):
    seg = (32 - width) & 31
    max_lane = (lane & seg) | (clamp & ~seg & 31)
    min_lane = lane & seg
    if mode == "up":
        j, ok = lane - b, lane - b >= max_lane
    elif mode == "down":
        j, ok = lane + b, lane + b <= max_lane
    elif mode == "bfly":
        j, ok = lane ^ b, (lane ^ b) <= max_lane
    else:
        j = min_lane | (b & ~seg & 31)
        ok = j <= max_lane
    return values[j if ok else lane]


def test_segmented_shuffles(device):
    x = np.random.default_rng(2).integers(-10**6, 10**6, 64).astype(np.int32)
    (out,), _ = run(device, "segmented_shuffles", (1, 1, 1), (64, 1, 1), [x], [np.zeros(4 * 64, np.int32)])
    want = []
    for i in range(64):
        w, lane = x[(i // 32) * 32:(i // 32) * 32 + 32], i % 32
        want += [_shfl(w, lane, "down", 1, 8, 31), _shfl(w, lane, "bfly", 5, 16, 31),
                 _shfl(w, lane, "idx", 2, 4, 31), _shfl(w, lane, "up", 3, 8, 0)]
    np.testing.assert_array_equal(out, np.array(want, np.int32))


def test_match_redux_activemask(device):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, 64).astype(np.int32)
    x[32:] = 2 * rng.integers(0, 3, 32)     # second warp: all even
    (out,), _ = run(device, "warp_matching", (1, 1, 1), (64, 1, 1), [x], [np.zeros(5 * 64, np.uint32)])
    out = out.reshape(64, 5)
    for w in range(2):
        v = x[32 * w:32 * w + 32]
        parity_same = len(set(v & 1)) == 1
        even = sum(1 << k for k in range(32) if v[k] % 2 == 0)
        for lane in range(32):
            row = out[32 * w + lane]
            assert row[0] == sum(1 << k for k in range(32) if v[k] == v[lane])
            assert row[1] == (M32 if parity_same else 0) and row[2] == int(parity_same)
            assert row[3] == (int(v.sum()) + int(v.min())) & M32
            assert row[4] == (even if v[lane] % 2 == 0 else 0)


def test_divergent_loops_reconverge_before_shuffles(device):
    x = np.random.default_rng(4).integers(-50, 50, 96).astype(np.int32)
    (out,), _ = run(device, "divergent_loops", (1, 1, 1), (96, 1, 1), [x], [np.zeros(2 * 96, np.int32)])
    accs = []
    for i in range(96):
        lane, acc = i % 32, 0
        for k in range(lane % 5 + 1):
            if (k + lane) & 1:
                acc += int(x[i]) * k
            elif lane > 16:
                acc -= k
            else:
                acc ^= 3
        accs.append(acc)
    sums = [sum(accs[32 * (i // 32):32 * (i // 32) + 32]) for i in range(96)]
    np.testing.assert_array_equal(out.reshape(96, 2), np.array([accs, sums]).T)


def test_every_atomic(device):
    rng = np.random.default_rng(5)
    x = rng.integers(-1000, 1000, 128).astype(np.int32)
    ints = np.array([2**31 - 1, -2**31, -1, 0, 0, 0, -1, 0, 0, 0], np.int32)
    ll = np.array([0, M64, 1 << 63, 10], np.uint64)
    outs, _ = run(device, "many_atomics", (2, 1, 1), (64, 1, 1), [x],
                  [ints, ll, np.zeros(1, np.float32), np.zeros(1, np.float64), np.zeros(2, np.int32)])
    got_ints, got_ll, got_f, got_d, got_sh = outs
    u = x.view(np.uint32)
    xor = 0
    for v in x:
        xor ^= int(v)
    want_ints = [x.min(), x.max(), u.min(), u.max(), 128 % 10, (-128) % 101, -2**31, (1 << 29) - 1, xor, x[5]]
    np.testing.assert_array_equal(got_ints, np.array(want_ints, np.int64).astype(np.int32))
    sx = [int(v) for v in x]
    want_ll = [sum(v & 0xFF for v in sx), min(v & M64 for v in sx), max(sx) & M64, 10 + 3 * 128]
    assert [int(v) for v in got_ll] == want_ll
    assert got_f[0] == 64.0 and got_d[0] == 32.0
    assert got_sh[0] == sum(v & 7 for v in sx)
    assert got_sh[1] == max(v & 0xFFFF for v in sx)


def _round_f32(value: float, mode: str) -> np.float32:
    """float64 -> float32 rounded toward zero, down or up."""
    with np.errstate(over="ignore"):
        f = np.float32(value)
    if mode == "rz" and abs(float(f)) > abs(value):
        f = np.nextafter(f, np.float32(0))
    elif mode == "rd" and float(f) > value:
        f = np.nextafter(f, np.float32(-np.inf))
    elif mode == "ru" and float(f) < value:
        f = np.nextafter(f, np.float32(np.inf))
    return np.float32(f)


def _f2i(v: float, rnd, lo=-2**31, hi=2**31 - 1) -> int:
    if np.isnan(v):
        return 0
    return int(min(max(rnd(v), lo), hi))


def _half_bits(v: np.float32, toward_zero: bool) -> int:
    if np.isnan(v):
        return 0x7FFF
    with np.errstate(over="ignore"):
        h = np.float16(v)
    if toward_zero and abs(float(h)) > abs(float(v)):
        h = np.nextafter(h, np.float16(0))
    return int(np.array(h).view(np.uint16))


def _bf16_bits(v: np.float32) -> int:
    if np.isnan(v):
        return 0x7FFF
    bits = int(np.array(v).view(np.uint32))
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def test_conversions(device):
    x = np.array([2.5, -2.5, 3.5, -0.7, 1e10, -3e9, np.nan, 70000.0, 65519.0, 1.0001, -123.456, 0.0],
                 np.float32)
    xd = np.array([1.0 / 3, -1.0 / 3, 2.5, 3.5, 1e300, -7.5, 0.1, 2**31 + 0.5, -(2**33), 1e-40, 123.456, -0.0])
    n = len(x)
    outs, _ = run(device, "conversions", (1, 1, 1), (n, 1, 1), [x, xd],
                  [np.zeros(8 * n, np.int32), np.zeros(4 * n, np.float32), np.zeros(3 * n, np.uint16)])
    got_i, got_f, got_h = (o.reshape(n, -1) for o in outs)
    for i in range(n):
        v, w = float(x[i]), float(xd[i])
        rz = _f2i(v, np.trunc)
        big = np.float32(x[i] * np.float32(1e10))
        want_i = [_f2i(v, np.rint), rz, _f2i(v, np.floor), _f2i(v, np.ceil),
                  _f2i(v, np.rint, 0, M32), _f2i(float(big), np.trunc, -2**63, 2**63 - 1), _f2i(w, np.rint),
                  ((rz & 0xFFFF) ^ 0x8000) - 0x8000]
        assert [int(g) for g in got_i[i]] == [((k + 2**31) & M32) - 2**31 for k in want_i], i
        product = ((rz * 16777217 + 2**31) & M32) - 2**31
        want_f = [_round_f32(w, "rd"), _round_f32(w, "ru"), _round_f32(float(product), "rz"),
                  np.float32(np.uint32((i * 3000000007) & M32))]
        np.testing.assert_array_equal(got_f[i], np.array(want_f, np.float32), err_msg=f"row {i}")
        assert [int(h) for h in got_h[i]] == [_half_bits(x[i], False), _half_bits(x[i], True), _bf16_bits(x[i])], i


def test_directed_rounding_and_float_special_cases(device):
    rng = np.random.default_rng(6)
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    a[:3] = [np.nan, 1.0, np.nan]
    b[:3] = [2.0, np.nan, np.nan]
    (out,), _ = run(device, "float_rounding", (1, 1, 1), (64, 1, 1), [a, b], [np.zeros(8 * 64, np.float32)])
    out = out.reshape(64, 8)
    for i in range(3, 64):
        x, y = float(a[i]), float(b[i])
        want = [_round_f32(x + y, "rz"), _round_f32(x + y, "ru"), _round_f32(x * y, "rd"), a[i] / b[i],
                np.sqrt(np.abs(a[i])), np.fmin(a[i], b[i]), np.fmax(a[i], b[i]), np.copysign(a[i], b[i])]
        np.testing.assert_array_equal(out[i], np.array(want, np.float32), err_msg=f"row {i}")
    np.testing.assert_array_equal(out[:3, 5], [2.0, 1.0, np.nan])    # fminf ignores a NaN operand
    np.testing.assert_array_equal(out[:3, 6], [2.0, 1.0, np.nan])


def test_integer_intrinsics(device):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    a[0], b[0] = 0, 0
    (out,), _ = run(device, "int_intrinsics", (1, 1, 1), (64, 1, 1), [a, b], [np.zeros(10 * 64, np.uint64)])
    out = out.reshape(64, 10)

    def s32(v):
        return ((v + 2**31) & M32) - 2**31

    for i in range(64):
        x, y = int(a[i]), int(b[i])
        X = (x << 32) | y
        sel = 0x7531
        pool = (y << 32) | x
        perm = sum(((pool >> (8 * ((sel >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
        n = i & 31
        shl = (((pool << n) >> 32) & M32)
        shr = (pool >> n) & M32
        low = (X << (i % 64)) & M64
        want = [((s32(x) * s32(y)) >> 32) & M32, (x * y) >> 32, (X * ((X + 12345) & M64)) >> 64,
                (abs(s32(x) - s32(y)) + 7) & M32, perm, shl, shr, int(f"{X:064b}"[::-1], 2),
                (64 - (X >> (i % 64)).bit_length()) + 100 * X.bit_count(), (low & -low).bit_length()]
        assert [int(v) for v in out[i]] == want, i


def test_packed_and_relu_min_max(device):
    rng = np.random.default_rng(11)
    a = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    a[:4] = [0x7FFF8000, 0x00000000, 0xFFFF0001, 0x80000000]     # extremes of each half and of s32
    b[:4] = [0x80007FFF, 0xFFFFFFFF, 0x0001FFFF, 0x7FFFFFFF]
    (out,), _ = run(device, "packed_min_max", (1, 1, 1), (64, 1, 1), [a, b], [np.zeros(8 * 64, np.uint32)])
    out = out.reshape(64, 8)

    def halves(v, signed):
        h = [(v >> (16 * k)) & 0xFFFF for k in range(2)]
        return [x - 0x10000 if signed and x >= 0x8000 else x for x in h]

    def pack(hs):
        return (hs[0] & 0xFFFF) | ((hs[1] & 0xFFFF) << 16)

    def s32(v):
        return v - 2**32 if v >= 2**31 else v

    for i in range(64):
        x, y = int(a[i]), int(b[i])
        sx, sy, ux, uy = halves(x, True), halves(y, True), halves(x, False), halves(y, False)
        want = [pack([max(p, q) for p, q in zip(sx, sy)]), pack([min(p, q) for p, q in zip(sx, sy)]),
                pack([max(p, q) for p, q in zip(ux, uy)]), pack([min(p, q) for p, q in zip(ux, uy)]),
                pack([max(p, q, 0) for p, q in zip(sx, sy)]), pack([max(min(p, q), 0) for p, q in zip(sx, sy)]),
                max(s32(x), s32(y), 0), max(min(s32(x), s32(y)), 0)]
        assert [int(v) for v in out[i]] == want, (i, hex(x), hex(y))


def test_local_arrays_struct_calls_and_recursion(device):
    x = np.random.default_rng(8).integers(0, 100, 48).astype(np.int32)
    (out_i, out_d), _ = run(device, "locals_and_calls", (2, 1, 1), (24, 1, 1), [x],
                            [np.zeros(3 * 48, np.int32), np.zeros(48, np.float64)])
    fib = [0, 1]
    while len(fib) < 12:
        fib.append(fib[-1] + fib[-2])
    for i in range(48):
        v = int(x[i])
        idx = (v + i) & 15
        assert list(out_i[3 * i:3 * i + 3]) == [v * idx + i, v * idx + idx + 1, fib[i % 12]], i
        assert out_d[i] == (3.0 + i) * 0.5


def test_warps_take_turns_on_a_shared_flag(device):
    (out,), _ = run(device, "warps_take_turns", (1, 1, 1), (64, 1, 1), [], [np.zeros(32, np.int32)])
    np.testing.assert_array_equal(out, 42 + np.arange(32))


def test_printf_conversions(device):
    _, printed = run(device, "printf_formats", (1, 1, 1), (32, 1, 1), [np.array([3.14159, 12345.678])], [])
    assert printed == "-5|7|ff|-1234567890123|z| 3.14|str|1.234568e+04|%\n"


def test_function_pointers_and_virtual_calls(device):
    x = np.random.default_rng(9).integers(-100, 100, 64).astype(np.int32)
    (out,), _ = run(device, "function_pointers", (1, 1, 1), (64, 1, 1), [x], [np.zeros(128, np.int32)])
    ops = [lambda v: 2 * v, lambda v: v * v, lambda v: -v]
    want = []
    for i, v in enumerate(int(a) for a in x):
        area = v * v if v % 2 == 0 else int(np.trunc(v * v / 2))
        want += [ops[i % 3](v), area]
    np.testing.assert_array_equal(out, want)


def test_dense_switch(device):
    x = np.arange(-40, 24, dtype=np.int32)
    (out,), _ = run(device, "dense_switch", (1, 1, 1), (64, 1, 1), [x], [np.zeros(64, np.int32)])
    cases = [lambda v: v * 3, lambda v: v + 11, lambda v: v ^ 5, lambda v: v - 7, lambda v: v * v,
             lambda v: v >> 1, lambda v: ~v, lambda v: 42]
    np.testing.assert_array_equal(out, [cases[v & 7](v) for v in (int(a) for a in x)])


JUMP_TABLE_PTX = """
.version 8.0
.target sm_80
.address_size 64

.visible .entry jump_table(.param .u64 out)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [out];
	mov.u32 	%r1, %tid.x;
	rem.u32 	%r2, %r1, 3;
	targets: .branchtargets $L_zero, $L_one, $L_two;
	brx.idx 	%r2, targets;
$L_zero:
	mov.u32 	%r3, 100;
	bra.uni 	$L_store;
$L_one:
	mov.u32 	%r3, 200;
	bra.uni 	$L_store;
$L_two:
	mov.u32 	%r3, 300;
$L_store:
	add.s32 	%r3, %r3, %r1;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.u32 	[%rd3], %r3;
	ret;
}
"""


def run_hand_written(ptxas, tmp_path, ptx: str, arch: str, kernel: str, block: int, output: np.ndarray) -> np.ndarray:
    """Hand-written PTX that ptxas must accept, run on an emulator of its own (one block of
    `block` threads, `output` its only parameter); returns what the kernel left in `output`."""
    path = tmp_path / f"{kernel}.ptx"
    path.write_text(ptx)
    result = subprocess.run([ptxas, f"-arch={arch}", str(path), "-o", str(tmp_path / f"{kernel}.cubin")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    try:
        module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
        (out,), _ = run((backend, module), kernel, (1, 1, 1), (block, 1, 1), [], [output])
        return out
    finally:
        backend.close()


def test_indexed_branch_jump_table(ptxas, tmp_path):
    out = run_hand_written(ptxas, tmp_path, JUMP_TABLE_PTX, "sm_80", "jump_table", 64, np.zeros(64, np.int32))
    np.testing.assert_array_equal(out, [100 * (t % 3 + 1) + t for t in range(64)])


def test_async_copies_and_integer_dot_products(device):
    rng = np.random.default_rng(10)
    x = rng.integers(-1000, 1000, (64, 4)).astype(np.int32)
    a = rng.integers(-2**31, 2**31, 64, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, 64, dtype=np.int64).astype(np.int32)
    (out, dots), _ = run(device, "async_copy_and_dots", (1, 1, 1), (64, 1, 1), [x, a, b],
                         [np.zeros(64, np.int32), np.zeros(3 * 64, np.int32)])
    np.testing.assert_array_equal(out, x[::-1].sum(axis=1))

    def parts(v, bits, signed):
        raw = [(int(v) & M32) >> (bits * k) & ((1 << bits) - 1) for k in range(32 // bits)]
        return [r - (1 << bits) if signed and r >> (bits - 1) else r for r in raw]

    def wrap(v):
        return ((v + 2**31) & M32) - 2**31

    for t in range(64):
        sa, sb = parts(a[t], 8, True), parts(b[t], 8, True)
        ua, ub = parts(a[t], 8, False), parts(b[t], 8, False)
        halves = parts(a[t], 16, True)
        want = [wrap(5 + sum(p * q for p, q in zip(sa, sb))), wrap(5 + sum(p * q for p, q in zip(ua, ub))),
                wrap(-3 + halves[0] * sb[2] + halves[1] * sb[3])]
        assert list(dots[3 * t:3 * t + 3]) == want, t


def test_generic_pointers_to_every_space(device):
    g = np.arange(200, dtype=np.int32) * 7
    (out, flags), _ = run(device, "generic_pointers", (1, 1, 1), (64, 1, 1), [g],
                          [np.zeros(4 * 64, np.int32), np.zeros(64, np.int32)])
    sh = np.arange(64) * 3
    for t in range(64):
        s0, loc0 = t % 32, t % 4
        want = [int(sh[s0:s0 + 32].sum()), sum(t + k for k in range(loc0, loc0 + 4)), int(g[t:t + 4].sum()), 4 * s0]
        assert list(out[4 * t:4 * t + 4]) == want, t
    # shared pointer: isShared; local: isLocal; global: isGlobal
    np.testing.assert_array_equal(flags, np.full(64, 0b100_010_001))


# Two `{ }` blocks declaring the same labels (what inline asm of CUTLASS's barrier
# waits leaves in every kernel: LAB_WAIT / DONE in each block), and an outer label of
# the same name as an inner one. A branch goes to the label of its own block (or the
# nearest enclosing one), never to a same-named label elsewhere in the function.
SCOPED_LABELS_PTX = r""".version 8.0
.target sm_80
.address_size 64

.visible .entry scoped_labels(.param .u64 out)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<3>;
	.reg .pred %p<2>;
	ld.param.u64 	%rd1, [out];
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, 0;
	bra 	DONE;
	mov.u32 	%r2, 1000;
DONE:
	{
	.reg .b32 n;
	mov.u32 	n, 0;
	LAB_WAIT:
	add.u32 	n, n, 1;
	setp.ge.u32 	%p1, n, 3;
	@%p1 bra 	DONE;
	bra 	LAB_WAIT;
	DONE:
	add.u32 	%r2, %r2, n;
	}
	{
	.reg .b32 n;
	mov.u32 	n, 0;
	LAB_WAIT:
	add.u32 	n, n, 10;
	setp.ge.u32 	%p1, n, 50;
	@%p1 bra 	DONE;
	bra 	LAB_WAIT;
	DONE:
	add.u32 	%r2, %r2, n;
	}
	add.u32 	%r2, %r2, %r1;
	mul.wide.u32 	%rd2, %r1, 4;
	add.s64 	%rd2, %rd1, %rd2;
	st.global.u32 	[%rd2], %r2;
	ret;
}
"""


def test_labels_are_scoped_to_their_block(ptxas, tmp_path):
    # ptxas accepts it: the same names in sibling blocks are legal PTX
    out = run_hand_written(ptxas, tmp_path, SCOPED_LABELS_PTX, "sm_80", "scoped_labels", 32, np.zeros(32, np.int32))
    np.testing.assert_array_equal(out, [3 + 50 + t for t in range(32)])


# An mbarrier whose bytes landed (complete_tx) and whose arrival came before the
# expect_tx that announces those bytes: the expect_tx brings the count back to 0 and
# so completes the phase (out[0] = 1: the phase with parity 0 completed).
EXPECT_AFTER_LANDING_PTX = r""".version 8.0
.target sm_90
.address_size 64

.visible .entry expect_after_landing(.param .u64 out)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<3>;
	.reg .pred %p<2>;
	.shared .align 8 .b64 bar;
	ld.param.u64 	%rd1, [out];
	mov.u32 	%r1, 1;
	mbarrier.init.shared::cta.b64 	[bar], %r1;
	mov.u32 	%r2, 64;
	mbarrier.complete_tx.shared::cta.b64 	[bar], %r2;
	mbarrier.arrive.shared::cta.b64 	%rd2, [bar];
	mbarrier.test_wait.parity.shared::cta.b64 	%p1, [bar], 0;
	selp.u32 	%r3, 1, 0, %p1;
	st.global.u32 	[%rd1+4], %r3;
	mbarrier.expect_tx.shared::cta.b64 	[bar], %r2;
	mbarrier.test_wait.parity.shared::cta.b64 	%p1, [bar], 0;
	selp.u32 	%r3, 1, 0, %p1;
	st.global.u32 	[%rd1], %r3;
	ret;
}
"""


def test_expect_tx_after_the_bytes_landed_completes_the_phase(ptxas, tmp_path):
    out = run_hand_written(ptxas, tmp_path, EXPECT_AFTER_LANDING_PTX, "sm_90", "expect_after_landing", 1,
                           np.zeros(2, np.int32))
    assert out.tolist() == [1, 0]   # not complete while bytes were owed; complete once announced


# sm_100's 256-bit vector accesses (PyTorch's jiterator vectorizes by 8 for them): each
# thread loads 8 floats from its 64-byte row and stores them, reversed and each plus its
# position (1..8), in the row's second half.
WIDE_COPIES_PTX = r""".version 8.8
.target sm_100
.address_size 64

.visible .entry wide_copies(.param .u64 out)
{
	.reg .b32 %r<2>;
	.reg .f32 %f<17>;
	.reg .b64 %rd<5>;
	ld.param.u64 	%rd1, [out];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 64;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.v8.f32 	{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd4];
	add.f32 	%f9, %f8, 0f3F800000;
	add.f32 	%f10, %f7, 0f40000000;
	add.f32 	%f11, %f6, 0f40400000;
	add.f32 	%f12, %f5, 0f40800000;
	add.f32 	%f13, %f4, 0f40A00000;
	add.f32 	%f14, %f3, 0f40C00000;
	add.f32 	%f15, %f2, 0f40E00000;
	add.f32 	%f16, %f1, 0f41000000;
	st.global.v8.f32 	[%rd4+32], {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16};
	ret;
}
"""


def test_256_bit_vector_loads_and_stores(ptxas, tmp_path):
    rows = np.zeros((32, 16), np.float32)
    rows[:, :8] = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    out = run_hand_written(ptxas, tmp_path, WIDE_COPIES_PTX, "sm_100", "wide_copies", 32, rows).reshape(32, 16)
    np.testing.assert_array_equal(out[:, :8], rows[:, :8])
    np.testing.assert_array_equal(out[:, 8:], rows[:, 7::-1] + np.arange(1, 9, dtype=np.float32))
