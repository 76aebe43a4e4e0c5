// The warp matrix functions (wmma.load, wmma.store, wmma.mma: CUDA's nvcuda::wmma
// fragments). The PTX ISA leaves the fragment layouts to the implementation (a
// program may only load, store, multiply, and apply the same operation to every
// element), so the emulator chooses its own: a fragment of E elements per lane of
// an R x C matrix (A is M x K, B is K x N, C and D are M x N) is the matrix in row
// major order, lane l holding elements (l mod L) E .. (l mod L) E + E - 1, where
// L = R C / E lanes hold it all and the other lanes copies (f16 A and B of
// m16n16k16 are held twice, as on the hardware; E comes from the instruction's
// register count). Element j lives in register j / e, field j mod e, e elements to
// a register (two f16 or bf16, four u8 or s8, one of the 32- and 64-bit types).
// wmma.load and wmma.store move such a fragment between registers and memory laid
// out row or column major with the given stride in elements; wmma.mma computes
// D = A B + C with mma.sync's arithmetic (matrix_multiply.h).
//
// Operands: load and store: imm names the slot list [the fragment's registers...,
// the address, the stride (kNoSlot: the matrix's own width)]; imm2 packs rows
// (bits 0-7), columns (8-15), the MmaType (16-19), column major (bit 20), the
// state space (21-22: 0 generic, 1 global, 2 shared) and the register count
// (24-31). mma: imm names [D..., A..., B..., C...], imm2 the MmaShape, flags the
// register counts of A, B, C and D in bytes 0-3.
#include <string>

#include "emulator/matrix_multiply.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

struct Fragment {
  uint32_t rows, cols, registers;
  MmaType type;
  bool column_major;
  uint32_t space;

  static Fragment unpack(int64_t packed) {
    const uint64_t v = static_cast<uint64_t>(packed);
    return {static_cast<uint32_t>(v & 0xff), static_cast<uint32_t>((v >> 8) & 0xff),
            static_cast<uint32_t>((v >> 24) & 0xff), static_cast<MmaType>((v >> 16) & 0xf), ((v >> 20) & 1) != 0,
            static_cast<uint32_t>((v >> 21) & 3)};
  }
};

// (row, column) of element j of lane `lane` in a fragment of `per_lane` elements.
MatrixCoord element_place(uint32_t rows, uint32_t cols, uint32_t per_lane, int lane, uint32_t j) {
  const uint32_t holders = rows * cols / per_lane;
  const uint32_t index = (static_cast<uint32_t>(lane) % holders) * per_lane + j;
  return {index / cols, index % cols};
}

uint32_t elements_per_lane(uint32_t rows, uint32_t cols, uint32_t registers, MmaType t, const char* what) {
  const uint32_t per_lane = registers * mma_per_register(t);
  if (per_lane == 0 || (rows * cols) % per_lane != 0 || kWarpSize % (rows * cols / per_lane) != 0) {
    fault(kIllegalInstruction, std::string(what) + " with " + std::to_string(registers) +
                                   " registers for a " + std::to_string(rows) + " x " + std::to_string(cols) +
                                   " fragment", -1);
  }
  return per_lane;
}

uint8_t* element_at(Exec& e, uint32_t space, uint64_t address, uint32_t bytes, int lane) {
  switch (space) {
    case 1: return e.global(address, bytes, lane);
    case 2: return e.shared(address, bytes, lane);
    default: return e.generic(address, bytes, lane);
  }
}

// Calls f(lane, register, field, device address) for every element of every lane.
template <class F>
void for_elements(Exec& e, const Fragment& f, const std::vector<uint32_t>& slots, const char* what, F fn) {
  const uint32_t per_lane = elements_per_lane(f.rows, f.cols, f.registers, f.type, what);
  const uint32_t per = mma_per_register(f.type), bytes = mma_bits(f.type) / 8;
  const uint64_t* address = e.lanes(slots[f.registers]);
  const uint32_t stride_slot = slots[f.registers + 1];
  const uint64_t* stride = stride_slot == kNoSlot ? nullptr : e.lanes(stride_slot);
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const uint64_t ld = stride != nullptr ? static_cast<uint32_t>(stride[lane]) : (f.column_major ? f.rows : f.cols);
    for (uint32_t j = 0; j < per_lane; ++j) {
      const MatrixCoord at = element_place(f.rows, f.cols, per_lane, lane, j);
      const uint64_t index = f.column_major ? at.col * ld + at.row : at.row * ld + at.col;
      fn(lane, j / per, j % per, element_at(e, f.space, address[lane] + index * bytes, bytes, lane));
    }
  }
}

EMU_HANDLER(h_wmma_load) {
  if (m != kFullMask) fault(kIllegalInstruction, "wmma.load needs all 32 lanes of the warp (.sync.aligned)", -1);
  const Fragment f = Fragment::unpack(in.imm2);
  const auto& slots = slot_list(e, in, f.registers + 2, "wmma.load");
  const uint32_t bits = mma_bits(f.type);
  std::vector<uint64_t> values(static_cast<size_t>(f.registers) * kWarpSize, 0);
  for_elements(e, f, slots, "wmma.load", [&](int lane, uint32_t r, uint32_t field, const uint8_t* p) {
    uint64_t raw = 0;
    std::memcpy(&raw, p, bits / 8);
    values[static_cast<size_t>(r) * kWarpSize + lane] |= bits >= 64 ? raw : raw << (bits * field);
  });
  for (uint32_t r = 0; r < f.registers; ++r) {
    if (slots[r] == kNoSlot) continue;
    uint64_t* reg = e.lanes(slots[r]);
    for (int lane = 0; lane < kWarpSize; ++lane) reg[lane] = values[static_cast<size_t>(r) * kWarpSize + lane];
  }
}

EMU_HANDLER(h_wmma_store) {
  if (m != kFullMask) fault(kIllegalInstruction, "wmma.store needs all 32 lanes of the warp (.sync.aligned)", -1);
  const Fragment f = Fragment::unpack(in.imm2);
  const auto& slots = slot_list(e, in, f.registers + 2, "wmma.store");
  const uint32_t bits = mma_bits(f.type);
  for_elements(e, f, slots, "wmma.store", [&](int lane, uint32_t r, uint32_t field, uint8_t* p) {
    const uint64_t raw = mma_field(e.lanes(slots[r])[lane], bits, field);
    std::memcpy(p, &raw, bits / 8);
  });
}

void read_matrix(Exec& e, const uint32_t* regs, uint32_t nregs, MmaType t, MmaMatrix& into) {
  const uint32_t per_lane = elements_per_lane(into.rows, into.cols, nregs, t, "wmma.mma");
  const uint32_t per = mma_per_register(t), holders = into.rows * into.cols / per_lane;
  for (int lane = 0; lane < static_cast<int>(holders); ++lane) {
    for (uint32_t j = 0; j < per_lane; ++j) {
      const MatrixCoord at = element_place(into.rows, into.cols, per_lane, lane, j);
      into.set(at.row, at.col, t, mma_field(e.lanes(regs[j / per])[lane], mma_bits(t), j % per));
    }
  }
}

void write_matrix(Exec& e, const uint32_t* regs, uint32_t nregs, MmaType t, const MmaMatrix& acc, bool satfinite) {
  const uint32_t per_lane = elements_per_lane(acc.rows, acc.cols, nregs, t, "wmma.mma");
  const uint32_t per = mma_per_register(t), bits = mma_bits(t);
  std::vector<uint64_t> values(static_cast<size_t>(nregs) * kWarpSize, 0);
  for (int lane = 0; lane < kWarpSize; ++lane) {
    for (uint32_t j = 0; j < per_lane; ++j) {
      const MatrixCoord at = element_place(acc.rows, acc.cols, per_lane, lane, j);
      const size_t index = static_cast<size_t>(at.row) * acc.cols + at.col;
      uint64_t raw = acc.integer ? mma_encode_int(acc.i[index], satfinite) : mma_encode_float(t, acc.f[index]);
      if (bits < 64) raw &= (uint64_t{1} << bits) - 1;
      values[static_cast<size_t>(j / per) * kWarpSize + lane] |= bits >= 64 ? raw : raw << (bits * (j % per));
    }
  }
  for (uint32_t r = 0; r < nregs; ++r) {
    if (regs[r] == kNoSlot) continue;
    uint64_t* reg = e.lanes(regs[r]);
    for (int lane = 0; lane < kWarpSize; ++lane) reg[lane] = values[static_cast<size_t>(r) * kWarpSize + lane];
  }
}

EMU_HANDLER(h_wmma_mma) {
  if (m != kFullMask) fault(kIllegalInstruction, "wmma.mma needs all 32 lanes of the warp (.sync.aligned)", -1);
  const MmaShape s = MmaShape::unpack(in.imm2);
  const uint32_t na = in.flags & 0xff, nb = (in.flags >> 8) & 0xff, nc = (in.flags >> 16) & 0xff,
                 nd = (in.flags >> 24) & 0xff;
  const auto& slots = slot_list(e, in, nd + na + nb + nc, "wmma.mma");
  const uint32_t* d = slots.data();
  const uint32_t* a = d + nd;
  const uint32_t* b = a + na;
  const uint32_t* c = b + nb;
  const bool integer = mma_integer(s.a);
  MmaMatrix ma(s.m, s.k, integer), mb(s.k, s.n, integer), acc(s.m, s.n, integer);
  read_matrix(e, a, na, s.a, ma);
  read_matrix(e, b, nb, s.b, mb);
  read_matrix(e, c, nc, s.c, acc);
  mma_accumulate(acc, ma, mb);
  write_matrix(e, d, nd, s.d, acc, s.satfinite);
}

const HandlerRegistrar registrar{
    {"wmma.load", HandlerInfo{h_wmma_load, Control::kWarpSync}},
    {"wmma.store", HandlerInfo{h_wmma_store, Control::kWarpSync}},
    {"wmma.mma", HandlerInfo{h_wmma_mma, Control::kWarpSync}},
};

}  // namespace
}  // namespace tally::emu
