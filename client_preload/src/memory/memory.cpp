// Device memory: allocation and freeing (forwarded: the server owns every
// allocation and enforces the job's quota), address ranges (answered from the
// client's own map), and the stream-ordered allocator's default pool, which here
// is plain device memory (allocation is immediate, which stream order allows).
#include <cstring>

#include "memory/address_map.h"
#include "graphs/capture.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "memory/host_memory.h"
#include "memory/managed_memory.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

CUresult allocate(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  protocol::MemAllocReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemAllocMsg{bytes}, protocol::MessageKind::MemAllocReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  device_ranges().add(out.dptr, bytes, DeviceRangeKind::kAllocation);
  *dptr = out.dptr;
  return CUDA_SUCCESS;
}

// After the server took a free: the job's own record of the memory goes.
void forget_range(CUdeviceptr dptr) {
  forget_context_resource(ContextResource::kDeviceMemory, dptr);
  auto found = device_ranges().remove(dptr);
  if (found && found->value == DeviceRangeKind::kManaged) forget_managed(found->start, found->size);
}

CUresult free_now(CUdeviceptr dptr) {
  // cudart frees NULL as a no-op; so does the driver.
  if (dptr == 0) return Connection::instance().usable();
  protocol::MemFreeMsg m{dptr};
  CUresult rc = Connection::instance().request_done(m);
  if (rc == CUDA_SUCCESS) forget_range(dptr);
  return rc;
}

CUresult free_async(CUdeviceptr dptr, CUstream stream, bool per_thread) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  protocol::MemFreeAsyncMsg m{dptr, 0};
  if (CUresult rc = stream_id(stream, per_thread, &m.stream); rc != CUDA_SUCCESS) return rc;
  // Memory nodes are not captured: stream-ordered allocation ends a capture.
  if (CUresult rc; refused_while_capturing(m.stream, &rc)) return rc;
  CUresult rc = Connection::instance().send(m);
  if (rc == CUDA_SUCCESS) forget_range(dptr);   // the server's view of managed memory lives on until freed
  return rc;
}

CUresult allocate_async(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool per_thread) {
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc; refused_while_capturing(id, &rc)) return rc;
  return allocate(dptr, bytes);
}

// The one memory pool of the device: its handle is this object's address.
struct DefaultPool {
  std::atomic<uint64_t> release_threshold{0};
  std::atomic<int> reuse_follow_event{1}, reuse_opportunistic{1}, reuse_internal{1};
} g_default_pool;

CUmemoryPool default_pool() { return reinterpret_cast<CUmemoryPool>(&g_default_pool); }

CUresult check_pool(CUmemoryPool pool) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  return pool == default_pool() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult check_location(const CUmemLocation* location, CUmemAllocationType type) {
  if (location == nullptr || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || location->id != 0) return CUDA_ERROR_NOT_SUPPORTED;
  return Connection::instance().usable();
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

// cuMemAlloc and cuMemAllocPitch memory belongs to the current context (stream-ordered
// allocations belong to none).
static CUresult allocate_in_context(CUdeviceptr* dptr, size_t bytes) {
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = allocate(dptr, bytes);
  if (rc == CUDA_SUCCESS) note_context_resource(ContextResource::kDeviceMemory, *dptr);
  return rc;
}

TALLY_ENTRY(cuMemAlloc_v3020)(CUdeviceptr_v2* dptr, size_t bytesize) { return allocate_in_context(dptr, bytesize); }

TALLY_ENTRY(cuMemAllocPitch_v3020)(CUdeviceptr_v2* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes) {
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  // Rows start on the device's pitch alignment, as the driver lays them out.
  size_t align = static_cast<size_t>(Connection::instance().device().attributes[CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT]);
  if (align == 0 || (align & (align - 1)) != 0) align = 512;
  const size_t pitch = (WidthInBytes + align - 1) & ~(align - 1);
  CUresult rc = allocate_in_context(dptr, pitch * Height);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

TALLY_ENTRY(cuMemFree_v3020)(CUdeviceptr_v2 dptr) { return free_now(dptr); }

TALLY_ENTRY(cuMemGetInfo_v3020)(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  protocol::MemInfoReplyMsg info{};
  if (CUresult rc = request_reply(protocol::MemGetInfoMsg{}, protocol::MessageKind::MemInfoReply, &info);
      rc != CUDA_SUCCESS)
    return rc;
  *free = info.free;
  *total = info.total;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemGetAddressRange_v3020)(CUdeviceptr_v2* pbase, size_t* psize, CUdeviceptr_v2 dptr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto found = device_ranges().find(dptr);
  if (!found) return pinned_address_range(dptr, pbase, psize);  // mapped pinned memory's device pointer
  if (pbase != nullptr) *pbase = found->start;
  if (psize != nullptr) *psize = found->size;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemAllocAsync_v11020)(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  return allocate_async(dptr, bytesize, hStream, false);
}
TALLY_ENTRY(cuMemAllocAsync_v11020_ptsz)(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  return allocate_async(dptr, bytesize, hStream, true);
}
TALLY_ENTRY(cuMemAllocFromPoolAsync_v11020)(CUdeviceptr_v2* dptr, size_t bytesize, CUmemoryPool pool,
                                            CUstream hStream) {
  if (CUresult rc = check_pool(pool); rc != CUDA_SUCCESS) return rc;
  return allocate_async(dptr, bytesize, hStream, false);
}
TALLY_ENTRY(cuMemAllocFromPoolAsync_v11020_ptsz)(CUdeviceptr_v2* dptr, size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream) {
  if (CUresult rc = check_pool(pool); rc != CUDA_SUCCESS) return rc;
  return allocate_async(dptr, bytesize, hStream, true);
}
TALLY_ENTRY(cuMemFreeAsync_v11020)(CUdeviceptr_v2 dptr, CUstream hStream) { return free_async(dptr, hStream, false); }
TALLY_ENTRY(cuMemFreeAsync_v11020_ptsz)(CUdeviceptr_v2 dptr, CUstream hStream) {
  return free_async(dptr, hStream, true);
}

TALLY_ENTRY(cuDeviceGetDefaultMemPool_v11020)(CUmemoryPool* pool_out, CUdevice_v1 dev) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = default_pool();
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuDeviceGetMemPool_v11020)(CUmemoryPool* pool, CUdevice_v1 dev) {
  return tally_entry_cuDeviceGetDefaultMemPool_v11020(pool, dev);
}
TALLY_ENTRY(cuDeviceSetMemPool_v11020)(CUdevice_v1 dev, CUmemoryPool pool) {
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  return check_pool(pool);
}
TALLY_ENTRY(cuMemGetDefaultMemPool_v13000)(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_location(location, type); rc != CUDA_SUCCESS) return rc;
  *pool_out = default_pool();
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuMemGetMemPool_v13000)(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type) {
  return tally_entry_cuMemGetDefaultMemPool_v13000(pool_out, location, type);
}
TALLY_ENTRY(cuMemSetMemPool_v13000)(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  if (CUresult rc = check_location(location, type); rc != CUDA_SUCCESS) return rc;
  return check_pool(pool);
}
TALLY_ENTRY(cuMemPoolTrimTo_v11020)(CUmemoryPool pool, size_t minBytesToKeep) {
  (void)minBytesToKeep;  // nothing is cached: freed memory goes back at once
  return check_pool(pool);
}

TALLY_ENTRY(cuMemPoolSetAttribute_v11020)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult rc = check_pool(pool); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      g_default_pool.release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      g_default_pool.reuse_follow_event = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      g_default_pool.reuse_opportunistic = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      g_default_pool.reuse_internal = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      return *static_cast<cuuint64_t*>(value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;  // reset only
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

TALLY_ENTRY(cuMemPoolGetAttribute_v11020)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult rc = check_pool(pool); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = g_default_pool.release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *static_cast<int*>(value) = g_default_pool.reuse_follow_event;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *static_cast<int*>(value) = g_default_pool.reuse_opportunistic;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = g_default_pool.reuse_internal;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = 0;  // nothing is held back in the pool
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
