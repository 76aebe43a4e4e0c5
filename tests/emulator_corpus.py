"""Launch specifications and numpy references for the kernels of the CUDA test
corpus (tests/cuda/corpus/*.cu), shared by the emulator tests and the pass
equivalence tests.

    case = CASES_BY_ID["vector_add"]
    outputs = run_case(backend, module, case)      # launches, copies back
    check_case(case, outputs)                      # asserts against numpy

Floats are compared exactly where the reference reproduces the kernel's order
of operations (nvcc contracts a*b+c into fma.rn, which `fma32` computes exactly
rounded); approximate intrinsics (__expf-style ex2.approx, rsqrt.approx) get a
stated relative tolerance. Outputs whose order depends on scheduling (atomic
tickets) have a custom check.
"""
from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from tally.protocol.errors import DeviceError

# --------------------------------------------------------------------------- exact references


def fma32(a, b, c) -> np.ndarray:
    """Correctly rounded float32 fma(a, b, c), elementwise.

    a*b is exact in float64; s = p + c is the float64 nearest the exact sum, and
    (TwoSum) s + e is the exact sum. Rounding s to float32 is then correct unless
    s sits exactly halfway between two float32s, where e breaks the tie."""
    a, b, c = (np.asarray(x, dtype=np.float32).astype(np.float64) for x in (a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    e = (p - (s - bb)) + (c - bb)
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
    down = np.nextafter(r, np.float32(-np.inf)).astype(np.float64)
    tie_up = (s - r64 == (up - r64) / 2) & (e > 0)
    tie_down = (r64 - s == (r64 - down) / 2) & (e < 0)
    r = np.where(tie_up, up.astype(np.float32), r)
    r = np.where(tie_down, down.astype(np.float32), r)
    return r.astype(np.float32)


def fma64(a, b, c) -> np.ndarray:
    """Correctly rounded float64 fma, through exact rationals (small arrays only)."""
    out = [float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
           for x, y, z in zip(np.ravel(a), np.ravel(b), np.ravel(c))]
    return np.array(out, dtype=np.float64)


# --------------------------------------------------------------------------- case description


@dataclass(frozen=True)
class Buf:
    """A kernel argument that is the device address of buffer `name`."""

    name: str


@dataclass
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple                      # Buf | numpy scalar | bytes, one per kernel parameter
    shared: int = 0


@dataclass
class Case:
    id: str
    source: str                      # corpus file name
    launches: list[Launch]
    inputs: dict[str, np.ndarray]    # device buffers and their initial contents
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    rtol: dict[str, float] = field(default_factory=dict)     # outputs compared with a tolerance
    globals_expected: dict[str, np.ndarray] = field(default_factory=dict)  # module variables after the run
    check: Callable[[dict[str, np.ndarray]], None] | None = None
    printf_lines: list[str] | None = None                   # expected printf lines (any order)
    uses_barriers: bool = False                             # for tests that care (early returns)


def pack_params(layout, args) -> tuple[bytes, list[str]]:
    """Parameter buffer for `args` placed at `layout`'s offsets; Buf entries become
    placeholders filled by `fill_pointers` (returned names, in order)."""
    if len(layout) != len(args):
        raise ValueError(f"kernel takes {len(layout)} parameters, the case gives {len(args)}")
    end = max((p.offset + p.size for p in layout), default=0)
    out = bytearray(end)
    pointers = []
    for p, a in zip(layout, args):
        if isinstance(a, Buf):
            data = b"\0" * 8
            pointers.append((p.offset, a.name))
        elif isinstance(a, (bytes, bytearray)):
            data = bytes(a)
        else:
            data = np.asarray(a).tobytes()
        if len(data) != p.size:
            raise ValueError(f"argument {a!r} is {len(data)} bytes, the parameter at offset {p.offset} is {p.size}")
        out[p.offset:p.offset + p.size] = data
    return bytes(out), pointers


def direct_launch(backend, module, name, grid, block, shared, stream, params) -> None:
    backend.launch(backend.module_function(module, name), grid, block, shared, stream, params)


Launcher = Callable[..., None]


def run_case(backend, module, case: Case, launcher: Launcher = direct_launch, stream=None) -> dict[str, np.ndarray]:
    """Allocates and fills the case's buffers, runs its launches with `launcher`,
    synchronizes, copies every buffer back and frees them. Raises the DeviceError
    of a failed launch."""
    own_stream = stream is None
    if own_stream:
        stream = backend.stream_create()
    ptrs = {name: backend.mem_alloc(max(arr.nbytes, 1)) for name, arr in case.inputs.items()}
    try:
        for name, arr in case.inputs.items():
            backend.memcpy_htod_async(ptrs[name], memoryview(np.ascontiguousarray(arr)).cast("B"), stream)
        for launch in case.launches:
            fn = backend.module_function(module, launch.kernel)
            params, pointers = pack_params(fn.params, launch.args)
            params = bytearray(params)
            for offset, name in pointers:
                params[offset:offset + 8] = struct.pack("<Q", ptrs[name])
            launcher(backend, module, launch.kernel, launch.grid, launch.block, launch.shared, stream, bytes(params))
        outputs = {name: np.empty_like(arr) for name, arr in case.inputs.items()}
        for name, out in outputs.items():
            backend.memcpy_dtoh_async(memoryview(out).cast("B"), ptrs[name], stream)
        for name, ref in case.globals_expected.items():
            ptr, size = backend.module_global(module, name)
            outputs["global:" + name] = np.empty(size // ref.itemsize, dtype=ref.dtype)
            backend.memcpy_dtoh_async(memoryview(outputs["global:" + name]).cast("B"), ptr, stream)
        backend.stream_synchronize(stream)
        return outputs
    finally:
        with contextlib.suppress(DeviceError):  # pending work ends before its buffers go
            backend.stream_synchronize(stream)
        for ptr in ptrs.values():
            backend.mem_free(ptr)
        if own_stream:
            backend.stream_destroy(stream)


def check_case(case: Case, outputs: dict[str, np.ndarray], printf: str | None = None) -> None:
    for name, ref in case.expected.items():
        got = outputs[name]
        if name in case.rtol:
            np.testing.assert_allclose(got, ref, rtol=case.rtol[name], atol=0, err_msg=f"{case.id}: {name}")
        else:
            np.testing.assert_array_equal(got, ref, err_msg=f"{case.id}: {name}")
    for name, ref in case.globals_expected.items():
        np.testing.assert_array_equal(outputs["global:" + name], ref, err_msg=f"{case.id}: global {name}")
    if case.check is not None:
        case.check(outputs)
    if case.printf_lines is not None and printf is not None:
        assert sorted(printf.splitlines()) == sorted(case.printf_lines), printf


def _blocks(n: int, block: int) -> int:
    return (n + block - 1) // block


def i32(v) -> np.int32:
    return np.int32(v)


# --------------------------------------------------------------------------- the cases

def _vector_add(rng) -> Case:
    n = 1000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    return Case("vector_add", "vector_add.cu",
                [Launch("vector_add", (_blocks(n, 128), 1, 1), (128, 1, 1), (Buf("a"), Buf("b"), Buf("c"), i32(n)))],
                {"a": a, "b": b, "c": np.zeros(n, np.float32)}, {"c": a + b})


def _saxpy(rng) -> Case:
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    alpha = np.float32(2.5)
    return Case("saxpy", "saxpy.cu",
                [Launch("saxpy", (3, 1, 1), (96, 1, 1), (i32(n), alpha, Buf("x"), Buf("y")))],
                {"x": x, "y": y}, {"y": fma32(alpha, x, y)})


def _reduce_sum(rng) -> Case:
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    blocks = _blocks(n, 256)
    parts = np.zeros(blocks * 256, np.float32)
    parts[:n] = x
    parts = parts.reshape(blocks, 256)
    stride = 128
    while stride:
        parts[:, :stride] = parts[:, :stride] + parts[:, stride:2 * stride]
        stride //= 2
    return Case("reduce_sum", "reduce_shared.cu",
                [Launch("reduce_sum", (blocks, 1, 1), (256, 1, 1), (Buf("x"), Buf("out"), i32(n)))],
                {"x": x, "out": np.zeros(blocks, np.float32)}, {"out": parts[:, 0].copy()}, uses_barriers=True)


def _matmul(rng) -> Case:
    M, N, K = 40, 36, 50
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    acc = np.zeros((M, N), np.float32)
    for k in range(K):
        acc = fma32(A[:, k, None], B[None, k, :], acc)
    return Case("matmul_tiled", "matmul_tiled.cu",
                [Launch("matmul_tiled", (_blocks(N, 16), _blocks(M, 16), 1), (16, 16, 1),
                        (Buf("A"), Buf("B"), Buf("C"), i32(M), i32(N), i32(K)))],
                {"A": A, "B": B, "C": np.zeros((M, N), np.float32)}, {"C": acc}, uses_barriers=True)


def _histogram(rng) -> Case:
    n = 5000
    data = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    bins = np.bincount(data % 64, minlength=64).astype(np.uint32)
    return Case("histogram64", "histogram.cu",
                [Launch("histogram64", (3, 1, 1), (96, 1, 1), (Buf("data"), i32(n), Buf("bins")))],
                {"data": data, "bins": np.zeros(64, np.uint32)}, {"bins": bins}, uses_barriers=True)


def _fetch_add(rng) -> Case:
    n = 300

    def check(out):
        assert out["counter"][0] == n
        assert np.array_equal(np.sort(out["old"]), np.arange(n, dtype=np.uint32)), "tickets are not 0..n-1"

    return Case("fetch_add_ticket", "histogram.cu",
                [Launch("fetch_add_ticket", (3, 1, 1), (128, 1, 1), (Buf("counter"), Buf("old"), i32(n)))],
                {"counter": np.zeros(1, np.uint32), "old": np.zeros(n, np.uint32)}, check=check)


def _warp_reduce(rng) -> Case:
    n = 256
    x = rng.standard_normal(n).astype(np.float32)
    w = x.reshape(-1, 32)
    lanes = np.arange(32)
    s = w.copy()
    for off in (16, 8, 4, 2, 1):
        src = np.where(lanes + off <= 31, lanes + off, lanes)
        s = s + s[:, src]
    m = w.copy()
    for mask in (16, 8, 4, 2, 1):
        m = np.maximum(m, m[:, lanes ^ mask])
    p = w.copy()
    for off in (1, 2, 4, 8, 16):
        up = p[:, np.where(lanes - off >= 0, lanes - off, lanes)]
        p = np.where(lanes >= off, p + up, p)
    return Case("warp_reduce", "warp_shuffle.cu",
                [Launch("warp_reduce", (2, 1, 1), (128, 1, 1),
                        (Buf("x"), Buf("sums"), Buf("xmax"), Buf("bcast"), Buf("prefix")))],
                {"x": x, "sums": np.zeros(n // 32, np.float32), "xmax": np.zeros(n // 32, np.float32),
                 "bcast": np.zeros(n, np.float32), "prefix": np.zeros(n, np.float32)},
                {"sums": s[:, 0].copy(), "xmax": m[:, 0].copy(), "bcast": np.repeat(w[:, 5], 32),
                 "prefix": p.reshape(-1)})


def _warp_vote(rng) -> Case:
    n = 192
    x = rng.integers(-3, 4, n).astype(np.int32)
    x[32:64] = 5          # a warp where every lane is positive
    x[64:96] = -1         # and one where none is
    pos = (x > 0).reshape(-1, 32)
    ballot = (pos * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    return Case("warp_vote", "warp_shuffle.cu",
                [Launch("warp_vote", (3, 1, 1), (64, 1, 1), (Buf("x"), Buf("ballot"), Buf("any"), Buf("all")))],
                {"x": x, "ballot": np.zeros(n // 32, np.uint32), "any": np.zeros(n // 32, np.int32),
                 "all": np.zeros(n // 32, np.int32)},
                {"ballot": ballot, "any": pos.any(axis=1).astype(np.int32), "all": pos.all(axis=1).astype(np.int32)})


def _early_exit(rng) -> Case:
    n, block = 300, 128
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.full(n, -7, np.int32)
    for b in range(_blocks(n, block)):
        live = min(block, n - b * block)
        tile = x[b * block:b * block + live]
        for t in range(1, live):
            out[b * block + t] = tile[t] + tile[(t + 1) % live]
    return Case("early_exit_neighbors", "early_return.cu",
                [Launch("early_exit_neighbors", (_blocks(n, block), 1, 1), (block, 1, 1), (Buf("x"), Buf("out"), i32(n)))],
                {"x": x, "out": np.full(n, -7, np.int32)}, {"out": out}, uses_barriers=True)


def _return_after_barrier(rng) -> Case:
    n = 200
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    expected = np.full(256, -7, np.int32)
    expected[:n] = x * 2
    return Case("return_after_barrier", "early_return.cu",
                [Launch("return_after_barrier", (4, 1, 1), (64, 1, 1), (Buf("x"), Buf("out"), i32(n)))],
                {"x": x, "out": np.full(256, -7, np.int32)}, {"out": expected}, uses_barriers=True)


def _stamp_2d(rng) -> Case:
    width, height = 37, 23
    y, x = np.mgrid[0:height, 0:width]
    return Case("stamp_2d", "grid_3d.cu",
                [Launch("stamp_2d", (_blocks(width, 8), _blocks(height, 4), 1), (8, 4, 1),
                        (Buf("out"), i32(width), i32(height)))],
                {"out": np.full((height, width), -1, np.int32)}, {"out": (y * 1000 + x).astype(np.int32)})


def _block_ids_3d(rng) -> Case:
    grid, block = (2, 3, 2), (4, 2, 3)
    blocks, threads = int(np.prod(grid)), int(np.prod(block))
    return Case("block_ids_3d", "grid_3d.cu",
                [Launch("block_ids_3d", grid, block, (Buf("ids"), Buf("count")))],
                {"ids": np.full(blocks * threads, -1, np.int32), "count": np.zeros(blocks * threads, np.int32)},
                {"ids": np.repeat(np.arange(blocks, dtype=np.int32), threads),
                 "count": np.full(blocks * threads, blocks, np.int32)})


def _reverse_block(rng) -> Case:
    block, grid = 64, 3
    x = rng.integers(0, 10**6, block * grid).astype(np.int32)
    return Case("reverse_block", "dynamic_shared.cu",
                [Launch("reverse_block", (grid, 1, 1), (block, 1, 1), (Buf("x"), Buf("out")), shared=block * 4)],
                {"x": x, "out": np.zeros(block * grid, np.int32)},
                {"out": x.reshape(grid, block)[:, ::-1].reshape(-1).copy()}, uses_barriers=True)


def _report_smem(rng) -> Case:
    return Case("report_dynamic_smem", "dynamic_shared.cu",
                [Launch("report_dynamic_smem", (3, 1, 1), (64, 1, 1), (Buf("sizes"),), shared=200)],
                {"sizes": np.zeros(3, np.uint32)}, {"sizes": np.full(3, 200, np.uint32)})


def _kp(rng) -> Case:
    c, mc, md, mi = -3, 7, 2.75, -11
    f = (1.5, -0.25, 3.0, 0.125)
    s = -9
    arr = (0.5, 1.5, 2.5, 3.5, -4.0)
    p0 = 1000
    flag = True
    acc = float(mc + c) + md
    for v in (float(mi), *f, float(s), *arr, float(p0)):
        acc = acc + v
    acc = 1.0 + acc
    mixed = struct.pack("<b7xdi4x", mc, md, mi)
    float4 = struct.pack("<4f", *f)
    farr = struct.pack("<5f12x", *arr)
    return Case("kp", "struct_params.cu",
                [Launch("kp", (1, 1, 1), (1, 1, 1),
                        (struct.pack("<b", c), mixed, float4, struct.pack("<h", s), farr, Buf("p"),
                         struct.pack("<?", flag)))],
                {"p": np.array([p0, 0], np.int32)}, {"p": np.array([p0, int(acc)], np.int32)})


def _affine(rng) -> Case:
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    scale, shift = np.float32(1.75), np.float32(-0.5)
    y = np.zeros(n + 20, np.float32)
    expected = y.copy()
    expected[:n] = fma32(scale, x, shift)
    return Case("affine", "struct_params.cu",
                [Launch("affine", (3, 1, 1), (128, 1, 1), (struct.pack("<ffi", scale, shift, n), Buf("x"), Buf("y")))],
                {"x": x, "y": y}, {"y": expected})


def _templates(rng) -> list[Case]:
    n = 150
    xf = rng.standard_normal(n).astype(np.float32)
    xi = rng.integers(-10**6, 10**6, n).astype(np.int32)
    xd = rng.standard_normal(n)
    a_ll, b_ll = (rng.integers(-2**62, 2**62, n, dtype=np.int64) for _ in range(2))
    a_us, b_us = (rng.integers(0, 2**16, n).astype(np.uint16) for _ in range(2))
    a_f, b_f = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    grid, block = (2, 1, 1), (96, 1, 1)

    def scale(cid, kernel, x, k):
        return Case(cid, "templates.cu", [Launch(kernel, grid, block, (Buf("out"), Buf("x"), i32(n)))],
                    {"out": np.zeros_like(x), "x": x}, {"out": (x * x.dtype.type(k)).astype(x.dtype)})

    def emax(cid, kernel, a, b):
        return Case(cid, "templates.cu", [Launch(kernel, grid, block, (Buf("a"), Buf("b"), Buf("out"), i32(n)))],
                    {"a": a, "b": b, "out": np.zeros_like(a)}, {"out": np.where(a > b, a, b)})

    return [scale("fill_scale_float", "_Z10fill_scaleIfLi3EEvPT_PKS0_i", xf, 3),
            scale("fill_scale_int", "_Z10fill_scaleIiLi7EEvPT_PKS0_i", xi, 7),
            scale("fill_scale_double", "_Z10fill_scaleIdLi2EEvPT_PKS0_i", xd, 2),
            emax("elementwise_max_float", "_Z15elementwise_maxIfEvPKT_S2_PS0_i", a_f, b_f),
            emax("elementwise_max_longlong", "_Z15elementwise_maxIxEvPKT_S2_PS0_i", a_ll, b_ll),
            emax("elementwise_max_ushort", "_Z15elementwise_maxItEvPKT_S2_PS0_i", a_us, b_us)]


def _asm_ops(rng) -> Case:
    n = 150
    a, b = (rng.integers(-100, 100, n).astype(np.int32) for _ in range(2))
    i = np.arange(n)
    bufs = {k: np.zeros(n, np.int32) for k in ("out", "lane", "bigger")}
    return Case("asm_ops", "inline_asm.cu",
                [Launch("asm_ops", (3, 1, 1), (64, 1, 1),
                        (Buf("a"), Buf("b"), Buf("out"), Buf("lane"), Buf("bigger"), i32(n)))],
                {"a": a, "b": b, **bufs},
                {"out": a + b, "lane": (i % 32).astype(np.int32), "bigger": (a > b).astype(np.int32)})


def _asm_special(rng) -> Case:
    n = 128
    return Case("asm_special_regs", "inline_asm.cu",
                [Launch("asm_special_regs", (2, 1, 1), (64, 1, 1), (Buf("clocks"), Buf("smid_ok")))],
                {"clocks": np.zeros(n, np.int32), "smid_ok": np.zeros(n, np.int32)},
                {"clocks": np.ones(n, np.int32), "smid_ok": np.ones(n, np.int32)})


def _call_device(rng) -> Case:
    n = 100
    x = rng.integers(0, 21, n).astype(np.int32)
    return Case("call_device", "noinline_call.cu",
                [Launch("call_device", (2, 1, 1), (64, 1, 1), (Buf("x"), Buf("out"), Buf("tri"), i32(n)))],
                {"x": x, "out": np.zeros(n, np.int32), "tri": np.zeros(n, np.int32)},
                {"out": x * x + np.arange(n, dtype=np.int32), "tri": x * (x + 1) // 2})


def _print_values(rng) -> Case:
    values = np.array([10, -20, 30], np.int32)
    return Case("print_values", "printf_kernel.cu",
                [Launch("print_values", (3, 1, 1), (32, 1, 1), (Buf("values"), Buf("out")))],
                {"values": values, "out": np.zeros(3, np.int32)}, {"out": values * 2},
                printf_lines=[f"block {b} value {v}" for b, v in enumerate(values)])


def _float_math(rng) -> Case:
    n = 200
    x = rng.uniform(0.01, 20.0, n).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = np.stack([np.exp(x64).astype(np.float32), np.sqrt(x), x / (x + np.float32(1)),
                    fma32(x, x, (1 / np.sqrt(x64)).astype(np.float32))], axis=1).reshape(-1)
    return Case("float_math", "math_ops.cu",
                [Launch("float_math", (2, 1, 1), (128, 1, 1), (Buf("x"), Buf("f"), i32(n)))],
                {"x": x, "f": np.zeros(4 * n, np.float32)}, {"f": ref},
                rtol={"f": 2e-6})   # expf through ex2.approx (2 ulp), __fdividef and rsqrtf approximate


def _int_math(rng) -> Case:
    n = 200
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    a[:4] = [0, -1, 2**31 - 1, -2**31 + 1]
    k = rng.integers(-1000, 1000, n).astype(np.int32)
    k[k == 0] = 3
    k[:4] = [7, -7, 13, -2]
    u = a.view(np.uint32)
    q = np.trunc(a.astype(np.float64) / k).astype(np.int64)
    r = a.astype(np.int64) - q * k
    af = a.astype(np.float32)
    def to_int(f):  # cvt.rzi.s32.f32 saturates
        return np.clip(np.trunc(f).astype(np.int64), -2**31, 2**31 - 1)
    ref = np.stack([q, r, u // 7, u % 7, np.minimum(a, k), np.maximum(a, k),
                    to_int(af) >> 1, to_int(af * np.float32(0.5))], axis=1)
    return Case("int_math", "math_ops.cu",
                [Launch("int_math", (2, 1, 1), (128, 1, 1), (Buf("a"), Buf("k"), Buf("r"), i32(n)))],
                {"a": a, "k": k, "r": np.zeros(8 * n, np.int32)},
                {"r": ref.astype(np.int64).astype(np.uint32).view(np.int32).reshape(-1)})


def _bit_ops(rng) -> Case:
    n = 100
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v[:4] = [0, 1, 0x80000000, 0xFFFFFFFF]
    vals = [int(x) for x in v]
    ref = []
    for x in vals:
        ffs = (x & -x).bit_length()
        ref += [x.bit_count(), 32 - x.bit_length(), int(f"{x:032b}"[::-1], 2), ffs]
    return Case("bit_ops", "math_ops.cu",
                [Launch("bit_ops", (1, 1, 1), (128, 1, 1), (Buf("v"), Buf("bits"), i32(n)))],
                {"v": v, "bits": np.zeros(4 * n, np.uint32)}, {"bits": np.array(ref, np.uint32)})


def _wide_math(rng) -> Case:
    n = 100
    a = rng.integers(0, 2**64, n, dtype=np.uint64)
    b = rng.integers(0, 2**64, n, dtype=np.uint64)
    b[:3] = [0, 1, 2**64 - 1]
    sign_ext = (a & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        ref = np.stack([a * b + (a >> np.uint64(3)), a // (b | np.uint64(1)), sign_ext], axis=1).reshape(-1)
    return Case("wide_math", "math_ops.cu",
                [Launch("wide_math", (1, 1, 1), (128, 1, 1), (Buf("a"), Buf("b"), Buf("w"), i32(n)))],
                {"a": a, "b": b, "w": np.zeros(3 * n, np.uint64)}, {"w": ref})


def _double_math(rng) -> Case:
    n = 64
    x = rng.uniform(0, 50, n)
    t = np.sqrt(fma64(x, x, np.ones(n))) / (x + 2.5)
    ref = x.astype(np.float32).astype(np.float64) * 0.125 + t
    return Case("double_math", "double_precision.cu",
                [Launch("double_math", (1, 1, 1), (64, 1, 1), (Buf("x"), Buf("y"), i32(n)))],
                {"x": x, "y": np.zeros(n, np.float64)}, {"y": ref})


def _half_fma(rng) -> Case:
    n = 200
    a = rng.uniform(-4, 4, n).astype(np.float16)
    b = rng.uniform(-4, 4, n).astype(np.float16)
    prod = (a.astype(np.float64) * b.astype(np.float64)).astype(np.float16)
    r = (prod.astype(np.float64) + a.astype(np.float64)).astype(np.float16)
    return Case("half_fma", "half_precision.cu",
                [Launch("half_fma", (2, 1, 1), (128, 1, 1), (Buf("a"), Buf("b"), Buf("out"), Buf("asf"), i32(n)))],
                {"a": a, "b": b, "out": np.zeros(n, np.float16), "asf": np.zeros(n, np.float32)},
                {"out": r, "asf": r.astype(np.float32)})


def _poly(rng) -> Case:
    n = 300
    x = rng.uniform(-2, 2, n).astype(np.float32)
    c = np.array([1.0, -0.5, 0.25, 2.0], np.float32)
    t = fma32(x, c[3], c[2])
    t = fma32(x, t, c[1])
    y = fma32(x, t, c[0])
    return Case("poly_eval", "constant_array.cu",
                [Launch("poly_eval", (3, 1, 1), (128, 1, 1), (Buf("x"), Buf("y"), i32(n)))],
                {"x": x, "y": np.zeros(n, np.float32)}, {"y": y})


def _use_globals(rng) -> Case:
    n = 100
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    table = np.array([0, 1, 1, 2, 3, 5, 8, 13], np.int32)
    return Case("use_globals", "device_global.cu",
                [Launch("use_globals", (2, 1, 1), (64, 1, 1), (Buf("x"), Buf("out"), i32(n))),
                 Launch("read_counter", (1, 1, 1), (1, 1, 1), (Buf("counter"),))],
                {"x": x, "out": np.zeros(n, np.int32), "counter": np.zeros(1, np.int32)},
                {"out": x + table[np.arange(n) % 8] * 3, "counter": np.array([n], np.int32)},
                globals_expected={"global_counter": np.array([n], np.int32), "scale_bits": np.array([3], np.uint64)})


def _unrolled(rng) -> list[Case]:
    n = 100
    x = rng.standard_normal(8 * n).astype(np.float32).reshape(n, 8)
    acc = x[:, 0] + np.float32(0)
    for k in range(1, 8):
        acc = fma32(x[:, k], np.float32(k + 1), acc)
    length = 11
    rows = rng.standard_normal(length * n).astype(np.float32).reshape(n, length)
    racc = np.zeros(n, np.float32)
    for k in range(length):
        racc = racc + rows[:, k]
    return [Case("dot8_unrolled", "unrolled_loop.cu",
                 [Launch("dot8_unrolled", (1, 1, 1), (128, 1, 1), (Buf("x"), Buf("out"), i32(n)))],
                 {"x": x.reshape(-1), "out": np.zeros(n, np.float32)}, {"out": acc}),
            Case("row_sum", "unrolled_loop.cu",
                 [Launch("row_sum", (2, 1, 1), (64, 1, 1),
                         (Buf("x"), Buf("out"), Buf("check"), i32(n), i32(length)))],
                 {"x": rows.reshape(-1), "out": np.zeros(n, np.float32), "check": np.zeros(n, np.int32)},
                 {"out": racc, "check": np.full(n, length, np.int32)})]


def _last_block(rng) -> Case:
    blocks = 4
    x = rng.standard_normal(128 * blocks).astype(np.float32)
    partial = np.zeros(blocks, np.float32)
    for b in range(blocks):
        acc = np.float32(0)
        for v in x[b * 128:(b + 1) * 128]:
            acc = np.float32(acc + v)
        partial[b] = acc
    total = np.float32(0)
    for v in partial:
        total = np.float32(total + v)
    return Case("last_block_sum", "volatile_fence.cu",
                [Launch("last_block_sum", (blocks, 1, 1), (128, 1, 1), (Buf("x"), Buf("partial"), Buf("done"), Buf("total")))],
                {"x": x, "partial": np.zeros(blocks, np.float32), "done": np.zeros(1, np.uint32),
                 "total": np.zeros(1, np.float32)},
                {"partial": partial, "done": np.array([blocks], np.uint32), "total": np.array([total])},
                uses_barriers=True)


def _max_cas(rng) -> Case:
    n = 500
    x = rng.standard_normal(n).astype(np.float32)
    return Case("max_reduce_cas", "atomic_cas_max.cu",
                [Launch("max_reduce_cas", (4, 1, 1), (128, 1, 1), (Buf("x"), Buf("result"), i32(n)))],
                {"x": x, "result": np.array([-np.inf], np.float32)}, {"result": np.array([x.max()])})


def build_cases() -> list[Case]:
    rng = np.random.default_rng(20261121)
    cases = [_vector_add(rng), _saxpy(rng), _reduce_sum(rng), _matmul(rng), _histogram(rng), _fetch_add(rng),
             _warp_reduce(rng), _warp_vote(rng), _early_exit(rng), _return_after_barrier(rng), _stamp_2d(rng),
             _block_ids_3d(rng), _reverse_block(rng), _report_smem(rng), _kp(rng), _affine(rng),
             *_templates(rng), _asm_ops(rng), _asm_special(rng), _call_device(rng), _print_values(rng),
             _float_math(rng), _int_math(rng), _bit_ops(rng), _wide_math(rng), _double_math(rng), _half_fma(rng),
             _poly(rng), _use_globals(rng), *_unrolled(rng), _last_block(rng), _max_cas(rng)]
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases


CASES: list[Case] = build_cases()
CASES_BY_ID: dict[str, Case] = {c.id: c for c in CASES}
