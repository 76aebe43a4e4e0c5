// The server-wide switch that lets best-effort lanes issue kernels
// (docs/data-plane.md, "Best-effort release").
//
// Python's executor opens it when its policy would start a best-effort kernel
// at once (no high-priority work waiting or running, the idle grace passed,
// the cluster layer's gate allows it) and grants that job its lanes. Every
// high-priority kernel closes it, whichever plane issues it: the C++ data
// plane of a high-priority job closes it before it issues a kernel, so the
// release decision reacts to high-priority work without Python. A closed gate
// sends best-effort launches to Python, whose policy holds them until the
// high-priority job is idle again; the next grant opens it again.
//
// The same high-priority kernel must stop the best-effort PTB launches already
// on the device: the gate carries their board (preempt_board.h).
#pragma once
#include <atomic>

#include "data_plane/preempt_board.h"

namespace tally::data_plane {

class BestEffortGate {
 public:
  void open() { open_.store(true, std::memory_order_release); }
  void close() {
    // Most high-priority kernels find it closed already: skip the store's cache-line traffic.
    if (open_.load(std::memory_order_relaxed)) open_.store(false, std::memory_order_release);
  }
  bool is_open() const { return open_.load(std::memory_order_acquire); }
  PreemptBoard& preemptible() { return board_; }

 private:
  std::atomic<bool> open_{false};
  PreemptBoard board_;
};

}  // namespace tally::data_plane
