// CUPTI's general calls under tally: version, result texts, timestamps, the ids a
// record names, and finalize.
#include <cstring>

#include "contexts/contexts.h"
#include "cupti/cupti_state.h"
#include "cupti/device_work_records.h"
#include "cupti/refusal.h"
#include "streams/stream_ids.h"

using namespace tally::client::cupti;

namespace {

const char* result_name(CUptiResult result) {
  switch (result) {
#define TALLY_CUPTI_RESULT(name) \
  case name: return #name;
    TALLY_CUPTI_RESULT(CUPTI_SUCCESS)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_PARAMETER)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_DEVICE)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_CONTEXT)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_ID)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_NAME)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_OPERATION)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_OUT_OF_MEMORY)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_HARDWARE)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_API_NOT_IMPLEMENTED)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_MAX_LIMIT_REACHED)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_NOT_READY)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_NOT_COMPATIBLE)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_NOT_INITIALIZED)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_QUEUE_EMPTY)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_HANDLE)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_STREAM)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_KIND)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_DISABLED)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_INVALID_MODULE)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_NOT_SUPPORTED)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    TALLY_CUPTI_RESULT(CUPTI_ERROR_UNKNOWN)
#undef TALLY_CUPTI_RESULT
    default: return nullptr;
  }
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

// The CUPTI API version of the headers tally was built with: the records tally
// writes have that version's layouts.
CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  if (str == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  const char* name = result_name(result);
  if (name == nullptr) {
    *str = "CUPTI_ERROR_UNKNOWN";
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  *str = name;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp_out) {
  if (timestamp_out == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp_out = timestamp();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetContextId(CUcontext context, uint32_t* contextId) {
  if (contextId == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  tally::client::ContextObject* c = nullptr;
  if (context == nullptr || tally::client::context_object(context, &c) != CUDA_SUCCESS || c == nullptr)
    return CUPTI_ERROR_INVALID_CONTEXT;
  *contextId = static_cast<uint32_t>(c->id);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext, uint32_t* deviceId) {
  if (deviceId == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *deviceId = 0;  // a tally server serves one device, the job's device 0
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext, CUstream stream, uint8_t perThreadStream, uint32_t* streamId) {
  if (streamId == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  uint64_t wire = 0;
  if (tally::client::stream_id(stream, perThreadStream != 0, &wire) != CUDA_SUCCESS) return CUPTI_ERROR_INVALID_STREAM;
  *streamId = stream_record_id(wire);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetStreamId(CUcontext context, CUstream stream, uint32_t* streamId) {
  return cuptiGetStreamIdEx(context, stream, 0, streamId);
}

CUptiResult CUPTIAPI cuptiFinalize(void) {
  finalize();
  return CUPTI_SUCCESS;
}

}  // extern "C"
#pragma GCC visibility pop
