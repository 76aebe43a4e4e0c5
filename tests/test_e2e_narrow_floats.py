"""The 8-bit float conversions (cvt to and from e4m3x2/e5m2x2, with .relu and from
f16x2), max/min.NaN (f32, f16, bf16, bf16x2) and tensormap.replace (global and
shared memory), compiled by nvcc for sm_90a and run under tally-run on the emulator
(tests/cuda/programs/narrow_floats.cu). Every result is checked against the formats'
definitions (tests/narrow_float_reference.py); the tensor map against the field
offsets the emulator's layout gives (csrc/src/emulator/tensor_map.h). The ue8m0
conversions need sm_100a: test_emulator_ue8m0.py runs them on an emulated 10.0."""
from __future__ import annotations

import shutil
import struct

import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401
from narrow_float_reference import (E4M3, E5M2, F32_CANONICAL_NAN, HALF_CANONICAL_NAN, bf16_bits, bf16_value, f32,
                                    half_bits, half_value, max_nan, min_nan)

from tally._core import emulator as core

GENCODE = ("-gencode", "arch=compute_90a,code=[sm_90a,compute_90a]")


@pytest.fixture(scope="module")
def results(emulator_server):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    program = build_cuda(nvcc, "narrow_floats.cu", flags=GENCODE)
    job = run_job(emulator_server.socket, program, timeout=300)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr
    words = {}
    for line in job.stdout.splitlines():
        key, _, values = line.partition("=")
        words[key] = [int(v, 16) for v in values.split(",")] if values else []
    inputs = [f32(b) for b in words["inputs"]]
    pairs = list(zip(inputs[0::2], inputs[1::2]))
    return pairs, words


def _check(pairs, got, expect, what):
    wrong = [(a, b, hex(g), hex(e)) for (a, b), g, e in zip(pairs, got, expect) if g != e]
    assert not wrong, f"{what}: {len(wrong)} of {len(pairs)} wrong, e.g. (a, b, got, expected) {wrong[:5]}"


def test_f32_pairs_to_e4m3x2_and_e5m2x2(results):
    pairs, words = results
    for slot, fmt, relu, name in ((0, E4M3, False, "e4m3x2"), (1, E5M2, False, "e5m2x2"),
                                  (2, E4M3, True, "relu e4m3x2"), (3, E5M2, True, "relu e5m2x2")):
        expect = [fmt.encode_satfinite(a, relu) << 8 | fmt.encode_satfinite(b, relu) for a, b in pairs]
        _check(pairs, words[f"slot{slot}"], expect, name)
    # the cases the formats' definitions single out
    by_input = dict(zip(pairs, words["slot0"]))
    assert by_input[(448.0, 449.0)] == 0x7E7E          # the largest finite, and what rounds to it
    assert by_input[(464.0, 480.0)] == 0x7E7E          # halfway to the next and beyond: satfinite
    assert by_input[(float("inf"), float("-inf"))] == 0x7EFE
    assert words["slot0"][[i for i, (a, _) in enumerate(pairs) if a != a][0]] == 0x7F7F   # NaN


def test_e4m3x2_and_e5m2x2_back_to_f16x2(results):
    pairs, words = results
    for slot, source, fmt, relu in ((4, 0, E4M3, False), (5, 1, E5M2, True)):
        expect = [fmt.to_half_bits(code >> 8, relu) << 16 | fmt.to_half_bits(code & 0xFF, relu)
                  for code in words[f"slot{source}"]]
        _check(pairs, words[f"slot{slot}"], expect, f"f16x2 from slot {source}")


def test_f16x2_to_e4m3x2(results):
    pairs, words = results
    expect = []
    for a, b in pairs:
        ha, hb = half_bits(a), half_bits(b)
        va = float("nan") if ha == HALF_CANONICAL_NAN else half_value(ha)
        vb = float("nan") if hb == HALF_CANONICAL_NAN else half_value(hb)
        expect.append(E4M3.encode_satfinite(va) << 8 | E4M3.encode_satfinite(vb))
    _check(pairs, words["slot6"], expect, "e4m3x2 from f16x2")


def _bits_or_nan(value, encode, nan_bits):
    return nan_bits if value is None else encode(value)


def test_nan_propagating_min_max(results):
    pairs, words = results
    max_bf16 = [_bits_or_nan(max_nan(bf16_value(bf16_bits(a)), bf16_value(bf16_bits(b))), bf16_bits,
                             HALF_CANONICAL_NAN) for a, b in pairs]
    _check(pairs, words["slot11"], max_bf16, "max.NaN.bf16")
    min_f16 = [_bits_or_nan(min_nan(half_value(half_bits(a)), half_value(half_bits(b))), half_bits,
                            HALF_CANONICAL_NAN) for a, b in pairs]
    _check(pairs, words["slot12"], min_f16, "min.NaN.f16")
    max_f32 = [_bits_or_nan(max_nan(a, b), lambda v: struct.unpack("<I", struct.pack("<f", v))[0],
                            F32_CANONICAL_NAN) for a, b in pairs]
    _check(pairs, words["slot13"], max_f32, "max.NaN.f32")
    min_x2 = [(m << 16 | m) for m in (_bits_or_nan(min_nan(bf16_value(bf16_bits(a)), bf16_value(bf16_bits(b))),
                                                   bf16_bits, HALF_CANONICAL_NAN) for a, b in pairs)]
    _check(pairs, words["slot15"], min_x2, "min.NaN.bf16x2")
    assert any(v == F32_CANONICAL_NAN for v in words["slot13"]) and any(v != F32_CANONICAL_NAN
                                                                         for v in words["slot13"])


def _field(words: list[int], name: str, ordinal: int = 0) -> int:
    offset, size = core.tensor_map_field(name, ordinal)
    raw = b"".join(w.to_bytes(4, "little") for w in words)
    return int.from_bytes(raw[offset:offset + size], "little")


def test_tensormap_replace_in_global_and_shared_memory(results):
    _, words = results
    g, s = words["tensormap_global"], words["tensormap_shared"]
    assert len(g) == len(s) == core.TENSOR_MAP_BYTES // 4
    assert _field(g, "global_address") == 0x123456789ABCDEF0
    assert _field(g, "rank") == 2
    assert _field(g, "box_dim", 1) == 64
    assert _field(g, "global_dim", 4) == 777
    assert _field(g, "global_stride", 0) == 4096
    assert _field(g, "element_stride", 2) == 3
    assert (_field(g, "elemtype"), _field(g, "swizzle_mode"), _field(g, "fill_mode")) == (7, 3, 1)
    assert _field(g, "box_dim", 0) == 0 and _field(g, "global_dim", 3) == 0     # untouched fields stay
    assert (_field(s, "rank"), _field(s, "global_address"), _field(s, "interleave_layout"),
            _field(s, "fill_mode")) == (4, 0xFEED, 2, 1)
    assert sum(1 for w in s if w) == 4   # rank, the address (one word), interleave, fill: nothing else written
