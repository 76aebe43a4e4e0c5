// Lane groups of a warp: which lanes run next (the reconvergence rule in
// scheduler.cpp), the instruction loop, branches, calls, returns and exits.
#include <cstring>

#include "emulator/runner.h"

namespace tally::emu::detail {

void Runner::set_frame(Exec& e, Warp& w) {
  e.depth = w.gdepth;
  e.bank[kBankFrame] = w.regs.data() + static_cast<size_t>(w.gdepth) * prog_.frame_registers * kWarpSize;
}

void Runner::flush_group(Warp& w) {
  for_lanes(w.group, [&](int l) {
    w.pc[l] = w.gpc;
    w.depth[l] = static_cast<uint16_t>(w.gdepth);
  });
  w.group = 0;
}

// Picks the lanes to run next (the reconvergence rule in scheduler.cpp).
bool Runner::select_group(Warp& w) {
  flush_group(w);
  if (!w.runnable && w.at_warpsync) wake_warpsync(w);
  LaneMask r = w.runnable;
  if (!r) return false;
  uint64_t best = ~0ull;
  for_lanes(r, [&](int l) {
    uint64_t k = key_of(w.depth[l], w.pc[l]);
    if (k < best) best = k;
  });
  LaneMask g = 0;
  uint64_t other = ~0ull;
  for_lanes(r, [&](int l) {
    uint64_t k = key_of(w.depth[l], w.pc[l]);
    if (k == best) {
      g |= 1u << l;
    } else if (k < other) {
      other = k;
    }
  });
  w.group = g;
  int l0 = first_lane(g);
  w.gpc = w.pc[l0];
  w.gdepth = w.depth[l0];
  w.other_min = other;
  return true;
}

// Lanes of `exec` go to `taken`, the rest of the group to `not_taken`.
void Runner::split(Warp& w, LaneMask exec, int32_t taken, int32_t not_taken) {
  for_lanes(w.group, [&](int l) {
    w.pc[l] = (exec >> l) & 1 ? taken : not_taken;
    w.depth[l] = static_cast<uint16_t>(w.gdepth);
  });
  w.group = 0;
}

void Runner::ensure_depth(Warp& w, uint32_t frames) {
  if (w.depth_capacity >= frames) return;
  uint32_t cap = std::max(frames, 2 * w.depth_capacity);
  w.regs.resize(static_cast<size_t>(cap) * prog_.frame_registers * kWarpSize, 0);
  w.return_pc.resize(static_cast<size_t>(cap) * kWarpSize, 0);
  uint64_t stride = static_cast<uint64_t>(cap) * prog_.local_frame_bytes;
  if (stride != w.local_stride) {
    std::vector<uint8_t> local(stride * kWarpSize, 0);
    for (int l = 0; l < kWarpSize; ++l) {
      std::memcpy(local.data() + l * stride, w.local.data() + l * w.local_stride, w.local_stride);
    }
    w.local.swap(local);
    w.local_stride = stride;
  }
  w.depth_capacity = cap;
}

// Runs up to max_steps instructions of warp w; returns how many ran.
uint64_t Runner::run_warp(Warp& w, uint64_t max_steps) {
  Exec e;
  e.warp = &w;
  e.launch = &L_;
  e.bank[kBankWarp] = w.fixed.data();
  e.bank[kBankConst] = const_cast<uint64_t*>(prog_.const_bank.data());
  if (!select_group(w)) return 0;
  set_frame(e, w);
  const Instr* code = prog_.code.data();
  uint64_t steps = 0;
  try {
    while (steps < max_steps) {
      const Instr& in = code[w.gpc];
      LaneMask exec = w.group;
      if (in.guard != kNoSlot) {
        LaneMask p = predicate_mask(e.lanes(in.guard));
        exec &= in.guard_negated ? ~p : p;
      }
      ++steps;
      L_.thread_instructions += popcount(w.group);
      bool regroup = false;
      switch (in.control) {
        case Control::kNone:
          if (exec) in.fn(e, in, exec);
          ++w.gpc;
          break;
        case Control::kBranch:
          if (exec == w.group) {
            w.gpc = in.target;
          } else if (exec == 0) {
            ++w.gpc;
          } else {
            split(w, exec, in.target, w.gpc + 1);
            regroup = true;
          }
          break;
        case Control::kBranchIndexed:
          regroup = branch_indexed(e, w, in, exec);
          break;
        case Control::kCall:
          regroup = call(e, w, in, exec);
          break;
        case Control::kReturn:
          regroup = w.gdepth == 0 ? exit_lanes(w, exec) : return_lanes(w, exec);
          break;
        case Control::kExit:
          regroup = exit_lanes(w, exec);
          break;
        case Control::kBarrier:
          regroup = barrier(e, w, in, exec);
          break;
        case Control::kClusterBarrier:
          regroup = cluster_barrier(e, w, in, exec);
          break;
        case Control::kWarpSync:
          regroup = warp_sync(e, w, in, exec);
          break;
        case Control::kWait:
          if (exec) in.fn(e, in, exec);
          ++w.gpc;
          if (e.yield) return steps;  // resumes here (select_group) at the warp's next turn
          break;
        case Control::kTrap:
          if (exec) fault(kLaunchFailed, "trap instruction executed", first_lane(exec));
          ++w.gpc;
          break;
      }
      if (regroup || key_of(w.gdepth, w.gpc) >= w.other_min) {
        if (!select_group(w)) return steps;
      }
      set_frame(e, w);
    }
  } catch (Fault& f) {
    int lane = f.lane >= 0 ? f.lane : first_lane(w.group ? w.group : 1u);
    throw LaunchAbort{f.code, f.message + " by " + thread_name(w, lane) + " of " + block_name() + " at " +
                                  where(w.gpc)};
  }
  return steps;
}

// Moves each lane of `exec` to its own target (the rest of the group to pc + 1);
// true when the group had to be split.
bool Runner::jump_lanes(Warp& w, LaneMask exec, const int32_t* targets, uint32_t target_depth) {
  int32_t first = targets[first_lane(exec)];
  bool same = true;
  for_lanes(exec, [&](int l) { same &= targets[l] == first; });
  if (same && exec == w.group) {
    w.gpc = first;
    w.gdepth = target_depth;
    return false;
  }
  for_lanes(w.group, [&](int l) {
    bool jumps = (exec >> l) & 1;
    w.pc[l] = jumps ? targets[l] : w.gpc + 1;
    w.depth[l] = static_cast<uint16_t>(jumps ? target_depth : w.gdepth);
  });
  w.group = 0;
  return true;
}

bool Runner::branch_indexed(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
  if (!exec) {
    ++w.gpc;
    return false;
  }
  const auto& table = prog_.jump_tables[static_cast<size_t>(in.imm)];
  const uint64_t* index = e.lanes(in.op[0]);
  int32_t targets[kWarpSize];
  for_lanes(exec, [&](int l) {
    uint32_t i = static_cast<uint32_t>(index[l]);
    if (i >= table.size()) {
      fault(kLaunchFailed, "brx.idx index " + std::to_string(i) + " is past its " + std::to_string(table.size()) +
                               "-entry target list", l);
    }
    targets[l] = table[i];
  });
  return jump_lanes(w, exec, targets, w.gdepth);
}

bool Runner::call(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
  if (!exec) {
    ++w.gpc;
    return false;
  }
  if (w.gdepth + 1 >= prog_.max_call_depth) {
    fault(kLaunchFailed, "call stack overflow (more than " + std::to_string(prog_.max_call_depth) +
                             " nested calls)", first_lane(exec));
  }
  int32_t targets[kWarpSize];
  if (in.op[0] == kNoSlot) {
    for_lanes(exec, [&](int l) { targets[l] = in.target; });
  } else {  // through a function pointer
    const uint64_t* fn = e.lanes(in.op[0]);
    for_lanes(exec, [&](int l) {
      uint64_t index = fn[l] - kCodeWindow;
      int32_t pc = index < prog_.function_table.size() ? prog_.function_table[index] : -1;
      if (pc < 0) fault(kLaunchFailed, "call through an invalid function pointer " + hex(fn[l]), l);
      targets[l] = pc;
    });
  }
  ensure_depth(w, w.gdepth + 2);
  uint32_t F = prog_.local_frame_bytes;
  const auto& copies = prog_.copies[static_cast<size_t>(in.imm)];
  for_lanes(exec, [&](int l) {
    uint8_t* base = w.local.data() + l * w.local_stride;
    for (const FrameCopy& c : copies) {
      std::memcpy(base + (w.gdepth + 1) * F + c.to, base + w.gdepth * F + c.from, c.size);
    }
    w.return_pc[w.gdepth * kWarpSize + l] = w.gpc + 1;
  });
  return jump_lanes(w, exec, targets, w.gdepth + 1);
}

bool Runner::return_lanes(Warp& w, LaneMask exec) {
  if (!exec) {
    ++w.gpc;
    return false;
  }
  return jump_lanes(w, exec, w.return_pc.data() + (w.gdepth - 1) * kWarpSize, w.gdepth - 1);
}

bool Runner::exit_lanes(Warp& w, LaneMask exec) {
  if (!exec) {
    ++w.gpc;
    return false;
  }
  w.live &= ~exec;
  w.runnable &= ~exec;
  L_.block.live_threads -= popcount(exec);
  w.group &= ~exec;
  // The cluster barrier waits for every live thread; an exited one no longer counts,
  // whether it arrived or not.
  cluster_arrived_ -= popcount(exec & w.cluster_arrived);
  w.cluster_arrived &= ~exec;
  ++w.gpc;
  // Fewer live threads: a count-less barrier may now be complete.
  flush_group(w);
  for (uint32_t id = 0; id < 16; ++id) check_barrier(id);
  check_cluster_barrier();
  return true;
}

}  // namespace tally::emu::detail
