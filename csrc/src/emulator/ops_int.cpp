// Integer arithmetic: add/sub/mul/mad (lo, hi, wide, 24-bit), div/rem, abs,
// neg, min/max (with sm_90's packed 16x2 and .relu forms), sad, carry chains.
// Wrapping arithmetic is done in uint64_t so that signed overflow (undefined in
// C++) wraps as on the GPU.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

template <class T>
using Unsigned = std::make_unsigned_t<T>;

// The type twice as wide as T (same signedness), for .wide and .hi.
template <class T> struct Wider;
template <> struct Wider<int16_t> { using type = int32_t; };
template <> struct Wider<uint16_t> { using type = uint32_t; };
template <> struct Wider<int32_t> { using type = int64_t; };
template <> struct Wider<uint32_t> { using type = uint64_t; };
template <> struct Wider<int64_t> { using type = __int128; };
template <> struct Wider<uint64_t> { using type = unsigned __int128; };

template <class T>
T wrap_add(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
template <class T>
T wrap_sub(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
template <class T>
T wrap_mul(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
template <class T>
T mul_hi(T a, T b) {
  using W = typename Wider<T>::type;
  W p = static_cast<W>(static_cast<W>(a) * static_cast<W>(b));
  return static_cast<T>(p >> (8 * sizeof(T)));
}

template <class T> EMU_HANDLER(h_add) { binary<T>(e, in, m, wrap_add<T>); }
template <class T> EMU_HANDLER(h_sub) { binary<T>(e, in, m, wrap_sub<T>); }
template <class T> EMU_HANDLER(h_mul_lo) { binary<T>(e, in, m, wrap_mul<T>); }
template <class T> EMU_HANDLER(h_mul_hi) { binary<T>(e, in, m, mul_hi<T>); }
template <class T> EMU_HANDLER(h_mul_wide) {
  using W = typename Wider<T>::type;
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) { d[l] = put<W>(static_cast<W>(static_cast<W>(get<T>(a[l])) * static_cast<W>(get<T>(b[l])))); });
}
template <class T> EMU_HANDLER(h_mad_lo) {
  ternary<T>(e, in, m, [](T a, T b, T c) { return wrap_add<T>(wrap_mul<T>(a, b), c); });
}
template <class T> EMU_HANDLER(h_mad_hi) {
  ternary<T>(e, in, m, [](T a, T b, T c) { return wrap_add<T>(mul_hi<T>(a, b), c); });
}
template <class T> EMU_HANDLER(h_mad_wide) {
  using W = typename Wider<T>::type;
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  for_lanes(m, [&](int l) {
    W p = static_cast<W>(static_cast<W>(get<T>(a[l])) * static_cast<W>(get<T>(b[l])));
    d[l] = put<W>(wrap_add<W>(p, get<W>(c[l])));
  });
}

// 24-bit multiplies: the low 24 bits of each operand (sign-extended for .s32)
// give a 48-bit product; .lo is bits 31..0, .hi bits 47..16.
template <class T>
int64_t mul24_product(T a, T b) {
  int64_t x = static_cast<int64_t>(static_cast<uint32_t>(a) & 0xffffff);
  int64_t y = static_cast<int64_t>(static_cast<uint32_t>(b) & 0xffffff);
  if constexpr (std::is_signed_v<T>) {
    if (x & 0x800000) x -= 0x1000000;
    if (y & 0x800000) y -= 0x1000000;
  }
  return x * y;
}
template <class T> EMU_HANDLER(h_mul24_lo) {
  binary<T>(e, in, m, [](T a, T b) { return static_cast<T>(mul24_product(a, b)); });
}
template <class T> EMU_HANDLER(h_mul24_hi) {
  binary<T>(e, in, m, [](T a, T b) { return static_cast<T>(mul24_product(a, b) >> 16); });
}
template <class T> EMU_HANDLER(h_mad24_lo) {
  ternary<T>(e, in, m, [](T a, T b, T c) { return wrap_add<T>(static_cast<T>(mul24_product(a, b)), c); });
}
template <class T> EMU_HANDLER(h_mad24_hi) {
  ternary<T>(e, in, m, [](T a, T b, T c) { return wrap_add<T>(static_cast<T>(mul24_product(a, b) >> 16), c); });
}

// Division by zero is unspecified in PTX; like the hardware we return all ones
// for the quotient and the dividend for the remainder, and never trap.
template <class T>
T div_op(T a, T b) {
  if (b == 0) return static_cast<T>(~static_cast<Unsigned<T>>(0));
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return a;
  }
  return static_cast<T>(a / b);
}
template <class T>
T rem_op(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return static_cast<T>(a % b);
}
template <class T> EMU_HANDLER(h_div) { binary<T>(e, in, m, div_op<T>); }
template <class T> EMU_HANDLER(h_rem) { binary<T>(e, in, m, rem_op<T>); }
template <class T> EMU_HANDLER(h_abs) {
  unary<T>(e, in, m, [](T a) { return a < 0 ? wrap_sub<T>(0, a) : a; });
}
template <class T> EMU_HANDLER(h_neg) { unary<T>(e, in, m, [](T a) { return wrap_sub<T>(0, a); }); }
template <bool kMax, class T>
T min_max(T a, T b) { return kMax ? (a < b ? b : a) : (b < a ? b : a); }
template <class T> EMU_HANDLER(h_min) { binary<T>(e, in, m, min_max<false, T>); }
template <class T> EMU_HANDLER(h_max) { binary<T>(e, in, m, min_max<true, T>); }
// min/max clamped at 0 (.relu, sm_90: signed types only).
template <class T, bool kMax> EMU_HANDLER(h_minmax_relu) {
  binary<T>(e, in, m, [](T a, T b) { return std::max(min_max<kMax>(a, b), T{0}); });
}
// min/max of both 16-bit halves of 32-bit registers at once (.u16x2, .s16x2, sm_90),
// each half clamped at 0 with kRelu (.relu, .s16x2 only).
template <class Half, bool kMax, bool kRelu> EMU_HANDLER(h_minmax_x2) {
  binary<uint32_t>(e, in, m, [](uint32_t a, uint32_t b) {
    uint32_t out = 0;
    for (int k = 0; k < 2; ++k) {
      const Half x = static_cast<Half>(a >> (16 * k)), y = static_cast<Half>(b >> (16 * k));
      Half r = min_max<kMax>(x, y);
      if constexpr (kRelu) r = std::max(r, Half{0});
      out |= static_cast<uint32_t>(static_cast<uint16_t>(r)) << (16 * k);
    }
    return out;
  });
}
template <class T> EMU_HANDLER(h_sad) {
  ternary<T>(e, in, m, [](T a, T b, T c) { return wrap_add<T>(c, a > b ? wrap_sub<T>(a, b) : wrap_sub<T>(b, a)); });
}

// Carry chains: op[3] is a hidden per-thread register holding CC.CF (0/1).
template <class T, bool kAddIn, bool kSub, bool kCarryOut>
EMU_HANDLER(h_carry) {
  using U = Unsigned<T>;
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  uint64_t* cc = e.lanes(in.op[3]);
  for_lanes(m, [&](int l) {
    using W = typename Wider<U>::type;
    W x = static_cast<U>(a[l]);
    W y = static_cast<U>(b[l]);
    W cin = kAddIn ? (cc[l] & 1) : 0;
    W r;
    uint64_t carry;
    if constexpr (kSub) {
      r = x - y - cin;
      carry = (x < y + cin) ? 1 : 0;  // borrow
    } else {
      r = x + y + cin;
      carry = static_cast<uint64_t>(r >> (8 * sizeof(U))) & 1;
    }
    d[l] = put<T>(static_cast<T>(static_cast<U>(r)));
    if (kCarryOut) cc[l] = carry;
  });
}

// Multiply-add in carry chains (extended-precision multiplication, as NVVM emits for
// 64-bit products and math library range reduction): d = (lo or hi half of a * b) +
// c (+ CC.CF for madc), carry out into CC.CF with .cc. op[4] is the CC.CF register.
template <class T, bool kHi, bool kAddIn, bool kCarryOut>
EMU_HANDLER(h_mad_carry) {
  using U = Unsigned<T>;
  using W = typename Wider<U>::type;
  constexpr unsigned kBits = 8 * sizeof(T);
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  uint64_t* cc = e.lanes(in.op[4]);
  for_lanes(m, [&](int l) {
    U half = kHi ? static_cast<U>(mul_hi<T>(static_cast<T>(a[l]), static_cast<T>(b[l])))
                 : static_cast<U>(wrap_mul<T>(static_cast<T>(a[l]), static_cast<T>(b[l])));
    W sum = static_cast<W>(half) + static_cast<W>(static_cast<U>(c[l])) + (kAddIn ? (cc[l] & 1) : 0);
    d[l] = put<T>(static_cast<T>(static_cast<U>(sum)));
    if (kCarryOut) cc[l] = static_cast<uint64_t>(sum >> kBits) & 1;
  });
}

// dp4a d, a, b, c: c + the dot product of a's and b's four bytes; dp2a: a's two
// halves with two bytes of b (low or high pair). Signedness per operand.
template <int kPairs> EMU_HANDLER(h_dot) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  bool sa = in.flags & flag::kDotSignedA, sb = in.flags & flag::kDotSignedB;
  unsigned b_first = (kPairs == 2 && (in.flags & flag::kDot2High)) ? 2 : 0;
  for_lanes(m, [&](int l) {
    uint32_t x = static_cast<uint32_t>(a[l]), y = static_cast<uint32_t>(b[l]);
    int64_t acc = 0;
    for (int k = 0; k < kPairs; ++k) {
      unsigned a_bits = kPairs == 4 ? 8 : 16;
      uint64_t av = (x >> (a_bits * k)) & ((1u << a_bits) - 1);
      uint64_t bv = (y >> (8 * (b_first + k))) & 0xff;
      acc += static_cast<int64_t>(extend(av, a_bits / 8, sa)) * static_cast<int64_t>(extend(bv, 1, sb));
    }
    d[l] = static_cast<uint32_t>(static_cast<uint32_t>(c[l]) + static_cast<uint32_t>(acc));
  });
}

#define CARRY_ENTRIES(key, add_in, sub, carry_out)                                        \
  EMU_ENTRY(key ".u32", (h_carry<uint32_t, add_in, sub, carry_out>)),                      \
      EMU_ENTRY(key ".s32", (h_carry<int32_t, add_in, sub, carry_out>)),                   \
      EMU_ENTRY(key ".u64", (h_carry<uint64_t, add_in, sub, carry_out>)),                  \
      EMU_ENTRY(key ".s64", (h_carry<int64_t, add_in, sub, carry_out>))

#define MAD_CARRY_ENTRIES(key, hi, add_in, carry_out)                                     \
  EMU_ENTRY(key ".u32", (h_mad_carry<uint32_t, hi, add_in, carry_out>)),                   \
      EMU_ENTRY(key ".s32", (h_mad_carry<int32_t, hi, add_in, carry_out>)),                \
      EMU_ENTRY(key ".u64", (h_mad_carry<uint64_t, hi, add_in, carry_out>)),               \
      EMU_ENTRY(key ".s64", (h_mad_carry<int64_t, hi, add_in, carry_out>))

const HandlerRegistrar registrar{
    EMU_INT_ENTRIES("add", h_add), EMU_INT_ENTRIES("sub", h_sub),
    EMU_INT_ENTRIES("mul.lo", h_mul_lo), EMU_INT_ENTRIES("mul.hi", h_mul_hi),
    EMU_ENTRY("mul.wide.s16", h_mul_wide<int16_t>), EMU_ENTRY("mul.wide.u16", h_mul_wide<uint16_t>),
    EMU_ENTRY("mul.wide.s32", h_mul_wide<int32_t>), EMU_ENTRY("mul.wide.u32", h_mul_wide<uint32_t>),
    EMU_INT_ENTRIES("mad.lo", h_mad_lo), EMU_INT_ENTRIES("mad.hi", h_mad_hi),
    EMU_ENTRY("mad.wide.s16", h_mad_wide<int16_t>), EMU_ENTRY("mad.wide.u16", h_mad_wide<uint16_t>),
    EMU_ENTRY("mad.wide.s32", h_mad_wide<int32_t>), EMU_ENTRY("mad.wide.u32", h_mad_wide<uint32_t>),
    EMU_ENTRY("mul24.lo.s32", h_mul24_lo<int32_t>), EMU_ENTRY("mul24.lo.u32", h_mul24_lo<uint32_t>),
    EMU_ENTRY("mul24.hi.s32", h_mul24_hi<int32_t>), EMU_ENTRY("mul24.hi.u32", h_mul24_hi<uint32_t>),
    EMU_ENTRY("mad24.lo.s32", h_mad24_lo<int32_t>), EMU_ENTRY("mad24.lo.u32", h_mad24_lo<uint32_t>),
    EMU_ENTRY("mad24.hi.s32", h_mad24_hi<int32_t>), EMU_ENTRY("mad24.hi.u32", h_mad24_hi<uint32_t>),
    EMU_INT_ENTRIES("div", h_div), EMU_INT_ENTRIES("rem", h_rem),
    EMU_ENTRY("abs.s16", h_abs<int16_t>), EMU_ENTRY("abs.s32", h_abs<int32_t>), EMU_ENTRY("abs.s64", h_abs<int64_t>),
    EMU_ENTRY("neg.s16", h_neg<int16_t>), EMU_ENTRY("neg.s32", h_neg<int32_t>), EMU_ENTRY("neg.s64", h_neg<int64_t>),
    EMU_INT_ENTRIES("min", h_min), EMU_INT_ENTRIES("max", h_max), EMU_INT_ENTRIES("sad", h_sad),
    EMU_ENTRY("min.relu.s32", (h_minmax_relu<int32_t, false>)), EMU_ENTRY("max.relu.s32", (h_minmax_relu<int32_t, true>)),
    EMU_ENTRY("min.u16x2", (h_minmax_x2<uint16_t, false, false>)),
    EMU_ENTRY("max.u16x2", (h_minmax_x2<uint16_t, true, false>)),
    EMU_ENTRY("min.s16x2", (h_minmax_x2<int16_t, false, false>)),
    EMU_ENTRY("max.s16x2", (h_minmax_x2<int16_t, true, false>)),
    EMU_ENTRY("min.relu.s16x2", (h_minmax_x2<int16_t, false, true>)),
    EMU_ENTRY("max.relu.s16x2", (h_minmax_x2<int16_t, true, true>)),
    CARRY_ENTRIES("add.cc", false, false, true), CARRY_ENTRIES("addc", true, false, false),
    CARRY_ENTRIES("addc.cc", true, false, true), CARRY_ENTRIES("sub.cc", false, true, true),
    CARRY_ENTRIES("subc", true, true, false), CARRY_ENTRIES("subc.cc", true, true, true),
    EMU_ENTRY("dp4a", h_dot<4>), EMU_ENTRY("dp2a", h_dot<2>),
    MAD_CARRY_ENTRIES("mad.lo.cc", false, false, true), MAD_CARRY_ENTRIES("mad.hi.cc", true, false, true),
    MAD_CARRY_ENTRIES("madc.lo", false, true, false), MAD_CARRY_ENTRIES("madc.hi", true, true, false),
    MAD_CARRY_ENTRIES("madc.lo.cc", false, true, true), MAD_CARRY_ENTRIES("madc.hi.cc", true, true, true),
};

}  // namespace
}  // namespace tally::emu
