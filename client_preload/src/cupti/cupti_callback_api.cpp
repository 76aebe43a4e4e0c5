// The callback API (callbacks.h). API-domain callbacks (driver and runtime entry
// and exit with each call's parameter struct) would need tally to build CUPTI's
// per-function parameter structs for every call; they are refused with the reason,
// as are the other domains, and a profiler that needs them says so.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>

#include "cupti/callbacks.h"
#include "cupti/refusal.h"

namespace tally::client::cupti {
namespace {

// What cuptiSubscribe hands out; its address is the handle.
struct Subscriber {
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
};

std::mutex g_mutex;
Subscriber g_subscriber;
std::atomic<bool> g_subscribed{false};
std::set<CUpti_CallbackId> g_resource_enabled;  // CUPTI_CB_DOMAIN_RESOURCE callbacks switched on

bool supported_resource_callback(CUpti_CallbackId cbid) {
  return cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED || cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING;
}

void raise_resource(CUpti_CallbackId cbid, CUcontext context) {
  if (!g_subscribed.load(std::memory_order_acquire)) return;
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_resource_enabled.count(cbid) == 0) return;
    callback = g_subscriber.callback;
    userdata = g_subscriber.userdata;
  }
  CUpti_ResourceData data{};
  data.context = context;
  if (callback != nullptr) callback(userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &data);
}

const char* domain_refusal(CUpti_CallbackDomain domain) {
  switch (domain) {
    case CUPTI_CB_DOMAIN_DRIVER_API:
    case CUPTI_CB_DOMAIN_RUNTIME_API:
      return "tally raises no API-domain callbacks (it does not build CUPTI's parameter structs); activity records "
             "(cuptiActivityEnable) are what tally's CUPTI measures";
    default:
      return "of the callback domains tally raises only the resource domain's context created and destroy starting";
  }
}

}  // namespace

void context_created(CUcontext context) { raise_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, context); }
void context_destroy_starting(CUcontext context) {
  raise_resource(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, context);
}

}  // namespace tally::client::cupti

using namespace tally::client::cupti;

#pragma GCC visibility push(default)
extern "C" {

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  if (subscriber == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_subscribed.load(std::memory_order_relaxed)) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_subscriber = Subscriber{callback, userdata};
  g_resource_enabled.clear();
  g_subscribed.store(true, std::memory_order_release);
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                       void* userdata, CUpti_SubscriberParams*) {
  return cuptiSubscribe(subscriber, callback, userdata);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_subscribed.load(std::memory_order_relaxed) ||
      subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber))
    return CUPTI_ERROR_INVALID_PARAMETER;
  g_subscribed.store(false, std::memory_order_release);
  g_subscriber = Subscriber{};
  g_resource_enabled.clear();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber) ||
      !g_subscribed.load(std::memory_order_acquire))
    return CUPTI_ERROR_INVALID_PARAMETER;
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || !supported_resource_callback(cbid)) {
    if (enable == 0) return CUPTI_SUCCESS;
    char call[80];
    std::snprintf(call, sizeof call, "cuptiEnableCallback(domain %d, callback %u)", static_cast<int>(domain), cbid);
    return refuse(call, domain_refusal(domain));
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (enable != 0) {
    g_resource_enabled.insert(cbid);
  } else {
    g_resource_enabled.erase(cbid);
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    for (CUpti_CallbackId cbid : {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING})
      if (CUptiResult rc = cuptiEnableCallback(enable, subscriber, domain, cbid); rc != CUPTI_SUCCESS) return rc;
    return CUPTI_SUCCESS;
  }
  return cuptiEnableCallback(enable, subscriber, domain, 0);
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char** name) {
  if (name == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  // The driver calls tally's records name: its kernel launches.
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: *name = "cuLaunchKernel"; return CUPTI_SUCCESS;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: *name = "cuLaunchKernel_ptsz"; return CUPTI_SUCCESS;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: *name = "cuLaunchKernelEx"; return CUPTI_SUCCESS;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: *name = "cuLaunchKernelEx_ptsz"; return CUPTI_SUCCESS;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel: *name = "cuLaunchCooperativeKernel"; return CUPTI_SUCCESS;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
        *name = "cuLaunchCooperativeKernel_ptsz";
        return CUPTI_SUCCESS;
      default: break;
    }
  }
  return refuse("cuptiGetCallbackName", "tally names only the driver calls its records carry (kernel launches)",
                CUPTI_ERROR_INVALID_PARAMETER);
}

}  // extern "C"
#pragma GCC visibility pop
