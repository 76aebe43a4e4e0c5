// The packed 8-bit float conversions of cvt (fp8_formats.h has the formats):
//   cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32    d, a, b   (a -> d's upper byte)
//   cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f16x2  d, a      (a's upper half -> upper byte)
//   cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2}            d, a      (a's upper byte -> upper half)
//   cvt.{rz,rp}{.satfinite}.ue8m0x2.f32            d, a, b
//   cvt.{rz,rp}{.satfinite}.ue8m0x2.bf16x2         d, a
//   cvt.rn.bf16x2.ue8m0x2                          d, a
// Operands: op[0] = d, op[1] = a, op[2] = b (the two-source forms).
#include "emulator/float_formats.h"
#include "emulator/fp8_formats.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

template <int kFormat>
constexpr Fp8Format format_of() {
  return kFormat == 4 ? kE4M3 : kE5M2;
}

template <int kFormat> EMU_HANDLER(h_f8x2_from_f32) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const bool relu = in.flags & flag::kRelu;
  for_lanes(m, [&](int l) {
    uint8_t hi = encode_fp8_satfinite(get<float>(a[l]), format_of<kFormat>(), relu);
    uint8_t lo = encode_fp8_satfinite(get<float>(b[l]), format_of<kFormat>(), relu);
    d[l] = static_cast<uint64_t>(hi) << 8 | lo;
  });
}

template <int kFormat> EMU_HANDLER(h_f8x2_from_f16x2) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const bool relu = in.flags & flag::kRelu;
  for_lanes(m, [&](int l) {
    double hi = half_to_double(static_cast<uint16_t>(a[l] >> 16));
    double lo = half_to_double(static_cast<uint16_t>(a[l]));
    d[l] = static_cast<uint64_t>(encode_fp8_satfinite(hi, format_of<kFormat>(), relu)) << 8 |
           encode_fp8_satfinite(lo, format_of<kFormat>(), relu);
  });
}

// Every e4m3 and e5m2 value is an f16 value, so the conversion is exact; NaN
// becomes f16's canonical NaN.
template <int kFormat> EMU_HANDLER(h_f16x2_from_f8x2) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const bool relu = in.flags & flag::kRelu;
  auto widen = [&](uint8_t bits) -> uint64_t {
    double v = decode_fp8(bits, format_of<kFormat>());
    if (std::isnan(v)) return 0x7fff;
    if (relu && std::signbit(v)) v = 0.0;
    return double_to_half(v);
  };
  for_lanes(m, [&](int l) { d[l] = widen(static_cast<uint8_t>(a[l] >> 8)) << 16 | widen(static_cast<uint8_t>(a[l])); });
}

bool rounds_up(const Instr& in) { return (in.flags & flag::kRoundMask) == flag::kRp; }

EMU_HANDLER(h_ue8m0x2_from_f32) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const bool up = rounds_up(in), satfinite = in.flags & flag::kSat;
  auto convert = [&](uint64_t raw) {
    return ue8m0_of_bf16(bf16_for_ue8m0(static_cast<uint32_t>(raw), up), up, satfinite);
  };
  for_lanes(m, [&](int l) { d[l] = static_cast<uint64_t>(convert(a[l])) << 8 | convert(b[l]); });
}

EMU_HANDLER(h_ue8m0x2_from_bf16x2) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const bool up = rounds_up(in), satfinite = in.flags & flag::kSat;
  for_lanes(m, [&](int l) {
    d[l] = static_cast<uint64_t>(ue8m0_of_bf16(static_cast<uint16_t>(a[l] >> 16), up, satfinite)) << 8 |
           ue8m0_of_bf16(static_cast<uint16_t>(a[l]), up, satfinite);
  });
}

EMU_HANDLER(h_bf16x2_from_ue8m0x2) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) {
    d[l] = static_cast<uint64_t>(bf16_of_ue8m0(static_cast<uint8_t>(a[l] >> 8))) << 16 |
           bf16_of_ue8m0(static_cast<uint8_t>(a[l]));
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("cvt.e4m3x2.f32", h_f8x2_from_f32<4>),     EMU_ENTRY("cvt.e5m2x2.f32", h_f8x2_from_f32<5>),
    EMU_ENTRY("cvt.e4m3x2.f16x2", h_f8x2_from_f16x2<4>), EMU_ENTRY("cvt.e5m2x2.f16x2", h_f8x2_from_f16x2<5>),
    EMU_ENTRY("cvt.f16x2.e4m3x2", h_f16x2_from_f8x2<4>), EMU_ENTRY("cvt.f16x2.e5m2x2", h_f16x2_from_f8x2<5>),
    EMU_ENTRY("cvt.ue8m0x2.f32", h_ue8m0x2_from_f32),    EMU_ENTRY("cvt.ue8m0x2.bf16x2", h_ue8m0x2_from_bf16x2),
    EMU_ENTRY("cvt.bf16x2.ue8m0x2", h_bf16x2_from_ue8m0x2),
};

}  // namespace
}  // namespace tally::emu
