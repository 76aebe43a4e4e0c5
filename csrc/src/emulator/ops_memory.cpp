// Memory instructions: ld/st (scalar and vector, every state space), atom/red,
// cvta, isspacep, local-symbol addresses, fences.
//
// ld/st operands: op[0..3] the data registers (vector elements; kNoSlot for a
// `_` sink), op[4] the address base register (a constant 0 for symbols and
// absolute addresses), imm the offset. Spaces: global (and const), shared,
// local (thread-relative address), frame (a symbol of the current call frame:
// function parameters, call arguments, local arrays), param (the kernel's
// parameter buffer) and generic (decided per address by its window).
//
// Global and generic accesses are relaxed atomics (plain moves on x86) so a
// value another stream or the host writes while the kernel runs is seen by the
// next load, as a volatile load on a GPU sees it.
#include <chrono>

#include "emulator/float_formats.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

enum Space { kGlobal, kShared, kLocal, kFrame, kParam, kGeneric };

template <int S>
inline uint8_t* resolve(Exec& e, uint64_t addr, uint32_t n, int lane) {
  if constexpr (S == kGlobal) return e.global(addr, n, lane);
  if constexpr (S == kShared) return e.shared(addr, n, lane);
  if constexpr (S == kLocal) return e.local(addr, n, lane);
  if constexpr (S == kFrame) return e.local(addr + e.frame_local_base(), n, lane);
  if constexpr (S == kParam) return e.param(addr, n, lane);
  return e.generic(addr, n, lane);
}

inline int load_order(uint32_t flags) {
  uint32_t o = (flags >> flag::kOrderShift) & flag::kOrderMask;
  return o == flag::kAcquire || o == flag::kAcqRel ? __ATOMIC_ACQUIRE : o == flag::kSeqCst ? __ATOMIC_SEQ_CST
                                                                                           : __ATOMIC_RELAXED;
}
inline int store_order(uint32_t flags) {
  uint32_t o = (flags >> flag::kOrderShift) & flag::kOrderMask;
  return o == flag::kRelease || o == flag::kAcqRel ? __ATOMIC_RELEASE : o == flag::kSeqCst ? __ATOMIC_SEQ_CST
                                                                                           : __ATOMIC_RELAXED;
}

inline uint64_t load_element(const uint8_t* p, unsigned size, int order) {
  switch (size) {
    case 1: return __atomic_load_n(p, order);
    case 2: return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), order);
    case 4: return __atomic_load_n(reinterpret_cast<const uint32_t*>(p), order);
    default: return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), order);
  }
}

inline void store_element(uint8_t* p, unsigned size, uint64_t v, int order) {
  switch (size) {
    case 1: __atomic_store_n(p, static_cast<uint8_t>(v), order); break;
    case 2: __atomic_store_n(reinterpret_cast<uint16_t*>(p), static_cast<uint16_t>(v), order); break;
    case 4: __atomic_store_n(reinterpret_cast<uint32_t*>(p), static_cast<uint32_t>(v), order); break;
    default: __atomic_store_n(reinterpret_cast<uint64_t*>(p), v, order); break;
  }
}

template <int S> EMU_HANDLER(h_ld) {
  const uint64_t* base = e.lanes(in.op[4]);
  const unsigned size = in.size, width = in.width;
  const bool sign = in.flags & flag::kSignExtend;
  const int order = load_order(in.flags);
  uint64_t* dst[4] = {};
  for (unsigned k = 0; k < width; ++k) dst[k] = in.op[k] == kNoSlot ? nullptr : e.lanes(in.op[k]);
  uint64_t addr[kWarpSize];
  for_lanes(m, [&](int l) { addr[l] = base[l] + static_cast<uint64_t>(in.imm); });  // before any write
  for_lanes(m, [&](int l) {
    const uint8_t* p = resolve<S>(e, addr[l], size * width, l);
    for (unsigned k = 0; k < width; ++k) {
      if (dst[k]) dst[k][l] = extend(load_element(p + k * size, size, order), size, sign);
    }
  });
}

template <int S> EMU_HANDLER(h_st) {
  const uint64_t* base = e.lanes(in.op[4]);
  const unsigned size = in.size, width = in.width;
  const int order = store_order(in.flags);
  const uint64_t* src[4] = {};
  for (unsigned k = 0; k < width; ++k) src[k] = e.lanes(in.op[k]);
  for_lanes(m, [&](int l) {
    uint8_t* p = resolve<S>(e, base[l] + static_cast<uint64_t>(in.imm), size * width, l);
    for (unsigned k = 0; k < width; ++k) store_element(p + k * size, size, src[k][l], order);
  });
}

// ---------------------------------------------------------------- atomics

// CAS loop applying f(old) -> new on a T in memory; returns the old raw bits.
template <class T, class F>
uint64_t cas_loop(uint8_t* p, F f) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
  Bits* q = reinterpret_cast<Bits*>(p);
  Bits old = __atomic_load_n(q, __ATOMIC_RELAXED);
  for (;;) {
    T value;
    std::memcpy(&value, &old, sizeof(T));
    T updated = f(value);
    Bits desired;
    std::memcpy(&desired, &updated, sizeof(T));
    if (__atomic_compare_exchange_n(q, &old, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return old;
  }
}

template <class T>
uint64_t int_atomic(uint8_t* p, uint32_t op, uint64_t braw, uint64_t craw) {
  T* q = reinterpret_cast<T*>(p);
  T b = static_cast<T>(braw), c = static_cast<T>(craw);
  switch (op) {
    case flag::kAtomAdd: return put<T>(__atomic_fetch_add(q, b, __ATOMIC_SEQ_CST));
    case flag::kAtomAnd: return put<T>(__atomic_fetch_and(q, b, __ATOMIC_SEQ_CST));
    case flag::kAtomOr: return put<T>(__atomic_fetch_or(q, b, __ATOMIC_SEQ_CST));
    case flag::kAtomXor: return put<T>(__atomic_fetch_xor(q, b, __ATOMIC_SEQ_CST));
    case flag::kAtomExch: return put<T>(__atomic_exchange_n(q, b, __ATOMIC_SEQ_CST));
    case flag::kAtomCas: {
      T expected = b;
      __atomic_compare_exchange_n(q, &expected, c, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      return put<T>(expected);
    }
    case flag::kAtomMin: return extend(cas_loop<T>(p, [&](T v) { return b < v ? b : v; }), sizeof(T), std::is_signed_v<T>);
    case flag::kAtomMax: return extend(cas_loop<T>(p, [&](T v) { return v < b ? b : v; }), sizeof(T), std::is_signed_v<T>);
    case flag::kAtomInc:  // ((old >= b) ? 0 : old + 1), unsigned
      return cas_loop<T>(p, [&](T v) { return v >= b ? T(0) : T(v + 1); });
    default:  // kAtomDec: ((old == 0 || old > b) ? b : old - 1), unsigned
      return cas_loop<T>(p, [&](T v) { return (v == 0 || v > b) ? b : T(v - 1); });
  }
}

template <class T>
uint64_t float_atomic(uint8_t* p, uint32_t op, uint64_t braw) {
  T b = get<T>(braw);
  switch (op) {
    case flag::kAtomAdd: return cas_loop<T>(p, [&](T v) { return v + b; });
    case flag::kAtomMin: return cas_loop<T>(p, [&](T v) { return ptx_min(v, b); });
    case flag::kAtomMax: return cas_loop<T>(p, [&](T v) { return ptx_max(v, b); });
    default: return cas_loop<T>(p, [&](T) { return b; });  // exch
  }
}

template <bool kBF16>
uint64_t half_atomic(uint8_t* p, uint32_t op, uint64_t braw, uint64_t craw) {
  auto decode = [](uint16_t h) { return kBF16 ? bf16_to_double(h) : half_to_double(h); };
  auto encode = [](double v) { return kBF16 ? double_to_bf16(v) : double_to_half(v); };
  uint16_t b = static_cast<uint16_t>(braw), c = static_cast<uint16_t>(craw);
  switch (op) {
    case flag::kAtomAdd: return cas_loop<uint16_t>(p, [&](uint16_t v) { return encode(decode(v) + decode(b)); });
    case flag::kAtomMin: return cas_loop<uint16_t>(p, [&](uint16_t v) { return encode(ptx_min(decode(v), decode(b))); });
    case flag::kAtomMax: return cas_loop<uint16_t>(p, [&](uint16_t v) { return encode(ptx_max(decode(v), decode(b))); });
    case flag::kAtomCas: return cas_loop<uint16_t>(p, [&](uint16_t v) { return v == b ? c : v; });
    default: return cas_loop<uint16_t>(p, [&](uint16_t) { return b; });
  }
}

uint64_t atomic_rmw(uint8_t* p, uint32_t type, uint32_t op, uint64_t b, uint64_t c) {
  switch (type) {
    case kU16: return op == flag::kAtomCas ? half_atomic<false>(p, op, b, c) : int_atomic<uint16_t>(p, op, b, c);
    case kU32: return int_atomic<uint32_t>(p, op, b, c);
    case kS32: return int_atomic<int32_t>(p, op, b, c);
    case kU64: return int_atomic<uint64_t>(p, op, b, c);
    case kS64: return int_atomic<int64_t>(p, op, b, c);
    case kF32: return float_atomic<float>(p, op, b);
    case kF64: return float_atomic<double>(p, op, b);
    case kF16: return half_atomic<false>(p, op, b, c);
    default: return half_atomic<true>(p, op, b, c);  // kBF16
  }
}

// atom/red: op[0] = d (kNoSlot for red), op[1] = b, op[2] = c (cas), op[4] = base, imm = offset.
// Lanes apply their operations one after another, in lane order.
template <int S> EMU_HANDLER(h_atom) {
  const uint64_t* base = e.lanes(in.op[4]);
  const uint64_t* b = e.lanes(in.op[1]);
  const uint64_t* c = in.op[2] == kNoSlot ? nullptr : e.lanes(in.op[2]);
  uint64_t* d = in.op[0] == kNoSlot ? nullptr : e.lanes(in.op[0]);
  uint32_t op = (in.flags >> flag::kAtomOpShift) & 0xf;
  uint32_t type = (in.flags >> flag::kSrcTypeShift) & flag::kTypeMask;
  uint64_t addr[kWarpSize], bv[kWarpSize], cv[kWarpSize];
  for_lanes(m, [&](int l) {
    addr[l] = base[l] + static_cast<uint64_t>(in.imm);
    bv[l] = b[l];
    cv[l] = c ? c[l] : 0;
  });
  for_lanes(m, [&](int l) {
    uint8_t* p = resolve<S>(e, addr[l], in.size, l);
    uint64_t old = atomic_rmw(p, type, op, bv[l], cv[l]);
    if (d) d[l] = old;
  });
}

// cp.async [dst], [src], cp-size{, src-size | ignore-src}: op[4]/imm the shared
// destination, op[5]/imm2 the global source, size = cp-size; op[0] the bytes to
// read (kNoSlot: all), op[1] a predicate that skips the read. The copy is done at
// once (so commit/wait groups have nothing to wait for); bytes not read are zeroed.
EMU_HANDLER(h_cp_async) {
  const uint64_t* dst = e.lanes(in.op[4]);
  const uint64_t* src = e.lanes(in.op[5]);
  const uint64_t* src_size = in.op[0] == kNoSlot ? nullptr : e.lanes(in.op[0]);
  const uint64_t* ignore = in.op[1] == kNoSlot ? nullptr : e.lanes(in.op[1]);
  const uint32_t size = in.size;
  for_lanes(m, [&](int l) {
    uint8_t* d = e.shared(dst[l] + static_cast<uint64_t>(in.imm), size, l);
    uint32_t n = src_size ? std::min<uint32_t>(static_cast<uint32_t>(src_size[l]), size) : size;
    if (ignore && ignore[l]) n = 0;
    if (n) std::memcpy(d, e.global(src[l] + static_cast<uint64_t>(in.imm2), n, l), n);
    if (n < size) std::memset(d + n, 0, size - n);
  });
}

// ---------------------------------------------------------------- addresses

// cvta.<space> d, a (space address -> generic) and cvta.to.<space> (generic -> space).
template <uint64_t kWindow, bool kToGeneric> EMU_HANDLER(h_cvta) {
  unary<uint64_t>(e, in, m, [](uint64_t a) { return kToGeneric ? a + kWindow : a - kWindow; });
}

// isspacep.<space> p, a
template <int S> EMU_HANDLER(h_isspacep) {
  unary<uint64_t>(e, in, m, [](uint64_t a) -> uint64_t {
    bool shared = a - kSharedWindow < kWindowSize, local = a - kLocalWindow < kWindowSize,
         param = a - kParamWindow < kWindowSize;
    if (S == kShared) return shared;
    if (S == kLocal) return local;
    if (S == kParam) return param;
    return !shared && !local && !param;
  });
}

// Address of a local symbol of the current frame (imm = its offset in the frame),
// as a local-space address or (kGeneric) a generic one.
template <bool kGenericAddress> EMU_HANDLER(h_localaddr) {
  uint64_t* d = e.lanes(in.op[0]);
  uint64_t v = e.frame_local_base() + static_cast<uint64_t>(in.imm) + (kGenericAddress ? kLocalWindow : 0);
  for_lanes(m, [&](int l) { d[l] = v; });
}

EMU_HANDLER(h_fence) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMU_HANDLER(h_nop) {}

// %clock, %clock64 (a nanosecond counter standing in for SM cycles) and %globaltimer.
EMU_HANDLER(h_clock) {
  uint32_t kind = (in.flags >> flag::kClockShift) & 0x3;
  uint64_t v;
  if (kind == flag::kGlobalTimer) {
    v = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count());
  } else {
    v = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch()).count());
    if (kind == flag::kClock32) v &= 0xffffffffu;
  }
  uint64_t* d = e.lanes(in.op[0]);
  for_lanes(m, [&](int l) { d[l] = v; });
}

#define SPACE_ENTRIES(key, H)                                                                   \
  EMU_ENTRY(key ".global", H<kGlobal>), EMU_ENTRY(key ".shared", H<kShared>),                   \
      EMU_ENTRY(key ".local", H<kLocal>), EMU_ENTRY(key ".frame", H<kFrame>),                   \
      EMU_ENTRY(key ".param", H<kParam>), EMU_ENTRY(key ".generic", H<kGeneric>)

const HandlerRegistrar registrar{
    SPACE_ENTRIES("ld", h_ld), SPACE_ENTRIES("st", h_st),
    EMU_ENTRY("atom.global", h_atom<kGlobal>), EMU_ENTRY("atom.shared", h_atom<kShared>),
    EMU_ENTRY("atom.generic", h_atom<kGeneric>),
    EMU_ENTRY("cvta.shared", (h_cvta<kSharedWindow, true>)), EMU_ENTRY("cvta.to.shared", (h_cvta<kSharedWindow, false>)),
    EMU_ENTRY("cvta.local", (h_cvta<kLocalWindow, true>)), EMU_ENTRY("cvta.to.local", (h_cvta<kLocalWindow, false>)),
    EMU_ENTRY("cvta.param", (h_cvta<kParamWindow, true>)), EMU_ENTRY("cvta.to.param", (h_cvta<kParamWindow, false>)),
    EMU_ENTRY("isspacep.global", h_isspacep<kGlobal>), EMU_ENTRY("isspacep.shared", h_isspacep<kShared>),
    EMU_ENTRY("isspacep.local", h_isspacep<kLocal>), EMU_ENTRY("isspacep.param", h_isspacep<kParam>),
    EMU_ENTRY("localaddr", h_localaddr<false>), EMU_ENTRY("localaddr.generic", h_localaddr<true>),
    EMU_ENTRY("cp.async", h_cp_async), EMU_ENTRY("fence", h_fence), EMU_ENTRY("nop", h_nop), EMU_ENTRY("clock", h_clock),
};

}  // namespace

uint64_t reduce_in_memory(uint8_t* p, uint32_t type, uint32_t op, uint64_t value) {
  return atomic_rmw(p, type, op, value, 0);
}

}  // namespace tally::emu
