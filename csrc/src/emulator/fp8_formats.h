// The 8-bit float formats of PTX's cvt, from their definitions (OCP 8-bit
// floating point; the PTX ISA's cvt section):
//   e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity; S.1111.111
//         is NaN, so exponent 15 still holds normal numbers up to 448 (0x7e).
//   e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits; IEEE-like: exponent 31
//         is infinity (mantissa 0) or NaN; the largest finite is 57344 (0x7b).
//   ue8m0: an unsigned power of two (MX scale factors): value 2^(bits - 127), 0xff NaN.
// cvt to e4m3/e5m2 is always .rn.satfinite in PTX: round to nearest even, anything
// beyond the largest finite (infinity included) becomes the largest finite of its
// sign, NaN the canonical NaN 0x7f; .relu first turns negative inputs into +0.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace tally::emu {

struct Fp8Format {
  int exp_bits;
  int man_bits;
  uint8_t max_finite;   // encoding of the largest finite magnitude
};
constexpr Fp8Format kE4M3{4, 3, 0x7e};
constexpr Fp8Format kE5M2{5, 2, 0x7b};
constexpr uint8_t kFp8CanonicalNaN = 0x7f;

inline bool fp8_is_nan(uint8_t bits, Fp8Format f) {
  uint8_t magnitude = bits & 0x7f;
  if (f.exp_bits == 4) return magnitude == 0x7f;
  return (magnitude >> 2) == 0x1f && (magnitude & 0x3) != 0;
}

inline double decode_fp8(uint8_t bits, Fp8Format f) {
  const bool negative = bits & 0x80;
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const uint32_t exp = (bits & 0x7f) >> f.man_bits;
  const uint32_t man = bits & ((1u << f.man_bits) - 1);
  double v;
  if (fp8_is_nan(bits, f)) {
    return std::numeric_limits<double>::quiet_NaN();
  } else if (f.exp_bits == 5 && exp == 0x1f) {
    v = std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(man | (1u << f.man_bits)), static_cast<int>(exp) - bias - f.man_bits);
  }
  return negative ? -v : v;
}

// cvt.rn.satfinite{.relu}: `v` is exact (an f32 or f16 value held in a double).
inline uint8_t encode_fp8_satfinite(double v, Fp8Format f, bool relu) {
  if (std::isnan(v)) return kFp8CanonicalNaN;
  if (relu && std::signbit(v)) v = 0.0;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  double a = std::fabs(v);
  if (std::isinf(a)) return sign | f.max_finite;
  if (a == 0) return sign;
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int emin = 1 - bias;
  int e2;
  std::frexp(a, &e2);
  int e = e2 - 1;                                   // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;                           // subnormals: a fixed quantum
  double scaled = std::ldexp(a, f.man_bits - e);    // exact
  double n = std::floor(scaled);
  double frac = scaled - n;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0)) n += 1;
  if (n >= std::ldexp(1.0, f.man_bits + 1)) {       // rounded into the next binade
    n /= 2;
    ++e;
  }
  if (std::ldexp(n, e - f.man_bits) > decode_fp8(f.max_finite, f)) return sign | f.max_finite;
  auto mant = static_cast<uint32_t>(n);
  if (mant < (1u << f.man_bits)) return sign | static_cast<uint8_t>(mant);   // subnormal (or zero)
  return sign | static_cast<uint8_t>(((e + bias) << f.man_bits) | (mant - (1u << f.man_bits)));
}

// ue8m0 from a bf16 encoding: its exponent field, the sign ignored; .rp rounds a
// magnitude with mantissa bits up to the next power (not for NaN, infinity, or values
// at or below 2^-127, whose exponent field is already the smallest); .satfinite keeps
// infinity and overflow at 0xfe instead of the NaN encoding.
inline uint8_t ue8m0_of_bf16(uint16_t bf16, bool round_up, bool satfinite) {
  const uint16_t magnitude = bf16 & 0x7fff;
  uint32_t e = (bf16 >> 7) & 0xff;
  if (round_up && (bf16 & 0x7f) != 0 && magnitude > 0x0040 && magnitude < 0x7f80) ++e;
  if (satfinite && magnitude <= 0x7f80 && e >= 0xff) e = 0xfe;
  return static_cast<uint8_t>(e > 0xff ? 0xff : e);
}

// f32 to the bf16 the ue8m0 conversion starts from: truncated (.rz), or for .rp a
// positive finite value with bits below bf16's mantissa goes up one ulp.
inline uint16_t bf16_for_ue8m0(uint32_t f32, bool round_up) {
  if ((f32 & 0x7fffffff) > 0x7f800000) return 0x7fff;
  if (round_up && f32 < 0x7f800000 && (f32 & 0xffff) != 0) return static_cast<uint16_t>((f32 >> 16) + 1);
  return static_cast<uint16_t>(f32 >> 16);
}

inline uint16_t bf16_of_ue8m0(uint8_t bits) {
  if (bits == 0xff) return 0x7fff;
  if (bits == 0) return 0x0040;      // 2^-127, a bf16 subnormal
  return static_cast<uint16_t>(bits << 7);
}

}  // namespace tally::emu
