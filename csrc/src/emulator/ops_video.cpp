// SIMD video instructions on packed lanes of a 32-bit register: vadd4, vsub4,
// vavrg4, vabsdiff4, vmin4, vmax4, vset4 (four 8-bit lanes) and their 2-way forms
// (two 16-bit lanes), as the PTX ISA's pseudocode defines them with the default
// lane selectors and mask (CUDA's __vabsdiffu4, __vsadu4 and the like use them):
//
// Each lane of a and b is extended as its type says (.s32: signed lanes), the
// operation is done at full precision, and then either
// - plain (or .sat): each lane's result, truncated (or saturated to the destination
//   lane's range), goes into d; lanes outside the mask keep c's;
// - .add: d = c + the sum of the masked lanes' results (a sum of absolute
//   differences, say).
// vavrg rounds halves up ((a + b + 1) >> 1); vset gives 1 or 0 per lane.
//
// Operands op[0] = d, op[1] = a, op[2] = b, op[3] = c. flags: the operation
// (kAdd..kSet) in bits 0-2, a signed (bit 3), b signed (bit 4), d signed (bit 5),
// .sat (bit 6), .add (bit 7), the comparison of vset in bits 8-10 (eq, ne, lt, le,
// gt, ge), the mask in bits 12-15 (one bit per lane). `size` is the lane width in
// bits (8 or 16).
#include <cstdint>

#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

enum VideoOp : uint32_t { kAdd = 0, kSub, kAverage, kAbsDiff, kMin, kMax, kSet };
constexpr uint32_t kASigned = 1u << 3, kBSigned = 1u << 4, kDSigned = 1u << 5, kSat = 1u << 6,
                   kAccumulate = 1u << 7;

int64_t lane(uint32_t word, uint32_t i, uint32_t bits, bool is_signed) {
  const uint32_t mask = bits == 8 ? 0xffu : 0xffffu;
  const uint32_t v = (word >> (i * bits)) & mask;
  if (!is_signed) return v;
  const uint32_t sign = 1u << (bits - 1);
  return static_cast<int64_t>(v ^ sign) - static_cast<int64_t>(sign);
}

bool compare(uint32_t cmp, int64_t a, int64_t b) {
  switch (cmp) {
    case 0: return a == b;
    case 1: return a != b;
    case 2: return a < b;
    case 3: return a <= b;
    case 4: return a > b;
    default: return a >= b;
  }
}

EMU_HANDLER(h_video) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  const uint32_t f = in.flags, op = f & 7, bits = in.size, count = 32 / bits;
  const uint32_t cmp = (f >> 8) & 7, mask = (f >> 12) & 0xf;
  const uint32_t lane_mask = bits == 8 ? 0xffu : 0xffffu;
  const int64_t high = (f & kDSigned) ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1;
  const int64_t low = (f & kDSigned) ? -(int64_t{1} << (bits - 1)) : 0;
  for_lanes(m, [&](int l) {
    const uint32_t wa = static_cast<uint32_t>(a[l]), wb = static_cast<uint32_t>(b[l]);
    const uint32_t wc = static_cast<uint32_t>(c[l]);
    uint32_t out = wc;
    int64_t sum = 0;
    for (uint32_t i = 0; i < count; ++i) {
      if (!((mask >> i) & 1)) continue;
      const int64_t x = lane(wa, i, bits, f & kASigned), y = lane(wb, i, bits, f & kBSigned);
      int64_t t = 0;
      switch (op) {
        case kAdd: t = x + y; break;
        case kSub: t = x - y; break;
        case kAverage: t = (x + y + 1) >> 1; break;
        case kAbsDiff: t = x > y ? x - y : y - x; break;
        case kMin: t = x < y ? x : y; break;
        case kMax: t = x > y ? x : y; break;
        default: t = compare(cmp, x, y) ? 1 : 0; break;
      }
      if (f & kAccumulate) {
        sum += t;
        continue;
      }
      if (f & kSat) t = t < low ? low : (t > high ? high : t);
      const uint32_t shift = i * bits;
      out = (out & ~(lane_mask << shift)) | ((static_cast<uint32_t>(t) & lane_mask) << shift);
    }
    if (f & kAccumulate) out = static_cast<uint32_t>(static_cast<int64_t>(wc) + sum);
    d[l] = out;
  });
}

const HandlerRegistrar registrar{EMU_ENTRY("vsimd.b32", h_video)};

}  // namespace
}  // namespace tally::emu
