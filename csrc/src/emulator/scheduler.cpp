// The hot loop: runs a launch block by block, each block's warps round-robin,
// each warp as groups of lanes that share a pc.
//
// Reconvergence rule: a warp always executes the runnable lanes with the
// smallest key (deepest call frame first, then lowest pc); lanes with another
// key wait. nvcc lays structured control flow out so that the code of a
// construct precedes its join point (if/else arms before the join label, a loop
// body before its exit), so the lanes at a lower pc are exactly those that still
// have to reach the join point: running them first brings every lane to the join
// point together, i.e. the warp reconverges at the immediate post-dominator.
// Calls go deepest-first, so lanes inside a callee finish it and rejoin their
// caller at the return address. Warp-synchronous instructions (shfl.sync,
// vote.sync, ...) do not rely on this: lanes wait there until every live lane of
// the membermask has arrived, so they are correct for any layout.
//
// Barriers count threads: a count-less barrier completes when every live
// (not exited) thread of the block waits at it, so exited threads and warps do
// not count, as on the hardware. If the live threads of a block all wait and no
// barrier can complete, or a count-less barrier would release threads waiting
// at different instructions, the launch fails with a message naming them.
#include <chrono>
#include <cstdio>
#include <map>

#include "emulator/exec.h"

namespace tally::emu {

namespace {

constexpr uint32_t kDepthKeyBase = 0xffff;
constexpr uint64_t kWarpSlice = 1 << 14;  // steps a warp runs before the next warp's turn

inline uint64_t key_of(uint32_t depth, int32_t pc) {
  return (static_cast<uint64_t>(kDepthKeyBase - depth) << 32) | static_cast<uint32_t>(pc);
}

inline int popcount(LaneMask m) { return __builtin_popcount(m); }
inline int first_lane(LaneMask m) { return __builtin_ctz(m); }

// A launch failure with its context already in the message.
struct LaunchAbort {
  int code;
  std::string message;
};

std::string thread_ranges(const std::vector<uint32_t>& ids) {
  std::string out;
  size_t i = 0;
  int shown = 0;
  while (i < ids.size()) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (shown == 8) {
      out += ", ...";
      break;
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    ++shown;
    i = j + 1;
  }
  return out;
}

class Runner {
 public:
  explicit Runner(Launch& L) : L_(L), prog_(L.prog) {}

  void run() {
    const LaunchConfig& c = L_.cfg;
    L_.threads_per_block = c.block[0] * c.block[1] * c.block[2];
    uint32_t nwarps = (L_.threads_per_block + kWarpSize - 1) / kWarpSize;
    L_.warps.resize(nwarps);
    for (uint32_t w = 0; w < nwarps; ++w) allocate_warp(L_.warps[w], w);
    start_ = std::chrono::steady_clock::now();
    uint64_t blocks = static_cast<uint64_t>(c.grid[0]) * c.grid[1] * c.grid[2];
    for (uint64_t b = 0; b < blocks; ++b) run_block(b);
  }

 private:
  Launch& L_;
  const Program& prog_;
  std::chrono::steady_clock::time_point start_;

  // ------------------------------------------------------------ setup

  void allocate_warp(Warp& w, uint32_t index) {
    w.index = index;
    w.depth_capacity = 1;
    w.regs.assign(static_cast<size_t>(prog_.frame_registers) * kWarpSize, 0);
    w.fixed.assign(static_cast<size_t>(prog_.warp_slots) * kWarpSize, 0);
    w.local_stride = prog_.local_frame_bytes;
    w.local.assign(w.local_stride * kWarpSize, 0);
    w.return_pc.assign(kWarpSize, 0);
  }

  void start_block(uint64_t linear) {
    const LaunchConfig& c = L_.cfg;
    Block& B = L_.block;
    B.linear = linear;
    B.ctaid[0] = static_cast<uint32_t>(linear % c.grid[0]);
    B.ctaid[1] = static_cast<uint32_t>((linear / c.grid[0]) % c.grid[1]);
    B.ctaid[2] = static_cast<uint32_t>(linear / (static_cast<uint64_t>(c.grid[0]) * c.grid[1]));
    B.shared.assign(static_cast<size_t>(prog_.static_shared_bytes) + c.dynamic_shared, 0);
    B.live_threads = L_.threads_per_block;
    for (auto& bar : B.barriers) bar = Barrier{};
    for (Warp& w : L_.warps) {
      uint32_t first = w.index * kWarpSize;
      uint32_t count = std::min<uint32_t>(kWarpSize, L_.threads_per_block - first);
      w.exists = count == kWarpSize ? kFullMask : ((1u << count) - 1);
      w.live = w.runnable = w.exists;
      w.at_barrier = w.at_warpsync = 0;
      for (int l = 0; l < kWarpSize; ++l) {
        w.pc[l] = prog_.entry_pc;
        w.depth[l] = 0;
      }
      w.group = 0;
      w.other_min = ~0ull;
      for (auto& [slot, special] : prog_.specials) {
        uint64_t* row = w.fixed.data() + static_cast<size_t>(slot & kIndexMask) * kWarpSize;
        for (int l = 0; l < kWarpSize; ++l) row[l] = special_value(special, w, l);
      }
    }
  }

  uint64_t special_value(Special s, const Warp& w, int lane) const {
    const LaunchConfig& c = L_.cfg;
    const Block& B = L_.block;
    uint32_t t = w.index * kWarpSize + lane;
    uint64_t lane_bit = 1ull << lane;
    switch (s) {
      case kTidX: return t % c.block[0];
      case kTidY: return (t / c.block[0]) % c.block[1];
      case kTidZ: return t / (c.block[0] * c.block[1]);
      case kNtidX: return c.block[0];
      case kNtidY: return c.block[1];
      case kNtidZ: return c.block[2];
      case kCtaidX: return B.ctaid[0];
      case kCtaidY: return B.ctaid[1];
      case kCtaidZ: return B.ctaid[2];
      case kNctaidX: return c.grid[0];
      case kNctaidY: return c.grid[1];
      case kNctaidZ: return c.grid[2];
      case kLaneId: return static_cast<uint64_t>(lane);
      case kWarpId: return w.index;
      case kNWarpId: return 64;
      case kSmId: return B.linear % (c.sm_count ? c.sm_count : 1);
      case kNSmId: return c.sm_count;
      case kGridId: return 1;
      case kLanemaskEq: return lane_bit;
      case kLanemaskLt: return lane_bit - 1;
      case kLanemaskLe: return ((lane_bit << 1) - 1) & 0xffffffffull;
      case kLanemaskGt: return ~((lane_bit << 1) - 1) & 0xffffffffull;
      case kLanemaskGe: return ~(lane_bit - 1) & 0xffffffffull;
      case kDynamicSmemSize: return c.dynamic_shared;
      case kTotalSmemSize: return prog_.static_shared_bytes + c.dynamic_shared;
      default: return 0;
    }
  }

  // ------------------------------------------------------------ blocks

  void run_block(uint64_t linear) {
    start_block(linear);
    Block& B = L_.block;
    for (;;) {
      bool progressed = false;
      for (Warp& w : L_.warps) {
        if (!w.live) continue;
        uint64_t steps = run_warp(w, kWarpSlice);
        if (steps) progressed = true;
        L_.warp_steps += steps;
      }
      if (B.live_threads == 0) return;
      check_limits();
      if (!progressed && !unstick()) deadlock();
    }
  }

  void check_limits() {
    const LaunchConfig& c = L_.cfg;
    if (c.max_warp_steps && L_.warp_steps > c.max_warp_steps) {
      throw LaunchAbort{kLaunchTimeout, "kernel exceeded the emulator's instruction limit (" +
                                            std::to_string(c.max_warp_steps) + " warp instructions) in " +
                                            block_name() + " at " + where_running()};
    }
    if (c.cancel && c.cancel->load(std::memory_order_relaxed)) {
      throw LaunchAbort{kLaunchFailed, "launch cancelled (the device is shutting down)"};
    }
    if (c.timeout_seconds > 0) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (elapsed > c.timeout_seconds) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3g", c.timeout_seconds);
        throw LaunchAbort{kLaunchTimeout, std::string("kernel ran longer than the emulator's launch time limit (") +
                                              buf + " s) in " + block_name() + " at " + where_running()};
      }
    }
  }

  std::string block_name() const {
    const Block& B = L_.block;
    return "block (" + std::to_string(B.ctaid[0]) + "," + std::to_string(B.ctaid[1]) + "," +
           std::to_string(B.ctaid[2]) + ")";
  }

  std::string where(int32_t pc) const {
    return "line " + std::to_string(prog_.code[pc].line) + " (" + prog_.text[pc] + ")";
  }

  std::string where_running() const {
    for (const Warp& w : L_.warps) {
      if (w.runnable) {
        int l = first_lane(w.runnable);
        int32_t pc = (w.group >> l) & 1 ? w.gpc : w.pc[l];
        return where(pc);
      }
    }
    return "an unknown instruction";
  }

  std::string thread_name(const Warp& w, int lane) const {
    const LaunchConfig& c = L_.cfg;
    uint32_t t = w.index * kWarpSize + lane;
    return "thread (" + std::to_string(t % c.block[0]) + "," + std::to_string((t / c.block[0]) % c.block[1]) + "," +
           std::to_string(t / (c.block[0] * c.block[1])) + ")";
  }

  // Nothing ran in a whole round: wake warp-sync waiters whose partners exited
  // and complete barriers whose missing threads exited; false if nothing moved.
  bool unstick() {
    bool moved = false;
    for (Warp& w : L_.warps) moved |= wake_warpsync(w);
    for (uint32_t id = 0; id < 16; ++id) moved |= check_barrier(id);
    return moved;
  }

  [[noreturn]] void deadlock() {
    // (kind, pc) -> waiting thread ids
    std::map<std::pair<int, int32_t>, std::vector<uint32_t>> waiting;
    for (const Warp& w : L_.warps) {
      for (int l = 0; l < kWarpSize; ++l) {
        LaneMask bit = 1u << l;
        if (w.at_barrier & bit) waiting[{0, w.pc[l]}].push_back(w.index * kWarpSize + l);
        if (w.at_warpsync & bit) waiting[{1, w.pc[l]}].push_back(w.index * kWarpSize + l);
      }
    }
    std::string msg = "divergent barrier: " + block_name() + " can never continue: ";
    bool first = true;
    for (auto& [k, ids] : waiting) {
      if (!first) msg += "; ";
      first = false;
      msg += "threads " + thread_ranges(ids) + " wait at " + where(k.second);
    }
    msg += " (" + std::to_string(L_.block.live_threads) + " live threads in the block)";
    throw LaunchAbort{kLaunchFailed, msg};
  }

  // ------------------------------------------------------------ warps

  void set_frame(Exec& e, Warp& w) {
    e.depth = w.gdepth;
    e.bank[kBankFrame] = w.regs.data() + static_cast<size_t>(w.gdepth) * prog_.frame_registers * kWarpSize;
  }

  void flush_group(Warp& w) {
    for_lanes(w.group, [&](int l) {
      w.pc[l] = w.gpc;
      w.depth[l] = static_cast<uint16_t>(w.gdepth);
    });
    w.group = 0;
  }

  // Picks the lanes to run next (see the reconvergence rule above).
  bool select_group(Warp& w) {
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
  void split(Warp& w, LaneMask exec, int32_t taken, int32_t not_taken) {
    for_lanes(w.group, [&](int l) {
      w.pc[l] = (exec >> l) & 1 ? taken : not_taken;
      w.depth[l] = static_cast<uint16_t>(w.gdepth);
    });
    w.group = 0;
  }

  void ensure_depth(Warp& w, uint32_t frames) {
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
  uint64_t run_warp(Warp& w, uint64_t max_steps) {
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
          case Control::kWarpSync:
            regroup = warp_sync(e, w, in, exec);
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
  bool jump_lanes(Warp& w, LaneMask exec, const int32_t* targets, uint32_t target_depth) {
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

  bool branch_indexed(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
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

  bool call(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
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

  bool return_lanes(Warp& w, LaneMask exec) {
    if (!exec) {
      ++w.gpc;
      return false;
    }
    return jump_lanes(w, exec, w.return_pc.data() + (w.gdepth - 1) * kWarpSize, w.gdepth - 1);
  }

  bool exit_lanes(Warp& w, LaneMask exec) {
    if (!exec) {
      ++w.gpc;
      return false;
    }
    w.live &= ~exec;
    w.runnable &= ~exec;
    L_.block.live_threads -= popcount(exec);
    w.group &= ~exec;
    ++w.gpc;
    // Fewer live threads: a count-less barrier may now be complete.
    flush_group(w);
    for (uint32_t id = 0; id < 16; ++id) check_barrier(id);
    return true;
  }

  // ------------------------------------------------------------ barriers

  bool barrier(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
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
  bool check_barrier(uint32_t id) {
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
  void check_same_instruction(uint32_t id) {
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

  void write_register(Warp& w, int lane, uint32_t slot, uint64_t value) {
    if ((slot >> kBankShift) != kBankFrame) return;
    size_t frame = static_cast<size_t>(w.depth[lane]) * prog_.frame_registers * kWarpSize;
    w.regs[frame + static_cast<size_t>(slot & kIndexMask) * kWarpSize + lane] = value;
  }

  uint64_t read_register(const Warp& w, int lane, uint32_t slot) const {
    uint32_t bank = slot >> kBankShift;
    size_t row = static_cast<size_t>(slot & kIndexMask) * kWarpSize + lane;
    if (bank == kBankConst) return prog_.const_bank[row];
    if (bank == kBankWarp) return w.fixed[row];
    return w.regs[static_cast<size_t>(w.depth[lane]) * prog_.frame_registers * kWarpSize + row];
  }

  // ------------------------------------------------------------ warp-synchronous instructions

  LaneMask member_mask(const Instr& in, uint64_t value) const {
    return in.op[kMemberMaskOperand] == kNoSlot ? kFullMask : static_cast<LaneMask>(value);
  }

  bool warp_sync(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
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
  bool wake_warpsync(Warp& w) {
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
};

}  // namespace

LaunchResult run_launch(const Program& program, DeviceMemory& memory, const std::string& params,
                        const LaunchConfig& config) {
  LaunchResult result;
  std::string problem = program.validate();
  if (!problem.empty()) {
    result.code = kLaunchFailed;
    result.message = "the lowered program of " + program.name + " is unsound (an emulator bug): " + problem;
    return result;
  }
  DeviceMemory::Use use(memory);
  Launch launch(program, memory, params, config);
  try {
    Runner(launch).run();
  } catch (LaunchAbort& a) {
    result.code = a.code;
    result.message = a.message;
  } catch (Fault& f) {  // raised outside a warp (barrier release): message is complete
    result.code = f.code;
    result.message = f.message;
  }
  result.printf_output = std::move(launch.printf_output);
  result.warp_steps = launch.warp_steps;
  result.thread_instructions = launch.thread_instructions;
  return result;
}

}  // namespace tally::emu
