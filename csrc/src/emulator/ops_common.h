// Helpers shared by the instruction handlers (ops_*.cpp): lane loops over
// operand rows and registration macros.
//
// Operand convention for computational instructions: op[0] = d, op[1] = a,
// op[2] = b, op[3] = c; instructions with two destinations (setp's p|q) use
// op[0] and op[1] and shift the sources (documented at each handler).
#pragma once

#include "emulator/exec.h"

namespace tally::emu {

template <class T, class F>
inline void unary(Exec& e, const Instr& in, LaneMask m, F f) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) { d[l] = put<T>(f(get<T>(a[l]))); });
}

template <class T, class F>
inline void binary(Exec& e, const Instr& in, LaneMask m, F f) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) { d[l] = put<T>(f(get<T>(a[l]), get<T>(b[l]))); });
}

template <class T, class F>
inline void ternary(Exec& e, const Instr& in, LaneMask m, F f) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* b = e.lanes(in.op[2]);
  const uint64_t* c = e.lanes(in.op[3]);
  for_lanes(m, [&](int l) { d[l] = put<T>(f(get<T>(a[l]), get<T>(b[l]), get<T>(c[l]))); });
}

// atom's read-modify-write of one element at p (type and op: the flag codes of
// atom), for the bulk reductions; returns the old value.
uint64_t reduce_in_memory(uint8_t* p, uint32_t type, uint32_t op, uint64_t value);

#define EMU_HANDLER(name) void name(Exec& e, const Instr& in, LaneMask m)
#define EMU_ENTRY(key, fn) {key, HandlerInfo{fn, Control::kNone}}
// key.s16 ... key.u64 -> fn<int16_t> ... fn<uint64_t>
#define EMU_INT_ENTRIES(key, fn)                                                            \
  EMU_ENTRY(key ".s16", fn<int16_t>), EMU_ENTRY(key ".u16", fn<uint16_t>),                 \
      EMU_ENTRY(key ".s32", fn<int32_t>), EMU_ENTRY(key ".u32", fn<uint32_t>),             \
      EMU_ENTRY(key ".s64", fn<int64_t>), EMU_ENTRY(key ".u64", fn<uint64_t>)
#define EMU_INT32_64_ENTRIES(key, fn)                                                       \
  EMU_ENTRY(key ".s32", fn<int32_t>), EMU_ENTRY(key ".u32", fn<uint32_t>),                 \
      EMU_ENTRY(key ".s64", fn<int64_t>), EMU_ENTRY(key ".u64", fn<uint64_t>)
#define EMU_BITS_ENTRIES(key, fn)                                                           \
  EMU_ENTRY(key ".b16", fn<uint16_t>), EMU_ENTRY(key ".b32", fn<uint32_t>),                \
      EMU_ENTRY(key ".b64", fn<uint64_t>)
#define EMU_FLOAT_ENTRIES(key, fn) EMU_ENTRY(key ".f32", fn<float>), EMU_ENTRY(key ".f64", fn<double>)

}  // namespace tally::emu
