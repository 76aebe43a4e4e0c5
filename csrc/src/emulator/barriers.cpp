// Block barriers (bar/barrier .sync/.arrive/.red: thread counts, exited threads,
// divergence checks) and warp-synchronous instructions (waiting for the
// membermask's live lanes).
#include <map>

#include "emulator/runner.h"

namespace tally::emu::detail {

bool Runner::barrier(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
  if (!exec) {
    ++w.gpc;
    return false;
  }
  int lead = first_lane(exec);
  uint32_t id = static_cast<uint32_t>(e.lanes(in.op[0])[lead]);
  if (id >= 16) fault(kLaunchFailed, "barrier id " + std::to_string(id) + " is out of range (0-15)", lead);
  uint32_t count = in.op[1] == kNoSlot ? 0 : static_cast<uint32_t>(e.lanes(in.op[1])[lead]);
  if (in.op[1] != kNoSlot && (count == 0 || count % kWarpSize != 0)) {
    fault(kLaunchFailed, "barrier thread count " + std::to_string(count) + " is not a positive multiple of 32", lead);
  }
  Barrier& bar = L_.block.barriers[id];
  if (bar.arrived && bar.expected != count) {
    fault(kLaunchFailed, "barrier " + std::to_string(id) + " used with thread counts " +
                             std::to_string(bar.expected) + " and " + std::to_string(count) + " at once", lead);
  }
  bar.expected = count;
  bar.arrived += popcount(exec);
  uint32_t kind = (in.flags >> flag::kBarShift) & 0x7;
  if (kind == flag::kBarArrive) {
    ++w.gpc;
    flush_group(w);
    check_barrier(id);
    return true;
  }
  if (kind != flag::kBarSync) {
    const uint64_t* p = e.lanes(in.op[3]);
    bool negate = in.flags & flag::kNegateC;
    for_lanes(exec, [&](int l) {
      bool v = (p[l] != 0) != negate;
      bar.popc += v;
      bar.all &= v;
      bar.any |= v;
    });
  }
  for_lanes(w.group, [&](int l) {
    bool waits = (exec >> l) & 1;
    w.pc[l] = waits ? w.gpc : w.gpc + 1;
    w.depth[l] = static_cast<uint16_t>(w.gdepth);
    if (waits) w.barrier_id[l] = static_cast<uint8_t>(id);
  });
  w.group = 0;
  w.at_barrier |= exec;
  w.runnable &= ~exec;
  check_barrier(id);
  return true;
}

// Releases barrier `id` if every thread it waits for has arrived.
bool Runner::check_barrier(uint32_t id) {
  Block& B = L_.block;
  Barrier& bar = B.barriers[id];
  if (bar.arrived == 0) return false;
  uint32_t expected = bar.expected ? bar.expected : B.live_threads;
  if (bar.arrived < expected) return false;
  if (bar.expected == 0) check_same_instruction(id);
  for (Warp& w : L_.warps) {
    LaneMask waiting = 0;
    for_lanes(w.at_barrier, [&](int l) {
      if (w.barrier_id[l] == id) waiting |= 1u << l;
    });
    for_lanes(waiting, [&](int l) {
      const Instr& in = prog_.code[w.pc[l]];
      uint32_t kind = (in.flags >> flag::kBarShift) & 0x7;
      if (kind >= flag::kBarRedPopc && in.op[2] != kNoSlot) {
        uint64_t value = kind == flag::kBarRedPopc ? bar.popc : kind == flag::kBarRedAnd ? bar.all : bar.any;
        write_register(w, l, in.op[2], value);
      }
      ++w.pc[l];
    });
    w.at_barrier &= ~waiting;
    w.runnable |= waiting;
  }
  bar = Barrier{};
  return true;
}

// A count-less barrier whose waiters sit at different instructions: on a GPU
// the block would mix different synchronization points (or hang).
void Runner::check_same_instruction(uint32_t id) {
  std::map<int32_t, std::vector<uint32_t>> by_pc;
  for (const Warp& w : L_.warps) {
    for_lanes(w.at_barrier, [&](int l) {
      if (w.barrier_id[l] == id) by_pc[w.pc[l]].push_back(w.index * kWarpSize + l);
    });
  }
  if (by_pc.size() <= 1) return;
  std::string msg = "divergent barrier: " + block_name() + ": ";
  bool first = true;
  for (auto& [pc, ids] : by_pc) {
    if (!first) msg += "; ";
    first = false;
    msg += "threads " + thread_ranges(ids) + " wait at " + where(pc);
  }
  throw LaunchAbort{kLaunchFailed, msg};
}

void Runner::write_register(Warp& w, int lane, uint32_t slot, uint64_t value) {
  if ((slot >> kBankShift) != kBankFrame) return;
  size_t frame = static_cast<size_t>(w.depth[lane]) * prog_.frame_registers * kWarpSize;
  w.regs[frame + static_cast<size_t>(slot & kIndexMask) * kWarpSize + lane] = value;
}

uint64_t Runner::read_register(const Warp& w, int lane, uint32_t slot) const {
  uint32_t bank = slot >> kBankShift;
  size_t row = static_cast<size_t>(slot & kIndexMask) * kWarpSize + lane;
  if (bank == kBankConst) return prog_.const_bank[row];
  if (bank == kBankWarp) return w.fixed[row];
  return w.regs[static_cast<size_t>(w.depth[lane]) * prog_.frame_registers * kWarpSize + row];
}

LaneMask Runner::member_mask(const Instr& in, uint64_t value) const {
  return in.op[kMemberMaskOperand] == kNoSlot ? kFullMask : static_cast<LaneMask>(value);
}

bool Runner::warp_sync(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
  LaneMask here = 0;
  for_lanes(w.at_warpsync, [&](int l) {
    if (w.pc[l] == w.gpc && w.depth[l] == w.gdepth) here |= 1u << l;
  });
  LaneMask arrived = exec | here;
  if (!arrived) {
    ++w.gpc;
    return false;
  }
  uint64_t mm = in.op[kMemberMaskOperand] == kNoSlot ? kFullMask
                                                      : e.lanes(in.op[kMemberMaskOperand])[first_lane(arrived)];
  LaneMask required = member_mask(in, mm) & w.live;
  if ((required & ~arrived) == 0) {
    w.at_warpsync &= ~here;
    w.runnable |= here;
    if (in.fn) in.fn(e, in, arrived);
    w.group |= here;
    ++w.gpc;
    return false;
  }
  for_lanes(w.group, [&](int l) {
    w.pc[l] = (exec >> l) & 1 ? w.gpc : w.gpc + 1;
    w.depth[l] = static_cast<uint16_t>(w.gdepth);
  });
  w.group = 0;
  w.at_warpsync |= exec;
  w.runnable &= ~exec;
  return true;
}

// Waiters whose missing partners have exited may go on.
bool Runner::wake_warpsync(Warp& w) {
  bool woke = false;
  LaneMask pending = w.at_warpsync;
  while (pending) {
    int l0 = first_lane(pending);
    LaneMask same = 0;
    for_lanes(pending, [&](int l) {
      if (w.pc[l] == w.pc[l0] && w.depth[l] == w.depth[l0]) same |= 1u << l;
    });
    pending &= ~same;
    const Instr& in = prog_.code[w.pc[l0]];
    uint64_t mm = in.op[kMemberMaskOperand] == kNoSlot ? kFullMask : read_register(w, l0, in.op[kMemberMaskOperand]);
    LaneMask required = member_mask(in, mm) & w.live;
    if ((required & ~same) == 0) {
      w.at_warpsync &= ~same;
      w.runnable |= same;
      woke = true;
    }
  }
  return woke;
}

}  // namespace tally::emu::detail
