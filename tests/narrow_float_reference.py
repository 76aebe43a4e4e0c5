"""Expected results of PTX's 8-bit float conversions and NaN-propagating min/max,
computed from the formats' definitions, independently of the emulator's code
(csrc/src/emulator/fp8_formats.h): every encoding of a format is decoded from its
bit fields, and a conversion picks the nearest one (ties to the even encoding).

The formats (OCP 8-bit floating point; PTX ISA, cvt):
- e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity; S.1111.111 is NaN.
- e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; exponent 31: infinity / NaN.
- ue8m0: 8 exponent bits, no sign: 2^(e - 127); 0xff is NaN.
cvt to e4m3/e5m2 is .rn.satfinite: beyond the largest finite (infinity included)
gives the largest finite of the sign, NaN gives 0x7f; .relu makes negatives +0.
No module of the emulator is imported here."""
from __future__ import annotations

import math
import struct

import numpy as np

F32_CANONICAL_NAN = 0x7FFFFFFF
HALF_CANONICAL_NAN = 0x7FFF


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def bits_f32(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


class Fp8:
    def __init__(self, exp_bits: int, man_bits: int, has_inf: bool):
        self.exp_bits, self.man_bits, self.has_inf = exp_bits, man_bits, has_inf
        # encoding -> value for every non-negative finite encoding
        self.finite = {code: v for code in range(0x80) if (v := self.decode(code)) is not None and math.isfinite(v)}
        self.max_code = max(self.finite, key=self.finite.get)

    def decode(self, code: int) -> float | None:
        """The value of an encoding; None for NaN."""
        sign = -1.0 if code & 0x80 else 1.0
        exp = (code & 0x7F) >> self.man_bits
        man = code & ((1 << self.man_bits) - 1)
        bias = (1 << (self.exp_bits - 1)) - 1
        top = (1 << self.exp_bits) - 1
        if self.has_inf and exp == top:
            return None if man else sign * math.inf
        if not self.has_inf and exp == top and man == (1 << self.man_bits) - 1:
            return None
        if exp == 0:
            return sign * man * 2.0 ** (1 - bias - self.man_bits)
        return sign * (1 + man / (1 << self.man_bits)) * 2.0 ** (exp - bias)

    def encode_satfinite(self, x: float, relu: bool = False) -> int:
        if math.isnan(x):
            return 0x7F
        if relu and math.copysign(1.0, x) < 0:
            x = 0.0
        sign = 0x80 if math.copysign(1.0, x) < 0 else 0
        a = abs(x)
        if a >= self.finite[self.max_code]:
            return sign | self.max_code
        best = min(self.finite, key=lambda c: (abs(self.finite[c] - a), c & 1))
        return sign | best

    def encode_array(self, values: np.ndarray) -> np.ndarray:
        """encode_satfinite of every element, as uint8 codes of the same shape."""
        return np.array([self.encode_satfinite(float(v)) for v in values.flat], np.uint8).reshape(values.shape)

    def to_half_bits(self, code: int, relu: bool = False) -> int:
        v = self.decode(code)
        if v is None:
            return HALF_CANONICAL_NAN
        if relu and math.copysign(1.0, v) < 0:
            v = 0.0
        return int(np.array(v, np.float16).view(np.uint16))


E4M3 = Fp8(4, 3, has_inf=False)
E5M2 = Fp8(5, 2, has_inf=True)


def half_bits(x: float) -> int:
    """cvt.rn.f16.f32 (numpy rounds to nearest even); NaN as the canonical NaN."""
    if math.isnan(x):
        return HALF_CANONICAL_NAN
    with np.errstate(over="ignore"):
        return int(np.array(np.float32(x), np.float16).view(np.uint16))


def half_value(bits: int) -> float:
    return float(np.array(bits, np.uint16).view(np.float16))


def bf16_bits(x: float) -> int:
    """cvt.rn.bf16.f32: the f32 rounded to its upper 16 bits, ties to even."""
    if math.isnan(x):
        return HALF_CANONICAL_NAN
    b = bits_f32(x)
    upper, rest = b >> 16, b & 0xFFFF
    if rest > 0x8000 or (rest == 0x8000 and upper & 1):
        upper += 1
    return upper & 0xFFFF


def bf16_value(bits: int) -> float:
    return f32(bits << 16)


def _ptx_order(value: float) -> tuple:
    return (value, math.copysign(1.0, value))      # -0 < +0


def max_nan(a: float, b: float) -> float | None:
    if math.isnan(a) or math.isnan(b):
        return None
    return max(a, b, key=_ptx_order)


def min_nan(a: float, b: float) -> float | None:
    if math.isnan(a) or math.isnan(b):
        return None
    return min(a, b, key=_ptx_order)


def ue8m0(x: float, round_up: bool, satfinite: bool) -> int:
    """cvt.{rz,rp}{.satfinite}.ue8m0.f32 of a non-negative x (or NaN / infinity): the
    largest power of two at or below x (.rz) or the smallest at or above it (.rp),
    2^-127 at the least; overflow and infinity are 0xfe with .satfinite, else 0xff."""
    if math.isnan(x):
        return 0xFF
    if math.isinf(x):
        return 0xFE if satfinite else 0xFF
    if x <= 2.0 ** -127:
        return 0
    e = math.floor(math.log2(x))
    while 2.0 ** e > x:           # log2 rounding at the edges of a binade
        e -= 1
    while 2.0 ** (e + 1) <= x:
        e += 1
    if round_up and 2.0 ** e != x:
        e += 1
    code = e + 127
    if code >= 0xFF:
        return 0xFE if satfinite else 0xFF
    return code


def ue8m0_to_bf16_bits(code: int) -> int:
    if code == 0xFF:
        return HALF_CANONICAL_NAN
    return int(np.array(2.0 ** (code - 127), np.float32).view(np.uint32)) >> 16
