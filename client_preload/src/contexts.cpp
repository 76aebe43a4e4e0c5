#include "contexts.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "connection.h"
#include "entry_point.h"

namespace tally::client {
namespace {

struct PrimaryContext {
  CUdevice device;
  std::atomic<int> retains{0};
  std::atomic<bool> active{false};
  std::atomic<unsigned> flags{0};
};

// The server serves one device; its primary context lives for the whole process.
PrimaryContext g_primary{0};

PrimaryContext* as_primary(CUcontext ctx) {
  return reinterpret_cast<PrimaryContext*>(ctx) == &g_primary ? &g_primary : nullptr;
}

CUcontext handle(PrimaryContext* p) { return reinterpret_cast<CUcontext>(p); }

// Innermost last; the top is the thread's current context.
thread_local std::vector<CUcontext> t_context_stack;

CUcontext current_context() { return t_context_stack.empty() ? nullptr : t_context_stack.back(); }

CUresult check_device(CUdevice dev) {
  const Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  return dev >= 0 && dev < c.device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult check_context(CUcontext ctx) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  return as_primary(ctx) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

CUresult primary_context(CUdevice dev, CUcontext* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  g_primary.active.store(true, std::memory_order_relaxed);
  *out = handle(&g_primary);
  return CUDA_SUCCESS;
}

CUresult context_device(CUcontext ctx, CUdevice* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = current_context();
  if (ctx == nullptr) {
    CUresult rc = Connection::instance().usable();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_CONTEXT;
  }
  if (CUresult rc = check_context(ctx); rc != CUDA_SUCCESS) return rc;
  *out = as_primary(ctx)->device;
  return CUDA_SUCCESS;
}

}  // namespace tally::client

using namespace tally::client;

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
  *active = g_primary.active.load(std::memory_order_relaxed) || g_primary.retains.load(std::memory_order_relaxed) > 0;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDevicePrimaryCtxSetFlags_v11000)(CUdevice_v1 dev, unsigned int flags) {
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
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
  *pctx = current_context();
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxSetCurrent_v4000)(CUcontext ctx) {
  if (ctx != nullptr) {
    if (CUresult rc = check_context(ctx); rc != CUDA_SUCCESS) return rc;
  } else if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) {
    return rc;
  }
  // Replaces the top of the stack; NULL unbinds it.
  if (!t_context_stack.empty()) t_context_stack.pop_back();
  if (ctx != nullptr) t_context_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxPushCurrent_v4000)(CUcontext ctx) {
  if (CUresult rc = check_context(ctx); rc != CUDA_SUCCESS) return rc;
  t_context_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxPopCurrent_v4000)(CUcontext* pctx) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (t_context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = t_context_stack.back();
  t_context_stack.pop_back();
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetDevice_v2000)(CUdevice_v1* device) { return context_device(nullptr, device); }

TALLY_ENTRY(cuCtxGetDevice_v13000)(CUdevice* device, CUcontext ctx) { return context_device(ctx, device); }
