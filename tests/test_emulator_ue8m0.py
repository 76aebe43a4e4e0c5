"""The ue8m0 conversions (MX scale factors; sm_100a PTX) on an emulator that
reports compute capability 10.0: cvt.{rz,rp}{.satfinite}.ue8m0x2.f32 and .bf16x2,
and cvt.rn.bf16x2.ue8m0x2, from the kernel tests/cuda/programs/narrow_floats.cu
compiled for sm_100a, against the format's definition (narrow_float_reference)."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from e2e_helpers import PROGRAMS
from narrow_float_reference import bf16_bits, bf16_value, ue8m0, ue8m0_to_bf16_bits
from ptx_corpus import compile_ptx

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend

SLOTS = 16


@pytest.fixture(scope="module")
def results():
    ptx = compile_ptx(PROGRAMS / "narrow_floats.cu", arch="sm_100a", extra_flags=(f"-I{PROGRAMS}",))
    backend = EmulatorBackend(printf_to_stdout=False, compute_capability=(10, 0))
    module = backend.module_load(ModuleSource(original=ptx.encode(), ptx=ptx))
    values = [0.0, 1.0, 1.5, 2.0, 3.0, 0.75, 1e-30, 1e-39, 2.0 ** -127, 2.0 ** -126 * 1.5, 3e38, 2.0 ** 127,
              float("inf"), float("nan"), 6.0e-39, 12345.678, 2.0 ** -100, 2.0 ** -100 * 1.0001]
    values += [float(np.float32(2.0 ** (k / 7.0))) for k in range(-900, 900, 13)]
    if len(values) % 2:
        values.append(5.0)
    x = np.array(values, np.float32)
    pairs = len(values) // 2
    s = backend.stream_create()
    d_x, d_out = backend.mem_alloc(x.nbytes), backend.mem_alloc(pairs * SLOTS * 4)
    try:
        backend.memcpy_htod_async(d_x, memoryview(x).cast("B"), s)
        fn = backend.module_function(module, "_Z11conversionsPKfiPj")
        backend.launch(fn, (1, 1, 1), (pairs, 1, 1), 0, s, struct.pack("<QiiQ", d_x, pairs, 0, d_out))
        out = np.zeros(pairs * SLOTS, np.uint32)
        backend.memcpy_dtoh_async(memoryview(out).cast("B"), d_out, s)
        backend.stream_synchronize(s)
    finally:
        backend.mem_free(d_x)
        backend.mem_free(d_out)
        backend.close()
    return list(zip(x[0::2].tolist(), x[1::2].tolist())), out.reshape(pairs, SLOTS)


def test_f32_to_ue8m0x2_round_toward_zero_and_up(results):
    pairs, out = results
    for slot, up, satfinite in ((7, False, True), (8, True, True), (9, True, False)):
        expect = [ue8m0(a, up, satfinite) << 8 | ue8m0(b, up, satfinite) for a, b in pairs]
        wrong = [(a, b, hex(g), hex(e)) for (a, b), g, e in zip(pairs, out[:, slot].tolist(), expect) if g != e]
        assert not wrong, f"slot {slot}: {wrong[:5]}"


def test_bf16x2_to_ue8m0x2_and_back(results):
    pairs, out = results
    # from bf16: the value after rounding the f32 to bf16 (cvt.rn.bf16x2.f32)
    expect = [ue8m0(_bf16(a), False, True) << 8 | ue8m0(_bf16(b), False, True) for a, b in pairs]
    assert out[:, 14].tolist() == expect
    back = [ue8m0_to_bf16_bits(c >> 8) << 16 | ue8m0_to_bf16_bits(c & 0xFF) for c in out[:, 8].tolist()]
    assert out[:, 10].tolist() == back
    assert 0x7FFF in {v >> 16 for v in out[:, 10].tolist()} | {v & 0xFFFF for v in out[:, 10].tolist()}


def _bf16(x: float) -> float:
    return x if math.isnan(x) else bf16_value(bf16_bits(x))
