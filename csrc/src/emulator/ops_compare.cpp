// Comparisons and selects: setp, set, selp, slct.
//
// setp/set operands: op[0] = p (or d for set), op[1] = q (or none), op[2] = a,
// op[3] = b, op[4] = c (the predicate combined by .and/.or/.xor, or none).
// Ordered float comparisons (eq, ne, lt, ...) are false when either operand is
// NaN; the unordered ones (equ, neu, ltu, ...) are true then.
#include <cmath>
#include <type_traits>

#include "emulator/float_formats.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

template <class V>
bool compare(V a, V b, uint32_t cmp) {
  if constexpr (std::is_floating_point_v<V>) {
    bool unordered = std::isnan(a) || std::isnan(b);
    switch (cmp) {
      case flag::kEq: return !unordered && a == b;
      case flag::kNe: return !unordered && a != b;
      case flag::kLt: case flag::kLo: return !unordered && a < b;
      case flag::kLe: case flag::kLs: return !unordered && a <= b;
      case flag::kGt: case flag::kHi: return !unordered && a > b;
      case flag::kGe: case flag::kHs: return !unordered && a >= b;
      case flag::kEqu: return unordered || a == b;
      case flag::kNeu: return unordered || a != b;
      case flag::kLtu: return unordered || a < b;
      case flag::kLeu: return unordered || a <= b;
      case flag::kGtu: return unordered || a > b;
      case flag::kGeu: return unordered || a >= b;
      case flag::kNum: return !unordered;
      default: return unordered;  // kNan
    }
  } else {
    using U = std::make_unsigned_t<V>;
    U ua = static_cast<U>(a), ub = static_cast<U>(b);
    switch (cmp) {
      case flag::kEq: return a == b;
      case flag::kNe: return a != b;
      case flag::kLt: return a < b;
      case flag::kLe: return a <= b;
      case flag::kGt: return a > b;
      case flag::kGe: return a >= b;
      case flag::kLo: return ua < ub;
      case flag::kLs: return ua <= ub;
      case flag::kHi: return ua > ub;
      case flag::kHs: return ua >= ub;
      default: return false;
    }
  }
}

inline bool combine(bool r, bool c, uint32_t op) {
  switch (op) {
    case flag::kBoolAnd: return r && c;
    case flag::kBoolOr: return r || c;
    case flag::kBoolXor: return r != c;
    default: return r;
  }
}

struct DecodeF16 {
  using V = double;
  static double get(uint64_t raw) { return half_to_double(static_cast<uint16_t>(raw)); }
};
struct DecodeBF16 {
  using V = double;
  static double get(uint64_t raw) { return bf16_to_double(static_cast<uint16_t>(raw)); }
};
template <class T>
struct DecodeAs {
  using V = T;
  static T get(uint64_t raw) { return tally::emu::get<T>(raw); }
};

// kElems = 2 for f16x2/bf16x2: p gets the low halves' result, q the high halves'.
template <class D, int kElems, bool kSet>
void compare_op(Exec& e, const Instr& in, LaneMask m) {
  uint64_t* p = e.lanes(in.op[0]);
  uint64_t* q = in.op[1] == kNoSlot ? nullptr : e.lanes(in.op[1]);
  const uint64_t* a = e.lanes(in.op[2]);
  const uint64_t* b = e.lanes(in.op[3]);
  const uint64_t* c = in.op[4] == kNoSlot ? nullptr : e.lanes(in.op[4]);
  uint32_t cmp = (in.flags >> flag::kCmpShift) & flag::kCmpMask;
  uint32_t op = (in.flags >> flag::kBoolShift) & flag::kBoolMask;
  bool negate_c = in.flags & flag::kNegateC;
  bool ftz = in.flags & flag::kFtz;
  bool float_result = in.flags & flag::kSetFloatResult;
  for_lanes(m, [&](int l) {
    bool cv = c ? ((c[l] != 0) != negate_c) : true;
    bool r[2] = {false, false};
    for (int k = 0; k < kElems; ++k) {
      uint64_t ra = kElems == 2 ? (a[l] >> (16 * k)) & 0xffff : a[l];
      uint64_t rb = kElems == 2 ? (b[l] >> (16 * k)) & 0xffff : b[l];
      auto va = D::get(ra), vb = D::get(rb);
      if constexpr (std::is_floating_point_v<typename D::V>) {
        if (ftz) {
          va = flush_subnormal(va);
          vb = flush_subnormal(vb);
        }
      }
      r[k] = compare(va, vb, cmp);
    }
    if (kElems == 2) {
      p[l] = combine(r[0], cv, op);
      if (q) q[l] = combine(r[1], cv, op);
    } else if (kSet) {
      bool v = combine(r[0], cv, op);
      p[l] = float_result ? (v ? 0x3f800000u : 0u) : (v ? 0xffffffffu : 0u);
    } else {
      p[l] = combine(r[0], cv, op);
      if (q) q[l] = combine(!r[0], cv, op);
    }
  });
}

template <class D> EMU_HANDLER(h_setp) { compare_op<D, 1, false>(e, in, m); }
template <class D> EMU_HANDLER(h_setp2) { compare_op<D, 2, false>(e, in, m); }
template <class D> EMU_HANDLER(h_set) { compare_op<D, 1, true>(e, in, m); }

// selp d, a, b, c: d = c ? a : b (any type: the raw register value moves).
EMU_HANDLER(h_selp) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  for_lanes(m, [&](int l) { d[l] = c[l] ? a[l] : b[l]; });
}

// slct d, a, b, c: d = c >= 0 ? a : b, c an s32 or an f32.
template <class C> EMU_HANDLER(h_slct) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  bool ftz = in.flags & flag::kFtz;
  for_lanes(m, [&](int l) {
    C v = get<C>(c[l]);
    if constexpr (std::is_floating_point_v<C>) {
      if (ftz) v = flush_subnormal(v);
    }
    d[l] = v >= 0 ? a[l] : b[l];
  });
}

#define SETP_ENTRIES(key, H)                                                                   \
  EMU_ENTRY(key ".b16", H<DecodeAs<uint16_t>>), EMU_ENTRY(key ".b32", H<DecodeAs<uint32_t>>),   \
      EMU_ENTRY(key ".b64", H<DecodeAs<uint64_t>>), EMU_ENTRY(key ".u16", H<DecodeAs<uint16_t>>), \
      EMU_ENTRY(key ".s16", H<DecodeAs<int16_t>>), EMU_ENTRY(key ".u32", H<DecodeAs<uint32_t>>),  \
      EMU_ENTRY(key ".s32", H<DecodeAs<int32_t>>), EMU_ENTRY(key ".u64", H<DecodeAs<uint64_t>>),  \
      EMU_ENTRY(key ".s64", H<DecodeAs<int64_t>>), EMU_ENTRY(key ".f32", H<DecodeAs<float>>),     \
      EMU_ENTRY(key ".f64", H<DecodeAs<double>>), EMU_ENTRY(key ".f16", H<DecodeF16>),            \
      EMU_ENTRY(key ".bf16", H<DecodeBF16>)

const HandlerRegistrar registrar{
    SETP_ENTRIES("setp", h_setp), SETP_ENTRIES("set", h_set),
    EMU_ENTRY("setp.f16x2", h_setp2<DecodeF16>), EMU_ENTRY("setp.bf16x2", h_setp2<DecodeBF16>),
    EMU_ENTRY("selp", h_selp), EMU_ENTRY("slct.s32", h_slct<int32_t>), EMU_ENTRY("slct.f32", h_slct<float>),
};

}  // namespace
}  // namespace tally::emu
