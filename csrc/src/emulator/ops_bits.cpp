// Logic and bit manipulation: and/or/xor/not/cnot, shifts, bfe/bfi, brev, clz,
// popc, bfind, prmt, lop3, shf. Semantics follow the PTX ISA pseudocode.
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

template <class T> EMU_HANDLER(h_and) { binary<T>(e, in, m, [](T a, T b) { return static_cast<T>(a & b); }); }
template <class T> EMU_HANDLER(h_or) { binary<T>(e, in, m, [](T a, T b) { return static_cast<T>(a | b); }); }
template <class T> EMU_HANDLER(h_xor) { binary<T>(e, in, m, [](T a, T b) { return static_cast<T>(a ^ b); }); }
template <class T> EMU_HANDLER(h_not) { unary<T>(e, in, m, [](T a) { return static_cast<T>(~a); }); }
template <class T> EMU_HANDLER(h_cnot) { unary<T>(e, in, m, [](T a) { return static_cast<T>(a == 0 ? 1 : 0); }); }

// Predicates hold 0/1.
EMU_HANDLER(h_and_pred) { binary<uint64_t>(e, in, m, [](uint64_t a, uint64_t b) { return uint64_t((a != 0) & (b != 0)); }); }
EMU_HANDLER(h_or_pred) { binary<uint64_t>(e, in, m, [](uint64_t a, uint64_t b) { return uint64_t((a != 0) | (b != 0)); }); }
EMU_HANDLER(h_xor_pred) { binary<uint64_t>(e, in, m, [](uint64_t a, uint64_t b) { return uint64_t((a != 0) ^ (b != 0)); }); }
EMU_HANDLER(h_not_pred) { unary<uint64_t>(e, in, m, [](uint64_t a) { return uint64_t(a == 0); }); }

// Shift amounts are .u32 and saturate: shifting by the width or more gives 0
// (or the sign for arithmetic right shifts).
template <class T>
void shift(Exec& e, const Instr& in, LaneMask m, bool left) {
  constexpr unsigned bits = 8 * sizeof(T);
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) {
    T x = get<T>(a[l]);
    uint32_t n = static_cast<uint32_t>(b[l]);
    T r;
    if (left) {
      r = n >= bits ? T(0) : static_cast<T>(static_cast<uint64_t>(x) << n);
    } else if constexpr (std::is_signed_v<T>) {
      r = static_cast<T>(x >> (n >= bits ? bits - 1 : n));
    } else {
      r = n >= bits ? T(0) : static_cast<T>(x >> n);
    }
    d[l] = put<T>(r);
  });
}
template <class T> EMU_HANDLER(h_shl) { shift<T>(e, in, m, true); }
template <class T> EMU_HANDLER(h_shr) { shift<T>(e, in, m, false); }

template <class T> EMU_HANDLER(h_bfe) {
  constexpr unsigned msb = 8 * sizeof(T) - 1;
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  for_lanes(m, [&](int l) {
    uint64_t x = static_cast<std::make_unsigned_t<T>>(a[l]);
    unsigned pos = b[l] & 0xff, len = c[l] & 0xff;
    uint64_t sbit = 0;
    if (std::is_signed_v<T> && len != 0) sbit = (x >> std::min(pos + len - 1, msb)) & 1;
    uint64_t r = 0;
    for (unsigned i = 0; i <= msb; ++i) {
      uint64_t bit = (i < len && pos + i <= msb) ? (x >> (pos + i)) & 1 : sbit;
      r |= bit << i;
    }
    d[l] = put<T>(static_cast<T>(r));
  });
}

template <class T> EMU_HANDLER(h_bfi) {
  // bfi d, a (field), b (base), c (pos), op[4] (len)
  constexpr unsigned msb = 8 * sizeof(T) - 1;
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  const uint64_t* n = e.lanes(in.op[4]);
  for_lanes(m, [&](int l) {
    uint64_t f = static_cast<T>(b[l]);
    unsigned pos = c[l] & 0xff, len = n[l] & 0xff;
    for (unsigned i = 0; i < len && pos + i <= msb; ++i) {
      uint64_t bit = (a[l] >> i) & 1;
      f = (f & ~(1ull << (pos + i))) | (bit << (pos + i));
    }
    d[l] = put<T>(static_cast<T>(f));
  });
}

template <class T> EMU_HANDLER(h_brev) {
  unary<T>(e, in, m, [](T a) {
    T r = 0;
    for (unsigned i = 0; i < 8 * sizeof(T); ++i) r = static_cast<T>(r | (((a >> i) & 1) << (8 * sizeof(T) - 1 - i)));
    return r;
  });
}

template <class T> EMU_HANDLER(h_clz) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) {
    T x = static_cast<T>(a[l]);
    uint32_t r = x == 0 ? 8 * sizeof(T) : (sizeof(T) == 8 ? __builtin_clzll(x) : __builtin_clz(static_cast<uint32_t>(x)));
    d[l] = r;
  });
}

template <class T> EMU_HANDLER(h_popc) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) { d[l] = static_cast<uint32_t>(__builtin_popcountll(static_cast<T>(a[l]))); });
}

// bfind: position of the most significant non-sign bit (0xffffffff if none);
// .shiftamt gives the left shift that would normalize it instead.
template <class T> EMU_HANDLER(h_bfind) {
  constexpr int bits = 8 * sizeof(T);
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  bool shiftamt = in.flags & flag::kShiftAmount;
  for_lanes(m, [&](int l) {
    uint64_t x = static_cast<std::make_unsigned_t<T>>(a[l]);
    if (std::is_signed_v<T> && ((x >> (bits - 1)) & 1)) x = ~x & (bits == 64 ? ~0ull : ((1ull << bits) - 1));
    int pos = -1;
    for (int i = bits - 1; i >= 0; --i) {
      if ((x >> i) & 1) {
        pos = i;
        break;
      }
    }
    uint32_t r = pos < 0 ? 0xffffffffu : shiftamt ? static_cast<uint32_t>(bits - 1 - pos) : static_cast<uint32_t>(pos);
    d[l] = r;
  });
}

EMU_HANDLER(h_prmt) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  uint32_t mode = (in.flags >> flag::kPrmtShift) & 0x7;
  for_lanes(m, [&](int l) {
    uint64_t bytes = (static_cast<uint64_t>(static_cast<uint32_t>(b[l])) << 32) | static_cast<uint32_t>(a[l]);
    auto byte = [&](unsigned i) { return static_cast<uint32_t>((bytes >> (8 * (i & 7))) & 0xff); };
    uint32_t sel = static_cast<uint32_t>(c[l]);
    uint32_t r = 0;
    if (mode == flag::kPrmtDefault) {
      for (unsigned i = 0; i < 4; ++i) {
        uint32_t s = (sel >> (4 * i)) & 0xf;
        uint32_t v = byte(s & 7);
        if (s & 8) v = (v & 0x80) ? 0xff : 0;
        r |= v << (8 * i);
      }
    } else {
      unsigned s = sel & 3;
      unsigned idx[4];
      for (unsigned i = 0; i < 4; ++i) {
        switch (mode) {
          case flag::kPrmtF4e: idx[i] = (s + i) & 7; break;            // forward 4 extract
          case flag::kPrmtB4e: idx[i] = (s + 8 - i) & 7; break;        // backward 4 extract
          case flag::kPrmtRc8: idx[i] = s; break;                      // replicate byte
          case flag::kPrmtEcl: idx[i] = i < s ? s : i; break;          // edge clamp left
          case flag::kPrmtEcr: idx[i] = i > s ? s : i; break;          // edge clamp right
          default: idx[i] = ((s & 1) << 1) | (i & 1); break;           // rc16: replicate half
        }
      }
      for (unsigned i = 0; i < 4; ++i) r |= byte(idx[i]) << (8 * i);
    }
    d[l] = r;
  });
}

// lop3: bit i of the lookup table (imm) is F(a, b, c) for a = i>>2, b = (i>>1)&1, c = i&1.
EMU_HANDLER(h_lop3) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  uint32_t lut = static_cast<uint32_t>(in.imm);
  for_lanes(m, [&](int l) {
    uint32_t x = static_cast<uint32_t>(a[l]), y = static_cast<uint32_t>(b[l]), z = static_cast<uint32_t>(c[l]);
    uint32_t r = 0;
    for (unsigned i = 0; i < 8; ++i) {
      if ((lut >> i) & 1) r |= ((i & 4) ? x : ~x) & ((i & 2) ? y : ~y) & ((i & 1) ? z : ~z);
    }
    d[l] = r;
  });
}

// shf.{l,r}.{wrap,clamp}.b32 d, a, b, c: funnel shift of the 64-bit {b:a}.
EMU_HANDLER(h_shf) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  bool left = in.flags & flag::kShfLeft, clamp = in.flags & flag::kShfClamp;
  for_lanes(m, [&](int l) {
    uint32_t n = static_cast<uint32_t>(c[l]);
    n = clamp ? std::min<uint32_t>(n, 32) : (n & 31);
    uint64_t v = (static_cast<uint64_t>(static_cast<uint32_t>(b[l])) << 32) | static_cast<uint32_t>(a[l]);
    uint32_t r = left ? static_cast<uint32_t>((v << n) >> 32) : static_cast<uint32_t>(v >> n);
    d[l] = r;
  });
}

// bmsk.{clamp,wrap}.b32 d, a, b: b one-bits starting at bit a (CUB's radix sort
// makes its digit masks with it). .wrap takes a and b mod 32; .clamp limits them
// to 32, so a start of 32 or more gives 0.
template <bool kWrap> EMU_HANDLER(h_bmsk) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) {
    uint64_t start = static_cast<uint32_t>(a[l]), width = static_cast<uint32_t>(b[l]);
    if (kWrap) {
      start &= 31;
      width &= 31;
    } else {
      start = std::min<uint64_t>(start, 32);
      width = std::min<uint64_t>(width, 32);
    }
    d[l] = static_cast<uint32_t>(((uint64_t{1} << width) - 1) << start);
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("bmsk.clamp.b32", h_bmsk<false>), EMU_ENTRY("bmsk.wrap.b32", h_bmsk<true>),
    EMU_BITS_ENTRIES("and", h_and), EMU_BITS_ENTRIES("or", h_or), EMU_BITS_ENTRIES("xor", h_xor),
    EMU_BITS_ENTRIES("not", h_not), EMU_BITS_ENTRIES("cnot", h_cnot),
    EMU_ENTRY("and.pred", h_and_pred), EMU_ENTRY("or.pred", h_or_pred), EMU_ENTRY("xor.pred", h_xor_pred),
    EMU_ENTRY("not.pred", h_not_pred),
    EMU_BITS_ENTRIES("shl", h_shl),
    EMU_ENTRY("shr.b16", h_shr<uint16_t>), EMU_ENTRY("shr.b32", h_shr<uint32_t>), EMU_ENTRY("shr.b64", h_shr<uint64_t>),
    EMU_INT_ENTRIES("shr", h_shr),
    EMU_INT32_64_ENTRIES("bfe", h_bfe),
    EMU_ENTRY("bfi.b32", h_bfi<uint32_t>), EMU_ENTRY("bfi.b64", h_bfi<uint64_t>),
    EMU_ENTRY("brev.b32", h_brev<uint32_t>), EMU_ENTRY("brev.b64", h_brev<uint64_t>),
    EMU_ENTRY("clz.b32", h_clz<uint32_t>), EMU_ENTRY("clz.b64", h_clz<uint64_t>),
    EMU_ENTRY("popc.b32", h_popc<uint32_t>), EMU_ENTRY("popc.b64", h_popc<uint64_t>),
    EMU_INT32_64_ENTRIES("bfind", h_bfind),
    EMU_ENTRY("prmt.b32", h_prmt), EMU_ENTRY("lop3.b32", h_lop3), EMU_ENTRY("shf.b32", h_shf),
};

}  // namespace
}  // namespace tally::emu
