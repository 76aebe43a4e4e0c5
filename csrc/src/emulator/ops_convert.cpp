// Conversions and moves: cvt (every integer/float pair, rounding, .sat, .ftz,
// .relu), cvt.pack to f16x2/bf16x2, mov, and vector pack/unpack moves.
#include <cmath>
#include <limits>

#include "emulator/float_formats.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

constexpr unsigned kTypeBytes[kTypeCount] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8};
inline bool is_float(uint32_t t) { return t >= kF16; }
inline bool is_signed(uint32_t t) { return t == kS8 || t == kS16 || t == kS32 || t == kS64; }

double read_float(uint64_t raw, uint32_t t) {
  switch (t) {
    case kF16: return half_to_double(static_cast<uint16_t>(raw));
    case kBF16: return bf16_to_double(static_cast<uint16_t>(raw));
    case kF32: return get<float>(raw);
    default: return get<double>(raw);
  }
}

// Integer limits of type t as __int128.
__int128 int_min(uint32_t t) {
  return is_signed(t) ? -(static_cast<__int128>(1) << (8 * kTypeBytes[t] - 1)) : 0;
}
__int128 int_max(uint32_t t) {
  unsigned bits = 8 * kTypeBytes[t] - (is_signed(t) ? 1 : 0);
  return (static_cast<__int128>(1) << bits) - 1;
}

uint64_t int_to_int(uint64_t raw, uint32_t s, uint32_t d, bool sat) {
  uint64_t v = extend(raw, kTypeBytes[s], is_signed(s));
  if (sat) {
    __int128 x = is_signed(s) ? static_cast<__int128>(static_cast<int64_t>(v)) : static_cast<__int128>(v);
    if (x < int_min(d)) x = int_min(d);
    if (x > int_max(d)) x = int_max(d);
    v = static_cast<uint64_t>(x);
  }
  return extend(v, kTypeBytes[d], is_signed(d));
}

double round_integral(double v, Round r) {
  switch (r) {
    case Round::kNearest: return std::nearbyint(v);
    case Round::kZero: return std::trunc(v);
    case Round::kDown: return std::floor(v);
    default: return std::ceil(v);
  }
}

// Float to integer conversions saturate to the destination range; NaN gives 0.
uint64_t float_to_int(double v, uint32_t d, Round r) {
  if (std::isnan(v)) return 0;
  v = round_integral(v, r);
  double lo = static_cast<double>(int_min(d));
  double hi_excl = std::ldexp(1.0, 8 * kTypeBytes[d] - (is_signed(d) ? 1 : 0));  // max + 1
  __int128 x;
  if (v < lo) {
    x = int_min(d);
  } else if (v >= hi_excl) {
    x = int_max(d);
  } else {
    x = static_cast<__int128>(v);
  }
  return extend(static_cast<uint64_t>(x), kTypeBytes[d], is_signed(d));
}

uint64_t to_float(double v, uint32_t d, Round r, uint32_t flags) {
  bool ftz = flags & flag::kFtz;
  if (flags & flag::kRelu) v = std::isnan(v) ? v : std::fmax(v, 0.0);
  if (flags & flag::kSat) v = saturate01(v);
  switch (d) {
    case kF16: return double_to_half(v, r);
    case kBF16: return double_to_bf16(v, r);
    case kF32: {
      float f = static_cast<float>(v);  // rounded in the host mode set by the caller
      if (ftz) f = flush_subnormal(f);
      return put<float>(f);
    }
    default: return put<double>(v);
  }
}

EMU_HANDLER(h_cvt) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  uint32_t dt = (in.flags >> flag::kDstTypeShift) & flag::kTypeMask;
  uint32_t st = (in.flags >> flag::kSrcTypeShift) & flag::kTypeMask;
  bool sat = in.flags & flag::kSat;
  bool ftz = in.flags & flag::kFtz;
  uint32_t round_bits = in.flags & flag::kRoundMask;
  bool integral = round_bits >= flag::kRni && round_bits <= flag::kRpi;
  if (!is_float(dt) && !is_float(st)) {
    for_lanes(m, [&](int l) { d[l] = int_to_int(a[l], st, dt, sat); });
    return;
  }
  if (!is_float(dt)) {
    Round r = round_of(in.flags, Round::kZero);
    for_lanes(m, [&](int l) {
      double v = read_float(a[l], st);
      if (ftz) v = st == kF32 ? flush_subnormal(static_cast<float>(v)) : v;
      d[l] = float_to_int(v, dt, r);
    });
    return;
  }
  Round r = round_of(in.flags);
  // The host rounding mode applies to int->float and f64->f32; f16/bf16 encode themselves.
  RoundingScope rounding(integral ? 0 : in.flags);
  for_lanes(m, [&](int l) {
    double v;
    if (is_float(st)) {
      v = read_float(a[l], st);
      if (ftz && st == kF32) v = flush_subnormal(static_cast<float>(v));
      if (integral) v = round_integral(v, r);
    } else {
      uint64_t x = extend(a[l], kTypeBytes[st], is_signed(st));
      if (dt == kF32) {
        // Round once, straight to float (via double would round twice for 64-bit ints).
        float f = is_signed(st) ? static_cast<float>(static_cast<int64_t>(x)) : static_cast<float>(x);
        v = f;
      } else {
        v = is_signed(st) ? static_cast<double>(static_cast<int64_t>(x)) : static_cast<double>(x);
      }
    }
    d[l] = to_float(v, dt, r, in.flags);
  });
}

// cvt.rn.f16x2.f32 d, a, b: d = {upper: cvt(a), lower: cvt(b)}.
template <bool kBF16> EMU_HANDLER(h_cvt_pack) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  Round r = round_of(in.flags);
  bool relu = in.flags & flag::kRelu;
  for_lanes(m, [&](int l) {
    double x = get<float>(a[l]), y = get<float>(b[l]);
    if (relu) {
      x = std::isnan(x) ? x : std::fmax(x, 0.0);
      y = std::isnan(y) ? y : std::fmax(y, 0.0);
    }
    uint32_t hi = kBF16 ? double_to_bf16(x, r) : double_to_half(x, r);
    uint32_t lo = kBF16 ? double_to_bf16(y, r) : double_to_half(y, r);
    d[l] = (hi << 16) | lo;
  });
}

EMU_HANDLER(h_mov) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) { d[l] = a[l]; });
}

// mov.bN d, {e0, e1, ...}: element 0 in the low bits. op[1..width] are the elements.
EMU_HANDLER(h_mov_pack) {
  uint64_t* d = e.lanes(in.op[0]);
  unsigned bits = 8 * in.size;
  uint64_t mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
  const uint64_t* src[8] = {};
  for (int k = 0; k < in.width; ++k) src[k] = in.op[1 + k] == kNoSlot ? nullptr : e.lanes(in.op[1 + k]);
  for_lanes(m, [&](int l) {
    uint64_t v = 0;
    for (int k = 0; k < in.width; ++k) {
      if (src[k]) v |= (src[k][l] & mask) << (bits * k);
    }
    d[l] = v;
  });
}

// mov.bN {d0, d1, ...}, a: op[0..width-1] destinations (kNoSlot for `_`), op[4] the source.
EMU_HANDLER(h_mov_unpack) {
  const uint64_t* a = e.lanes(in.op[4]);
  unsigned bits = 8 * in.size;
  uint64_t mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
  uint64_t source[kWarpSize];
  for_lanes(m, [&](int l) { source[l] = a[l]; });  // a may be one of the destinations
  for (int k = 0; k < in.width; ++k) {
    if (in.op[k] == kNoSlot) continue;
    uint64_t* d = e.lanes(in.op[k]);
    for_lanes(m, [&](int l) { d[l] = (source[l] >> (bits * k)) & mask; });
  }
}

// cvt{.rna,.rn,.rz}{.satfinite}{.relu}.tf32.f32 d, a: a with its 13 low mantissa bits
// rounded away (nearest with ties away from zero, nearest even, or toward zero); the
// result is an f32 bit pattern whose low 13 bits are zero. flags: the rounding
// (0 rna, 1 rn, 2 rz) in bits 0-1, .satfinite (bit 2: an infinity becomes the
// largest finite tf32 of its sign), .relu (bit 3: negative results become +0).
EMU_HANDLER(h_cvt_tf32) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint32_t rounding = in.flags & 3;
  const bool satfinite = (in.flags & 4) != 0, relu = (in.flags & 8) != 0;
  for_lanes(m, [&](int l) {
    uint32_t bits = static_cast<uint32_t>(a[l]);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
      d[l] = 0x7fffffffu;   // NaN: the canonical one
      return;
    }
    if ((bits & 0x7f800000u) != 0x7f800000u) {   // finite: round the 13 low bits away
      if (rounding == 0) bits += 0x1000u;
      if (rounding == 1) bits += 0xfffu + ((bits >> 13) & 1u);
    }
    bits &= 0xffffe000u;
    if (satfinite && (bits & 0x7fffffffu) == 0x7f800000u) bits = (bits & 0x80000000u) | 0x7f7fe000u;
    if (relu && (bits & 0x80000000u)) bits = 0;
    d[l] = bits;
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("cvt", h_cvt), EMU_ENTRY("cvt.tf32.f32", h_cvt_tf32), EMU_ENTRY("cvt.pack.f16x2", h_cvt_pack<false>),
    EMU_ENTRY("cvt.pack.bf16x2", h_cvt_pack<true>), EMU_ENTRY("mov", h_mov),
    EMU_ENTRY("mov.pack", h_mov_pack), EMU_ENTRY("mov.unpack", h_mov_unpack),
};

}  // namespace
}  // namespace tally::emu
