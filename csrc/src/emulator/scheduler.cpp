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

#include "emulator/runner.h"

namespace tally::emu {
namespace detail {

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

void Runner::run() {
  const LaunchConfig& c = L_.cfg;
  L_.threads_per_block = c.block[0] * c.block[1] * c.block[2];
  uint32_t nwarps = (L_.threads_per_block + kWarpSize - 1) / kWarpSize;
  L_.warps.resize(nwarps);
  for (uint32_t w = 0; w < nwarps; ++w) allocate_warp(L_.warps[w], w);
  start_ = std::chrono::steady_clock::now();
  uint64_t blocks = static_cast<uint64_t>(c.grid[0]) * c.grid[1] * c.grid[2];
  for (uint64_t b = 0; b < blocks; ++b) run_block(b);
}

void Runner::allocate_warp(Warp& w, uint32_t index) {
  w.index = index;
  w.depth_capacity = 1;
  w.regs.assign(static_cast<size_t>(prog_.frame_registers) * kWarpSize, 0);
  w.fixed.assign(static_cast<size_t>(prog_.warp_slots) * kWarpSize, 0);
  w.local_stride = prog_.local_frame_bytes;
  w.local.assign(w.local_stride * kWarpSize, 0);
  w.return_pc.assign(kWarpSize, 0);
}

void Runner::start_block(uint64_t linear) {
  const LaunchConfig& c = L_.cfg;
  Block& B = L_.block;
  B.linear = linear;
  B.ctaid[0] = static_cast<uint32_t>(linear % c.grid[0]);
  B.ctaid[1] = static_cast<uint32_t>((linear / c.grid[0]) % c.grid[1]);
  B.ctaid[2] = static_cast<uint32_t>(linear / (static_cast<uint64_t>(c.grid[0]) * c.grid[1]));
  size_t shared_end = prog_.reserved_shared_bytes
                          ? static_cast<size_t>(L_.reserved_shared_begin()) + prog_.reserved_shared_bytes
                          : static_cast<size_t>(prog_.static_shared_bytes) + c.dynamic_shared;
  B.shared.assign(shared_end, 0);
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

uint64_t Runner::special_value(Special s, const Warp& w, int lane) const {
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
    // Blocks go round-robin to the SMs the launch may use: its SM cap (a green
    // context, an SM share), else the whole device.
    case kSmId: {
      uint32_t sms = c.sm_cap != 0 && c.sm_cap < c.sm_count ? c.sm_cap : c.sm_count;
      return B.linear % (sms ? sms : 1);
    }
    case kNSmId: return c.sm_count;
    case kGridId: return 1;
    case kLanemaskEq: return lane_bit;
    case kLanemaskLt: return lane_bit - 1;
    case kLanemaskLe: return ((lane_bit << 1) - 1) & 0xffffffffull;
    case kLanemaskGt: return ~((lane_bit << 1) - 1) & 0xffffffffull;
    case kLanemaskGe: return ~(lane_bit - 1) & 0xffffffffull;
    case kDynamicSmemSize: return c.dynamic_shared;
    case kTotalSmemSize: return prog_.static_shared_bytes + c.dynamic_shared;
    case kAggrSmemSize: return B.shared.size();
    // Slot 0 takes the first half of the region, slot 1 (cooperative groups' scratch,
    // at most 288 bytes) the second.
    case kReservedSmemBegin:
    case kReservedSmemOffset0: return L_.reserved_shared_begin();
    case kReservedSmemOffset1: return L_.reserved_shared_begin() + prog_.reserved_shared_bytes / 2;
    case kReservedSmemEnd: return L_.reserved_shared_begin() + prog_.reserved_shared_bytes;
    case kReservedSmemCap: return prog_.reserved_shared_bytes;
    default: return 0;
  }
}

void Runner::run_block(uint64_t linear) {
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

void Runner::check_limits() {
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

std::string Runner::block_name() const {
  const Block& B = L_.block;
  return "block (" + std::to_string(B.ctaid[0]) + "," + std::to_string(B.ctaid[1]) + "," +
         std::to_string(B.ctaid[2]) + ")";
}

std::string Runner::where(int32_t pc) const {
  return "line " + std::to_string(prog_.code[pc].line) + " (" + prog_.text[pc] + ")";
}

std::string Runner::where_running() const {
  for (const Warp& w : L_.warps) {
    if (w.runnable) {
      int l = first_lane(w.runnable);
      int32_t pc = (w.group >> l) & 1 ? w.gpc : w.pc[l];
      return where(pc);
    }
  }
  return "an unknown instruction";
}

std::string Runner::thread_name(const Warp& w, int lane) const {
  const LaunchConfig& c = L_.cfg;
  uint32_t t = w.index * kWarpSize + lane;
  return "thread (" + std::to_string(t % c.block[0]) + "," + std::to_string((t / c.block[0]) % c.block[1]) + "," +
         std::to_string(t / (c.block[0] * c.block[1])) + ")";
}

// Nothing ran in a whole round: wake warp-sync waiters whose partners exited
// and complete barriers whose missing threads exited; false if nothing moved.
bool Runner::unstick() {
  bool moved = false;
  for (Warp& w : L_.warps) moved |= wake_warpsync(w);
  for (uint32_t id = 0; id < 16; ++id) moved |= check_barrier(id);
  return moved;
}

[[noreturn]] void Runner::deadlock() {
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

}  // namespace detail

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
    detail::Runner(launch).run();
  } catch (detail::LaunchAbort& a) {
    result.code = a.code;
    result.message = a.message;
  } catch (Fault& f) {  // raised outside a warp (barrier release): message is complete
    result.code = f.code;
    result.message = f.message;
  }
  result.printf_output = std::move(launch.printf_output);
  result.assert_output = std::move(launch.assert_output);
  result.warp_steps = launch.warp_steps;
  result.thread_instructions = launch.thread_instructions;
  return result;
}

}  // namespace tally::emu
