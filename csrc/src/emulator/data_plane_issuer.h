// The emulator backend's DeviceIssuer (data_plane_issuer.cpp): work onto its
// streams' C++ queues. A stream handle is the address of its StreamQueue.
#pragma once
#include <memory>

#include "data_plane/device_issue.h"

namespace tally::emu {
class DeviceMemory;
struct CancelFlag;
}  // namespace tally::emu

namespace tally::data_plane {

// What a launch may ask of the emulated device. Not written here: the Python
// backend passes the limits it reads from the device attributes it reports
// (tally/backends/device_attributes.py, launch_limits), so the client, the
// Python backend and this issuer check one set of numbers.
struct LaunchLimits {
  uint32_t max_grid[3];
  uint32_t max_block[3];
  uint32_t max_threads;
  uint32_t max_shared_bytes;
};

class EmulatorIssuer final : public DeviceIssuer {
 public:
  EmulatorIssuer(std::shared_ptr<emu::DeviceMemory> memory, uint32_t sm_count, uint64_t max_warp_steps,
                 double timeout_seconds, std::shared_ptr<emu::CancelFlag> cancel, LaunchLimits limits);

  bool launch(uint64_t stream, const FunctionEntry& fn, const LaunchShape& shape, const uint8_t* params,
              uint32_t param_bytes, uint32_t sm_cap) override;
  bool memset(uint64_t stream, uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count) override;
  bool copy_dtod(uint64_t stream, uint64_t dst, uint64_t src, uint64_t nbytes) override;
  bool copy_htod(uint64_t stream, uint64_t dst, const uint8_t* src, uint64_t nbytes) override;
  bool stream_quiet(uint64_t stream) override;
  bool completes_at_issue() const override { return false; }
  bool carries_sm_cap() const override { return true; }   // its worker threads are the SMs
  const char* name() const override { return "emulator"; }

 private:
  // [addr, addr + nbytes) is memory the emulator can touch (the Python backend's check).
  bool owned(uint64_t addr, uint64_t nbytes);

  std::shared_ptr<emu::DeviceMemory> memory_;
  uint32_t sm_count_;
  uint64_t max_warp_steps_;
  double timeout_seconds_;
  std::shared_ptr<emu::CancelFlag> cancel_;
  LaunchLimits limits_;
};

}  // namespace tally::data_plane
