// Device work timed with timing events (device_work.h says how and why).
#include "cupti/device_work.h"
#include "cupti/device_work_records.h"

#include <unistd.h>
#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "contexts/contexts.h"
#include "cupti/cupti_state.h"
#include "driver_objects.h"
#include "graphs/capture.h"
#include "logging/log.h"
#include "streams/timing_events.h"

namespace tally::client::cupti {
namespace {

constexpr int kExternalKinds = 8;  // CUpti_ExternalCorrelationKind goes to CUSTOM2 = 7
thread_local std::vector<uint64_t> t_external[kExternalKinds];

// One piece of timed work waiting for its end event.
struct Pending {
  CUpti_ActivityKind kind;
  uint64_t stream;
  uint64_t start_event;
  uint64_t end_event;
  union {
    CUpti_ActivityKernel10 kernel;
    CUpti_ActivityMemcpy6 memcpy;
    CUpti_ActivityMemset4 memset;
  } record;
};

// The reference event: recorded on the first timed stream and waited for, its host
// time taken right after the wait returns (so device times read against it lag by
// at most one synchronize round trip). Renewed once nothing is pending, so the
// intervals the server measures stay short.
//
// The server measures in milliseconds; records are in the job's clock, which is
// nanoseconds unless the job registered its own (Kineto's counts timestamp-counter
// ticks and converts them itself). So the reference keeps both clocks, and at each
// flush the job clock's rate is read off the two clocks' progress since then.
struct Reference {
  uint64_t event = 0;
  uint64_t host_ns = 0;     // realtime_ns()
  uint64_t host_stamp = 0;  // timestamp(), the job's clock
};

// Job-clock units per nanosecond (1 for tally's own clock); refitted whenever at
// least kMinFitNs passed since the reference (clock reads are good to tens of
// nanoseconds, so the rate is good to about 1e-4), kept from the last fit otherwise.
constexpr uint64_t kMinFitNs = 200'000;
double g_units_per_ns = 1.0;

void fit_job_clock(const Reference& ref) {
  if (!job_clock()) {
    g_units_per_ns = 1.0;
    return;
  }
  const uint64_t stamp = timestamp();
  const uint64_t ns = realtime_ns();
  if (ns > ref.host_ns + kMinFitNs && stamp > ref.host_stamp)
    g_units_per_ns = static_cast<double>(stamp - ref.host_stamp) / static_cast<double>(ns - ref.host_ns);
}

std::mutex g_mutex;
Reference g_reference;
std::atomic<int> g_in_flight{0};  // timed calls between their start event and finish()
std::deque<Pending> g_pending;
// A job that profiles for long without flushing: each time this many more calls
// wait, the finished ones become records (and full buffers go back to the job, as
// CUPTI hands back a buffer when it is full), so timing events do not pile up.
constexpr size_t kResolveBatch = 1024;
size_t g_resolve_at = kResolveBatch;

// Timing events are reused: the server handles an event's create and destroy on its
// Python side, which costs a launch far more than the launch itself (bench/bench_cupti.py),
// so an event whose time was read goes back to this pool instead of being destroyed.
// Bounded: past kPoolLimit spare events are destroyed.
constexpr size_t kPoolLimit = 8192;
std::mutex g_pool_mutex;
std::vector<uint64_t> g_pool;

uint64_t take_event() {
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (!g_pool.empty()) {
      const uint64_t event = g_pool.back();
      g_pool.pop_back();
      return event;
    }
  }
  return create_timing_event();
}

void give_back(uint64_t event) {
  if (event == 0) return;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (g_pool.size() < kPoolLimit) {
      g_pool.push_back(event);
      return;
    }
  }
  destroy_timing_event(event);
}

bool reference_ready(uint64_t stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_reference.event != 0) return true;
  const uint64_t event = create_timing_event();
  if (event == 0) return false;
  if (record_timing_event(event, stream) != CUDA_SUCCESS || synchronize_timing_event(event) != CUDA_SUCCESS) {
    destroy_timing_event(event);
    return false;
  }
  g_reference.event = event;
  g_reference.host_stamp = timestamp();
  g_reference.host_ns = realtime_ns();
  return true;
}

uint32_t thread_id() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

// Start and end of a record, in the job's clock.
template <class Record>
void set_times(Record* r, uint64_t start, uint64_t end) {
  r->start = start;
  r->end = end;
}

}  // namespace

namespace {

// A kernel record's description of the launch (name, registers, memory sizes, shape).
CUpti_ActivityKernel10 kernel_record(const KernelLaunch& launch) {
  // Records hold the name by pointer for as long as the job keeps them: a pool of
  // the names seen, never freed (one entry per distinct kernel).
  static std::mutex names_mutex;
  static std::set<std::string> names;
  const FunctionObject* fn = launch.fn;
  CUpti_ActivityKernel10 r{};
  {
    std::lock_guard<std::mutex> lock(names_mutex);
    r.name = names.insert(fn->name).first->c_str();
  }
  const auto attribute = [fn](CUfunction_attribute a) { return fn->attributes[a].load(std::memory_order_relaxed); };
  r.registersPerThread = static_cast<uint16_t>(attribute(CU_FUNC_ATTRIBUTE_NUM_REGS));
  r.staticSharedMemory = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  r.localMemoryPerThread = static_cast<uint32_t>(attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
  r.gridX = static_cast<int32_t>(launch.grid[0]), r.gridY = static_cast<int32_t>(launch.grid[1]);
  r.gridZ = static_cast<int32_t>(launch.grid[2]);
  r.blockX = static_cast<int32_t>(launch.block[0]), r.blockY = static_cast<int32_t>(launch.block[1]);
  r.blockZ = static_cast<int32_t>(launch.block[2]);
  r.dynamicSharedMemory = static_cast<int32_t>(launch.dynamic_shared);
  r.clusterX = launch.cluster[0], r.clusterY = launch.cluster[1], r.clusterZ = launch.cluster[2];
  r.launchType = launch.cooperative ? CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE
                                    : CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
  return r;
}

CUpti_CallbackId driver_cbid(LaunchCall call) {
  switch (call) {
    case LaunchCall::kLaunchKernel: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    case LaunchCall::kLaunchKernelPtsz: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz;
    case LaunchCall::kLaunchKernelEx: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
    case LaunchCall::kLaunchKernelExPtsz: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
    case LaunchCall::kCooperative: return CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel;
    case LaunchCall::kCooperativePtsz: return CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
    default: return CUPTI_DRIVER_TRACE_CBID_INVALID;
  }
}

}  // namespace

uint32_t current_context_id() {
  ContextObject* c = current_context();
  return c != nullptr ? static_cast<uint32_t>(c->id) : 1;
}

uint32_t stream_record_id(uint64_t stream) { return static_cast<uint32_t>(stream); }

CUptiResult push_external_correlation(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  const auto k = static_cast<int>(kind);
  if (k <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || k >= kExternalKinds) return CUPTI_ERROR_INVALID_PARAMETER;
  t_external[k].push_back(id);
  return CUPTI_SUCCESS;
}

CUptiResult pop_external_correlation(CUpti_ExternalCorrelationKind kind, uint64_t* last) {
  const auto k = static_cast<int>(kind);
  if (k <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || k >= kExternalKinds) return CUPTI_ERROR_INVALID_PARAMETER;
  if (t_external[k].empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (last != nullptr) *last = t_external[k].back();
  t_external[k].pop_back();
  return CUPTI_SUCCESS;
}

DeviceWork::DeviceWork(uint64_t stream, LaunchCall call) : stream_(stream), call_(call) {
  if (!device_work_enabled()) return;
  api_start_ = timestamp();
  correlation_ = next_correlation_id();
  if (!(kind_enabled(CUPTI_ACTIVITY_KIND_KERNEL) || kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ||
        kind_enabled(CUPTI_ACTIVITY_KIND_MEMCPY) || kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET)))
    return;
  if (capture_info(stream).status != CU_STREAM_CAPTURE_STATUS_NONE) return;
  if (!reference_ready(stream)) return;
  start_event_ = take_event();
  if (start_event_ != 0 && record_timing_event(start_event_, stream) != CUDA_SUCCESS) {
    give_back(start_event_);
    start_event_ = 0;
  }
  if (start_event_ != 0) g_in_flight.fetch_add(1, std::memory_order_acq_rel);
}

DeviceWork::~DeviceWork() {
  if (start_event_ == 0) return;
  if (!finished_) give_back(start_event_);
  g_in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

void DeviceWork::kernel(CUresult rc, const KernelLaunch& launch) {
  CUpti_ActivityKernel10 record = kernel_record(launch);
  record.kind = kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                                                                    : CUPTI_ACTIVITY_KIND_KERNEL;
  record.correlationId = correlation_;
  record.contextId = current_context_id();
  record.streamId = stream_record_id(stream_);
  record.queued = CUPTI_TIMESTAMP_UNKNOWN;
  record.submitted = CUPTI_TIMESTAMP_UNKNOWN;
  finish(rc, record.kind, &record);
}

void DeviceWork::memcpy(CUresult rc, CopyKind kind, bool host_pinned, size_t bytes, bool async) {
  const auto host = static_cast<uint8_t>(host_pinned ? CUPTI_ACTIVITY_MEMORY_KIND_PINNED
                                                     : CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE);
  const auto device = static_cast<uint8_t>(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  CUpti_ActivityMemcpy6 record{};
  record.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  switch (kind) {
    case CopyKind::kHostToDevice:
      record.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, record.srcKind = host, record.dstKind = device;
      break;
    case CopyKind::kDeviceToHost:
      record.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, record.srcKind = device, record.dstKind = host;
      break;
    case CopyKind::kDeviceToDevice:
      record.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, record.srcKind = device, record.dstKind = device;
      break;
  }
  record.flags = async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
  record.bytes = bytes;
  record.copyCount = 1;
  record.correlationId = correlation_;
  record.contextId = current_context_id();
  record.streamId = stream_record_id(stream_);
  finish(rc, record.kind, &record);
}

void DeviceWork::memset(CUresult rc, uint32_t value, size_t bytes, bool async) {
  CUpti_ActivityMemset4 record{};
  record.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  record.value = value;
  record.bytes = bytes;
  record.flags = async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
  record.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  record.correlationId = correlation_;
  record.contextId = current_context_id();
  record.streamId = stream_record_id(stream_);
  finish(rc, record.kind, &record);
}

void DeviceWork::finish(CUresult rc, int kind_number, const void* record) {
  const auto kind = static_cast<CUpti_ActivityKind>(kind_number);
  if (correlation_ == 0) return;  // nothing was enabled when the call began
  finished_ = true;
  if (kind_enabled(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) {
    for (int k = 0; k < kExternalKinds; ++k) {
      if (t_external[k].empty()) continue;
      CUpti_ActivityExternalCorrelation ext{};
      ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      ext.externalKind = static_cast<CUpti_ExternalCorrelationKind>(k);
      ext.externalId = t_external[k].back();
      ext.correlationId = correlation_;
      queue_record(&ext, sizeof ext);
    }
  }
  if (kind_enabled(CUPTI_ACTIVITY_KIND_DRIVER) && call_ != LaunchCall::kNone) {
    CUpti_ActivityAPI api{};
    api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    api.cbid = driver_cbid(call_);
    api.start = api_start_;
    api.end = timestamp();
    api.processId = static_cast<uint32_t>(getpid());
    api.threadId = thread_id();
    api.correlationId = correlation_;
    api.returnValue = static_cast<uint32_t>(rc);
    queue_record(&api, sizeof api);
  }
  if (start_event_ == 0) return;
  const uint64_t end_event = rc == CUDA_SUCCESS && kind_enabled(kind) ? take_event() : 0;
  if (end_event == 0 || record_timing_event(end_event, stream_) != CUDA_SUCCESS) {
    give_back(start_event_);
    give_back(end_event);
    return;
  }
  Pending p{};
  p.kind = kind;
  p.stream = stream_;
  p.start_event = start_event_;
  p.end_event = end_event;
  std::memcpy(&p.record, record, record_size(kind));
  bool resolve = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_pending.push_back(p);
    resolve = g_pending.size() >= g_resolve_at;
  }
  if (resolve) resolve_device_work(false);
}

void resolve_device_work(bool forced) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (forced) {
    // The last end event of each stream: once it completed, every earlier one on that
    // stream has (a stream runs in order).
    std::map<uint64_t, uint64_t> last_end;
    for (const Pending& p : g_pending) last_end[p.stream] = p.end_event;
    for (const auto& stream_end : last_end) (void)synchronize_timing_event(stream_end.second);
  }
  if (!g_pending.empty()) fit_job_clock(g_reference);
  // Every pending start and end event's time, kTimingEventsPerRequest to a request.
  std::vector<uint64_t> events;
  events.reserve(2 * g_pending.size());
  for (const Pending& p : g_pending) events.push_back(p.start_event), events.push_back(p.end_event);
  std::vector<double> ms(events.size(), std::numeric_limits<double>::infinity());
  for (size_t at = 0; at < events.size(); at += kTimingEventsPerRequest) {
    const auto count = static_cast<uint32_t>(std::min<size_t>(kTimingEventsPerRequest, events.size() - at));
    if (timing_event_times(g_reference.event, events.data() + at, count, ms.data() + at) != CUDA_SUCCESS)
      std::fill(ms.begin() + static_cast<std::ptrdiff_t>(at), ms.begin() + static_cast<std::ptrdiff_t>(at + count),
                std::numeric_limits<double>::infinity());
  }
  const auto at = [](double t) {
    return g_reference.host_stamp + static_cast<uint64_t>(t > 0 ? t * 1e6 * g_units_per_ns : 0);
  };
  std::deque<Pending> waiting;
  size_t lost = 0;
  for (size_t i = 0; i < g_pending.size(); ++i) {
    Pending& p = g_pending[i];
    const double start_ms = ms[2 * i], end_ms = ms[2 * i + 1];
    if (std::isnan(start_ms) || std::isnan(end_ms)) {
      waiting.push_back(p);       // not finished yet: a later flush reads it
      continue;
    }
    give_back(p.start_event);
    give_back(p.end_event);
    if (std::isinf(start_ms) || std::isinf(end_ms)) {
      ++lost;                      // the work failed (a fault) or the server could not time it
      continue;
    }
    const uint64_t start = at(start_ms);
    const uint64_t end = at(end_ms > start_ms ? end_ms : start_ms);
    switch (p.kind) {
      case CUPTI_ACTIVITY_KIND_MEMCPY: set_times(&p.record.memcpy, start, end); break;
      case CUPTI_ACTIVITY_KIND_MEMSET: set_times(&p.record.memset, start, end); break;
      default:
        set_times(&p.record.kernel, start, end);
        p.record.kernel.completed = end;
        break;
    }
    queue_record(&p.record, record_size(p.kind));
  }
  g_pending.swap(waiting);
  g_resolve_at = g_pending.size() + kResolveBatch;
  if (lost != 0)
    log_error("CUPTI (tally): %zu activity records dropped: their work failed or could not be timed", lost);
  if (g_pending.empty() && g_reference.event != 0 && g_in_flight.load(std::memory_order_acquire) == 0) {
    destroy_timing_event(g_reference.event);
    g_reference = Reference{};
  }
}

}  // namespace tally::client::cupti
