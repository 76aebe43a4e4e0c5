// The best-effort PTB launches on the device that a high-priority kernel must
// stop (docs/data-plane.md, "Preemption from the plane").
//
// Python's executor pins each PTB launch here (its preempt flag's device address
// and the control stream the flag is written on) after it queued the flag's
// reset and before it launches; it takes it off when the launch completes or
// when it preempts it itself. A high-priority job's C++ plane calls fire()
// before it issues a kernel: each pinned launch's flag is set on the control
// stream, after its reset (the pin came after the reset was queued, and fire()
// holds the same lock), so its workers stop after their current tasks, without
// Python between the job's launch and the preemption. Python learns of it when
// it takes the launch off (`fired`), and counts it then.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "data_plane/device_issue.h"

namespace tally::data_plane {

class PreemptBoard {
 public:
  void pin(uint64_t flag_address, uint64_t control_stream) {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.insert_or_assign(flag_address, Pinned{control_stream, false});   // a lane's next launch: armed again
    armed_.store(count_armed(), std::memory_order_release);
  }

  // Off the board; true when a high-priority kernel set its flag meanwhile.
  bool unpin(uint64_t flag_address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pinned_.find(flag_address);
    if (it == pinned_.end()) return false;
    const bool fired = it->second.fired;
    pinned_.erase(it);
    armed_.store(count_armed(), std::memory_order_release);
    return fired;
  }

  // Set the flag of every pinned launch not stopped yet (a high-priority kernel is
  // about to be issued). Most kernels find nothing pinned: one atomic load.
  void fire(DeviceIssuer& issuer) {
    if (armed_.load(std::memory_order_acquire) == 0) return;
    static const uint32_t kSet = 1;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [address, pinned] : pinned_) {
      if (pinned.fired) continue;
      // An issuer that declines leaves it to Python (its policy preempts on its next look).
      pinned.fired = issuer.copy_htod(pinned.control_stream, address, reinterpret_cast<const uint8_t*>(&kSet),
                                      sizeof kSet);
      if (pinned.fired) fires_.fetch_add(1, std::memory_order_relaxed);
    }
    armed_.store(count_armed(), std::memory_order_release);
  }

  uint64_t fires() const { return fires_.load(std::memory_order_relaxed); }

 private:
  struct Pinned {
    uint64_t control_stream;
    bool fired;
  };

  uint32_t count_armed() const {
    uint32_t n = 0;
    for (const auto& [address, pinned] : pinned_) n += pinned.fired ? 0 : 1;
    return n;
  }

  std::mutex mu_;
  std::unordered_map<uint64_t, Pinned> pinned_;   // flag address -> how to set it
  std::atomic<uint32_t> armed_{0};                // pinned and not fired
  std::atomic<uint64_t> fires_{0};
};

}  // namespace tally::data_plane
