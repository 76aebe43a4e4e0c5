// The CUPTI activity API as tally answers it (cupti_state.h says why tally answers
// it). Kinds tally records: KERNEL and CONCURRENT_KERNEL (the same records: tally
// never serializes kernels to time them), MEMCPY, MEMSET, DRIVER (the launch, copy
// and memset calls) and EXTERNAL_CORRELATION. Every other kind is refused with the
// reason, never accepted and left empty.
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "cupti/cupti_state.h"
#include "cupti/device_work_records.h"
#include "cupti/refusal.h"
#include "logging/log.h"

namespace tally::client::cupti {
namespace {

const char* refusal_reason(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return "runtime API records need the CUDA runtime's tool hooks, which only NVIDIA's driver drives; tally "
             "records the driver calls behind them (CUPTI_ACTIVITY_KIND_DRIVER)";
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
    case CUPTI_ACTIVITY_KIND_CUDA_EVENT:
      return "tally does not record synchronization or CUDA event activity";
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
      return "tally does not record profiler overhead";
    default:
      return "tally's CUPTI records only kernels, memcpy, memset, driver calls and external correlation";
  }
}

}  // namespace

CUptiResult refuse(const char* call, const char* reason, CUptiResult result) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::string key = std::string(call) + reason;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(key).second) return result;
  }
  log_error("CUPTI (tally): %s refused: %s", call, reason);
  return result;
}

}  // namespace tally::client::cupti

using namespace tally::client::cupti;

#pragma GCC visibility push(default)
extern "C" {

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  return register_buffer_callbacks(funcBufferRequested, funcBufferCompleted);
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (record_size(kind) == 0) {
    char call[64];
    std::snprintf(call, sizeof call, "cuptiActivityEnable(kind %d)", static_cast<int>(kind));
    return refuse(call, refusal_reason(kind));
  }
  const CUptiResult rc = set_kind_enabled(kind, true);
  if (rc == CUPTI_SUCCESS) hold_buffer();
  return rc;
}

CUptiResult CUPTIAPI cuptiActivityEnableContext(CUcontext, CUpti_ActivityKind kind) {
  // One session serves every context of the job, so a kind is on for all of them.
  return cuptiActivityEnable(kind);
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (record_size(kind) == 0) return CUPTI_SUCCESS;  // never enabled
  return set_kind_enabled(kind, false);
}

CUptiResult CUPTIAPI cuptiActivityDisableContext(CUcontext, CUpti_ActivityKind kind) {
  return cuptiActivityDisable(kind);
}

CUptiResult CUPTIAPI cuptiActivityEnableAndDump(CUpti_ActivityKind kind) {
  if (CUptiResult rc = cuptiActivityEnable(kind); rc != CUPTI_SUCCESS) return rc;
  return flush(false);
}

CUptiResult CUPTIAPI cuptiActivityFlush(CUcontext, uint32_t, uint32_t flag) {
  return flush((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0);
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  return flush((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0);
}

CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t time) {
  if (time == 0) return CUPTI_SUCCESS;  // 0 turns periodic flushing off, which is tally's only mode
  return refuse("cuptiActivityFlushPeriod", "tally delivers records when the job flushes, not periodically");
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes,
                                               CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t at = 0;
  if (*record != nullptr) {
    const auto* current = reinterpret_cast<const uint8_t*>(*record);
    if (current < buffer || current >= buffer + validBufferSizeBytes) return CUPTI_ERROR_INVALID_PARAMETER;
    const size_t stride = record_stride((*record)->kind);
    if (stride == 0) return CUPTI_ERROR_INVALID_KIND;
    at = static_cast<size_t>(current - buffer) + stride;
  }
  if (at + sizeof(CUpti_Activity) > validBufferSizeBytes) {
    *record = nullptr;
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  *record = reinterpret_cast<CUpti_Activity*>(buffer + at);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = dropped_records();
  return CUPTI_SUCCESS;
}

// Buffer-size and semaphore attributes shape NVIDIA's device-side buffers, which
// tally does not have; the buffer-handling ones (zeroed buffers, pinned buffers,
// per-thread buffers) change nothing a job can see in tally's records, which are
// written zero-padded into the job's buffers in the order the calls finished. So
// all are accepted without effect.
CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t* valueSize, void* value) {
  if (valueSize == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (attr) {
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_CDP:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_SIZE:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_LIMIT:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE:
    case CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER:
    case CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED:
    case CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_DEVICE_GRAPHS:
      return CUPTI_SUCCESS;
    default:
      return refuse("cuptiActivitySetAttribute", "tally does not know this attribute");
  }
}

CUptiResult CUPTIAPI cuptiActivityGetAttribute(CUpti_ActivityAttribute attr, size_t* valueSize, void* value) {
  if (valueSize == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (attr) {
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_CDP: {
      if (*valueSize < sizeof(size_t)) return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
      const size_t size = 8u << 20;  // NVIDIA's documented default
      std::memcpy(value, &size, sizeof size);
      *valueSize = sizeof size;
      return CUPTI_SUCCESS;
    }
    default:
      return refuse("cuptiActivityGetAttribute", "tally does not know this attribute");
  }
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  return push_external_correlation(kind, id);
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* lastId) {
  return pop_external_correlation(kind, lastId);
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp) {
  set_timestamp_callback(funcTimestamp);
  return CUPTI_SUCCESS;
}

// Per-call switches for runtime and driver records. Driver records are all-or-none
// in tally (the launch, copy and memset calls); runtime records are never made.
CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId, uint8_t enable) {
  return set_kind_enabled(CUPTI_ACTIVITY_KIND_DRIVER, enable != 0);
}

CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId, uint8_t enable) {
  if (enable == 0) return CUPTI_SUCCESS;
  return cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
}

// Timestamps tally cannot take: the moments a launch was queued and submitted
// inside NVIDIA's driver, and CUDA events' device times.
CUptiResult CUPTIAPI cuptiActivityEnableLatencyTimestamps(uint8_t enable) {
  if (enable == 0) return CUPTI_SUCCESS;
  return refuse("cuptiActivityEnableLatencyTimestamps",
                "tally has no queued/submitted times for a launch (its records say CUPTI_TIMESTAMP_UNKNOWN)");
}

CUptiResult CUPTIAPI cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t enable) {
  if (enable == 0) return CUPTI_SUCCESS;
  return refuse("cuptiActivityEnableCudaEventDeviceTimestamps", "tally does not record CUDA event activity");
}

CUptiResult CUPTIAPI cuptiActivityEnableLaunchAttributes(uint8_t enable) {
  if (enable == 0) return CUPTI_SUCCESS;
  return refuse("cuptiActivityEnableLaunchAttributes", "tally's kernel records carry no launch attributes");
}

}  // extern "C"
#pragma GCC visibility pop
