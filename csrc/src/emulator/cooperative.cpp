// Cooperative launches: every block of the grid is resident at once, as
// cuLaunchCooperativeKernel promises, because blocks may wait for each other
// (cooperative groups' grid.sync() spins on the grid workspace until all have
// arrived). An ordinary launch runs each block to its end before a worker takes
// the next; here a worker takes one more block of the launch every turn and
// gives each block it holds a short turn (kCooperativeWarpSlice steps per warp),
// so a block spinning at the grid barrier lets the others reach it. Workers that
// the pool starts late find fewer blocks left, or none, as for any launch; the
// caller's worker alone would still take them all.
//
// The first failure stops the whole grid: blocks waiting at a grid barrier for a
// block that failed would otherwise spin until the launch's time limit.
#include <memory>
#include <vector>

#include "emulator/runner.h"

namespace tally::emu::detail {

namespace {

struct ResidentBlock {
  uint64_t index;
  std::unique_ptr<Launch> launch;
  std::unique_ptr<Runner> runner;
};

bool grid_stopped(const LaunchShared& shared) {
  return shared.stop_after.load(std::memory_order_relaxed) != ~0ull;
}

}  // namespace

void run_cooperative_worker(const Program& program, DeviceMemory& memory, const std::string& params,
                            const LaunchConfig& config, uint32_t smid, LaunchShared& shared) {
  std::vector<ResidentBlock> resident;
  bool blocks_left = true;
  bool reported = false;   // the worker counts as one SM used, whatever its blocks
  auto retire = [&](ResidentBlock& block) {
    block.runner->keep_output(block.index);
    block.runner->report(!reported);
    reported = true;
    shared.running.fetch_sub(1);
  };
  for (;;) {
    if (blocks_left && !grid_stopped(shared)) {
      uint64_t b = shared.next.fetch_add(1);
      if (b >= shared.blocks) {
        blocks_left = false;
      } else {
        ResidentBlock block{b, std::make_unique<Launch>(program, memory, params, config, smid), nullptr};
        block.runner = std::make_unique<Runner>(*block.launch, shared);
        shared.started_blocks(1);
        if (block.runner->guarded(b, [&] { block.runner->begin(b); })) {
          resident.push_back(std::move(block));
        } else {
          retire(block);
        }
      }
    }
    if (resident.empty()) {
      if (!blocks_left || grid_stopped(shared)) break;
      continue;
    }
    for (size_t i = 0; i < resident.size();) {
      ResidentBlock& block = resident[i];
      bool done = false;
      bool ok = !grid_stopped(shared) &&
                block.runner->guarded(block.index, [&] { done = block.runner->advance(kCooperativeWarpSlice); });
      if (ok && !done) {
        ++i;
        continue;
      }
      retire(block);
      if (i + 1 != resident.size()) resident[i] = std::move(resident.back());
      resident.pop_back();
    }
  }
}

}  // namespace tally::emu::detail
