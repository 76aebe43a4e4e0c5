// cuMemPoolSetAttribute/GetAttribute and cuMemPoolSetAccess/GetAccess. A pool holds
// no freed memory (memory_pools.cpp): its reserved memory equals its used memory,
// and the release threshold and reuse flags are kept and read back. A value the
// driver refuses is refused with its code and the reason logged.
#include <mutex>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "memory/pool_objects.h"

using namespace tally::client;

TALLY_ENTRY(cuMemPoolSetAttribute_v11020)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  std::unique_lock<std::mutex> lock;
  MemoryPool* object = lock_pool(pool, "cuMemPoolSetAttribute", &lock);
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      object->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      object->reuse_follow_event = *static_cast<int*>(value) != 0;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      object->reuse_opportunistic = *static_cast<int*>(value) != 0;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      object->reuse_internal = *static_cast<int*>(value) != 0;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      // High-water marks can only be reset, to the current amount.
      if (*static_cast<cuuint64_t*>(value) != 0) {
        log_error("cuMemPoolSetAttribute: a high-water mark (attribute %d) can only be reset with 0, not set to "
                  "%llu (CUDA_ERROR_INVALID_VALUE)", static_cast<int>(attr),
                  static_cast<unsigned long long>(*static_cast<cuuint64_t*>(value)));
        return CUDA_ERROR_INVALID_VALUE;
      }
      object->used_high = object->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      log_error("cuMemPoolSetAttribute: attribute %d (the memory reserved or in use now) is read-only "
                "(CUDA_ERROR_INVALID_VALUE)", static_cast<int>(attr));
      return CUDA_ERROR_INVALID_VALUE;
    default:
      log_error("cuMemPoolSetAttribute: %d is not a memory pool attribute (CUDA_ERROR_INVALID_VALUE)",
                static_cast<int>(attr));
      return CUDA_ERROR_INVALID_VALUE;
  }
}

TALLY_ENTRY(cuMemPoolGetAttribute_v11020)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  std::unique_lock<std::mutex> lock;
  MemoryPool* object = lock_pool(pool, "cuMemPoolGetAttribute", &lock);
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = object->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *static_cast<int*>(value) = object->reuse_follow_event;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *static_cast<int*>(value) = object->reuse_opportunistic;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = object->reuse_internal;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = object->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = object->used_high;
      return CUDA_SUCCESS;
    default:
      log_error("cuMemPoolGetAttribute: %d is not a memory pool attribute (CUDA_ERROR_INVALID_VALUE)",
                static_cast<int>(attr));
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// The pool's own device always reads and writes it; there is no other device.
TALLY_ENTRY(cuMemPoolSetAccess_v11020)(CUmemoryPool pool, const CUmemAccessDesc_v1* map, size_t count) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  std::unique_lock<std::mutex> lock;
  MemoryPool* object = lock_pool(pool, "cuMemPoolSetAccess", &lock);
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (count > 0 && map == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool on_device = !object->managed() && !object->host();
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      log_error("cuMemPoolSetAccess: entry %zu: only device access can be set (CUDA_ERROR_INVALID_VALUE)", i);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (map[i].location.id != 0) {
      log_error("cuMemPoolSetAccess: entry %zu: there is no device %d (CUDA_ERROR_INVALID_DEVICE)", i,
                map[i].location.id);
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if (on_device && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      log_error("cuMemPoolSetAccess: entry %zu: the pool's own device keeps read-write access "
                "(CUDA_ERROR_INVALID_VALUE)", i);
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  // Kept and read back; tally's device reaches managed and pinned host memory whatever it says.
  for (size_t i = 0; i < count && !on_device; ++i) object->device_access = map[i].flags;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemPoolGetAccess_v11020)(CUmemAccess_flags* flags, CUmemoryPool memPool, CUmemLocation_v1* location) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  std::unique_lock<std::mutex> lock;
  MemoryPool* object = lock_pool(memPool, "cuMemPoolGetAccess", &lock);
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (location->id != 0) return CUDA_ERROR_INVALID_DEVICE;
  *flags = object->device_access;
  return CUDA_SUCCESS;
}
