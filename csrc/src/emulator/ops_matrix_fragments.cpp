// ldmatrix / stmatrix (m8n8, .b16): warp-collective moves of 8x8 matrices of
// 16-bit elements between shared memory and the mma fragment layout.
//
// Per the PTX ISA: for .xN (N = 1, 2, 4) matrix i's eight rows are 16 bytes
// each, at the addresses held by lanes 8i..8i+7. Lane t's register i holds
// row t/4, columns 2(t%4) and 2(t%4)+1 of matrix i (low half first); with
// .trans it holds the transposed matrix's, i.e. rows 2(t%4), 2(t%4)+1 of
// column t/4. Operands: op[0..3] the registers, op[4] the address base, imm
// the offset, width = N, flags bit 16 = .trans. Every lane of the warp must
// take part (.sync.aligned), so the handler runs warp-synchronously.
#include <cstring>
#include <utility>

#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

constexpr uint32_t kTrans = 1u << 16;

template <bool kGeneric>
uint8_t* row_address(Exec& e, uint64_t addr, int lane) {
  if (addr % 16) fault(kMisalignedAddress, "ldmatrix/stmatrix row address not 16-byte aligned", lane);
  return kGeneric ? e.generic(addr, 16, lane) : e.shared(addr, 16, lane);
}

// Where (row address lane, byte offset in that row) element k (0/1) of lane t's register lives.
inline void element_of(bool trans, int matrix, int t, int k, int& row_lane, int& byte) {
  int r = t / 4, c = 2 * (t % 4) + k;
  if (trans) std::swap(r, c);
  row_lane = 8 * matrix + r;
  byte = 2 * c;
}

template <bool kGeneric, bool kStore> EMU_HANDLER(h_matrix) {
  const unsigned n = in.width;
  const bool trans = in.flags & kTrans;
  LaneMask needed = n == 4 ? kFullMask : (1u << (8 * n)) - 1;
  if ((m & needed) != needed)
    fault(kIllegalInstruction, "ldmatrix/stmatrix needs every lane that supplies a row address (.sync.aligned)", -1);
  const uint64_t* base = e.lanes(in.op[4]);
  uint8_t* rows[kWarpSize];
  for (int l = 0; l < static_cast<int>(8 * n); ++l) rows[l] = row_address<kGeneric>(e, base[l] + static_cast<uint64_t>(in.imm), l);
  for (unsigned i = 0; i < n; ++i) {
    uint64_t* reg = e.lanes(in.op[i]);
    uint32_t loaded[kWarpSize];
    for (int t = 0; t < kWarpSize; ++t) {
      if (!((m >> t) & 1)) continue;  // an exited lane neither supplies nor receives
      uint32_t v = kStore ? static_cast<uint32_t>(reg[t]) : 0;
      for (int k = 0; k < 2; ++k) {
        int row_lane, byte;
        element_of(trans, static_cast<int>(i), t, k, row_lane, byte);
        uint8_t* p = rows[row_lane] + byte;
        if (kStore) {
          uint16_t h = static_cast<uint16_t>(v >> (16 * k));
          std::memcpy(p, &h, 2);
        } else {
          uint16_t h;
          std::memcpy(&h, p, 2);
          v |= static_cast<uint32_t>(h) << (16 * k);
        }
      }
      loaded[t] = v;
    }
    if (!kStore)
      for_lanes(m, [&](int t) { reg[t] = loaded[t]; });
  }
}

#define MATRIX(key, fn) {key, HandlerInfo{fn, Control::kWarpSync}}

const HandlerRegistrar registrar{
    MATRIX("ldmatrix.shared", (h_matrix<false, false>)), MATRIX("ldmatrix.generic", (h_matrix<true, false>)),
    MATRIX("stmatrix.shared", (h_matrix<false, true>)), MATRIX("stmatrix.generic", (h_matrix<true, true>)),
};

}  // namespace
}  // namespace tally::emu
