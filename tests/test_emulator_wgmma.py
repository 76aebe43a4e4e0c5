"""wgmma.mma_async on the emulator, one warpgroup: every swizzle mode and both majors
of the shared-memory operands, A from registers, the f16/bf16/tf32/fp8/s8 forms, f16
and s32 accumulators, scale-d and the negating scale immediates, against numpy.

Python lays each operand out in shared memory as CuTe writes the canonical GMMA
layouts (a (shape):(stride) layout per major and swizzle, evaluated
colexicographically, then Swizzle<B,4,3> on the byte address), with gaps between the
core-matrix groups so that a descriptor's LBO/SBO misread shows; the kernel copies
that image into shared memory, builds descriptors from it and multiplies. The
emulator's descriptor code (ops_wgmma.cpp) is a closed form of the same layouts;
Triton's and CUTLASS's kernels (test_emulator_triton.py, the CUTLASS program) check
both against code neither wrote.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from narrow_float_reference import E4M3, E5M2
from ptx_corpus import compile_source_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend

SWIZZLE_WIDTH = {0: 1, 3: 2, 2: 4, 1: 8}   # descriptor swizzle code -> 16-byte chunks per row
_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
_BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}

# name: (d.a.b types, N, A in registers, trans-a, trans-b, scale-a, scale-b)
FORMS = {
    "f16_kk": ("f32.f16.f16", 64, False, 0, 0, 1, 1),
    "f16_km": ("f32.f16.f16", 64, False, 0, 1, 1, 1),
    "f16_mk": ("f32.f16.f16", 64, False, 1, 0, 1, 1),
    "f16_mm": ("f32.f16.f16", 64, False, 1, 1, 1, 1),
    "f16_neg": ("f32.f16.f16", 8, False, 0, 0, -1, 1),
    "f16_n256": ("f32.f16.f16", 256, False, 0, 0, 1, 1),
    "bf16_regs": ("f32.bf16.bf16", 32, True, 0, 1, 1, -1),
    "tf32": ("f32.tf32.tf32", 16, False, 0, 0, 1, 1),
    "fp8_f16": ("f16.e4m3.e5m2", 24, False, 0, 0, 1, 1),
    "s8u8": ("s32.s8.u8", 16, False, 0, 0, 1, 1),
}

KERNEL = r"""
extern "C" __global__ void {name}(const uint8_t* image, unsigned image_bytes, unsigned long long a_desc,
                                  unsigned long long b_desc, const uint32_t* a_frag, const {dt}* C, {dt}* D,
                                  unsigned scale_d) {{
  extern __shared__ uint8_t raw[];
  unsigned raw_base = (unsigned)__cvta_generic_to_shared(raw);
  unsigned base = (raw_base + 1023) & ~1023u;    // the swizzle patterns repeat every 1024 bytes
  uint8_t* smem = raw + (base - raw_base);
  for (unsigned i = threadIdx.x; i < image_bytes; i += blockDim.x) smem[i] = image[i];
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;");
  unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  unsigned long long start = (base >> 4) & 0x3fff;
  a_desc += start;
  b_desc += start;
  {reg} d[{nd}];
  uint32_t a[4];
  for (int i = 0; i < 4; ++i) a[i] = a_frag[threadIdx.x * 4 + i];
  // D element i of this lane: row 16 warp + g + 8 ((i % 4) / 2), column 8 (i / 4) + 2 t + i % 2
  for (int i = 0; i < {ne}; ++i)
    {load_c}
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{sd}, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k{k}.{types} {{{dl}}}, {a_op}, %{bi}, p{imms};\n}}\n"
               : {outs} : {ins} : "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < {ne}; ++i)
    {store_d}
}}
"""


def _kernel(name: str) -> str:
    types, n, a_regs, trans_a, trans_b, scale_a, scale_b = FORMS[name]
    dtype, atype, _ = types.split(".")
    ne = n // 2                          # D elements per thread: 64 n / 128
    half = dtype == "f16"
    nd = ne // 2 if half else ne
    dt = "uint32_t"
    con = '"+r"' if dtype != "f32" else '"+f"'
    at = "(16 * warp + g + 8 * ((i % 4) / 2)) * {n} + 8 * (i / 4) + 2 * t + i % 2".format(n=n)
    if half:   # two f16 per register; C and D hold raw 16-bit halves packed in pairs
        load_c = f"{{ unsigned x = {at}; uint32_t h = ((const uint16_t*)C)[x]; if (i % 2) d[i / 2] |= h << 16; else d[i / 2] = h; }}"
        store_d = f"{{ unsigned x = {at}; ((uint16_t*)D)[x] = (uint16_t)(d[i / 2] >> (16 * (i % 2))); }}"
    elif dtype == "f32":   # float registers, copied (not aliased) from and to the raw bits
        load_c = f"d[i] = __uint_as_float(C[{at}]);"
        store_d = f"D[{at}] = __float_as_uint(d[i]);"
    else:
        load_c = f"d[i] = C[{at}];"
        store_d = f"D[{at}] = d[i];"
    outs = ", ".join(f'{con}(d[{i}])' for i in range(nd))
    dl = ",".join(f"%{i}" for i in range(nd))
    if a_regs:
        a_op = "{" + ",".join(f"%{nd + i}" for i in range(4)) + "}"
        ins = [f'"r"(a[{i}])' for i in range(4)]
    else:
        a_op = f"%{nd}"
        ins = ['"l"(a_desc)']
    bi = nd + len(ins)
    ins += ['"l"(b_desc)', '"r"(scale_d)']
    sd = bi + 1
    imms = ""
    if atype not in ("s8", "u8"):
        imms = f", {scale_a}, {scale_b}"
        if atype in ("f16", "bf16"):
            imms += f", {trans_b}" if a_regs else f", {trans_a}, {trans_b}"
    return KERNEL.format(name=name, dt=dt, reg="float" if dtype == "f32" else "uint32_t", nd=nd, ne=ne, load_c=load_c, store_d=store_d, n=n, k=_K[atype],
                         types=("satfinite." if dtype == "s32" else "") + types, dl=dl, a_op=a_op, bi=bi, sd=sd,
                         imms=imms, outs=outs, ins=", ".join(ins))


SOURCE = "#include <stdint.h>\n" + "".join(_kernel(n) for n in FORMS)


@pytest.fixture(scope="module")
def device():
    ptx = compile_source_ptx("emulator_wgmma.cu", SOURCE, "sm_90a")
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=120)
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    yield backend, module
    backend.close()


# ---------------------------------------------------------------- layouts, as CuTe states them


def _evaluate(coord: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """A flat coordinate through a (shape):(stride) layout, colexicographically."""
    offset = 0
    for extent, step in zip(shape, stride):
        offset += (coord % extent) * step
        coord //= extent
    return offset


def canonical_offset(mn: int, k: int, major: str, width: int, elem: int, lbo: int, sbo: int) -> int:
    """Byte offset, before swizzling, of element (mn, k) in the canonical GMMA layout:
    K-major  ((8,m),(T,2k)) : ((W T, SBO), (1, LBO if no swizzle else T))
    MN-major ((T,1,m),(8,k)) : ((1, T, SBO), (T, LBO))         without swizzle
             ((T,W,m),(8,k)) : ((1, T, LBO), (W T, SBO))       with one
    (T = 16 / element bytes; strides in elements, SBO and LBO in bytes)."""
    t = 16 // elem
    big = 1 << 20
    if major == "K":
        row = _evaluate(mn, (8, big), (width * t * elem, sbo))
        col = _evaluate(k, (t, big), (elem, lbo if width == 1 else t * elem))
    elif width == 1:
        row = _evaluate(mn, (t, 1, big), (elem, t * elem, sbo))
        col = _evaluate(k, (8, big), (t * elem, lbo))
    else:
        row = _evaluate(mn, (t, width, big), (elem, t * elem, lbo))
        col = _evaluate(k, (8, big), (width * t * elem, sbo))
    return row + col


def swizzle(address: int, width: int) -> int:
    """Swizzle<B,4,3> on a byte address: bits 7.. XORed into bits 4.. (B = log2 W bits)."""
    bits = width.bit_length() - 1
    return address ^ (((address >> 7) & ((1 << bits) - 1)) << 4)


def strides_for(major: str, width: int, rows: int, elem: int) -> tuple[int, int]:
    """(LBO, SBO) with a gap of one pattern between groups, so a misread offset shows."""
    atom = 128 * width                       # 8 rows of 16 W bytes
    if major == "K":
        if width == 1:
            return 128 * (rows // 8) + 256, 128 + 0   # K chunks far apart, row groups of 128 B adjacent
        return 16, 2 * atom                           # LBO unused; row groups an atom apart, with a gap
    if width == 1:
        t = 16 // elem
        return (rows // t) * 128 + 512, 128           # k groups far apart; MN chunks 128 B apart
    return 3 * atom, atom                             # MN groups 3 atoms apart; k groups adjacent


class Image:
    """A shared-memory image the kernel copies at a 1024-byte-aligned base."""

    def __init__(self, size: int):
        self.bytes = np.full(size, 0xff, np.uint8)   # garbage (NaN for floats) wherever no element lies
        self.used = np.zeros(size, bool)

    def place(self, matrix: np.ndarray, at: int, major: str, swizzle_code: int, elem: int,
              k_total: int | None = None) -> int:
        """Lays out `matrix` (MN x K raw values of `elem` bytes) at byte offset `at`;
        returns the descriptor's fields (without the base the kernel adds)."""
        width = SWIZZLE_WIDTH[swizzle_code]
        lbo, sbo = strides_for(major, width, matrix.shape[0], elem)
        raw = matrix.astype(f"<u{elem}").view(np.uint8).reshape(matrix.shape[0], matrix.shape[1], elem)
        for mn in range(matrix.shape[0]):
            for k in range(matrix.shape[1]):
                address = swizzle(at + canonical_offset(mn, k, major, width, elem, lbo, sbo), width)
                assert not self.used[address:address + elem].any(), "two elements placed on one byte"
                self.bytes[address:address + elem] = raw[mn, k]
                self.used[address:address + elem] = True
        return (at >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | swizzle_code << 62


def run(device, name, image: Image, a_desc: int, b_desc: int, a_frag: np.ndarray, c: np.ndarray,
        scale_d: int = 1) -> np.ndarray:
    backend, module = device
    s = backend.stream_create()
    out = np.zeros_like(c)
    arrays = [image.bytes, a_frag.astype(np.uint32), c, out]
    ptrs = [backend.mem_alloc(max(a.nbytes, 4)) for a in arrays]
    try:
        for a, p in zip(arrays[:3], ptrs):
            backend.memcpy_htod_async(p, memoryview(np.ascontiguousarray(a)).cast("B"), s)
        params = struct.pack("<QIxxxxQQQQQI", ptrs[0], image.bytes.size, a_desc, b_desc, ptrs[1], ptrs[2], ptrs[3],
                             scale_d)
        backend.launch(backend.module_function(module, name), (1, 1, 1), (128, 1, 1), image.bytes.size + 1024, s,
                       params)
        backend.memcpy_dtoh_async(memoryview(out).cast("B"), ptrs[3], s)
        backend.stream_synchronize(s)
    finally:
        for p in ptrs:
            backend.mem_free(p)
        backend.stream_destroy(s)
    return out


def _f16(v):
    return v.astype(np.float16).view(np.uint16)


def _f32(v):
    return v.astype(np.float32).view(np.uint32)


NO_A = np.zeros(128 * 4, np.uint32)


@pytest.mark.parametrize("swizzle_code", [0, 3, 2, 1], ids=["none", "32B", "64B", "128B"])
@pytest.mark.parametrize("name", ["f16_kk", "f16_km", "f16_mk", "f16_mm"])
def test_f16_every_layout(device, name, swizzle_code):
    _, n, _, trans_a, trans_b, *_ = FORMS[name]
    rng = np.random.default_rng(swizzle_code * 10 + trans_a * 2 + trans_b)
    width = SWIZZLE_WIDTH[swizzle_code]
    # K-major swizzled rows hold W 16-byte chunks: a K-major operand is that wide, and the
    # descriptor starts 32 bytes in for the second k-block when there is one (CUTLASS's pattern).
    k_total = 8 * width if width > 1 else 16
    kb = 1 if k_total >= 32 else 0
    a = rng.integers(-4, 5, (64, k_total))
    b = rng.integers(-4, 5, (n, k_total))        # B as N x K
    c = rng.integers(-50, 50, (64, n))
    image = Image(64 * 1024)
    a_major, b_major = ("M" if trans_a else "K"), ("M" if trans_b else "K")
    a_cols = a if a_major == "K" else a[:, kb * 16:kb * 16 + 16]
    b_cols = b if b_major == "K" else b[:, kb * 16:kb * 16 + 16]
    a_desc = image.place(_f16(a_cols), 0, a_major, swizzle_code, 2)
    b_desc = image.place(_f16(b_cols), 32 * 1024, b_major, swizzle_code, 2)
    if a_major == "K":
        a_desc += kb * 32 >> 4
    if b_major == "K":
        b_desc += kb * 32 >> 4
    out = run(device, name, image, a_desc, b_desc, NO_A, _f32(c))
    want = a[:, kb * 16:kb * 16 + 16] @ b[:, kb * 16:kb * 16 + 16].T + c
    assert out.view(np.float32).astype(np.int64).tolist() == want.tolist()


def test_scale_d_zero_and_negated_a(device):
    rng = np.random.default_rng(11)
    a, b, c = rng.integers(-4, 5, (64, 16)), rng.integers(-4, 5, (8, 16)), rng.integers(-50, 50, (64, 8))
    image = Image(32 * 1024)
    a_desc = image.place(_f16(a), 0, "K", 1, 2)
    b_desc = image.place(_f16(b), 16384, "K", 1, 2)
    accumulated = run(device, "f16_neg", image, a_desc, b_desc, NO_A, _f32(c), scale_d=1)
    assert accumulated.view(np.float32).astype(np.int64).tolist() == (-(a @ b.T) + c).tolist()
    replaced = run(device, "f16_neg", image, a_desc, b_desc, NO_A, _f32(c), scale_d=0)
    assert replaced.view(np.float32).astype(np.int64).tolist() == (-(a @ b.T)).tolist()


def test_widest_n(device):
    rng = np.random.default_rng(12)
    a, b, c = rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (256, 64)), rng.integers(-50, 50, (64, 256))
    image = Image(96 * 1024)
    a_desc = image.place(_f16(a), 0, "K", 1, 2)
    b_desc = image.place(_f16(b), 16 * 1024, "K", 1, 2)
    out = run(device, "f16_n256", image, a_desc, b_desc, NO_A, _f32(c))
    assert out.view(np.float32).astype(np.int64).tolist() == (a[:, :16] @ b[:, :16].T + c).tolist()


def a_fragments(a: np.ndarray, per_register: int, bits: int) -> np.ndarray:
    """Registers of A (64 x K) for the 128 threads, per the ISA's mma.m16n8k* A table
    (rows offset by 16 per warp): element i of lane l is row g + 8 (i / per % 2),
    column per t + i % per + (i / (2 per)) 4 per."""
    out = np.zeros((128, 4), np.uint64)
    for thread in range(128):
        warp, lane = divmod(thread, 32)
        g, t = divmod(lane, 4)
        for i in range(4 * per_register):
            reg, j = divmod(i, per_register)
            row = 16 * warp + g + 8 * (reg % 2)
            col = per_register * t + j + (reg // 2) * 4 * per_register
            out[thread, reg] |= np.uint64(int(a[row, col]) & ((1 << bits) - 1)) << np.uint64(bits * j)
    return out.astype(np.uint32).reshape(-1)


def test_bf16_a_from_registers_and_negated_b(device):
    rng = np.random.default_rng(13)
    a, b, c = rng.integers(-4, 5, (64, 16)), rng.integers(-4, 5, (32, 16)), rng.integers(-50, 50, (64, 32))
    bf16 = lambda v: (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    image = Image(16 * 1024)
    b_desc = image.place(bf16(b[:, :16]), 0, "M", 2, 2)      # trans-b: N-major, 64B swizzle
    out = run(device, "bf16_regs", image, 0, b_desc, a_fragments(bf16(a), 2, 16), _f32(c))
    assert out.view(np.float32).astype(np.int64).tolist() == (-(a @ b.T) + c).tolist()


def test_tf32(device):
    rng = np.random.default_rng(14)
    a, b, c = rng.integers(-4, 5, (64, 8)), rng.integers(-4, 5, (16, 8)), rng.integers(-50, 50, (64, 16))
    image = Image(16 * 1024)
    a_desc = image.place(_f32(a), 0, "K", 3, 4)
    b_desc = image.place(_f32(b), 8192, "K", 0, 4)
    out = run(device, "tf32", image, a_desc, b_desc, NO_A, _f32(c))
    assert out.view(np.float32).astype(np.int64).tolist() == (a @ b.T + c).tolist()


def test_fp8_with_f16_accumulator(device):
    rng = np.random.default_rng(15)
    a, b, c = rng.integers(-4, 5, (64, 32)), rng.integers(-4, 5, (24, 32)), rng.integers(-50, 50, (64, 24))
    image = Image(32 * 1024)
    a_desc = image.place(E4M3.encode_array(a), 0, "K", 1, 1)
    b_desc = image.place(E5M2.encode_array(b), 16384, "K", 1, 1)
    out = run(device, "fp8_f16", image, a_desc, b_desc, NO_A, _f16(c))
    assert out.view(np.float16).astype(np.int64).tolist() == (a @ b.T + c).tolist()


def test_s8_times_u8_satfinite(device):
    rng = np.random.default_rng(16)
    a, b = rng.integers(-128, 128, (64, 32)), rng.integers(0, 256, (16, 32))
    c = rng.integers(-(2 ** 20), 2 ** 20, (64, 16))
    c[0, :] = 2 ** 31 - 10       # row 0 overflows where its products are positive: clamps
    image = Image(16 * 1024)
    a_desc = image.place(a.astype(np.int8).view(np.uint8), 0, "K", 2, 1)
    b_desc = image.place(b.astype(np.uint8), 8192, "K", 0, 1)
    out = run(device, "s8u8", image, a_desc, b_desc, NO_A, c.astype(np.int32).view(np.uint32))
    want = np.clip(a @ b.T + c, -(2 ** 31), 2 ** 31 - 1)
    assert out.view(np.int32).tolist() == want.tolist()
