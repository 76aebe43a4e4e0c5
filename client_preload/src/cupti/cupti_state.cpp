// The activity API's state: which kinds are on, the job's callbacks, and the buffer
// being filled. A buffer reaches the job when it is full or at a flush
// (cuptiActivityFlush, FlushAll, Finalize), as CUPTI documents; Kineto and the
// CUPTI samples flush when they stop.
#include "cupti/cupti_state.h"

#include <atomic>
#include <cstring>
#include <ctime>
#include <mutex>

#include "cupti/device_work_records.h"
#include "logging/log.h"

namespace tally::client::cupti {
namespace {

std::atomic<uint64_t> g_enabled_kinds{0};  // bit k: CUpti_ActivityKind k (tally's kinds are all below 64)
std::atomic<CUpti_TimestampCallbackFunc> g_timestamp{nullptr};
std::atomic<uint32_t> g_next_correlation{1};
std::atomic<size_t> g_dropped{0};

// The job's buffer being filled, as CUPTI fills them: records back to back, each
// padded to 8 bytes. A buffer is asked for as soon as a kind is enabled (profilers
// such as Kineto flush only when they handed out a buffer), handed back when the
// next record does not fit, and at every flush.
std::mutex g_buffer_mutex;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
struct Buffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  size_t used = 0;
  size_t max_records = 0;  // 0: as many as fit
  size_t records = 0;
};
Buffer g_buffer;

constexpr uint64_t kDeviceWorkKinds =
    (1ull << CUPTI_ACTIVITY_KIND_KERNEL) | (1ull << CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) |
    (1ull << CUPTI_ACTIVITY_KIND_MEMCPY) | (1ull << CUPTI_ACTIVITY_KIND_MEMSET) | (1ull << CUPTI_ACTIVITY_KIND_DRIVER) |
    (1ull << CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);

size_t padded(size_t size) { return (size + 7) & ~size_t{7}; }

// With g_buffer_mutex held. The job's callbacks run under it: CUPTI forbids them to
// call back into the activity API, and Kineto's only take Kineto's own lock.
bool hold_buffer_locked() {
  if (g_buffer.data != nullptr) return true;
  if (g_request == nullptr) return false;
  Buffer b;
  g_request(&b.data, &b.size, &b.max_records);
  if (b.data == nullptr || b.size < padded(sizeof(CUpti_ActivityKernel10))) {
    static bool said = false;
    if (!said) {
      said = true;
      log_error("CUPTI (tally): the job's buffer callback gave %s; activity records are dropped",
                b.data == nullptr ? "no buffer" : "a buffer smaller than one record");
    }
    // A buffer too small for a record goes straight back, empty, so the job can free it.
    if (b.data != nullptr && g_complete != nullptr) g_complete(nullptr, 0, b.data, b.size, 0);
    return false;
  }
  g_buffer = b;
  return true;
}

void complete_buffer_locked() {
  if (g_buffer.data == nullptr) return;
  const Buffer done = g_buffer;
  g_buffer = Buffer{};
  if (g_complete != nullptr) g_complete(nullptr, 0, done.data, done.size, done.used);
}

}  // namespace

bool kind_enabled(CUpti_ActivityKind kind) {
  const auto k = static_cast<unsigned>(kind);
  return k < 64 && (g_enabled_kinds.load(std::memory_order_acquire) >> k & 1) != 0;
}

bool device_work_enabled() { return (g_enabled_kinds.load(std::memory_order_acquire) & kDeviceWorkKinds) != 0; }

CUptiResult set_kind_enabled(CUpti_ActivityKind kind, bool enabled) {
  const auto k = static_cast<unsigned>(kind);
  if (k >= 64) return CUPTI_ERROR_INVALID_KIND;
  if (enabled) {
    g_enabled_kinds.fetch_or(1ull << k, std::memory_order_acq_rel);
  } else {
    g_enabled_kinds.fetch_and(~(1ull << k), std::memory_order_acq_rel);
  }
  return CUPTI_SUCCESS;
}

uint64_t timestamp() {
  if (CUpti_TimestampCallbackFunc f = g_timestamp.load(std::memory_order_acquire)) return f();
  return realtime_ns();
}

bool job_clock() { return g_timestamp.load(std::memory_order_acquire) != nullptr; }

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void set_timestamp_callback(CUpti_TimestampCallbackFunc callback) {
  g_timestamp.store(callback, std::memory_order_release);
}

uint32_t next_correlation_id() { return g_next_correlation.fetch_add(1, std::memory_order_relaxed); }

size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    default: return 0;
  }
}

size_t record_stride(CUpti_ActivityKind kind) { return padded(record_size(kind)); }

void queue_record(const void* record, size_t size) {
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  const size_t step = padded(size);
  if (g_buffer.data != nullptr && (g_buffer.used + step > g_buffer.size ||
                                   (g_buffer.max_records != 0 && g_buffer.records == g_buffer.max_records)))
    complete_buffer_locked();
  if (!hold_buffer_locked() || g_buffer.used + step > g_buffer.size) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::memset(g_buffer.data + g_buffer.used, 0, step);
  std::memcpy(g_buffer.data + g_buffer.used, record, size);
  g_buffer.used += step;
  ++g_buffer.records;
}

CUptiResult register_buffer_callbacks(CUpti_BuffersCallbackRequestFunc request,
                                      CUpti_BuffersCallbackCompleteFunc complete) {
  if (request == nullptr || complete == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

void hold_buffer() {
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  (void)hold_buffer_locked();
}

CUptiResult flush(bool forced) {
  resolve_device_work(forced);
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  complete_buffer_locked();
  return CUPTI_SUCCESS;
}

size_t dropped_records() { return g_dropped.load(std::memory_order_relaxed); }

void finalize() {
  (void)flush(true);
  g_enabled_kinds.store(0, std::memory_order_release);
  g_timestamp.store(nullptr, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_buffer_mutex);
  g_request = nullptr;
  g_complete = nullptr;
}

}  // namespace tally::client::cupti
