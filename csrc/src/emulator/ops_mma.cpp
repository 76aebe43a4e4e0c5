// mma.sync.aligned (warp-level matrix multiply-accumulate): the m16n8k* and m8n8k*
// shapes with .row.col operands, f16/bf16/tf32/f64/e4m3/e5m2 and s8/u8/s4/u4
// inputs (matrix_multiply.h: layouts and arithmetic). The whole warp takes part
// (.sync.aligned), so the handler runs warp-synchronously once every lane is
// there, reassembles A, B and C from the lanes' registers, multiplies, and
// scatters D back.
//
// Operands: imm names the slot list [D registers, A, B, C]; imm2 the packed
// MmaShape.
#include "emulator/matrix_multiply.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

uint32_t registers_for(uint32_t elements_per_lane, MmaType t) {
  const uint32_t per = t == MmaType::kF16 ? 2 : mma_per_register(t);
  return (elements_per_lane + per - 1) / per;
}

EMU_HANDLER(h_mma_sync) {
  const MmaShape s = MmaShape::unpack(in.imm2);
  if (m != kFullMask) fault(kIllegalInstruction, "mma.sync needs all 32 lanes of the warp (.sync.aligned)", -1);
  const uint32_t a_count = s.m * s.k / kWarpSize, b_count = s.k * s.n / kWarpSize, c_count = s.m * s.n / kWarpSize;
  const uint32_t na = registers_for(a_count, s.a), nb = registers_for(b_count, s.b);
  const uint32_t nc = registers_for(c_count, s.c), nd = registers_for(c_count, s.d);
  const auto& slots = slot_list(e, in, nd + na + nb + nc, "mma.sync");
  const uint32_t* d = slots.data();
  const uint32_t* a = d + nd;
  const uint32_t* b = a + na;
  const uint32_t* c = b + nb;

  const bool integer = mma_integer(s.a);
  MmaMatrix ma(s.m, s.k, integer), mb(s.k, s.n, integer), acc(s.m, s.n, integer);
  mma_read_fragment(e, a, na, s.a, mma_a_coord, ma);
  mma_read_fragment(e, b, nb, s.b, mma_b_coord, mb);
  mma_read_c(e, c, s.c, c_count, acc);
  mma_accumulate(acc, ma, mb);
  mma_write_d(e, d, s.d, c_count, acc, s.satfinite);
}

const HandlerRegistrar registrar{{"mma.sync", HandlerInfo{h_mma_sync, Control::kWarpSync}}};

}  // namespace
}  // namespace tally::emu
