// The launch runner shared by scheduler.cpp (launch, blocks, limits, messages),
// warp_exec.cpp (lane groups, branches, calls) and barriers.cpp (block barriers and
// warp-synchronous instructions); see scheduler.cpp for the execution model.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "emulator/exec.h"

namespace tally::emu::detail {

constexpr uint32_t kDepthKeyBase = 0xffff;
constexpr uint64_t kWarpSlice = 1 << 14;  // steps a warp runs before the next warp's turn
// In a cooperative launch a warp may spin at the grid barrier until blocks on the same
// worker arrive: shorter turns let those blocks run sooner.
constexpr uint64_t kCooperativeWarpSlice = 1 << 10;

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

// A worker of the launch failed at a lower block: this one stops where it is.
struct Stopped {};

// What the workers of one launch share: the next block to run, the first
// failure, and what they printed, by block (so the output reads in block order,
// as when one worker ran them all).
struct LaunchShared {
  uint64_t blocks = 0;
  uint64_t clusters = 0;                     // of a launch with clusters of more than one block, else 0
  std::chrono::steady_clock::time_point start;
  std::atomic<uint64_t> next{0};
  // The lowest block that failed so far: blocks after it stop (a single worker
  // would never have run them), blocks before it run on, and may fail first.
  std::atomic<uint64_t> stop_after{~0ull};
  std::atomic<uint64_t> warp_steps{0};      // all workers', for the launch's instruction limit
  std::atomic<uint32_t> running{0};         // blocks running now
  std::atomic<uint32_t> max_running{0};
  std::mutex mutex;                          // the fields below
  std::vector<std::pair<uint64_t, std::string>> printf_chunks, assert_chunks;
  bool failed = false;
  uint64_t failed_block = 0;
  int code = 0;
  std::string message;
  uint64_t thread_instructions = 0;
  uint32_t sms_used = 0;

  // Keeps the failure of the lowest block (the one a single worker would have met first).
  void fail(uint64_t block, int fault_code, std::string text);
  // `count` blocks start running: counts them in `running` and `max_running`.
  void started_blocks(uint32_t count);
};

// "0-31, 64, 96-127" (at most 8 ranges).
std::string thread_ranges(const std::vector<uint32_t>& ids);

class Runner {
 public:
  Runner(Launch& L, LaunchShared& S) : L_(L), S_(S), prog_(L.prog) {}

  // Runs blocks taken from the launch's counter until none is left or another
  // worker failed; records this worker's failure, output and counts in S_.
  void run();

  // One block at a time, in turns (cooperative.cpp runs several blocks so):
  // begin(b) sets block b up, each advance(slice) gives every live warp up to
  // `slice` steps and says whether the block has finished; guarded(b, f) runs f,
  // records a failure of block b in S_ and returns false if it failed or stopped.
  void begin(uint64_t block);
  bool advance(uint64_t slice);
  template <class F>
  bool guarded(uint64_t block, F&& f);
  // The block's printf and assert output, by block, into S_.
  void keep_output(uint64_t block);
  // This runner's counts into S_; `counts_sm`: it is the worker's first.
  void report(bool counts_sm);

 private:
  Launch& L_;
  LaunchShared& S_;
  const Program& prog_;
  uint64_t steps_reported_ = 0;             // of L_.warp_steps, added to S_.warp_steps
  bool prepared_ = false;                   // warps allocated (prepare)

  // The blocks of the cluster being run (cluster_execution.cpp): each rank's warps
  // and block state; the running rank's are swapped into L_ (so everything else
  // sees one block, as in a launch without clusters).
  struct RankState {
    std::vector<Warp> warps;
    Block block;
  };
  std::vector<RankState> ranks_;
  int32_t swapped_in_ = -1;                 // the rank whose state is in L_ (-1: none)
  uint32_t cluster_arrived_ = 0;            // threads arrived at the cluster barrier's current phase
  uint64_t cluster_first_block_ = 0;        // linear index of the running cluster's rank-0 block


  // ------------------------------------------------------------ setup

  void allocate_warp(Warp& w, uint32_t index);
  void prepare();   // the warps of one block, once
  void start_block(uint64_t linear);
  void set_cluster_position(Block& B) const;
  uint64_t special_value(Special s, const Warp& w, int lane) const;

  // ------------------------------------------------------------ blocks

  void run_block(uint64_t linear);
  void check_limits();
  std::string block_name() const;
  std::string where(int32_t pc) const;
  std::string where_running() const;
  std::string thread_name(const Warp& w, int lane) const;

  // Nothing ran in a whole round: wake warp-sync waiters whose partners exited
  // and complete barriers whose missing threads exited; false if nothing moved.
  bool unstick();
  [[noreturn]] void deadlock();

  // ------------------------------------------------------------ warps

  void set_frame(Exec& e, Warp& w);
  void flush_group(Warp& w);

  // Picks the lanes to run next (the reconvergence rule in scheduler.cpp).
  bool select_group(Warp& w);

  // Lanes of `exec` go to `taken`, the rest of the group to `not_taken`.
  void split(Warp& w, LaneMask exec, int32_t taken, int32_t not_taken);
  void ensure_depth(Warp& w, uint32_t frames);

  // Runs up to max_steps instructions of warp w; returns how many ran.
  uint64_t run_warp(Warp& w, uint64_t max_steps);

  // Moves each lane of `exec` to its own target (the rest of the group to pc + 1);
  // true when the group had to be split.
  bool jump_lanes(Warp& w, LaneMask exec, const int32_t* targets, uint32_t target_depth);
  bool branch_indexed(Exec& e, Warp& w, const Instr& in, LaneMask exec);
  bool call(Exec& e, Warp& w, const Instr& in, LaneMask exec);
  bool return_lanes(Warp& w, LaneMask exec);
  bool exit_lanes(Warp& w, LaneMask exec);

  // ------------------------------------------------------------ barriers

  bool barrier(Exec& e, Warp& w, const Instr& in, LaneMask exec);

  // Releases barrier `id` if every thread it waits for has arrived.
  bool check_barrier(uint32_t id);

  // A count-less barrier whose waiters sit at different instructions: on a GPU
  // the block would mix different synchronization points (or hang).
  void check_same_instruction(uint32_t id);
  void write_register(Warp& w, int lane, uint32_t slot, uint64_t value);
  uint64_t read_register(const Warp& w, int lane, uint32_t slot) const;

  // ------------------------------------------------------------ clusters (cluster_execution.cpp)

  // Runs the blocks of cluster `index` together, round-robin, until all exited.
  void run_cluster(uint64_t index);
  void swap_rank(uint32_t rank);
  // f(warps, block) for each block of the running cluster (L_'s block alone outside clusters).
  template <class F>
  void for_cluster_blocks(F&& f);
  bool cluster_barrier(Exec& e, Warp& w, const Instr& in, LaneMask exec);
  // Completes the cluster barrier's phase once every live thread of the cluster arrived.
  bool check_cluster_barrier();

  // ------------------------------------------------------------ warp-synchronous instructions

  LaneMask member_mask(const Instr& in, uint64_t value) const;
  bool warp_sync(Exec& e, Warp& w, const Instr& in, LaneMask exec);

  // Waiters whose missing partners have exited may go on.
  bool wake_warpsync(Warp& w);
};

template <class F>
bool Runner::guarded(uint64_t block, F&& f) {
  try {
    f();
    return true;
  } catch (Stopped&) {
  } catch (LaunchAbort& a) {
    S_.fail(block, a.code, a.message);
  } catch (Fault& e) {  // raised outside a warp (barrier release): message is complete
    S_.fail(block, e.code, e.message);
  } catch (std::exception& e) {
    S_.fail(block, kLaunchFailed, std::string("the emulator failed running ") + block_name() + ": " + e.what());
  }
  return false;
}

// A cooperative launch's worker (cooperative.cpp): takes one more block of the
// launch each turn and runs all it took in turns, so every block is resident.
void run_cooperative_worker(const Program& program, DeviceMemory& memory, const std::string& params,
                            const LaunchConfig& config, uint32_t smid, LaunchShared& shared);

}  // namespace tally::emu::detail
