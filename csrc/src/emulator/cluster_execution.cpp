// Thread-block clusters: the blocks of a cluster are co-resident (they run on one
// worker, round-robin, each a slice of warp steps at a time, as a GPU runs them at
// once on the SMs of one GPC), so they can wait for each other at barrier.cluster
// and read each other's shared memory (cluster_memory.cpp) while all are alive.
//
// barrier.cluster is split: `arrive` counts the executing threads into the current
// phase; `wait` holds a thread until the phase it arrived in completes, which is
// when every live thread of the cluster arrived (exited threads do not count, as
// for bar.sync, whether they arrived before exiting or not). A launch without clusters is a grid of one-block clusters, where
// the same barrier spans the block.
#include "emulator/runner.h"

namespace tally::emu::detail {

void Runner::swap_rank(uint32_t rank) {
  std::swap(L_.warps, ranks_[rank].warps);
  std::swap(L_.block, ranks_[rank].block);
  swapped_in_ = swapped_in_ == static_cast<int32_t>(rank) ? -1 : static_cast<int32_t>(rank);
}

template <class F>
void Runner::for_cluster_blocks(F&& f) {
  if (ranks_.empty()) {
    f(L_.warps, L_.block);
    return;
  }
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    if (static_cast<int32_t>(r) == swapped_in_) {
      f(L_.warps, L_.block);
    } else {
      f(ranks_[r].warps, ranks_[r].block);
    }
  }
}

void Runner::run_cluster(uint64_t index) {
  const LaunchConfig& c = L_.cfg;
  const uint32_t* dims = c.cluster;
  const uint32_t n = dims[0] * dims[1] * dims[2];
  if (ranks_.size() != n) {
    ranks_.assign(n, RankState{});
    for (RankState& r : ranks_) r.warps = L_.warps;  // allocated by run()
  }
  // Cluster `index` in the grid of clusters, x fastest (as blocks are numbered).
  const uint64_t across_x = c.grid[0] / dims[0], across_y = c.grid[1] / dims[1];
  const uint64_t cluster_at[3] = {index % across_x, (index / across_x) % across_y, index / (across_x * across_y)};
  L_.cluster_shared.assign(n, Launch::RankShared{nullptr, 0});
  cluster_arrived_ = 0;
  for (uint32_t r = 0; r < n; ++r) {
    const uint64_t ctaid[3] = {cluster_at[0] * dims[0] + r % dims[0], cluster_at[1] * dims[1] + (r / dims[0]) % dims[1],
                               cluster_at[2] * dims[2] + r / (dims[0] * dims[1])};
    uint64_t linear = ctaid[0] + c.grid[0] * (ctaid[1] + static_cast<uint64_t>(c.grid[1]) * ctaid[2]);
    if (r == 0) cluster_first_block_ = linear;
    swap_rank(r);
    start_block(linear);
    swap_rank(r);
    // A swap moves the vector, not its bytes: this pointer stays valid for the cluster's life.
    L_.cluster_shared[r] = {ranks_[r].block.shared.data(), ranks_[r].block.shared.size()};
  }
  for (;;) {
    bool progressed = false, live = false;
    for (uint32_t r = 0; r < n; ++r) {
      if (ranks_[r].block.live_threads == 0) continue;
      swap_rank(r);
      for (Warp& w : L_.warps) {
        if (!w.live) continue;
        uint64_t steps = run_warp(w, kWarpSlice);
        if (steps) progressed = true;
        L_.warp_steps += steps;
      }
      check_limits();
      swap_rank(r);
      live |= ranks_[r].block.live_threads != 0;
    }
    if (!live) break;
    if (progressed) continue;
    bool moved = false;
    for (uint32_t r = 0; r < n && !moved; ++r) {
      swap_rank(r);
      moved = unstick();
      swap_rank(r);
    }
    if (moved) continue;
    for (uint32_t r = 0; r < n; ++r) {
      if (ranks_[r].block.live_threads == 0) continue;
      swap_rank(r);
      deadlock();  // names this block's waiting threads
    }
  }
  L_.cluster_shared.clear();
}

bool Runner::cluster_barrier(Exec& e, Warp& w, const Instr& in, LaneMask exec) {
  (void)e;
  if (!exec) {
    ++w.gpc;
    return false;
  }
  if (!(in.flags & flag::kClusterWait)) {
    if (LaneMask twice = exec & w.cluster_arrived) {
      fault(kLaunchFailed, "barrier.cluster.arrive twice without a barrier.cluster.wait between", first_lane(twice));
    }
    w.cluster_arrived |= exec;
    cluster_arrived_ += popcount(exec);
    ++w.gpc;
    flush_group(w);
    check_cluster_barrier();
    return true;
  }
  if (LaneMask never = exec & ~w.cluster_arrived & ~w.cluster_done) {
    fault(kLaunchFailed, "barrier.cluster.wait without a barrier.cluster.arrive before it", first_lane(never));
  }
  LaneMask waits = exec & w.cluster_arrived;
  w.cluster_done &= ~exec;
  for_lanes(w.group, [&](int l) {
    w.pc[l] = (waits >> l) & 1 ? w.gpc : w.gpc + 1;
    w.depth[l] = static_cast<uint16_t>(w.gdepth);
  });
  w.group = 0;
  w.at_cluster_wait |= waits;
  w.runnable &= ~waits;
  return true;
}

bool Runner::check_cluster_barrier() {
  if (cluster_arrived_ == 0) return false;
  uint32_t live = 0;
  for_cluster_blocks([&](std::vector<Warp>&, Block& B) { live += B.live_threads; });
  if (cluster_arrived_ < live) return false;
  // The phase completes: waiting threads go on, the others' next wait does not hold them.
  for_cluster_blocks([&](std::vector<Warp>& warps, Block&) {
    for (Warp& w : warps) {
      LaneMask waiting = w.at_cluster_wait;
      w.cluster_done |= w.cluster_arrived & ~waiting;
      w.cluster_arrived = 0;
      for_lanes(waiting, [&](int l) { ++w.pc[l]; });
      w.at_cluster_wait = 0;
      w.runnable |= waiting & w.live;
    }
  });
  cluster_arrived_ = 0;
  return true;
}

}  // namespace tally::emu::detail
