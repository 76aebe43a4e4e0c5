// f16 / bf16 arithmetic, scalar and packed x2 (elementwise on the two halves of
// a .b32). Each operation is computed in double, where the exact result of an
// add, sub or mul of two 16-bit values fits, and rounded once to the 16-bit
// format, which is what the hardware's single rounding gives.
#include <cmath>

#include "emulator/float_formats.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

struct F16 {
  static double decode(uint32_t bits) { return half_to_double(static_cast<uint16_t>(bits)); }
  static uint32_t encode(double v, Round r) { return double_to_half(v, r); }
  static bool subnormal(uint32_t bits) { return ((bits >> 10) & 0x1f) == 0 && (bits & 0x3ff) != 0; }
  static uint32_t signed_zero(uint32_t bits) { return bits & 0x8000; }
};
struct BF16 {
  static double decode(uint32_t bits) { return bf16_to_double(static_cast<uint16_t>(bits)); }
  static uint32_t encode(double v, Round r) { return double_to_bf16(v, r); }
  static bool subnormal(uint32_t bits) { return ((bits >> 7) & 0xff) == 0 && (bits & 0x7f) != 0; }
  static uint32_t signed_zero(uint32_t bits) { return bits & 0x8000; }
};

// Applies f to each 16-bit element (one for scalars, two for x2) of the sources.
template <class Fmt, int kElems, int kSources, class F>
void half_op(Exec& e, const Instr& in, LaneMask m, F f) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* src[3] = {nullptr, nullptr, nullptr};
  for (int s = 0; s < kSources; ++s) src[s] = e.lanes(in.op[1 + s]);
  Round r = round_of(in.flags);
  bool ftz = in.flags & flag::kFtz, sat = in.flags & flag::kSat, relu = in.flags & flag::kRelu;
  for_lanes(m, [&](int l) {
    uint32_t out = 0;
    for (int k = 0; k < kElems; ++k) {
      double x[3] = {0, 0, 0};
      for (int s = 0; s < kSources; ++s) {
        uint32_t bits = static_cast<uint32_t>(src[s][l] >> (16 * k)) & 0xffff;
        if (ftz && Fmt::subnormal(bits)) bits = Fmt::signed_zero(bits);
        x[s] = Fmt::decode(bits);
      }
      double v = f(x[0], x[1], x[2]);
      if (sat) v = saturate01(v);
      if (relu && !std::isnan(v) && v < 0) v = 0;
      uint32_t bits = Fmt::encode(v, r);
      if (ftz && Fmt::subnormal(bits)) bits = Fmt::signed_zero(bits);
      out |= bits << (16 * k);
    }
    d[l] = out;
  });
}

#define HALF_HANDLERS(name, sources, expr)                                                     \
  EMU_HANDLER(name##_f16) { half_op<F16, 1, sources>(e, in, m, [](double a, double b, double c) { return expr; }); } \
  EMU_HANDLER(name##_f16x2) { half_op<F16, 2, sources>(e, in, m, [](double a, double b, double c) { return expr; }); } \
  EMU_HANDLER(name##_bf16) { half_op<BF16, 1, sources>(e, in, m, [](double a, double b, double c) { return expr; }); } \
  EMU_HANDLER(name##_bf16x2) { half_op<BF16, 2, sources>(e, in, m, [](double a, double b, double c) { return expr; }); }

#define HALF_ENTRIES(key, name)                                                                \
  EMU_ENTRY(key ".f16", name##_f16), EMU_ENTRY(key ".f16x2", name##_f16x2),                   \
      EMU_ENTRY(key ".bf16", name##_bf16), EMU_ENTRY(key ".bf16x2", name##_bf16x2)

HALF_HANDLERS(h_add, 2, ((void)c, a + b))
HALF_HANDLERS(h_sub, 2, ((void)c, a - b))
HALF_HANDLERS(h_mul, 2, ((void)c, a * b))
HALF_HANDLERS(h_fma, 3, std::fma(a, b, c))
HALF_HANDLERS(h_neg, 1, ((void)b, (void)c, -a))
HALF_HANDLERS(h_abs, 1, ((void)b, (void)c, std::fabs(a)))
HALF_HANDLERS(h_min, 2, ((void)c, ptx_min(a, b)))
HALF_HANDLERS(h_max, 2, ((void)c, ptx_max(a, b)))
HALF_HANDLERS(h_min_nan, 2, ((void)c, ptx_min_nan(a, b)))
HALF_HANDLERS(h_max_nan, 2, ((void)c, ptx_max_nan(a, b)))
HALF_HANDLERS(h_ex2, 1, ((void)b, (void)c, std::exp2(a)))
HALF_HANDLERS(h_tanh, 1, ((void)b, (void)c, std::tanh(a)))

const HandlerRegistrar registrar{
    HALF_ENTRIES("add", h_add), HALF_ENTRIES("sub", h_sub), HALF_ENTRIES("mul", h_mul),
    HALF_ENTRIES("fma", h_fma), HALF_ENTRIES("neg", h_neg), HALF_ENTRIES("abs", h_abs),
    HALF_ENTRIES("min", h_min), HALF_ENTRIES("max", h_max), HALF_ENTRIES("min.nan", h_min_nan),
    HALF_ENTRIES("max.nan", h_max_nan), HALF_ENTRIES("ex2", h_ex2),
    HALF_ENTRIES("tanh", h_tanh),
};

}  // namespace
}  // namespace tally::emu
