// Arrive-wait barriers (mbarrier, sm_80+; the transaction counts of sm_90): a
// 64-bit object in shared memory (or, through a generic address, anywhere) that
// counts arrivals and, for asynchronous copies, bytes still to arrive.
//
// The object's bits are the hardware's secret (PTX calls it opaque); the
// emulator's own layout:
//   bits  0-20  pending arrivals of the current phase
//   bits 21-41  expected arrivals per phase (init's count; arrive_drop lowers it)
//   bits 42-62  transaction count, 21-bit two's complement (expect_tx adds,
//               complete_tx subtracts: a copy may complete before it is expected)
//   bit  63     the current phase's parity
// A phase completes when both its pending arrivals and its transaction count
// reach 0: the parity flips and pending arrivals start again at the expected count.
// The state an arrive returns is the object as it was before the arrive, so
// test_wait/try_wait with a state ask "has the phase it was taken in completed?"
// (its parity differs from the current one) and pending_count reads its count.
//
// Every update is a compare-and-swap of the whole word, so blocks of a cluster
// (each on its own worker thread) may arrive on one another's barriers.
// try_wait is test_wait that, when the phase is not complete, ends the warp's
// turn (Control::kWait) so the warps it waits for run; nanosleep also does.
//
// Operands: op[4] the address base register, imm its offset; op[0] the
// destination (state, predicate or count; kNoSlot for `_`); op[1] the count,
// transaction bytes, or the state/parity waited on.
#include "emulator/mbarrier.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

constexpr uint64_t kCountMask = (1ull << 21) - 1;
constexpr int kExpectedShift = 21;
constexpr int kTxShift = 42;
constexpr uint64_t kPhaseBit = 1ull << 63;
constexpr int64_t kMaxCount = (1 << 20) - 1;  // what init and arrive may ask (PTX: 2^20 - 1)

struct ArriveWait {
  uint64_t pending, expected;
  int64_t tx;
  bool phase;

  static ArriveWait of(uint64_t word) {
    int64_t tx = static_cast<int64_t>((word >> kTxShift) & kCountMask);
    if (tx & (1ll << 20)) tx -= (1ll << 21);
    return {word & kCountMask, (word >> kExpectedShift) & kCountMask, tx, (word & kPhaseBit) != 0};
  }
  uint64_t word() const {
    return (pending & kCountMask) | ((expected & kCountMask) << kExpectedShift) |
           ((static_cast<uint64_t>(tx) & kCountMask) << kTxShift) | (phase ? kPhaseBit : 0);
  }
  void complete_if_done() {
    if (pending == 0 && tx == 0) {
      phase = !phase;
      pending = expected;
    }
  }
};

enum Space { kShared, kGeneric };

template <int S>
uint64_t* object(Exec& e, const Instr& in, int lane) {
  uint64_t addr = e.lanes(in.op[4])[lane] + static_cast<uint64_t>(in.imm);
  uint8_t* p = S == kShared ? e.shared(addr, 8, lane) : e.generic(addr, 8, lane);
  return reinterpret_cast<uint64_t*>(p);
}

// Applies `change` to the barrier at `p` atomically; returns the word before.
template <class F>
uint64_t update(uint64_t* p, F&& change) {
  uint64_t old = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  for (;;) {
    ArriveWait b = ArriveWait::of(old);
    change(b);
    if (__atomic_compare_exchange_n(p, &old, b.word(), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return old;
  }
}

int64_t count_operand(Exec& e, uint32_t slot, int lane, const char* what) {
  int64_t v = static_cast<int64_t>(static_cast<uint32_t>(e.lanes(slot)[lane]));
  if (v < 0 || v > kMaxCount) {
    fault(kLaunchFailed, std::string("mbarrier ") + what + " " + std::to_string(v) + " is out of range (0-" +
                             std::to_string(kMaxCount) + ")", lane);
  }
  return v;
}

// mbarrier.init [a], count
template <int S> EMU_HANDLER(h_init) {
  for_lanes(m, [&](int l) {
    int64_t count = count_operand(e, in.op[1], l, "count");
    if (count == 0) fault(kLaunchFailed, "mbarrier.init with a count of 0", l);
    ArriveWait b{static_cast<uint64_t>(count), static_cast<uint64_t>(count), 0, false};
    __atomic_store_n(object<S>(e, in, l), b.word(), __ATOMIC_RELEASE);
  });
}

// mbarrier.inval [a]: the object becomes ordinary memory again.
template <int S> EMU_HANDLER(h_inval) {
  for_lanes(m, [&](int l) { __atomic_store_n(object<S>(e, in, l), uint64_t{0}, __ATOMIC_RELEASE); });
}

// mbarrier.arrive{_drop}{.expect_tx} state, [a]{, count | tx}: op[1] the arrival
// count (kNoSlot: 1), op[2] the transaction bytes expected first (kNoSlot: none).
template <int S, bool kDrop> EMU_HANDLER(h_arrive) {
  uint64_t* d = in.op[0] == kNoSlot ? nullptr : e.lanes(in.op[0]);
  for_lanes(m, [&](int l) {
    int64_t count = in.op[1] == kNoSlot ? 1 : count_operand(e, in.op[1], l, "arrival count");
    int64_t tx = in.op[2] == kNoSlot ? 0 : count_operand(e, in.op[2], l, "transaction count");
    bool underflow = false;
    uint64_t before = update(object<S>(e, in, l), [&](ArriveWait& b) {
      underflow = static_cast<int64_t>(b.pending) < count || (kDrop && static_cast<int64_t>(b.expected) < count);
      if (underflow) return;
      b.tx += tx;
      b.pending -= static_cast<uint64_t>(count);
      if (kDrop) b.expected -= static_cast<uint64_t>(count);
      b.complete_if_done();
    });
    if (underflow) {
      fault(kLaunchFailed, "mbarrier arrive of " + std::to_string(count) + " on a barrier with " +
                               std::to_string(ArriveWait::of(before).pending) +
                               " pending arrivals (not initialized, or more arrivals than its count)", l);
    }
    if (d) d[l] = before;
  });
}

// mbarrier.expect_tx [a], tx (kSign +1) and mbarrier.complete_tx [a], tx (-1).
template <int S, int kSign> EMU_HANDLER(h_tx) {
  for_lanes(m, [&](int l) {
    int64_t tx = count_operand(e, in.op[1], l, "transaction count");
    update(object<S>(e, in, l), [&](ArriveWait& b) {
      b.tx += kSign * tx;
      b.complete_if_done();   // expect_tx may meet bytes that landed first (the count back at 0)
    });
  });
}

// mbarrier.test_wait / try_wait{.parity} p, [a], state | parity. A state's phase
// (or the given parity) has completed when the current parity differs from it.
template <int S, bool kParity, bool kTry> EMU_HANDLER(h_wait) {
  uint64_t* d = in.op[0] == kNoSlot ? nullptr : e.lanes(in.op[0]);
  const uint64_t* waited = e.lanes(in.op[1]);
  bool all_done = true;
  for_lanes(m, [&](int l) {
    bool current = (__atomic_load_n(object<S>(e, in, l), __ATOMIC_ACQUIRE) & kPhaseBit) != 0;
    bool phase = kParity ? (waited[l] & 1) != 0 : (waited[l] & kPhaseBit) != 0;
    bool done = current != phase;
    all_done &= done;
    if (d) d[l] = done;
  });
  if (kTry && !all_done) e.yield = true;
}

// mbarrier.pending_count.b64 count, state
EMU_HANDLER(h_pending_count) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* state = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) { d[l] = state[l] & kCountMask; });
}

// nanosleep t: the warp gives up its turn (what a GPU's scheduler does with it).
EMU_HANDLER(h_nanosleep) { e.yield = true; }

#define WAIT(key, fn) {key, HandlerInfo{fn, Control::kWait}}
#define BOTH_SPACES(key, H)                                                                          \
  EMU_ENTRY("mbarrier." key ".shared", (H<kShared>)), EMU_ENTRY("mbarrier." key ".generic", (H<kGeneric>))

const HandlerRegistrar registrar{
    BOTH_SPACES("init", h_init),
    BOTH_SPACES("inval", h_inval),
    EMU_ENTRY("mbarrier.arrive.shared", (h_arrive<kShared, false>)),
    EMU_ENTRY("mbarrier.arrive.generic", (h_arrive<kGeneric, false>)),
    EMU_ENTRY("mbarrier.arrive_drop.shared", (h_arrive<kShared, true>)),
    EMU_ENTRY("mbarrier.arrive_drop.generic", (h_arrive<kGeneric, true>)),
    EMU_ENTRY("mbarrier.expect_tx.shared", (h_tx<kShared, 1>)),
    EMU_ENTRY("mbarrier.expect_tx.generic", (h_tx<kGeneric, 1>)),
    EMU_ENTRY("mbarrier.complete_tx.shared", (h_tx<kShared, -1>)),
    EMU_ENTRY("mbarrier.complete_tx.generic", (h_tx<kGeneric, -1>)),
    EMU_ENTRY("mbarrier.test_wait.shared", (h_wait<kShared, false, false>)),
    EMU_ENTRY("mbarrier.test_wait.generic", (h_wait<kGeneric, false, false>)),
    EMU_ENTRY("mbarrier.test_wait.parity.shared", (h_wait<kShared, true, false>)),
    EMU_ENTRY("mbarrier.test_wait.parity.generic", (h_wait<kGeneric, true, false>)),
    WAIT("mbarrier.try_wait.shared", (h_wait<kShared, false, true>)),
    WAIT("mbarrier.try_wait.generic", (h_wait<kGeneric, false, true>)),
    WAIT("mbarrier.try_wait.parity.shared", (h_wait<kShared, true, true>)),
    WAIT("mbarrier.try_wait.parity.generic", (h_wait<kGeneric, true, true>)),
    EMU_ENTRY("mbarrier.pending_count", h_pending_count),
    WAIT("nanosleep", h_nanosleep),
};

}  // namespace

void mbarrier_complete_tx(Exec& e, uint64_t shared_address, int64_t bytes, int lane) {
  auto* p = reinterpret_cast<uint64_t*>(e.shared(shared_address, 8, lane));
  update(p, [&](ArriveWait& b) {
    b.tx -= bytes;
    b.complete_if_done();
  });
}

}  // namespace tally::emu
