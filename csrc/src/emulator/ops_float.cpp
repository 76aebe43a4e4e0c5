// f32/f64 arithmetic with PTX modifiers: rounding (.rn default; .rz/.rm/.rp
// switch the host rounding mode), .ftz (flush subnormal inputs and results),
// .sat (clamp to [0, 1]). The .approx functions use the host's correctly or
// nearly correctly rounded libm, which is within the GPU's documented error.
#include <cmath>

#include "emulator/float_formats.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

template <class T>
struct Modifiers {
  explicit Modifiers(uint32_t flags) : ftz(flags & flag::kFtz), sat(flags & flag::kSat) {}
  T in(T v) const { return ftz ? flush_subnormal(v) : v; }
  T out(T v) const {
    if (ftz) v = flush_subnormal(v);
    return sat ? saturate01(v) : v;
  }
  bool any() const { return ftz || sat; }
  bool ftz, sat;
};

template <class T, class F>
void float_unary(Exec& e, const Instr& in, LaneMask m, F f) {
  RoundingScope rounding(in.flags);
  Modifiers<T> mod(in.flags);
  if (!mod.any()) return unary<T>(e, in, m, f);
  unary<T>(e, in, m, [&](T a) { return mod.out(f(mod.in(a))); });
}

template <class T, class F>
void float_binary(Exec& e, const Instr& in, LaneMask m, F f) {
  RoundingScope rounding(in.flags);
  Modifiers<T> mod(in.flags);
  if (!mod.any()) return binary<T>(e, in, m, f);
  binary<T>(e, in, m, [&](T a, T b) { return mod.out(f(mod.in(a), mod.in(b))); });
}

template <class T> EMU_HANDLER(h_add) { float_binary<T>(e, in, m, [](T a, T b) { return a + b; }); }
template <class T> EMU_HANDLER(h_sub) { float_binary<T>(e, in, m, [](T a, T b) { return a - b; }); }
template <class T> EMU_HANDLER(h_mul) { float_binary<T>(e, in, m, [](T a, T b) { return a * b; }); }
template <class T> EMU_HANDLER(h_div) { float_binary<T>(e, in, m, [](T a, T b) { return a / b; }); }
template <class T> EMU_HANDLER(h_fma) {
  RoundingScope rounding(in.flags);
  Modifiers<T> mod(in.flags);
  ternary<T>(e, in, m, [&](T a, T b, T c) { return mod.out(std::fma(mod.in(a), mod.in(b), mod.in(c))); });
}
template <class T> EMU_HANDLER(h_min) {
  float_binary<T>(e, in, m, [](T a, T b) { return ptx_min(a, b); });
}
template <class T> EMU_HANDLER(h_max) {
  float_binary<T>(e, in, m, [](T a, T b) { return ptx_max(a, b); });
}
// f32 min.NaN / max.NaN: NaN as the canonical 0x7fffffff a GPU writes.
template <bool kMax> EMU_HANDLER(h_minmax_nan_f32) {
  Modifiers<float> mod(in.flags);
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) {
    float x = mod.in(get<float>(a[l])), y = mod.in(get<float>(b[l]));
    d[l] = std::isnan(x) || std::isnan(y) ? 0x7fffffffu : put<float>(mod.out(kMax ? ptx_max(x, y) : ptx_min(x, y)));
  });
}
template <class T> EMU_HANDLER(h_abs) { float_unary<T>(e, in, m, [](T a) { return std::fabs(a); }); }
template <class T> EMU_HANDLER(h_neg) { float_unary<T>(e, in, m, [](T a) { return -a; }); }
template <class T> EMU_HANDLER(h_rcp) { float_unary<T>(e, in, m, [](T a) { return T(1) / a; }); }
template <class T> EMU_HANDLER(h_sqrt) { float_unary<T>(e, in, m, [](T a) { return std::sqrt(a); }); }
template <class T> EMU_HANDLER(h_rsqrt) { float_unary<T>(e, in, m, [](T a) { return T(1) / std::sqrt(a); }); }
template <class T> EMU_HANDLER(h_sin) { float_unary<T>(e, in, m, [](T a) { return std::sin(a); }); }
template <class T> EMU_HANDLER(h_cos) { float_unary<T>(e, in, m, [](T a) { return std::cos(a); }); }
template <class T> EMU_HANDLER(h_ex2) { float_unary<T>(e, in, m, [](T a) { return std::exp2(a); }); }
template <class T> EMU_HANDLER(h_lg2) { float_unary<T>(e, in, m, [](T a) { return std::log2(a); }); }
template <class T> EMU_HANDLER(h_tanh) { float_unary<T>(e, in, m, [](T a) { return std::tanh(a); }); }
// copysign d, a, b: the magnitude of b with the sign of a.
template <class T> EMU_HANDLER(h_copysign) {
  binary<T>(e, in, m, [](T a, T b) { return std::copysign(b, a); });
}

template <class T> EMU_HANDLER(h_testp) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  uint32_t cls = (in.flags >> flag::kTestShift) & 0x7;
  for_lanes(m, [&](int l) {
    T v = get<T>(a[l]);
    bool r = false;
    switch (cls) {
      case flag::kTestFinite: r = std::isfinite(v); break;
      case flag::kTestInfinite: r = std::isinf(v); break;
      case flag::kTestNumber: r = !std::isnan(v); break;
      case flag::kTestNotANumber: r = std::isnan(v); break;
      case flag::kTestNormal: r = std::isnormal(v); break;
      default: r = std::fpclassify(v) == FP_SUBNORMAL; break;
    }
    d[l] = r;
  });
}

const HandlerRegistrar registrar{
    EMU_FLOAT_ENTRIES("add", h_add), EMU_FLOAT_ENTRIES("sub", h_sub), EMU_FLOAT_ENTRIES("mul", h_mul),
    EMU_FLOAT_ENTRIES("div", h_div), EMU_FLOAT_ENTRIES("fma", h_fma), EMU_FLOAT_ENTRIES("mad", h_fma),
    EMU_FLOAT_ENTRIES("min", h_min), EMU_FLOAT_ENTRIES("max", h_max),
    EMU_ENTRY("min.nan.f32", h_minmax_nan_f32<false>), EMU_ENTRY("max.nan.f32", h_minmax_nan_f32<true>), EMU_FLOAT_ENTRIES("abs", h_abs),
    EMU_FLOAT_ENTRIES("neg", h_neg), EMU_FLOAT_ENTRIES("rcp", h_rcp), EMU_FLOAT_ENTRIES("sqrt", h_sqrt),
    EMU_FLOAT_ENTRIES("rsqrt", h_rsqrt), EMU_ENTRY("sin.f32", h_sin<float>), EMU_ENTRY("cos.f32", h_cos<float>),
    EMU_ENTRY("ex2.f32", h_ex2<float>), EMU_ENTRY("lg2.f32", h_lg2<float>), EMU_ENTRY("tanh.f32", h_tanh<float>),
    EMU_FLOAT_ENTRIES("copysign", h_copysign), EMU_FLOAT_ENTRIES("testp", h_testp),
};

}  // namespace
}  // namespace tally::emu
