// Floating-point helpers: IEEE half (f16) and bfloat16 encode/decode with any
// PTX rounding mode, flush-to-zero, saturation, PTX min/max NaN rules, and a
// scope that switches the host's rounding mode for .rz/.rm/.rp arithmetic.
#pragma once

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "emulator/emu_types.h"

namespace tally::emu {

enum class Round { kNearest, kZero, kDown, kUp };

inline Round round_of(uint32_t flags, Round fallback = Round::kNearest) {
  switch (flags & flag::kRoundMask) {
    case flag::kRn: case flag::kRni: return Round::kNearest;
    case flag::kRz: case flag::kRzi: return Round::kZero;
    case flag::kRm: case flag::kRmi: return Round::kDown;
    case flag::kRp: case flag::kRpi: return Round::kUp;
    default: return fallback;
  }
}

// Host arithmetic in the instruction's rounding mode while alive (only when it
// is not round-to-nearest, which is the host default).
class RoundingScope {
 public:
  explicit RoundingScope(uint32_t flags) {
    Round r = round_of(flags);
    if (r == Round::kNearest) return;
    saved_ = std::fegetround();
    std::fesetround(r == Round::kZero ? FE_TOWARDZERO : r == Round::kDown ? FE_DOWNWARD : FE_UPWARD);
    active_ = true;
  }
  ~RoundingScope() {
    if (active_) std::fesetround(saved_);
  }
  RoundingScope(const RoundingScope&) = delete;
  RoundingScope& operator=(const RoundingScope&) = delete;

 private:
  int saved_ = FE_TONEAREST;
  bool active_ = false;
};

// Rounds a finite or special double to a binary format with `exp_bits`
// exponent bits and `man_bits` stored mantissa bits; returns its encoding.
// NaN becomes the canonical NaN (all mantissa bits set, as NVIDIA GPUs give).
inline uint32_t encode_small_float(double v, int exp_bits, int man_bits, Round mode) {
  const uint32_t sign = std::signbit(v) ? 1u : 0u;
  const uint32_t sign_bit = sign << (exp_bits + man_bits);
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const int bias = (1 << (exp_bits - 1)) - 1;
  if (std::isnan(v)) return (exp_all << man_bits) | ((1u << man_bits) - 1);
  if (std::isinf(v)) return sign_bit | (exp_all << man_bits);
  double a = std::fabs(v);
  if (a == 0) return sign_bit;
  int e2;
  std::frexp(a, &e2);
  int e = e2 - 1;                 // a in [2^e, 2^(e+1))
  const int emin = 1 - bias;
  if (e < emin) e = emin;         // subnormal range: fixed quantum
  double scaled = std::ldexp(a, man_bits - e);   // exact: a power-of-two scaling
  double n = std::floor(scaled);
  double frac = scaled - n;
  bool up = false;
  switch (mode) {
    case Round::kNearest: up = frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0); break;
    case Round::kZero: break;
    case Round::kDown: up = sign && frac > 0; break;
    case Round::kUp: up = !sign && frac > 0; break;
  }
  if (up) n += 1;
  uint64_t mant = static_cast<uint64_t>(n);
  if (mant >= (2ull << man_bits)) {  // rounding carried into the next binade
    mant >>= 1;
    ++e;
  }
  const int emax = bias;
  if (e > emax) {
    bool to_inf = mode == Round::kNearest || (mode == Round::kUp && !sign) || (mode == Round::kDown && sign);
    if (to_inf) return sign_bit | (exp_all << man_bits);
    return sign_bit | ((exp_all - 1) << man_bits) | ((1u << man_bits) - 1);  // largest finite
  }
  if (mant < (1ull << man_bits)) return sign_bit | static_cast<uint32_t>(mant);  // subnormal
  return sign_bit | (static_cast<uint32_t>(e + bias) << man_bits) | static_cast<uint32_t>(mant - (1ull << man_bits));
}

inline double decode_small_float(uint32_t bits, int exp_bits, int man_bits) {
  const uint32_t sign = (bits >> (exp_bits + man_bits)) & 1;
  const uint32_t exp = (bits >> man_bits) & ((1u << exp_bits) - 1);
  const uint32_t mant = bits & ((1u << man_bits) - 1);
  const int bias = (1 << (exp_bits - 1)) - 1;
  double v;
  if (exp == (1u << exp_bits) - 1) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - man_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << man_bits)), static_cast<int>(exp) - bias - man_bits);
  }
  return sign ? -v : v;
}

inline double half_to_double(uint16_t h) { return decode_small_float(h, 5, 10); }
inline uint16_t double_to_half(double v, Round r = Round::kNearest) {
  return static_cast<uint16_t>(encode_small_float(v, 5, 10, r));
}
inline double bf16_to_double(uint16_t h) { return decode_small_float(h, 8, 7); }
inline uint16_t double_to_bf16(double v, Round r = Round::kNearest) {
  return static_cast<uint16_t>(encode_small_float(v, 8, 7, r));
}

template <class T>
inline T flush_subnormal(T v) {
  if (std::fpclassify(v) == FP_SUBNORMAL) return std::signbit(v) ? T(-0.0) : T(0.0);
  return v;
}

template <class T>
inline T saturate01(T v) {
  if (std::isnan(v)) return T(0);
  if (v < T(0)) return T(0);
  if (v > T(1)) return T(1);
  return v;
}

// PTX min/max: a NaN operand is ignored (NaN only if both are); -0 < +0.
template <class T>
inline T ptx_min(T a, T b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
template <class T>
inline T ptx_max(T a, T b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// min.NaN / max.NaN: a NaN operand makes the result NaN (the caller encodes it as
// the canonical NaN of its format).
template <class T>
inline T ptx_min_nan(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return ptx_min(a, b);
}
template <class T>
inline T ptx_max_nan(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return ptx_max(a, b);
}

}  // namespace tally::emu
