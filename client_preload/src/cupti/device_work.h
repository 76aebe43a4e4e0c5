// Timing a launch, copy or memset for tally's CUPTI (cupti_state.h). While a kind
// tied to device work is enabled, each such call is bracketed by two timing events
// recorded on the call's own stream, so the server stamps when the work before and
// after it finished; at a flush the events' times, read against a reference event
// whose host time is known, become the record's start and end. The call itself
// gets a correlation id, a driver record (host times of the call) and, for each
// external correlation id the thread pushed, an external correlation record: how
// Kineto ties a kernel to the PyTorch operator that launched it.
//
// Work on a stream being captured into a graph is not timed (it runs later, as a
// graph). Disabled, a DeviceWork costs one atomic load.
//
// No CUPTI type appears here: a client built without CUPTI's headers (a toolkit
// without them) compiles without_cupti.cpp instead, where all of this does nothing.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {
struct FunctionObject;
}

namespace tally::client::cupti {

// The driver call a launch came through, for its driver record.
enum class LaunchCall { kNone, kLaunchKernel, kLaunchKernelPtsz, kLaunchKernelEx, kLaunchKernelExPtsz,
                        kCooperative, kCooperativePtsz };
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// What a kernel record says about the launch.
struct KernelLaunch {
  const FunctionObject* fn;
  unsigned grid[3];
  unsigned block[3];
  unsigned dynamic_shared;
  uint32_t cluster[3];
  bool cooperative;
};

class DeviceWork {
 public:
  // `stream`: the wire stream the work goes to; `call`: the launch entry point making
  // it (kNone for copies and memsets, which then get no driver record).
  DeviceWork(uint64_t stream, LaunchCall call);
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;

  // Whether the call is recorded at all (some device-work kind was on when it began).
  bool active() const { return correlation_ != 0; }

  // After the call sent its work (`rc`: what the call returns): the record waits for
  // its end event and is written into the job's buffer at a flush.
  void kernel(CUresult rc, const KernelLaunch& launch);
  void memcpy(CUresult rc, CopyKind kind, bool host_pinned, size_t bytes, bool async);
  void memset(CUresult rc, uint32_t value, size_t bytes, bool async);

 private:
  void finish(CUresult rc, int kind, const void* record);

  uint64_t stream_;
  LaunchCall call_;
  uint64_t api_start_ = 0;
  uint32_t correlation_ = 0;
  uint64_t start_event_ = 0;
  bool finished_ = false;
};

}  // namespace tally::client::cupti
