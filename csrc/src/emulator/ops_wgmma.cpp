// wgmma (warpgroup-level matrix multiply-accumulate, sm_90a): mma_async of the
// m64nNkK shapes with A from a shared-memory matrix descriptor or registers and B
// from a descriptor; fence, commit_group and wait_group.
//
// The emulator multiplies when mma_async is issued: a program may not touch the
// accumulator registers or the operands' shared memory between the issue and the
// wait_group that covers it, so finishing early is one of the orders the hardware
// may take, and fence/commit_group/wait_group have nothing left to wait for. Each
// warp of the warpgroup computes its own 16 rows of D (rows 16w..16w+15 for warp
// w = %warpid mod 4), which is all of D the warp's registers hold; its rows of A,
// and all of B, are read from shared memory at the issue.
//
// Shared-memory matrix descriptor (64 bits): start address >> 4 (bits 0-13),
// leading-dimension byte offset >> 4 (16-29), stride-dimension byte offset >> 4
// (32-45), base offset (49-51, not used: matrices start at their pattern's
// repeat), swizzle (62-63: 0 none, 1 128B, 2 64B, 3 32B). The matrix is made of
// 16-byte rows of "core matrices" (8 rows each). With s-byte elements and
// T = 16 / s, swizzle width W (chunks of 16 bytes per swizzled row: 1, 2, 4, 8):
//   K-major (row r of M or N, byte kb = k s along K):
//     none:    r%8 * 16  + r/8 * SBO + kb/16 * LBO + kb%16
//     swizzle: r%8 * 16W + r/8 * SBO + kb/16 * 16  + kb%16
//   MN-major (element i along M or N, k along K):
//     none:    i%T * s + i/T * SBO + k%8 * 16 + k/8 * LBO
//     swizzle: i%T * s + (i/T)%W * 16 + i/(TW) * LBO + k%8 * 16W + k/8 * SBO
// and with a swizzle the address's 16-byte chunk bits (4..) are XORed with its
// 128-byte row bits (7..), as TMA writes them (ops_tensor_copy.cpp's swizzled()).
//
// Operands: imm names the slot list [D registers, A (4 registers or the
// descriptor), B descriptor, scale-d predicate]; imm2 the packed MmaShape.
#include "emulator/matrix_multiply.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

constexpr int kWarpsPerGroup = 4;

struct SharedMatrix {
  uint64_t start;
  uint32_t lbo, sbo;
  uint32_t width;   // 16-byte chunks per swizzled row (1: no swizzle)
  uint32_t swizzle_mask;

  static SharedMatrix of(uint64_t desc) {
    static constexpr uint32_t kWidth[] = {1, 8, 4, 2};
    uint32_t mode = static_cast<uint32_t>(desc >> 62);
    return SharedMatrix{(desc & 0x3fff) << 4, static_cast<uint32_t>((desc >> 16) & 0x3fff) << 4,
                        static_cast<uint32_t>((desc >> 32) & 0x3fff) << 4, kWidth[mode], kWidth[mode] - 1};
  }

  // Shared address of element (mn, k) of an operand with `bytes`-byte elements.
  uint64_t address(uint32_t mn, uint32_t k, uint32_t bytes, bool mn_major) const {
    uint64_t off;
    if (!mn_major) {
      uint32_t kb = k * bytes;
      off = width == 1 ? (mn % 8) * 16 + (mn / 8) * uint64_t{sbo} + (kb / 16) * uint64_t{lbo} + kb % 16
                       : (mn % 8) * 16 * width + (mn / 8) * uint64_t{sbo} + kb / 16 * 16 + kb % 16;
    } else {
      uint32_t t = 16 / bytes;
      off = width == 1 ? (mn % t) * bytes + (mn / t) * uint64_t{sbo} + (k % 8) * 16 + (k / 8) * uint64_t{lbo}
                       : (mn % t) * bytes + ((mn / t) % width) * 16 + (mn / (t * width)) * uint64_t{lbo} +
                             (k % 8) * 16 * width + (k / 8) * uint64_t{sbo};
    }
    uint64_t a = start + off;
    return a ^ (((a >> 7) & swizzle_mask) << 4);
  }
};

// Reads element (mn, k) of a descriptor operand of type t.
template <class Out>
void read_shared(Exec& e, const SharedMatrix& sm, MmaType t, bool mn_major, uint32_t rows, uint32_t k,
                 uint32_t row0, Out&& put) {
  const uint32_t bytes = mma_bits(t) / 8;
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t x = 0; x < k; ++x) {
      const uint8_t* p = e.shared(sm.address(row0 + r, x, bytes, mn_major), bytes, -1);
      uint64_t raw = 0;
      std::memcpy(&raw, p, bytes);
      put(r, x, raw);
    }
  }
}

EMU_HANDLER(h_wgmma) {
  const MmaShape s = MmaShape::unpack(in.imm2);
  if (m != kFullMask) fault(kIllegalInstruction, "wgmma.mma_async needs all 32 lanes of each warp (.sync.aligned)", -1);
  const uint32_t rows = s.m / kWarpsPerGroup;              // this warp's rows of D and A
  const uint32_t c_count = rows * s.n / kWarpSize;
  const uint32_t nd = s.d == MmaType::kF16 ? c_count / 2 : c_count;
  const uint32_t na = s.a_registers ? 4 : 1;
  const auto& slots = slot_list(e, in, nd + na + 2, "wgmma.mma_async");
  const uint32_t* d = slots.data();
  const uint32_t* a = d + nd;
  const uint32_t b_slot = a[na], scale_d = a[na + 1];
  const uint32_t row0 = (e.warp->index % kWarpsPerGroup) * rows;
  const int lead = 0;  // every lane is here; descriptors and scale-d are uniform

  const bool integer = mma_integer(s.a);
  const double sa = s.negate_a ? -1.0 : 1.0, sb = s.negate_b ? -1.0 : 1.0;
  MmaMatrix ma(rows, s.k, integer), mb(s.k, s.n, integer), acc(rows, s.n, integer);
  if (s.a_registers) {
    mma_read_fragment(e, a, 4, s.a, mma_a_coord, ma, sa);
  } else {
    read_shared(e, SharedMatrix::of(e.lanes(a[0])[lead]), s.a, s.transpose_a, rows, s.k, row0,
                [&](uint32_t r, uint32_t x, uint64_t raw) { ma.set(r, x, s.a, raw, sa); });
  }
  read_shared(e, SharedMatrix::of(e.lanes(b_slot)[lead]), s.b, s.transpose_b, s.n, s.k, 0,
              [&](uint32_t n, uint32_t x, uint64_t raw) { mb.set(x, n, s.b, raw, sb); });
  if (e.lanes(scale_d)[lead] & 1) mma_read_c(e, d, s.d, c_count, acc);
  mma_accumulate(acc, ma, mb);
  mma_write_d(e, d, s.d, c_count, acc, s.satfinite);
}

// fence, commit_group, wait_group: the work they order is done at the issue.
EMU_HANDLER(h_wgmma_ordering) {}

const HandlerRegistrar registrar{
    {"wgmma.mma_async", HandlerInfo{h_wgmma, Control::kWarpSync}},
    {"wgmma.ordering", HandlerInfo{h_wgmma_ordering, Control::kWarpSync}},
};

}  // namespace
}  // namespace tally::emu
