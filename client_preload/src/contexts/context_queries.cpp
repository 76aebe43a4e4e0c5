// Context-wide calls: synchronization (forwarded) and each context's settings,
// which the job's contexts keep in the client (the server runs every job in one
// session and sizes stacks itself); the device heap's size also goes to the
// server, which keeps one heap for the job (all its contexts share it).
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"

namespace tally::client {
namespace {

CUresult current(ContextObject** out) { return context_object(nullptr, out); }

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

// One session serves all of the job's contexts, so synchronizing one waits for the
// job's work in all of them (a superset of what CUDA waits for).
TALLY_ENTRY(cuCtxSynchronize_v2000)(void) {
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  return Connection::instance().request_done(protocol::CtxSynchronizeMsg{});
}

TALLY_ENTRY(cuCtxSynchronize_v13000)(CUcontext ctx) {
  ContextObject* c = nullptr;
  if (CUresult rc = context_object(ctx, &c); rc != CUDA_SUCCESS) return rc;
  return Connection::instance().request_done(protocol::CtxSynchronizeMsg{});
}

TALLY_ENTRY(cuCtxSetLimit_v3010)(CUlimit limit, size_t value) {
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  std::atomic<size_t>* slot = c->limits.slot(limit);
  if (slot == nullptr) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  // The device heap (kernels' malloc/free) is the server's: it allocates it, counts it
  // against the job's quota, and refuses a new size once a kernel has used it.
  if (limit == CU_LIMIT_MALLOC_HEAP_SIZE) {
    protocol::CtxSetLimitMsg msg{};
    msg.limit = static_cast<uint32_t>(limit);
    msg.value = value;
    if (CUresult rc = Connection::instance().request_done(msg); rc != CUDA_SUCCESS) return rc;
  }
  slot->store(value, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetLimit_v3010)(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  std::atomic<size_t>* slot = c->limits.slot(limit);
  if (slot == nullptr) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  *pvalue = slot->load(std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetCacheConfig_v3020)(CUfunc_cache* pconfig) {
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  *pconfig = static_cast<CUfunc_cache>(c->cache_config.load());
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxSetCacheConfig_v3020)(CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  c->cache_config.store(config);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetSharedMemConfig_v4020)(CUsharedconfig* pConfig) {
  if (pConfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxSetSharedMemConfig_v4020)(CUsharedconfig config) {
  (void)config;  // bank size is fixed on current GPUs; the driver ignores it too
  ContextObject* c = nullptr;
  return current(&c);
}

TALLY_ENTRY(cuCtxGetApiVersion_v3020)(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = context_object(ctx, &c); rc != CUDA_SUCCESS) return rc;
  *version = 3020;  // what the driver reports for contexts made by the current API
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetFlags_v7000)(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  *flags = c->flags.load(std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

// Scheduling flags only steer how the host thread waits in CUDA; the server waits
// here, so they are kept and reported back.
TALLY_ENTRY(cuCtxSetFlags_v12010)(unsigned int flags) {
  if (!valid_context_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = current(&c); rc != CUDA_SUCCESS) return rc;
  c->flags.store(flags, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetId_v12000)(CUcontext ctx, unsigned long long* ctxId) {
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ContextObject* c = nullptr;
  if (CUresult rc = context_object(ctx, &c); rc != CUDA_SUCCESS) return rc;
  *ctxId = c->id;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxResetPersistingL2Cache_v11000)(void) {
  ContextObject* c = nullptr;
  return current(&c);
}

// cudaDeviceReset lands here. The job's work is finished first, as the driver
// does, and a context fault the job hit is cleared (connection.h); the job keeps
// its allocations and handles (the server frees everything when the job ends),
// and cudart registers its modules again on next use.
TALLY_ENTRY(cuDevicePrimaryCtxReset_v11000)(CUdevice_v1 dev) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  return Connection::instance().reset_context();
}
TALLY_ENTRY(cuDevicePrimaryCtxReset_v7000)(CUdevice_v1 dev) { return tally_entry_cuDevicePrimaryCtxReset_v11000(dev); }

// One device serves the job: it has no peers.
TALLY_ENTRY(cuDeviceCanAccessPeer_v4000)(int* canAccessPeer, CUdevice_v1 dev, CUdevice_v1 peerDev) {
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0 || peerDev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = 0;
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuDeviceGetP2PAttribute_v8000)(int* value, CUdevice_P2PAttribute attrib, CUdevice_v1 srcDevice,
                                           CUdevice_v1 dstDevice) {
  (void)attrib;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  // The driver refuses a device paired with itself, and there is no other one.
  (void)srcDevice, (void)dstDevice;
  return CUDA_ERROR_INVALID_DEVICE;
}
