// Stream attributes (cuStreamSetAttribute, cuStreamGetAttribute,
// cuStreamCopyAttributes and their _ptsz forms): the client keeps each stream's
// values and answers from them, as it answers a stream's flags and priority.
//   access-policy window  also sent to the server (StreamAccessPolicy), which applies
//                         it to the device stream in stream order: on a GPU it steers
//                         the L2 residency of the stream's later kernels
//   priority              the stream's priority (cuStreamGetPriority says the same),
//                         clamped to CUDA's range like cuStreamCreateWithPriority's;
//                         as there, the device stream's priority stays the scheduler's
//                         (tally orders work by the job's priority class)
//   synchronization policy, memory synchronization domain and its map, NVLink-centric
//                         scheduling: how the driver waits and fences for this
//                         process's threads; the server's device streams are not the
//                         job's, so they are kept and read back only
// Any other attribute (cooperative, cluster...: valid for launches, not streams)
// is CUDA_ERROR_INVALID_VALUE, as in the driver.
#include <mutex>
#include <unordered_map>

#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "streams/stream_attributes.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

constexpr int kLeastPriority = 0;      // cuCtxGetStreamPriorityRange (streams.cpp)
constexpr int kGreatestPriority = -5;

struct StreamAttributes {
  CUaccessPolicyWindow window{};                       // num_bytes 0: none
  CUsynchronizationPolicy sync_policy = CU_SYNC_POLICY_AUTO;
  CUlaunchMemSyncDomainMap domain_map{0, 1};           // the driver's default: default -> 0, remote -> 1
  CUlaunchMemSyncDomain domain = CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT;
  unsigned nvlink_util_centric = 0;
  int priority = 0;                                    // default streams only; created ones keep theirs
};

std::mutex g_mutex;
std::unordered_map<uint64_t, StreamAttributes> g_attributes;   // streams with a value set

StreamAttributes stored(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_attributes.find(id);
  return it == g_attributes.end() ? StreamAttributes{} : it->second;
}

void store(uint64_t id, const StreamAttributes& a) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_attributes[id] = a;
}

CUresult check_window(const CUaccessPolicyWindow& w) {
  const int64_t max_bytes =
      Connection::instance().device().attributes[CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE];
  const char* problem = nullptr;
  if (w.num_bytes > static_cast<size_t>(max_bytes > 0 ? max_bytes : 0)) {
    problem = "is larger than the device's CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE";
  } else if (!(w.hitRatio >= 0.0f && w.hitRatio <= 1.0f)) {
    problem = "has a hit ratio outside [0, 1]";
  } else if (w.hitProp != CU_ACCESS_PROPERTY_NORMAL && w.hitProp != CU_ACCESS_PROPERTY_STREAMING &&
             w.hitProp != CU_ACCESS_PROPERTY_PERSISTING) {
    problem = "has an unknown hit property";
  } else if (w.missProp != CU_ACCESS_PROPERTY_NORMAL && w.missProp != CU_ACCESS_PROPERTY_STREAMING) {
    problem = "has a miss property other than normal or streaming";
  }
  if (problem == nullptr) return CUDA_SUCCESS;
  log_error("cuStreamSetAttribute: the access-policy window of %zu bytes at %p %s (CUDA_ERROR_INVALID_VALUE)",
            w.num_bytes, w.base_ptr, problem);
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult send_window(uint64_t id, const CUaccessPolicyWindow& w) {
  return Connection::instance().send(protocol::StreamAccessPolicyMsg{
      id, reinterpret_cast<uint64_t>(w.base_ptr), w.num_bytes, static_cast<double>(w.hitRatio),
      static_cast<uint32_t>(w.hitProp), static_cast<uint32_t>(w.missProp)});
}

CUresult get_attribute(CUstream stream, CUstreamAttrID attr, CUstreamAttrValue* value, bool per_thread) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  const StreamAttributes a = stored(id);
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: value->accessPolicyWindow = a.window; break;
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY: value->syncPolicy = a.sync_policy; break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: value->memSyncDomainMap = a.domain_map; break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: value->memSyncDomain = a.domain; break;
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING: value->nvlinkUtilCentricScheduling = a.nvlink_util_centric; break;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY: {
      const StreamObject* s = as_stream(stream);
      value->priority = s != nullptr ? s->priority : a.priority;
      break;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult set_attribute(CUstream stream, CUstreamAttrID attr, const CUstreamAttrValue* value, bool per_thread) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  StreamAttributes a = stored(id);
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
      if (CUresult rc = check_window(value->accessPolicyWindow); rc != CUDA_SUCCESS) return rc;
      if (CUresult rc = send_window(id, value->accessPolicyWindow); rc != CUDA_SUCCESS) return rc;
      a.window = value->accessPolicyWindow;
      break;
    }
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      if (value->syncPolicy < CU_SYNC_POLICY_AUTO || value->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
      a.sync_policy = value->syncPolicy;
      break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: a.domain_map = value->memSyncDomainMap; break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      if (value->memSyncDomain != CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT &&
          value->memSyncDomain != CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
        return CUDA_ERROR_INVALID_VALUE;
      a.domain = value->memSyncDomain;
      break;
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
      a.nvlink_util_centric = value->nvlinkUtilCentricScheduling != 0;
      break;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY: {
      const int p = value->priority > kLeastPriority     ? kLeastPriority
                    : value->priority < kGreatestPriority ? kGreatestPriority
                                                          : value->priority;
      if (StreamObject* s = as_stream(stream); s != nullptr) s->priority = p;
      a.priority = p;
      break;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  store(id, a);
  return CUDA_SUCCESS;
}

CUresult copy_attributes(CUstream dst, CUstream src, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t dst_id = 0, src_id = 0;
  if (CUresult rc = stream_id(dst, per_thread, &dst_id); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = stream_id(src, per_thread, &src_id); rc != CUDA_SUCCESS) return rc;
  StreamAttributes a = stored(src_id);
  if (const StreamObject* s = as_stream(src); s != nullptr) a.priority = s->priority;
  if (CUresult rc = send_window(dst_id, a.window); rc != CUDA_SUCCESS) return rc;
  if (StreamObject* d = as_stream(dst); d != nullptr) d->priority = a.priority;
  store(dst_id, a);
  return CUDA_SUCCESS;
}

}  // namespace

void forget_stream_attributes(uint64_t stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_attributes.erase(stream);
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuStreamGetAttribute_v11000)(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue_v1* value) {
  return get_attribute(hStream, attr, value, false);
}
TALLY_ENTRY(cuStreamGetAttribute_v11000_ptsz)(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue_v1* value_out) {
  return get_attribute(hStream, attr, value_out, true);
}
TALLY_ENTRY(cuStreamSetAttribute_v11000)(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue_v1* param) {
  return set_attribute(hStream, attr, param, false);
}
TALLY_ENTRY(cuStreamSetAttribute_v11000_ptsz)(CUstream hStream, CUstreamAttrID attr,
                                              const CUstreamAttrValue_v1* value) {
  return set_attribute(hStream, attr, value, true);
}
TALLY_ENTRY(cuStreamCopyAttributes_v11000)(CUstream dstStream, CUstream srcStream) {
  return copy_attributes(dstStream, srcStream, false);
}
TALLY_ENTRY(cuStreamCopyAttributes_v11000_ptsz)(CUstream dst, CUstream src) {
  return copy_attributes(dst, src, true);
}
