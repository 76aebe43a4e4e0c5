// Context-wide calls: synchronization (forwarded) and the context's settings,
// which the job's contexts keep in the client (the server runs every job in its
// own context and sizes stacks and heaps itself).
#include <atomic>

#include "connection.h"
#include "contexts.h"
#include "entry_point.h"

namespace tally::client {
namespace {

// cuCtxGetLimit's answers: CUDA's defaults until the job sets them.
struct Limits {
  std::atomic<size_t> stack_size{1024};
  std::atomic<size_t> printf_fifo_size{1 << 20};
  std::atomic<size_t> malloc_heap_size{8 << 20};
  std::atomic<size_t> dev_runtime_sync_depth{2};
  std::atomic<size_t> dev_runtime_pending_launch_count{2048};
  std::atomic<size_t> max_l2_fetch_granularity{64};
  std::atomic<size_t> persisting_l2_cache_size{0};
  std::atomic<size_t> shmem_size{0};
  std::atomic<size_t> cig_enabled{0};
  std::atomic<size_t> cig_shmem_fallback_enabled{0};
} g_limits;

std::atomic<size_t>* limit_slot(CUlimit limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: return &g_limits.stack_size;
    case CU_LIMIT_PRINTF_FIFO_SIZE: return &g_limits.printf_fifo_size;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return &g_limits.malloc_heap_size;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return &g_limits.dev_runtime_sync_depth;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return &g_limits.dev_runtime_pending_launch_count;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: return &g_limits.max_l2_fetch_granularity;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE: return &g_limits.persisting_l2_cache_size;
    case CU_LIMIT_SHMEM_SIZE: return &g_limits.shmem_size;
    case CU_LIMIT_CIG_ENABLED: return &g_limits.cig_enabled;
    case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED: return &g_limits.cig_shmem_fallback_enabled;
    default: return nullptr;
  }
}

std::atomic<int> g_cache_config{CU_FUNC_CACHE_PREFER_NONE};

CUresult current_context_usable() {
  CUdevice dev = 0;
  return context_device(nullptr, &dev);
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuCtxSynchronize_v2000)(void) {
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  return Connection::instance().request_done(protocol::CtxSynchronizeMsg{});
}

TALLY_ENTRY(cuCtxSynchronize_v13000)(CUcontext ctx) {
  CUdevice dev = 0;
  if (CUresult rc = context_device(ctx, &dev); rc != CUDA_SUCCESS) return rc;
  return Connection::instance().request_done(protocol::CtxSynchronizeMsg{});
}

TALLY_ENTRY(cuCtxSetLimit_v3010)(CUlimit limit, size_t value) {
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  std::atomic<size_t>* slot = limit_slot(limit);
  if (slot == nullptr) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  slot->store(value, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetLimit_v3010)(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  std::atomic<size_t>* slot = limit_slot(limit);
  if (slot == nullptr) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  *pvalue = slot->load(std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetCacheConfig_v3020)(CUfunc_cache* pconfig) {
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  *pconfig = static_cast<CUfunc_cache>(g_cache_config.load());
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxSetCacheConfig_v3020)(CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  g_cache_config.store(config);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetSharedMemConfig_v4020)(CUsharedconfig* pConfig) {
  if (pConfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxSetSharedMemConfig_v4020)(CUsharedconfig config) {
  (void)config;  // bank size is fixed on current GPUs; the driver ignores it too
  return current_context_usable();
}

TALLY_ENTRY(cuCtxGetApiVersion_v3020)(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev = 0;
  if (CUresult rc = context_device(ctx, &dev); rc != CUDA_SUCCESS) return rc;
  *version = 3020;  // what the driver reports for contexts made by the current API
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetFlags_v7000)(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = current_context_usable(); rc != CUDA_SUCCESS) return rc;
  int active = 0;
  return tally_entry_cuDevicePrimaryCtxGetState_v7000(0, flags, &active);
}

TALLY_ENTRY(cuCtxGetId_v12000)(CUcontext ctx, unsigned long long* ctxId) {
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev = 0;
  if (CUresult rc = context_device(ctx, &dev); rc != CUDA_SUCCESS) return rc;
  *ctxId = 1;  // the job has one context: the primary one
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxResetPersistingL2Cache_v11000)(void) { return current_context_usable(); }

// cudaDeviceReset lands here. The job's work is finished first, as the driver
// does; the job keeps its allocations and handles (the server frees everything
// when the job ends), and cudart registers its modules again on next use.
TALLY_ENTRY(cuDevicePrimaryCtxReset_v11000)(CUdevice_v1 dev) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  return Connection::instance().request_done(protocol::CtxSynchronizeMsg{});
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
