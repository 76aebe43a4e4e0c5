// What the tensor-core instructions (mma.sync in ops_mma.cpp, wgmma.mma_async in
// ops_wgmma.cpp) share: their element types, the packed description of one
// instruction the lowering writes into Instr::imm2, the fragment layouts of the
// PTX ISA, and the arithmetic.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"): lane t of a
// warp is in group g = t / 4 at position q = t % 4. A register holds
// e = 32 / element bits elements (one for 32- and 64-bit types). For every shape
// of the m16n8 and m8n8 families:
//   A (M x K, row major), register r, element j:
//       row g + 8 (r % 2),  column q e + j + (r / 2) 4e
//   B (K x N, column major), register r, element j:
//       row q e + j + r 4e, column g
//   C and D, element i (registers of 32/64-bit types hold one, f16 two):
//       row g + 8 ((i % 4) / 2),  column 8 (i / 4) + 2q + i % 2
// wgmma's D is the m16n8 form repeated over N / 8 column chunks, its warp w of the
// warpgroup holding rows 16w..16w+15; its register A is mma.m16n8k*'s A there.
//
// Arithmetic: D = C + sum over k of A B, the products exact in a double (every
// input type's are), summed in K order in a double, added to C and rounded once
// to the destination type (round to nearest even). Real tensor cores keep fewer bits between steps, so
// results on inexact data may differ from a GPU's in the last place; on data
// whose sums are exact (small integers, powers of two) they are bit-identical.
// Integer forms sum in 64 bits and wrap to 32 (.satfinite: clamp).
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/exec.h"
#include "emulator/float_formats.h"
#include "emulator/fp8_formats.h"

namespace tally::emu {

enum class MmaType : uint8_t { kF16, kBF16, kTF32, kF32, kF64, kS8, kU8, kS4, kU4, kE4M3, kE5M2, kS32, kCount };

inline uint32_t mma_bits(MmaType t) {
  switch (t) {
    case MmaType::kF64: return 64;
    case MmaType::kTF32: case MmaType::kF32: case MmaType::kS32: return 32;
    case MmaType::kF16: case MmaType::kBF16: return 16;
    case MmaType::kS4: case MmaType::kU4: return 4;
    default: return 8;
  }
}
inline bool mma_integer(MmaType t) {
  return t == MmaType::kS8 || t == MmaType::kU8 || t == MmaType::kS4 || t == MmaType::kU4 || t == MmaType::kS32;
}
// Elements one register holds.
inline uint32_t mma_per_register(MmaType t) { return mma_bits(t) >= 32 ? 1 : 32 / mma_bits(t); }

// One instruction, as packed into Instr::imm2 by the lowering (lower_matrix_multiply.py).
struct MmaShape {
  MmaType a, b, c, d;
  uint32_t m, n, k;
  bool satfinite;     // integer forms: clamp to s32
  bool a_registers;   // wgmma: A comes from registers (else a shared-memory descriptor)
  bool negate_a, negate_b, transpose_a, transpose_b;  // wgmma's imm-scale-a/b = -1, imm-trans-a/b = 1

  static MmaShape unpack(int64_t packed) {
    uint64_t v = static_cast<uint64_t>(packed);
    auto type = [&](int shift) { return static_cast<MmaType>((v >> shift) & 0xf); };
    return MmaShape{type(0), type(4), type(8), type(12),
                    static_cast<uint32_t>((v >> 16) & 0xff), static_cast<uint32_t>((v >> 24) & 0x1ff),
                    static_cast<uint32_t>((v >> 33) & 0x1ff),
                    ((v >> 42) & 1) != 0, ((v >> 43) & 1) != 0, ((v >> 44) & 1) != 0, ((v >> 45) & 1) != 0,
                    ((v >> 46) & 1) != 0, ((v >> 47) & 1) != 0};
  }
};

// Element j (bits `bits` wide) of a register value.
inline uint64_t mma_field(uint64_t reg, uint32_t bits, uint32_t j) {
  if (bits >= 64) return reg;
  return (reg >> (bits * j)) & ((uint64_t{1} << bits) - 1);
}

// The value of a raw element of a floating-point input type.
inline double mma_float(MmaType t, uint64_t raw) {
  switch (t) {
    case MmaType::kF16: return half_to_double(static_cast<uint16_t>(raw));
    case MmaType::kBF16: return bf16_to_double(static_cast<uint16_t>(raw));
    case MmaType::kTF32: {  // an f32 whose 13 low mantissa bits the tensor core does not read
      uint32_t bits = static_cast<uint32_t>(raw) & 0xffffe000u;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case MmaType::kF32: {
      uint32_t bits = static_cast<uint32_t>(raw);
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case MmaType::kF64: {
      double d;
      std::memcpy(&d, &raw, 8);
      return d;
    }
    case MmaType::kE4M3: return decode_fp8(static_cast<uint8_t>(raw), kE4M3);
    case MmaType::kE5M2: return decode_fp8(static_cast<uint8_t>(raw), kE5M2);
    default: return 0;
  }
}

// The value of a raw element of an integer input type (sign-extended for s types).
inline int64_t mma_int(MmaType t, uint64_t raw) {
  switch (t) {
    case MmaType::kS8: return static_cast<int8_t>(raw);
    case MmaType::kU8: return static_cast<uint8_t>(raw);
    case MmaType::kS4: return static_cast<int64_t>((raw & 0xf) ^ 0x8) - 8;
    case MmaType::kU4: return static_cast<int64_t>(raw & 0xf);
    case MmaType::kS32: return static_cast<int32_t>(raw);
    default: return 0;
  }
}

// The raw encoding of an accumulator value in a floating-point result type.
inline uint64_t mma_encode_float(MmaType t, double v) {
  switch (t) {
    case MmaType::kF16: return double_to_half(v);
    case MmaType::kF64: {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return bits;
    }
    default: {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return bits;
    }
  }
}

inline uint64_t mma_encode_int(int64_t v, bool satfinite) {
  if (satfinite) v = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v;
  return static_cast<uint32_t>(static_cast<int32_t>(static_cast<uint32_t>(v)));
}

// Where an element of a fragment lies in its matrix (the layouts above).
struct MatrixCoord {
  uint32_t row, col;
};
inline MatrixCoord mma_a_coord(int lane, uint32_t reg, uint32_t j, uint32_t per_reg) {
  uint32_t g = lane / 4, q = lane % 4;
  return {g + 8 * (reg % 2), q * per_reg + j + (reg / 2) * 4 * per_reg};
}
inline MatrixCoord mma_b_coord(int lane, uint32_t reg, uint32_t j, uint32_t per_reg) {
  uint32_t g = lane / 4, q = lane % 4;
  return {q * per_reg + j + reg * 4 * per_reg, g};
}
inline MatrixCoord mma_c_coord(int lane, uint32_t i) {
  uint32_t g = lane / 4, q = lane % 4;
  return {g + 8 * ((i % 4) / 2), 8 * (i / 4) + 2 * q + i % 2};
}

// A `rows` x `cols` row-major matrix of an instruction (A, B or the accumulator):
// doubles for floating-point forms, 64-bit integers for integer ones (one is used).
struct MmaMatrix {
  uint32_t rows = 0, cols = 0;
  bool integer = false;
  std::vector<double> f;
  std::vector<int64_t> i;
  MmaMatrix(uint32_t r, uint32_t c, bool is_int) : rows(r), cols(c), integer(is_int) {
    if (is_int) i.assign(static_cast<size_t>(r) * c, 0); else f.assign(static_cast<size_t>(r) * c, 0.0);
  }
  // Element (r, c) from its raw bits in type t; `scale` (wgmma's -1) applies to floats.
  void set(uint32_t r, uint32_t c, MmaType t, uint64_t raw, double scale = 1.0) {
    size_t at = static_cast<size_t>(r) * cols + c;
    if (integer) i[at] = mma_int(t, raw); else f[at] = scale * mma_float(t, raw);
  }
};

// Reads `nregs` registers of an A or B fragment (elements of type t, `coord` one of
// mma_a_coord / mma_b_coord) of every lane into `into`.
template <class Coord>
void mma_read_fragment(Exec& e, const uint32_t* regs, uint32_t nregs, MmaType t, Coord coord, MmaMatrix& into,
                       double scale = 1.0) {
  const uint32_t per = mma_per_register(t);
  for (uint32_t r = 0; r < nregs; ++r) {
    const uint64_t* reg = e.lanes(regs[r]);
    for (int lane = 0; lane < kWarpSize; ++lane)
      for (uint32_t j = 0; j < per; ++j) {
        MatrixCoord at = coord(lane, r, j, per);
        into.set(at.row, at.col, t, mma_field(reg[lane], mma_bits(t), j), scale);
      }
  }
}

// Reads the accumulator fragment of `count` elements from registers `regs` of every
// lane into `acc`.
inline void mma_read_c(Exec& e, const uint32_t* regs, MmaType t, uint32_t count, MmaMatrix& acc) {
  const uint32_t per = t == MmaType::kF16 ? 2 : 1;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t* reg = e.lanes(regs[i / per]);
    for (int lane = 0; lane < kWarpSize; ++lane) {
      MatrixCoord at = mma_c_coord(lane, i);
      acc.set(at.row, at.col, t, mma_field(reg[lane], per == 2 ? 16 : mma_bits(t), i % per));
    }
  }
}

// Writes `acc` back as the destination fragment (type t).
inline void mma_write_d(Exec& e, const uint32_t* regs, MmaType t, uint32_t count, const MmaMatrix& acc,
                        bool satfinite) {
  const uint32_t per = t == MmaType::kF16 ? 2 : 1;
  for (uint32_t r = 0; r < count / per; ++r) {
    uint64_t values[kWarpSize] = {};
    for (uint32_t h = 0; h < per; ++h) {
      uint32_t i = r * per + h;
      for (int lane = 0; lane < kWarpSize; ++lane) {
        MatrixCoord at = mma_c_coord(lane, i);
        size_t index = static_cast<size_t>(at.row) * acc.cols + at.col;
        uint64_t raw = acc.integer ? mma_encode_int(acc.i[index], satfinite) : mma_encode_float(t, acc.f[index]);
        values[lane] |= raw << (16 * h);
      }
    }
    if (regs[r] == kNoSlot) continue;
    uint64_t* reg = e.lanes(regs[r]);
    for (int lane = 0; lane < kWarpSize; ++lane) reg[lane] = values[lane];
  }
}

// acc (M x N) += a (M x K) * b (K x N), each sum in K order.
inline void mma_accumulate(MmaMatrix& acc, const MmaMatrix& a, const MmaMatrix& b) {
  const uint32_t k = a.cols;
  for (uint32_t r = 0; r < acc.rows; ++r) {
    for (uint32_t c = 0; c < acc.cols; ++c) {
      size_t at = static_cast<size_t>(r) * acc.cols + c;
      if (acc.integer) {
        int64_t sum = 0;
        for (uint32_t x = 0; x < k; ++x) sum += a.i[r * k + x] * b.i[static_cast<size_t>(x) * acc.cols + c];
        acc.i[at] += sum;
      } else {
        double sum = 0;
        for (uint32_t x = 0; x < k; ++x) sum += a.f[r * k + x] * b.f[static_cast<size_t>(x) * acc.cols + c];
        acc.f[at] += sum;
      }
    }
  }
}

// The operand slots of an instruction that names more than Instr::op holds.
inline const std::vector<uint32_t>& slot_list(Exec& e, const Instr& in, size_t expected, const char* what) {
  const auto& lists = e.launch->prog.slot_lists;
  if (in.imm < 0 || static_cast<size_t>(in.imm) >= lists.size() || lists[static_cast<size_t>(in.imm)].size() != expected) {
    fault(kIllegalInstruction, std::string(what) + " with an operand list that does not match its shape", -1);
  }
  return lists[static_cast<size_t>(in.imm)];
}

}  // namespace tally::emu
