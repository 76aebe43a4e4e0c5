"""mma.sync on the emulator: every form Triton, CUTLASS 2 and cuBLAS-style kernels
issue (m16n8k16/k8 f16 and bf16, tf32 k8/k4, f64 m8n8k4, s8/u8 k32/k16, s4 k64, fp8
k32), against numpy.

Each kernel builds its fragments from whole matrices in global memory with the
PTX ISA's tables written out per shape (element i of a fragment, groupID g = lane/4,
threadID_in_group t = lane%4), runs one mma.sync, and writes D back the same way.
The emulator's own fragment code (matrix_multiply.h) is written in a different,
general form, so the two agree only if both follow the ISA. The f16 kernel that
loads with ldmatrix, as real kernels do, checks the pair end to end.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from narrow_float_reference import E4M3, E5M2
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend

# The ISA's fragment tables: (row, col) of element i of the calling lane's fragment.
COORDS = r"""
#define G (threadIdx.x / 4)
#define T (threadIdx.x % 4)
__device__ void a_k16_b16(int i, int& r, int& c) { r = G + ((i < 2 || (i >= 4 && i < 6)) ? 0 : 8); c = T * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
__device__ void a_k8_b16(int i, int& r, int& c)  { r = G + (i < 2 ? 0 : 8); c = T * 2 + (i & 1); }
__device__ void a_k8_tf32(int i, int& r, int& c) { r = G + ((i == 0 || i == 2) ? 0 : 8); c = T + (i >= 2 ? 4 : 0); }
__device__ void a_k4_tf32(int i, int& r, int& c) { r = G + (i == 0 ? 0 : 8); c = T; }
__device__ void a_k32_b8(int i, int& r, int& c)  { r = G + ((i < 4 || (i >= 8 && i < 12)) ? 0 : 8); c = T * 4 + (i & 3) + (i >= 8 ? 16 : 0); }
__device__ void a_k16_b8(int i, int& r, int& c)  { r = G + (i < 4 ? 0 : 8); c = T * 4 + (i & 3); }
__device__ void a_k64_b4(int i, int& r, int& c)  { r = G + ((i < 8 || (i >= 16 && i < 24)) ? 0 : 8); c = T * 8 + (i & 7) + (i >= 16 ? 32 : 0); }
__device__ void a_m8k4_f64(int i, int& r, int& c) { r = G; c = T; }
__device__ void b_k16_b16(int i, int& r, int& c) { r = T * 2 + (i & 1) + (i >= 2 ? 8 : 0); c = G; }
__device__ void b_k8_b16(int i, int& r, int& c)  { r = T * 2 + i; c = G; }
__device__ void b_k8_tf32(int i, int& r, int& c) { r = T + (i ? 4 : 0); c = G; }
__device__ void b_k4_tf32(int i, int& r, int& c) { r = T; c = G; }
__device__ void b_k32_b8(int i, int& r, int& c)  { r = T * 4 + (i & 3) + (i >= 4 ? 16 : 0); c = G; }
__device__ void b_k16_b8(int i, int& r, int& c)  { r = T * 4 + i; c = G; }
__device__ void b_k64_b4(int i, int& r, int& c)  { r = T * 8 + (i & 7) + (i >= 8 ? 32 : 0); c = G; }
__device__ void b_m8k4_f64(int i, int& r, int& c) { r = T; c = G; }
__device__ void c_m16n8(int i, int& r, int& c)   { r = G + (i < 2 ? 0 : 8); c = T * 2 + (i & 1); }
__device__ void c_m8n8(int i, int& r, int& c)    { r = G; c = T * 2 + i; }

// Packs `count` elements of `bits` bits each from matrix m (cols wide) into regs.
template <class R, class E>
__device__ void gather(R* regs, int nregs, const E* m, int cols, int count, int bits,
                       void (*at)(int, int&, int&)) {
  for (int k = 0; k < nregs; ++k) regs[k] = 0;
  int per = count / nregs;
  for (int i = 0; i < count; ++i) {
    int r, c;
    at(i, r, c);
    R v = (R)m[r * cols + c] & (bits >= 8 * (int)sizeof(R) ? ~(R)0 : (((R)1 << bits) - 1));
    regs[i / per] |= v << ((i % per) * bits);
  }
}
template <class R, class E>
__device__ void scatter(const R* regs, int nregs, E* m, int cols, int count, int bits,
                        void (*at)(int, int&, int&)) {
  int per = count / nregs;
  for (int i = 0; i < count; ++i) {
    int r, c;
    at(i, r, c);
    m[r * cols + c] = (E)((regs[i / per] >> ((i % per) * bits)) & (bits >= 8 * (int)sizeof(R) ? ~(R)0 : (((R)1 << bits) - 1)));
  }
}
"""

# name: (ptx types d.a.b.c, m, n, k, element bits a/b, c/d bits, a coords, b coords, c coords, satfinite)
FORMS = {
    "f16_m16n8k16_f32": ("f32.f16.f16.f32", 16, 8, 16, 16, 32, "a_k16_b16", "b_k16_b16", "c_m16n8"),
    "f16_m16n8k16_f16": ("f16.f16.f16.f16", 16, 8, 16, 16, 16, "a_k16_b16", "b_k16_b16", "c_m16n8"),
    "f16_m16n8k8_f32": ("f32.f16.f16.f32", 16, 8, 8, 16, 32, "a_k8_b16", "b_k8_b16", "c_m16n8"),
    "bf16_m16n8k16": ("f32.bf16.bf16.f32", 16, 8, 16, 16, 32, "a_k16_b16", "b_k16_b16", "c_m16n8"),
    "bf16_m16n8k8": ("f32.bf16.bf16.f32", 16, 8, 8, 16, 32, "a_k8_b16", "b_k8_b16", "c_m16n8"),
    "tf32_m16n8k8": ("f32.tf32.tf32.f32", 16, 8, 8, 32, 32, "a_k8_tf32", "b_k8_tf32", "c_m16n8"),
    "tf32_m16n8k4": ("f32.tf32.tf32.f32", 16, 8, 4, 32, 32, "a_k4_tf32", "b_k4_tf32", "c_m16n8"),
    "f64_m8n8k4": ("f64.f64.f64.f64", 8, 8, 4, 64, 64, "a_m8k4_f64", "b_m8k4_f64", "c_m8n8"),
    "s8_m16n8k32": ("s32.s8.s8.s32", 16, 8, 32, 8, 32, "a_k32_b8", "b_k32_b8", "c_m16n8"),
    "s8_m16n8k32_sat": ("satfinite.s32.s8.s8.s32", 16, 8, 32, 8, 32, "a_k32_b8", "b_k32_b8", "c_m16n8"),
    "u8s8_m16n8k16": ("s32.u8.s8.s32", 16, 8, 16, 8, 32, "a_k16_b8", "b_k16_b8", "c_m16n8"),
    "s4_m16n8k64": ("s32.s4.s4.s32", 16, 8, 64, 4, 32, "a_k64_b4", "b_k64_b4", "c_m16n8"),
    "e4m3e5m2_m16n8k32": ("f32.e4m3.e5m2.f32", 16, 8, 32, 8, 32, "a_k32_b8", "b_k32_b8", "c_m16n8"),
}


def _ctype(bits: int) -> str:
    return {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "unsigned long long", 4: "uint8_t"}[bits]


def _kernel(name: str) -> str:
    types, m, n, k, ab, cd, a_at, b_at, c_at = FORMS[name]
    reg = "unsigned long long" if ab == 64 else "uint32_t"
    creg = "unsigned long long" if cd == 64 else "uint32_t"
    per_a = 1 if ab >= 32 else 32 // ab
    per_c = 2 if cd == 16 else 1
    na, nb = m * k // 32 // per_a, k * n // 32 // per_a
    nc = m * n // 32 // per_c
    dtype = types.split(".")[-4]
    # f32 and f64 operands go in float registers (copied, not aliased), the rest in .b32 ones
    to_c, from_c, c_con, c_val = {
        "f32": ("__uint_as_float", "__float_as_uint", '"+f"', "float"),
        "f64": ("__longlong_as_double", "__double_as_longlong", '"+d"', "double")}.get(
        dtype, ("", "", '"+r"', creg))
    ab_con, ab_val, to_ab = ('"d"', "double", "__longlong_as_double") if ab == 64 else ('"r"', reg, "")
    ops = [f"{c_con}(dv[{i}])" for i in range(nc)]
    ins = [f"{ab_con}(av[{i}])" for i in range(na)] + [f"{ab_con}(bv[{i}])" for i in range(nb)]
    n_out = nc
    dl = ",".join(f"%{i}" for i in range(nc))
    al = ",".join(f"%{n_out + i}" for i in range(na))
    bl = ",".join(f"%{n_out + na + i}" for i in range(nb))
    layout = "row.col." + types
    return f"""
extern "C" __global__ void {name}(const {_ctype(ab)}* A, const {_ctype(ab)}* B, const {_ctype(cd)}* C, {_ctype(cd)}* D) {{
  {reg} a[{na}], b[{nb}];
  {creg} d[{nc}];
  gather(a, {na}, A, {k}, {m * k // 32}, {ab}, {a_at});
  gather(b, {nb}, B, {n}, {k * n // 32}, {ab}, {b_at});
  gather(d, {nc}, C, {n}, {m * n // 32}, {cd}, {c_at});
  {c_val} dv[{nc}];
  {ab_val} av[{na}], bv[{nb}];
  for (int i = 0; i < {nc}; ++i) dv[i] = {to_c}(d[i]);
  for (int i = 0; i < {na}; ++i) av[i] = {to_ab}(a[i]);
  for (int i = 0; i < {nb}; ++i) bv[i] = {to_ab}(b[i]);
  asm volatile("mma.sync.aligned.m{m}n{n}k{k}.{layout} {{{dl}}}, {{{al}}}, {{{bl}}}, {{{dl}}};"
               : {", ".join(ops)} : {", ".join(ins)});
  for (int i = 0; i < {nc}; ++i) d[i] = {from_c}(dv[i]);
  scatter(d, {nc}, D, {n}, {m * n // 32}, {cd}, {c_at});
}}
"""


# f16 with ldmatrix: A (16x16, row major) by .x4, B (16x8 as k rows of n) by .x2.trans,
# as Triton and CUTLASS load them.
LDMATRIX = r"""
extern "C" __global__ void f16_ldmatrix(const uint16_t* A, const uint16_t* B, float* D) {
  __shared__ alignas(16) uint16_t a[16][16];
  __shared__ alignas(16) uint16_t b[16][8];
  unsigned lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) a[i / 16][i % 16] = A[i];
  for (int i = lane; i < 128; i += 32) b[i / 8][i % 8] = B[i];
  __syncwarp();
  unsigned ar[4], br[2];
  // lanes 0-15 name rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8
  unsigned pa = (unsigned)__cvta_generic_to_shared(&a[lane % 16][(lane / 16) * 8]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(ar[0]), "=r"(ar[1]), "=r"(ar[2]), "=r"(ar[3]) : "r"(pa));
  unsigned pb = (unsigned)__cvta_generic_to_shared(&b[lane % 16][0]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(br[0]), "=r"(br[1]) : "r"(pb));
  float d[4] = {0, 0, 0, 0};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
  for (int i = 0; i < 4; ++i) D[(lane / 4 + (i < 2 ? 0 : 8)) * 8 + (lane % 4) * 2 + (i & 1)] = d[i];
}
"""

SOURCE = "#include <stdint.h>\n" + COORDS + "".join(_kernel(n) for n in FORMS) + LDMATRIX


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_mma.cu", SOURCE, "sm_90")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=60)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


def run(device, kernel: str, inputs: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    backend, module = device
    s = backend.stream_create()
    ptrs = []
    try:
        for array in [*inputs, out]:
            ptrs.append(backend.mem_alloc(max(array.nbytes, 1)))
        for array, ptr in zip(inputs, ptrs):
            backend.memcpy_htod_async(ptr, memoryview(np.ascontiguousarray(array)).cast("B"), s)
        backend.launch(backend.module_function(module, kernel), (1, 1, 1), (32, 1, 1), 0, s,
                       struct.pack(f"<{len(ptrs)}Q", *ptrs))
        backend.memcpy_dtoh_async(memoryview(out).cast("B"), ptrs[-1], s)
        backend.stream_synchronize(s)
    finally:
        for ptr in ptrs:
            backend.mem_free(ptr)
        backend.stream_destroy(s)
    return out


def _f32_bits(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32).view(np.uint32)


@pytest.mark.parametrize("name", [n for n in FORMS if FORMS[n][0].split(".")[1] in ("f16", "bf16")])
def test_half_forms_match_numpy(device, name):
    types, m, n, k, *_ = FORMS[name]
    rng = np.random.default_rng(1)
    a, b = rng.integers(-4, 5, (m, k)), rng.integers(-4, 5, (k, n))
    c = rng.integers(-50, 50, (m, n))
    half = types.split(".")[1]
    enc = (lambda v: v.astype(np.float16).view(np.uint16)) if half == "f16" else \
        (lambda v: (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    want = a @ b + c
    if types.startswith("f16"):
        out = run(device, name, [enc(a), enc(b), c.astype(np.float16).view(np.uint16)], np.zeros((m, n), np.uint16))
        assert out.view(np.float16).astype(np.int64).tolist() == want.tolist()
    else:
        out = run(device, name, [enc(a), enc(b), _f32_bits(c)], np.zeros((m, n), np.uint32))
        assert out.view(np.float32).astype(np.int64).tolist() == want.tolist()


def test_f16_random_values_round_once(device):
    """Inexact data: D = round_f32(C + sum of exact products in K order), as documented."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    out = run(device, "f16_m16n8k16_f32", [a.view(np.uint16), b.view(np.uint16), _f32_bits(c)],
              np.zeros((16, 8), np.uint32)).view(np.float32)
    products = a.astype(np.float64)[:, :, None] * b.astype(np.float64)[None, :, :]
    sums = np.zeros((16, 8))
    for x in range(16):
        sums = sums + products[:, x, :]
    want = (c.astype(np.float64) + sums).astype(np.float32)
    assert out.tolist() == want.tolist()


def test_f16_fragments_from_ldmatrix(device):
    rng = np.random.default_rng(3)
    a, b = rng.integers(-8, 9, (16, 16)), rng.integers(-8, 9, (16, 8))
    out = run(device, "f16_ldmatrix", [a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16)],
              np.zeros((16, 8), np.float32))
    assert out.astype(np.int64).tolist() == (a @ b).tolist()


@pytest.mark.parametrize("name", ["tf32_m16n8k8", "tf32_m16n8k4"])
def test_tf32_ignores_the_low_mantissa_bits(device, name):
    _, m, n, k, *_ = FORMS[name]
    rng = np.random.default_rng(2)
    a, b = rng.integers(-4, 5, (m, k)), rng.integers(-4, 5, (k, n))
    c = rng.integers(-50, 50, (m, n))
    noisy_a = _f32_bits(a) | np.uint32(0x1fff) * (a != 0)  # below tf32's 10 mantissa bits
    out = run(device, name, [noisy_a, _f32_bits(b), _f32_bits(c)], np.zeros((m, n), np.uint32))
    assert out.view(np.float32).astype(np.int64).tolist() == (a @ b + c).tolist()


def test_f64_m8n8k4(device):
    rng = np.random.default_rng(4)
    a, b, c = rng.standard_normal((8, 4)), rng.standard_normal((4, 8)), rng.standard_normal((8, 8))
    out = run(device, "f64_m8n8k4", [a.view(np.uint64), b.view(np.uint64), c.view(np.uint64)],
              np.zeros((8, 8), np.uint64)).view(np.float64)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-14)


@pytest.mark.parametrize("name", ["s8_m16n8k32", "u8s8_m16n8k16"])
def test_integer_forms(device, name):
    types, m, n, k, *_ = FORMS[name]
    rng = np.random.default_rng(5)
    unsigned_a = types.split(".")[1] == "u8"
    a = rng.integers(0, 256, (m, k)) if unsigned_a else rng.integers(-128, 128, (m, k))
    b = rng.integers(-128, 128, (k, n))
    c = rng.integers(-(2 ** 20), 2 ** 20, (m, n))
    out = run(device, name, [a.astype(np.uint8), b.astype(np.int8).view(np.uint8), c.astype(np.int32).view(np.uint32)],
              np.zeros((m, n), np.uint32))
    assert out.view(np.int32).tolist() == (a @ b + c).tolist()


def test_satfinite_clamps_and_plain_wraps(device):
    a = np.full((16, 32), 127)
    b = np.full((32, 8), 127)
    c = np.full((16, 8), 2 ** 31 - 1000, np.int64)
    c[0, 0] = -(2 ** 31) + 5
    args = [a.astype(np.uint8), b.astype(np.uint8), c.astype(np.int32).view(np.uint32)]
    total = a @ b + c
    sat = run(device, "s8_m16n8k32_sat", args, np.zeros((16, 8), np.uint32)).view(np.int32)
    assert sat.tolist() == np.clip(total, -(2 ** 31), 2 ** 31 - 1).tolist()
    wrapped = run(device, "s8_m16n8k32", args, np.zeros((16, 8), np.uint32)).view(np.int32)
    assert wrapped.tolist() == ((total + 2 ** 31) % 2 ** 32 - 2 ** 31).tolist()


def test_s4_m16n8k64(device):
    rng = np.random.default_rng(6)
    a, b = rng.integers(-8, 8, (16, 64)), rng.integers(-8, 8, (64, 8))
    c = rng.integers(-1000, 1000, (16, 8))
    out = run(device, "s4_m16n8k64", [(a & 0xf).astype(np.uint8), (b & 0xf).astype(np.uint8),
                                      c.astype(np.int32).view(np.uint32)], np.zeros((16, 8), np.uint32))
    assert out.view(np.int32).tolist() == (a @ b + c).tolist()


def test_fp8_e4m3_times_e5m2(device):
    rng = np.random.default_rng(8)
    a, b = rng.integers(-4, 5, (16, 32)), rng.integers(-4, 5, (32, 8))
    c = rng.integers(-50, 50, (16, 8))
    out = run(device, "e4m3e5m2_m16n8k32", [E4M3.encode_array(a), E5M2.encode_array(b), _f32_bits(c)], np.zeros((16, 8), np.uint32))
    assert out.view(np.float32).astype(np.int64).tolist() == (a @ b + c).tolist()


def test_forms_the_emulator_refuses_say_so():
    from ptx_passes import parse_module
    from tally.backends.emulator.lowering import LoweringError, lower_kernel
    ptx = """.version 8.0
.target sm_80
.address_size 64
.visible .entry volta() {
  .reg .b32 %r<20>;
  mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%r0,%r1,%r2,%r3,%r4,%r5,%r6,%r7}, {%r8,%r9}, {%r10,%r11}, {%r12,%r13,%r14,%r15,%r16,%r17,%r18,%r19};
  ret;
}
"""
    with pytest.raises(LoweringError, match="m16n8 and m8n8 shapes"):
        lower_kernel(parse_module(ptx), "volta", {})
