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
#pragma once
#include "cupti/cupti_headers.h"

#include <cstdint>

#include "driver_headers.h"

namespace tally::client {
struct FunctionObject;
}

namespace tally::client::cupti {

class DeviceWork {
 public:
  // `stream`: the wire stream the work goes to; `cbid`: the driver API call making
  // it (CUPTI_DRIVER_TRACE_CBID_*), for the driver record; CUPTI_DRIVER_TRACE_CBID_INVALID
  // where the entry point is not known here (copies and memsets), which then get
  // no driver record.
  DeviceWork(uint64_t stream, CUpti_CallbackId cbid);
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;

  // Whether the call is recorded at all (some device-work kind was on when it began).
  bool active() const { return correlation_ != 0; }

  // After the call sent its work (`rc`: what the call returns). The record is
  // complete but for kind, times, ids and correlation, which these fill in; it
  // waits for its end event and is queued at a flush.
  void kernel(CUresult rc, CUpti_ActivityKernel10 record);
  void memcpy(CUresult rc, CUpti_ActivityMemcpy6 record);
  void memset(CUresult rc, CUpti_ActivityMemset4 record);

 private:
  void finish(CUresult rc, CUpti_ActivityKind kind, const void* record);

  uint64_t stream_;
  CUpti_CallbackId cbid_;
  uint64_t api_start_ = 0;
  uint32_t correlation_ = 0;
  uint64_t start_event_ = 0;
  bool finished_ = false;
};

// A kernel record's description of `fn` (name, registers, memory sizes); the
// launch adds its shape.
CUpti_ActivityKernel10 kernel_record(const FunctionObject* fn);

// Turns finished work into records (cupti_state.cpp calls it at a flush). With
// `forced`, waits for unfinished work; otherwise leaves it for a later flush.
void resolve_device_work(bool forced);

// The calling thread's external correlation ids (cuptiActivityPush/Pop...): a
// stack per kind; each timed call names the top of every non-empty one.
CUptiResult push_external_correlation(CUpti_ExternalCorrelationKind kind, uint64_t id);
CUptiResult pop_external_correlation(CUpti_ExternalCorrelationKind kind, uint64_t* last);

// The ids a record names: the current context's (cuCtxGetId's) and a wire stream's.
uint32_t current_context_id();
uint32_t stream_record_id(uint64_t stream);

}  // namespace tally::client::cupti
