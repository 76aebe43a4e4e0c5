#include "contexts/contexts.h"

#include <vector>

#include "connection/connection.h"
#include "contexts/green_contexts.h"
#include "cupti/callbacks.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"

namespace tally::client {
namespace {

// The server serves one device; its primary context lives for the whole process.
ContextObject g_primary(true, 1);
std::atomic<uint64_t> g_next_context_id{2};

// Innermost last; the top is the thread's current context.
thread_local std::vector<ContextObject*> t_context_stack;

ContextObject* as_context(CUcontext ctx) { return reinterpret_cast<ContextObject*>(ctx); }
CUcontext handle(ContextObject* c) { return reinterpret_cast<CUcontext>(c); }

ContextObject* top() { return t_context_stack.empty() ? nullptr : t_context_stack.back(); }

// The CUDA runtime binds the primary context to a thread at the thread's first call
// that needs a context unless the thread made one current itself ("Interactions with
// the CUDA Driver API" in the runtime's documentation). cudart does not say so to the
// driver: under tally it calls e.g. cuMemAlloc or cuCtxGetLimit on such a thread with
// nothing current (every runtime 12.4 to 13.5, traced), so the driver side binds it.
// Only in a process whose cudart asked for the primary context (runtime interface), and
// only on a thread that never set, pushed, popped or created a context: a driver-API
// thread that unbound its context still gets CUDA_ERROR_INVALID_CONTEXT.
std::atomic<bool> g_runtime_uses_primary{false};
thread_local bool t_thread_chose_context = false;

ContextObject* top_or_runtime_primary() {
  if (!t_context_stack.empty() || t_thread_chose_context ||
      !g_runtime_uses_primary.load(std::memory_order_relaxed))
    return top();
  t_context_stack.push_back(&g_primary);
  return &g_primary;
}

// Objects are never freed, so a handle the job made stays readable; anything else
// must be the primary context or an object this file created and still live.
std::mutex g_created_mutex;
std::set<ContextObject*> g_created;
std::atomic<bool> g_any_created{false};  // lets frees skip the search while the job made no context

bool known(ContextObject* c) {
  if (c == &g_primary) return true;
  std::lock_guard<std::mutex> lock(g_created_mutex);
  return g_created.count(c) != 0;
}

CUresult live_context(CUcontext ctx, ContextObject** out) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  ContextObject* c = as_context(ctx);
  if (c == nullptr || !known(c) || !c->live()) return CUDA_ERROR_INVALID_CONTEXT;
  *out = c;
  return CUDA_SUCCESS;
}

// CU_EXEC_AFFINITY_TYPE_SM_COUNT: the number of SMs the context asks for, rounded to
// what the device has (a later parameter of the same type overrides an earlier one).
CUresult read_affinity(const CUexecAffinityParam* params, int count, unsigned* sm_count) {
  if (count < 0 || (count > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < count; ++i) {
    if (params[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    const unsigned asked = params[i].param.smCount.val;
    if (asked == 0) return CUDA_ERROR_INVALID_VALUE;
    const unsigned device_sms = static_cast<unsigned>(Connection::instance().device().sm_count);
    *sm_count = device_sms > 0 && asked > device_sms ? device_sms : asked;
  }
  return CUDA_SUCCESS;
}

CUresult create(CUcontext* pctx, const CUexecAffinityParam* affinity, int affinity_count, unsigned flags,
                CUdevice dev) {
  if (pctx == nullptr || !valid_context_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  unsigned sm_count = 0;
  if (CUresult rc = read_affinity(affinity, affinity_count, &sm_count); rc != CUDA_SUCCESS) return rc;
  auto* c = new ContextObject(false, g_next_context_id.fetch_add(1, std::memory_order_relaxed));
  c->device = dev;
  c->flags.store(flags, std::memory_order_relaxed);
  c->sm_count_affinity = sm_count;
  {
    std::lock_guard<std::mutex> lock(g_created_mutex);
    g_created.insert(c);
  }
  g_any_created.store(true, std::memory_order_release);
  // The new context supplants the current one, which a later cuCtxPopCurrent restores.
  t_thread_chose_context = true;
  t_context_stack.push_back(c);
  *pctx = handle(c);
  cupti::context_created(handle(c));
  return CUDA_SUCCESS;
}

// Releases what `c` owns through the entry points that destroy each kind, after the
// job's work is done (CUDA destroys a context's streams with their work finished).
CUresult release_resources(ContextObject* c) {
  std::set<std::pair<ContextResource, uint64_t>> owned;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    owned.swap(c->resources);
  }
  CUresult first_error = Connection::instance().request_done(protocol::CtxSynchronizeMsg{});
  auto keep = [&](CUresult rc) {
    if (first_error == CUDA_SUCCESS) first_error = rc;
  };
  // Link states and modules first: nothing of the job runs their code any more.
  for (auto kind : {ContextResource::kLinkState, ContextResource::kModule, ContextResource::kEvent,
                    ContextResource::kStream, ContextResource::kDeviceMemory, ContextResource::kHostMemory}) {
    for (const auto& [k, h] : owned) {
      if (k != kind) continue;
      switch (k) {
        case ContextResource::kLinkState: keep(tally_entry_cuLinkDestroy_v5050(reinterpret_cast<CUlinkState>(h))); break;
        case ContextResource::kModule: keep(tally_entry_cuModuleUnload_v2000(reinterpret_cast<CUmodule>(h))); break;
        case ContextResource::kEvent: keep(tally_entry_cuEventDestroy_v4000(reinterpret_cast<CUevent>(h))); break;
        case ContextResource::kStream: keep(tally_entry_cuStreamDestroy_v4000(reinterpret_cast<CUstream>(h))); break;
        case ContextResource::kDeviceMemory: keep(tally_entry_cuMemFree_v3020(static_cast<CUdeviceptr>(h))); break;
        case ContextResource::kHostMemory: keep(tally_entry_cuMemFreeHost_v2000(reinterpret_cast<void*>(h))); break;
      }
    }
  }
  return first_error;
}

}  // namespace

CUresult check_device(CUdevice dev) {
  const Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  return dev >= 0 && dev < c.device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

ContextObject* current_context() { return top(); }

ContextObject* new_green_context(CUdevice dev, GreenContextObject* green) {
  auto* c = new ContextObject(false, g_next_context_id.fetch_add(1, std::memory_order_relaxed));
  c->device = dev;
  c->green = green;
  {
    std::lock_guard<std::mutex> lock(g_created_mutex);
    g_created.insert(c);
  }
  g_any_created.store(true, std::memory_order_release);
  return c;
}

bool valid_context_flags(unsigned flags) {
  const unsigned sched = flags & CU_CTX_SCHED_MASK;
  return (flags & ~unsigned{CU_CTX_FLAGS_MASK}) == 0 &&
         (sched == 0 || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD || sched == CU_CTX_SCHED_BLOCKING_SYNC);
}

std::atomic<size_t>* ContextLimits::slot(CUlimit limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: return &stack_size;
    case CU_LIMIT_PRINTF_FIFO_SIZE: return &printf_fifo_size;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return &malloc_heap_size;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return &dev_runtime_sync_depth;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return &dev_runtime_pending_launch_count;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: return &max_l2_fetch_granularity;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE: return &persisting_l2_cache_size;
    case CU_LIMIT_SHMEM_SIZE: return &shmem_size;
    case CU_LIMIT_CIG_ENABLED: return &cig_enabled;
    case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED: return &cig_shmem_fallback_enabled;
    default: return nullptr;
  }
}

CUresult primary_context(CUdevice dev, CUcontext* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  const bool was_active = g_primary.active.exchange(true, std::memory_order_relaxed);
  *out = handle(&g_primary);
  if (!was_active) cupti::context_created(handle(&g_primary));
  return CUDA_SUCCESS;
}

CUresult runtime_primary_context(CUdevice dev, CUcontext* out) {
  CUresult rc = primary_context(dev, out);
  if (rc == CUDA_SUCCESS) g_runtime_uses_primary.store(true, std::memory_order_relaxed);
  return rc;
}

CUcontext active_primary_context() {
  const bool active = g_primary.active.load(std::memory_order_relaxed) ||
                      g_primary.retains.load(std::memory_order_relaxed) > 0;
  return active ? handle(&g_primary) : nullptr;
}

CUresult context_object(CUcontext ctx, ContextObject** out) {
  if (ctx != nullptr) return live_context(ctx, out);
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  ContextObject* c = top_or_runtime_primary();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->live()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

CUresult context_device(CUcontext ctx, CUdevice* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = context_object(ctx, &c); rc != CUDA_SUCCESS) return rc;
  *out = c->device;
  return CUDA_SUCCESS;
}

CUresult check_current_context_for_new_resource() {
  ContextObject* c = top_or_runtime_primary();
  return c != nullptr && !c->live() ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}

void note_context_resource(ContextResource kind, uint64_t h) {
  ContextObject* c = top();
  if (c == nullptr || c->primary || c->green != nullptr) return;
  std::lock_guard<std::mutex> lock(c->mutex);
  c->resources.emplace(kind, h);
}

void forget_context_resource(ContextResource kind, uint64_t h) {
  // Released from any thread, whatever is current there: look in every created context.
  if (!g_any_created.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_created_mutex);
  for (ContextObject* c : g_created) {
    std::lock_guard<std::mutex> owner(c->mutex);
    if (c->resources.erase({kind, h}) != 0) return;
  }
}

CUcontext resource_context(ContextResource kind, uint64_t h) {
  if (g_any_created.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_created_mutex);
    for (ContextObject* c : g_created) {
      std::lock_guard<std::mutex> owner(c->mutex);
      if (c->resources.count({kind, h}) != 0) return handle(c);
    }
  }
  return handle(&g_primary);
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuCtxCreate_v3020)(CUcontext* pctx, unsigned int flags, CUdevice_v1 dev) {
  return create(pctx, nullptr, 0, flags, dev);
}

TALLY_ENTRY(cuCtxCreate_v11040)(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                                CUdevice_v1 dev) {
  return create(pctx, paramsArray, numParams, flags, dev);
}

TALLY_ENTRY(cuCtxCreate_v12050)(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                                CUdevice dev) {
  if (ctxCreateParams == nullptr) return create(pctx, nullptr, 0, flags, dev);
  // CUDA-in-Graphics shares SMs with a graphics API's (D3D12) command queue; tally's
  // jobs have no graphics queue to share with. SM partitions of a job's own are green
  // contexts (cuGreenCtxCreate), which tally supports.
  if (ctxCreateParams->cigParams != nullptr) {
    log_error("cuCtxCreate: contexts in CUDA-in-Graphics mode (cigParams) are not supported by tally; "
              "create the context without cigParams (for a partition of SMs, use green contexts)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return create(pctx, ctxCreateParams->execAffinityParams, ctxCreateParams->numExecAffinityParams, flags, dev);
}

TALLY_ENTRY(cuCtxDestroy_v4000)(CUcontext ctx) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = as_context(ctx);
  // The primary context is released with cuDevicePrimaryCtxRelease, never destroyed.
  if (c == &g_primary || !known(c)) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->green != nullptr) {
    log_error("cuCtxDestroy: this context stands for a green context; destroy it with cuGreenCtxDestroy");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  cupti::context_destroy_starting(ctx);
  ContextState expected = ContextState::kLive;
  if (!c->state.compare_exchange_strong(expected, ContextState::kDestroyed)) return CUDA_ERROR_INVALID_CONTEXT;
  // Popped if current here; other threads keep it current and get CONTEXT_IS_DESTROYED.
  if (top() == c) t_context_stack.pop_back();
  return release_resources(c);
}

TALLY_ENTRY(cuDevicePrimaryCtxRetain_v7000)(CUcontext* pctx, CUdevice_v1 dev) {
  CUresult rc = primary_context(dev, pctx);
  if (rc == CUDA_SUCCESS) g_primary.retains.fetch_add(1, std::memory_order_relaxed);
  return rc;
}

TALLY_ENTRY(cuDevicePrimaryCtxRelease_v11000)(CUdevice_v1 dev) {
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  int retains = g_primary.retains.load(std::memory_order_relaxed);
  do {
    if (retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  } while (!g_primary.retains.compare_exchange_weak(retains, retains - 1, std::memory_order_relaxed));
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDevicePrimaryCtxRelease_v7000)(CUdevice_v1 dev) { return tally_entry_cuDevicePrimaryCtxRelease_v11000(dev); }

TALLY_ENTRY(cuDevicePrimaryCtxGetState_v7000)(CUdevice_v1 dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  *flags = g_primary.flags.load(std::memory_order_relaxed);
  *active = active_primary_context() != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDevicePrimaryCtxSetFlags_v11000)(CUdevice_v1 dev, unsigned int flags) {
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  if (!valid_context_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  // Scheduling and resource flags only steer the host thread's waiting in CUDA; the
  // server does the waiting here, so they are recorded and reported back.
  g_primary.flags.store(flags, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDevicePrimaryCtxSetFlags_v7000)(CUdevice_v1 dev, unsigned int flags) {
  return tally_entry_cuDevicePrimaryCtxSetFlags_v11000(dev, flags);
}

TALLY_ENTRY(cuCtxGetCurrent_v4000)(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  *pctx = handle(top());
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxSetCurrent_v4000)(CUcontext ctx) {
  ContextObject* c = nullptr;
  if (ctx != nullptr) {
    if (CUresult rc = live_context(ctx, &c); rc != CUDA_SUCCESS) return rc;
  } else if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) {
    return rc;
  }
  // Replaces the top of the stack; NULL unbinds it.
  t_thread_chose_context = true;
  if (!t_context_stack.empty()) t_context_stack.pop_back();
  if (c != nullptr) t_context_stack.push_back(c);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxPushCurrent_v4000)(CUcontext ctx) {
  ContextObject* c = nullptr;
  if (CUresult rc = live_context(ctx, &c); rc != CUDA_SUCCESS) return rc;
  t_thread_chose_context = true;
  t_context_stack.push_back(c);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxPopCurrent_v4000)(CUcontext* pctx) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (t_context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  t_thread_chose_context = true;
  if (pctx != nullptr) *pctx = handle(t_context_stack.back());
  t_context_stack.pop_back();
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetDevice_v2000)(CUdevice_v1* device) { return context_device(nullptr, device); }

TALLY_ENTRY(cuCtxGetDevice_v13000)(CUdevice* device, CUcontext ctx) { return context_device(ctx, device); }

TALLY_ENTRY(cuCtxGetExecAffinity_v11040)(CUexecAffinityParam* pExecAffinity, CUexecAffinityType type) {
  if (pExecAffinity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = context_object(nullptr, &c); rc != CUDA_SUCCESS) return rc;
  if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  pExecAffinity->type = type;
  unsigned sms = static_cast<unsigned>(Connection::instance().device().sm_count);
  if (c->green != nullptr) sms = c->green->sm_count;  // a green context's SMs
  pExecAffinity->param.smCount.val = c->sm_count_affinity != 0 ? c->sm_count_affinity : sms;
  return CUDA_SUCCESS;
}

// An SM-count affinity is accepted and reported back (cuCtxGetExecAffinity); the
// job's share of the device is tally's to set (tally-run), so kernels are not
// confined by it.
TALLY_ENTRY(cuDeviceGetExecAffinitySupport_v11040)(int* pi, CUexecAffinityType type, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  *pi = type == CU_EXEC_AFFINITY_TYPE_SM_COUNT ? 1 : 0;
  return CUDA_SUCCESS;
}
