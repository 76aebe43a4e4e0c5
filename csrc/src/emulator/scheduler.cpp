// The hot loop: runs a launch block by block, each block's warps round-robin,
// each warp as groups of lanes that share a pc. (A launch with clusters of more
// than one block runs cluster by cluster, its blocks together: cluster_execution.cpp.)
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
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>

#include "emulator/grid_workspace.h"
#include "emulator/runner.h"
#include "emulator/worker_pool.h"

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

void LaunchShared::fail(uint64_t block, int fault_code, std::string text) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!failed || block < failed_block) {
    failed = true;
    failed_block = block;
    code = fault_code;
    message = std::move(text);
    stop_after.store(block);
  }
}

void LaunchShared::started_blocks(uint32_t count) {
  uint32_t now = running.fetch_add(count) + count;
  uint32_t most = max_running.load();
  while (now > most && !max_running.compare_exchange_weak(most, now)) {
  }
}

void Runner::prepare() {
  if (prepared_) return;
  const LaunchConfig& c = L_.cfg;
  L_.threads_per_block = c.block[0] * c.block[1] * c.block[2];
  uint32_t nwarps = (L_.threads_per_block + kWarpSize - 1) / kWarpSize;
  L_.warps.resize(nwarps);
  for (uint32_t w = 0; w < nwarps; ++w) allocate_warp(L_.warps[w], w);
  prepared_ = true;
}

void Runner::run() {
  const LaunchConfig& c = L_.cfg;
  prepare();
  bool ran = false;
  // The unit a worker takes is a block, or a whole cluster when clusters have
  // more than one block (its blocks must be co-resident: they wait for each other).
  const uint32_t per_unit = S_.clusters ? c.cluster[0] * c.cluster[1] * c.cluster[2] : 1;
  for (;;) {
    uint64_t u = S_.next.fetch_add(1);
    if (S_.clusters ? (u >= S_.clusters || S_.stop_after.load(std::memory_order_relaxed) != ~0ull)
                    : (u >= S_.blocks || u > S_.stop_after.load(std::memory_order_relaxed)))
      break;
    ran = true;
    S_.started_blocks(per_unit);
    bool ok = false;
    uint64_t b = u;  // the block a failure or output belongs to
    try {
      if (S_.clusters) {
        run_cluster(u);
      } else {
        run_block(u);
      }
      ok = true;
    } catch (Stopped&) {
    } catch (LaunchAbort& a) {
      b = L_.block.linear;
      S_.fail(b, a.code, a.message);
    } catch (Fault& f) {  // raised outside a warp (barrier release): message is complete
      b = L_.block.linear;
      S_.fail(b, f.code, f.message);
    } catch (std::exception& e) {
      b = L_.block.linear;
      S_.fail(b, kLaunchFailed, std::string("the emulator failed running ") + block_name() + ": " + e.what());
    }
    S_.running.fetch_sub(per_unit);
    keep_output(S_.clusters ? cluster_first_block_ : b);
    if (!ok) break;
  }
  report(ran);
}

void Runner::report(bool counts_sm) {
  std::lock_guard<std::mutex> lock(S_.mutex);
  S_.thread_instructions += L_.thread_instructions;
  S_.warp_steps.fetch_add(L_.warp_steps - steps_reported_);
  steps_reported_ = L_.warp_steps;
  if (counts_sm) ++S_.sms_used;
}

void Runner::keep_output(uint64_t block) {
  if (L_.printf_output.empty() && L_.assert_output.empty()) return;
  std::lock_guard<std::mutex> lock(S_.mutex);
  if (!L_.printf_output.empty()) S_.printf_chunks.emplace_back(block, std::move(L_.printf_output));
  if (!L_.assert_output.empty()) S_.assert_chunks.emplace_back(block, std::move(L_.assert_output));
  L_.printf_output.clear();
  L_.assert_output.clear();
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
  set_cluster_position(B);
  // A GPU gives a block its shared memory in whole allocation units (128 bytes), so an
  // access past the bytes asked for but inside the last unit does not fault there; LLVM's
  // load widening relies on it (nvJitLink's LTO merges a kernel's loads of a 28-byte
  // dynamic array into two 16-byte ones, numba-cuda's test_sm), so the emulator gives the
  // same.
  size_t shared_end = prog_.reserved_shared_bytes
                          ? static_cast<size_t>(L_.reserved_shared_begin()) + prog_.reserved_shared_bytes
                          : static_cast<size_t>(L_.reserved_shared_begin());
  B.shared.assign(shared_end, 0);
  B.live_threads = L_.threads_per_block;
  for (auto& bar : B.barriers) bar = Barrier{};
  if (ranks_.empty()) cluster_arrived_ = 0;  // a one-block cluster's barrier starts with the block
  for (Warp& w : L_.warps) {
    w.cluster_arrived = w.cluster_done = w.at_cluster_wait = 0;
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

void Runner::set_cluster_position(Block& B) const {
  const uint32_t* dims = L_.cfg.cluster;
  for (int i = 0; i < 3; ++i) {
    B.cluster_id[i] = B.ctaid[i] / dims[i];
    B.cluster_ctaid[i] = B.ctaid[i] % dims[i];
  }
  B.cluster_rank = B.cluster_ctaid[0] + dims[0] * (B.cluster_ctaid[1] + dims[1] * B.cluster_ctaid[2]);
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
    case kSmId: return L_.smid;
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
    case kClusterIdX: return B.cluster_id[0];
    case kClusterIdY: return B.cluster_id[1];
    case kClusterIdZ: return B.cluster_id[2];
    case kNclusterIdX: return c.grid[0] / c.cluster[0];
    case kNclusterIdY: return c.grid[1] / c.cluster[1];
    case kNclusterIdZ: return c.grid[2] / c.cluster[2];
    case kClusterCtaidX: return B.cluster_ctaid[0];
    case kClusterCtaidY: return B.cluster_ctaid[1];
    case kClusterCtaidZ: return B.cluster_ctaid[2];
    case kClusterNctaidX: return c.cluster[0];
    case kClusterNctaidY: return c.cluster[1];
    case kClusterNctaidZ: return c.cluster[2];
    case kClusterCtaRank: return B.cluster_rank;
    case kClusterNctaRank: return c.cluster[0] * c.cluster[1] * c.cluster[2];
    case kIsExplicitCluster: return c.explicit_cluster ? 1 : 0;
    case kEnvreg1: return c.grid_workspace >> 32;
    case kEnvreg2: return c.grid_workspace & 0xffffffffull;
    default: return 0;
  }
}

void Runner::run_block(uint64_t linear) {
  start_block(linear);
  while (!advance(kWarpSlice)) {
  }
}

void Runner::begin(uint64_t linear) {
  prepare();
  start_block(linear);
}

bool Runner::advance(uint64_t slice) {
  bool progressed = false;
  for (Warp& w : L_.warps) {
    if (!w.live) continue;
    uint64_t steps = run_warp(w, slice);
    if (steps) progressed = true;
    L_.warp_steps += steps;
  }
  if (L_.block.live_threads == 0) return true;
  check_limits();
  if (!progressed && !unstick()) deadlock();
  return false;
}

void Runner::check_limits() {
  const LaunchConfig& c = L_.cfg;
  if (L_.block.linear > S_.stop_after.load(std::memory_order_relaxed)) throw Stopped{};
  uint64_t all_steps = S_.warp_steps.fetch_add(L_.warp_steps - steps_reported_) + (L_.warp_steps - steps_reported_);
  steps_reported_ = L_.warp_steps;
  if (c.max_warp_steps && all_steps > c.max_warp_steps) {
    throw LaunchAbort{kLaunchTimeout, "kernel exceeded the emulator's instruction limit (" +
                                          std::to_string(c.max_warp_steps) + " warp instructions) in " +
                                          block_name() + " at " + where_running()};
  }
  if (c.cancel && c.cancel->load(std::memory_order_relaxed)) {
    throw LaunchAbort{kLaunchFailed, "launch cancelled (the device is shutting down)"};
  }
  if (c.timeout_seconds > 0) {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - S_.start).count();
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

// Where the block's live threads are, grouped by instruction (a kernel that spins,
// e.g. on a barrier phase that never completes, shows which waits and which moved on).
std::string Runner::where_running() const {
  std::map<int32_t, std::vector<uint32_t>> at;
  for (const Warp& w : L_.warps) {
    for_lanes(w.live, [&](int l) {
      at[(w.group >> l) & 1 ? w.gpc : w.pc[l]].push_back(w.index * kWarpSize + l);
    });
  }
  if (at.empty()) return "an unknown instruction";
  if (at.size() == 1) return where(at.begin()->first);
  std::string out;
  constexpr size_t kShown = 6;
  size_t shown = 0;
  for (auto& [pc, ids] : at) {
    if (shown == kShown) {
      out += "; and " + std::to_string(at.size() - kShown) + " more places";
      break;
    }
    out += (shown++ ? "; threads " : "threads ") + thread_ranges(ids) + " at " + where(pc);
  }
  return out;
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
  moved |= check_cluster_barrier();
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
      if (w.at_cluster_wait & bit) waiting[{2, w.pc[l]}].push_back(w.index * kWarpSize + l);
    }
  }
  std::string msg = "divergent barrier: " + block_name() + " can never continue: ";
  bool first = true;
  for (auto& [k, ids] : waiting) {
    if (!first) msg += "; ";
    first = false;
    msg += "threads " + thread_ranges(ids) + " wait at " + where(k.second);
  }
  msg += " (" + std::to_string(L_.block.live_threads) + " live threads in the block";
  if (!ranks_.empty()) msg += ", which waits with the other blocks of its cluster";
  msg += ")";
  throw LaunchAbort{kLaunchFailed, msg};
}

}  // namespace detail

LaunchResult run_launch(const Program& program, DeviceMemory& memory, const std::string& params,
                        const LaunchConfig& launch_config) {
  LaunchResult result;
  std::string problem = program.validate();
  if (!problem.empty()) {
    result.code = kLaunchFailed;
    result.message = "the lowered program of " + program.name + " is unsound (an emulator bug): " + problem;
    return result;
  }
  LaunchConfig config = launch_config;
  GridWorkspace workspace(memory);
  if (config.cooperative) {
    // A cooperative worker keeps each block apart; a cluster's blocks share one
    // worker's state (cluster_execution.cpp). Both at once is not emulated.
    if (config.cluster[0] * config.cluster[1] * config.cluster[2] > 1) {
      result.code = kNotSupported;
      result.message = "a cooperative launch of " + program.name + " with clusters of more than one block is "
                       "not emulated";
      return result;
    }
    try {
      config.grid_workspace = workspace.create();
    } catch (MemoryError& e) {
      result.code = e.code;
      result.message = "no device memory for the grid workspace of a cooperative launch of " + program.name +
                       ": " + e.what();
      return result;
    }
  }
  DeviceLaunches device_launches;
  config.device_launches = &device_launches;
  DeviceMemory::Use use(memory);
  detail::LaunchShared shared;
  shared.blocks = static_cast<uint64_t>(config.grid[0]) * config.grid[1] * config.grid[2];
  const uint32_t* cluster = config.cluster;
  const uint64_t cluster_blocks = static_cast<uint64_t>(cluster[0]) * cluster[1] * cluster[2];
  // The backend checks these with CUDA's codes first; the interpreter must never run a bad shape.
  if (cluster_blocks == 0 || cluster_blocks > kMaxClusterBlocks || config.grid[0] % cluster[0] ||
      config.grid[1] % cluster[1] || config.grid[2] % cluster[2]) {
    result.code = kInvalidValue;
    result.message = "cluster of " + std::to_string(cluster[0]) + "x" + std::to_string(cluster[1]) + "x" +
                     std::to_string(cluster[2]) + " blocks does not divide the grid or exceeds " +
                     std::to_string(kMaxClusterBlocks) + " blocks";
    return result;
  }
  if (cluster_blocks > 1) shared.clusters = shared.blocks / cluster_blocks;
  shared.start = std::chrono::steady_clock::now();
  // One worker per SM the launch may use, as a GPU spreads a grid over its SMs;
  // an SM cap (a job's share) leaves the other workers to other launches.
  uint64_t sms = std::max<uint32_t>(1, config.sm_count);
  if (config.sm_cap) sms = std::min<uint64_t>(sms, config.sm_cap);
  auto workers = static_cast<uint32_t>(std::min<uint64_t>(sms, shared.clusters ? shared.clusters : shared.blocks));
  WorkerPool::instance().run(workers, [&](uint32_t smid) {
    if (config.cooperative) {
      detail::run_cooperative_worker(program, memory, params, config, smid, shared);
      return;
    }
    Launch launch(program, memory, params, config, smid);
    detail::Runner(launch, shared).run();
  });
  // What blocks after a failed one printed before they were stopped is dropped: one
  // worker running the blocks in order would never have started them.
  auto in_block_order = [&](std::vector<std::pair<uint64_t, std::string>>& chunks) {
    std::stable_sort(chunks.begin(), chunks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string out;
    for (auto& chunk : chunks) {
      if (shared.failed && chunk.first > shared.failed_block) break;
      out += chunk.second;
    }
    return out;
  };
  result.printf_output = in_block_order(shared.printf_chunks);
  result.assert_output = in_block_order(shared.assert_chunks);
  if (shared.failed) {
    result.code = shared.code;
    result.message = std::move(shared.message);
  }
  result.warp_steps = shared.warp_steps.load();
  result.thread_instructions = shared.thread_instructions;
  result.sms_used = shared.sms_used;
  result.max_concurrent = shared.max_running.load();
  finish_device_launches(device_launches, config, shared.failed, result);
  return result;
}

}  // namespace tally::emu
