// The stream-ordered allocator (cuMemAllocAsync, cuMemAllocFromPoolAsync,
// cuMemFreeAsync) and its memory pools: the device's default pool, pools the job
// creates (cuMemPoolCreate), and the device's current pool (cuDeviceSetMemPool),
// which cuMemAllocAsync allocates from; managed pools (CUDA 13: allocType
// CU_MEM_ALLOCATION_TYPE_MANAGED), whose allocations are managed memory
// (managed_memory.cpp); and pinned host memory pools (location HOST or HOST_NUMA),
// whose allocations are pinned host memory the device reaches at the same address
// (host_memory.cpp, as cuMemHostAlloc's). Managed and host memory each have a default
// and a current pool of their own (cuMemGetDefaultMemPool / cuMemGetMemPool /
// cuMemSetMemPool with that type or location).
//
// A pool is the client's bookkeeping over ordinary allocations (a device pool's: device
// memory; a managed pool's: managed memory; a host pool's: pinned host memory): each
// device allocation is a MemAlloc the server charges to the job's quota and to the high-priority
// reserve, so suspension and migration carry it like any other allocation, and a
// free gives the memory back to the server at once. A pool therefore never holds
// memory back from other jobs sharing the device: what it has reserved is what is
// in use, cuMemPoolTrimTo has nothing to release, and the release threshold and
// reuse policies are kept and read back but change nothing. A pool's maxSize is
// enforced here. Allocation is immediate, which stream order allows.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/capture.h"
#include "graphs/memory_nodes.h"
#include "logging/log.h"
#include "generated/entry_points.h"
#include "memory/device_memory.h"
#include "memory/managed_memory.h"
#include "memory/memory_pools.h"
#include "memory/pool_objects.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

MemoryPool default_pool_of(CUmemAllocationType type, CUmemLocationType where) {
  MemoryPool pool;
  pool.props.allocType = type;
  pool.props.location = {where, 0};
  return pool;
}

MemoryPool g_default_pool;
MemoryPool g_default_managed_pool = default_pool_of(CU_MEM_ALLOCATION_TYPE_MANAGED, CU_MEM_LOCATION_TYPE_NONE);
MemoryPool g_default_host_pool = default_pool_of(CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_HOST);
std::mutex g_mutex;                                        // guards everything below and every pool's counts
// live pools: a handle is valid iff it is here
std::unordered_set<MemoryPool*> g_pools{&g_default_pool, &g_default_managed_pool, &g_default_host_pool};
std::unordered_map<CUdeviceptr, MemoryPool*> g_pool_of;    // allocation -> the pool it came from
MemoryPool* g_current = &g_default_pool;                   // cuDeviceSetMemPool's
MemoryPool* g_current_managed = &g_default_managed_pool;   // cuMemSetMemPool's for managed memory
MemoryPool* g_current_host = &g_default_host_pool;         // cuMemSetMemPool's for pinned host memory

bool is_default(const MemoryPool* pool) {
  return pool == &g_default_pool || pool == &g_default_managed_pool || pool == &g_default_host_pool;
}
bool host_location(const CUmemLocation& location) {
  return location.type == CU_MEM_LOCATION_TYPE_HOST || location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}
// The default or current pool slot a (location, type) pair names, as cuMemGetMemPool reads it.
MemoryPool* default_for(const CUmemLocation& location, CUmemAllocationType type) {
  if (type == CU_MEM_ALLOCATION_TYPE_MANAGED) return &g_default_managed_pool;
  return host_location(location) ? &g_default_host_pool : &g_default_pool;
}
MemoryPool** current_for(const CUmemLocation& location, CUmemAllocationType type) {
  if (type == CU_MEM_ALLOCATION_TYPE_MANAGED) return &g_current_managed;
  return host_location(location) ? &g_current_host : &g_current;
}

CUmemoryPool handle(MemoryPool* pool) { return reinterpret_cast<CUmemoryPool>(pool); }

// The live pool behind `pool`, or nullptr with the reason logged. Call with g_mutex held.
MemoryPool* find_locked(CUmemoryPool pool, const char* call) {
  auto* object = reinterpret_cast<MemoryPool*>(pool);
  if (g_pools.count(object) != 0) return object;
  log_error("%s: %p is not a memory pool of this process (destroyed, or never created) "
            "(CUDA_ERROR_INVALID_VALUE)", call, static_cast<void*>(pool));
  return nullptr;
}

CUresult check_pool(CUmemoryPool pool, const char* call) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_mutex);
  return find_locked(pool, call) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// A destroyed pool lives on until its last allocation is freed (as the driver's does).
void release_if_done_locked(MemoryPool* pool) {
  if (!is_default(pool) && pool->destroyed && pool->used == 0) delete pool;
}

// Whether `pool` is a live managed or host pool, whose allocations are no device memory
// (a pool that is not live is refused later, with its reason).
bool not_device_memory(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto* object = reinterpret_cast<MemoryPool*>(pool);
  return g_pools.count(object) != 0 && (object->managed() || object->host());
}

CUresult allocate_from(CUmemoryPool pool, CUdeviceptr* dptr, size_t bytes, CUstream stream, bool per_thread,
                       const char* call) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  if (pool != nullptr && not_device_memory(pool)) {
    // Graph memory nodes allocate device memory only (their poolProps say so).
    if (CUresult rc; refused_while_capturing(id, &rc)) {
      log_error("%s: a managed or host pool's allocation cannot be captured into a graph (graph memory nodes "
                "allocate device memory) (CUresult %d)", call, static_cast<int>(rc));
      return rc;
    }
  } else if (CUresult rc; capture_graph_alloc(id, bytes, pool, dptr, &rc)) {
    // In a stream capture the allocation becomes a memory-allocation node (memory_nodes.h).
    return rc;
  }
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  MemoryPool* object = nullptr;
  {
    // The bytes are counted before the request, so concurrent allocations cannot
    // pass the pool's maxSize together.
    std::lock_guard<std::mutex> lock(g_mutex);
    object = pool == nullptr ? g_current : find_locked(pool, call);
    if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const size_t max = object->props.maxSize;
    if (max != 0 && (bytes > max || object->used > max - bytes)) {
      log_error("%s: %zu bytes would take the pool past its maxSize of %zu bytes (%llu in use) "
                "(CUDA_ERROR_OUT_OF_MEMORY)", call, bytes, max, static_cast<unsigned long long>(object->used));
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    object->used += bytes;
  }
  CUresult rc = CUDA_SUCCESS;
  if (object->managed()) {
    rc = allocate_managed(dptr, bytes, CU_MEM_ATTACH_GLOBAL);
  } else if (object->host()) {
    void* host = nullptr;   // pinned, and the device reaches it at the same address
    rc = tally_entry_cuMemHostAlloc_v2020(&host, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    *dptr = reinterpret_cast<CUdeviceptr>(host);
  } else {
    rc = allocate_device_memory(dptr, bytes);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (rc != CUDA_SUCCESS) {
    object->used -= bytes;
    release_if_done_locked(object);
    return rc;
  }
  object->sizes[*dptr] = bytes;
  object->used_high = std::max(object->used_high, object->used);
  g_pool_of[*dptr] = object;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr dptr, CUstream stream, bool per_thread) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc; close_if_imported_pool_pointer(dptr, &rc)) return rc;
  if (CUresult rc; free_if_host_pool_pointer(dptr, true, stream, per_thread, &rc)) return rc;
  protocol::MemFreeAsyncMsg m{dptr, 0};
  if (CUresult rc = stream_id(stream, per_thread, &m.stream); rc != CUDA_SUCCESS) return rc;
  // Graph memory: a free node in a capture, else marked freed (its graphs keep the memory).
  if (CUresult rc; capture_graph_free(m.stream, dptr, &rc) || free_graph_allocation(dptr, &rc)) return rc;
  if (CUresult rc; refused_while_capturing(m.stream, &rc)) return rc;
  CUresult rc = Connection::instance().send(m);
  if (rc == CUDA_SUCCESS) forget_device_memory(dptr);   // the server's view of managed memory lives on until freed
  return rc;
}

// The one device is device 0, and the host one NUMA node: a device pool lives on device 0,
// a host pool on the host (any NUMA id names it). A managed pool's location is only its
// memory's preferred place, which changes nothing where nothing migrates
// (managed_memory.cpp): none, the device, or the host.
CUresult check_location(const CUmemLocation* location, CUmemAllocationType type, const char* call) {
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_MEM_ALLOCATION_TYPE_MANAGED) {
    switch (location->type) {
      case CU_MEM_LOCATION_TYPE_DEVICE:
        if (location->id != 0) return CUDA_ERROR_INVALID_DEVICE;
        [[fallthrough]];
      case CU_MEM_LOCATION_TYPE_NONE:
      case CU_MEM_LOCATION_TYPE_HOST:
      case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return Connection::instance().usable();
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (host_location(*location)) return Connection::instance().usable();   // the host's one NUMA node is all
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    log_error("%s: location type %d is none of device, host, host NUMA node (CUDA_ERROR_INVALID_VALUE)", call,
              static_cast<int>(location->type));
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (location->id != 0) return CUDA_ERROR_INVALID_DEVICE;
  return Connection::instance().usable();
}

}  // namespace

CUmemoryPool pool_of(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_pool_of.find(dptr);
  return it == g_pool_of.end() ? nullptr : handle(it->second);
}

void pool_allocation_freed(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_pool_of.find(dptr);
  if (it == g_pool_of.end()) return;
  MemoryPool* pool = it->second;
  g_pool_of.erase(it);
  auto size = pool->sizes.find(dptr);
  if (size != pool->sizes.end()) {
    pool->used -= size->second;
    pool->sizes.erase(size);
  }
  release_if_done_locked(pool);
}

bool free_if_host_pool_pointer(CUdeviceptr dptr, bool wait, CUstream stream, bool per_thread, CUresult* rc) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_pool_of.find(dptr);
    if (it == g_pool_of.end() || !it->second->host()) return false;
  }
  if (wait) {
    // Freed in stream order: the host memory goes once the stream has reached this point.
    // (Waited for here: nothing can free pinned host memory from within the stream.)
    uint64_t id = 0;
    if (*rc = stream_id(stream, per_thread, &id); *rc != CUDA_SUCCESS) return true;
    if (refused_while_capturing(id, rc)) return true;
    *rc = per_thread ? tally_entry_cuStreamSynchronize_v7000_ptsz(stream) : tally_entry_cuStreamSynchronize_v2000(stream);
    if (*rc != CUDA_SUCCESS) return true;
  }
  *rc = tally_entry_cuMemFreeHost_v2000(reinterpret_cast<void*>(dptr));
  if (*rc == CUDA_SUCCESS) pool_allocation_freed(dptr);
  return true;
}

CUmemoryPool add_pool(MemoryPool* pool) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pools.insert(pool);
  return handle(pool);
}

MemoryPool* lock_pool(CUmemoryPool pool, const char* call, std::unique_lock<std::mutex>* lock) {
  *lock = std::unique_lock<std::mutex>(g_mutex);
  return find_locked(pool, call);
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuMemAllocAsync_v11020)(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  return allocate_from(nullptr, dptr, bytesize, hStream, false, "cuMemAllocAsync");
}
TALLY_ENTRY(cuMemAllocAsync_v11020_ptsz)(CUdeviceptr_v2* dptr, size_t bytesize, CUstream hStream) {
  return allocate_from(nullptr, dptr, bytesize, hStream, true, "cuMemAllocAsync");
}
TALLY_ENTRY(cuMemAllocFromPoolAsync_v11020)(CUdeviceptr_v2* dptr, size_t bytesize, CUmemoryPool pool,
                                            CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate_from(pool, dptr, bytesize, hStream, false, "cuMemAllocFromPoolAsync");
}
TALLY_ENTRY(cuMemAllocFromPoolAsync_v11020_ptsz)(CUdeviceptr_v2* dptr, size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate_from(pool, dptr, bytesize, hStream, true, "cuMemAllocFromPoolAsync");
}
TALLY_ENTRY(cuMemFreeAsync_v11020)(CUdeviceptr_v2 dptr, CUstream hStream) { return free_async(dptr, hStream, false); }
TALLY_ENTRY(cuMemFreeAsync_v11020_ptsz)(CUdeviceptr_v2 dptr, CUstream hStream) {
  return free_async(dptr, hStream, true);
}

TALLY_ENTRY(cuMemPoolCreate_v11020)(CUmemoryPool* pool, const CUmemPoolProps_v1* props) {
  if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_location(&props->location, props->allocType, "cuMemPoolCreate"); rc != CUDA_SUCCESS)
    return rc;
  if ((props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED || host_location(props->location)) &&
      props->handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    log_error("cuMemPoolCreate: tally shares device memory pools only, not managed or host ones (handle types 0x%x) "
              "(CUDA_ERROR_NOT_SUPPORTED)", static_cast<unsigned>(props->handleTypes));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!pool_handle_types_supported(props->handleTypes)) {
    log_error("cuMemPoolCreate: handle types 0x%x: tally shares pools between jobs by POSIX file descriptor "
              "only (CUDA_ERROR_NOT_SUPPORTED)", static_cast<unsigned>(props->handleTypes));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (props->usage != 0) {
    log_error("cuMemPoolCreate: usage 0x%x (hardware decompression) is not supported (CUDA_ERROR_NOT_SUPPORTED)",
              static_cast<unsigned>(props->usage));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto* object = new MemoryPool();
  object->props = *props;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pools.insert(object);
  *pool = handle(object);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemPoolDestroy_v11020)(CUmemoryPool pool) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_mutex);
  MemoryPool* object = find_locked(pool, "cuMemPoolDestroy");
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (is_default(object)) {
    log_error("cuMemPoolDestroy: a default pool cannot be destroyed (CUDA_ERROR_INVALID_VALUE)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  g_pools.erase(object);
  if (g_current == object) g_current = &g_default_pool;   // the device's default pool becomes current again
  if (g_current_managed == object) g_current_managed = &g_default_managed_pool;
  if (g_current_host == object) g_current_host = &g_default_host_pool;
  object->destroyed = true;
  release_if_done_locked(object);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceGetDefaultMemPool_v11020)(CUmemoryPool* pool_out, CUdevice_v1 dev) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = handle(&g_default_pool);
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuDeviceGetMemPool_v11020)(CUmemoryPool* pool, CUdevice_v1 dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(g_mutex);
  *pool = handle(g_current);
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuDeviceSetMemPool_v11020)(CUdevice_v1 dev, CUmemoryPool pool) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(g_mutex);
  MemoryPool* object = find_locked(pool, "cuDeviceSetMemPool");
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (object->imported) {
    log_error("cuDeviceSetMemPool: a pool imported from another process cannot be a device's current pool "
              "(CUDA_ERROR_INVALID_VALUE)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (object->managed() || object->host()) {
    log_error("cuDeviceSetMemPool: a managed or host pool cannot be the device's current pool, from which "
              "cuMemAllocAsync allocates device memory; cuMemSetMemPool makes it the current pool of its kind "
              "(CUDA_ERROR_INVALID_VALUE)");
    return CUDA_ERROR_INVALID_VALUE;
  }
  g_current = object;
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuMemGetDefaultMemPool_v13000)(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_location(location, type, "cuMemGetDefaultMemPool"); rc != CUDA_SUCCESS) return rc;
  *pool_out = handle(default_for(*location, type));
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuMemGetMemPool_v13000)(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_location(location, type, "cuMemGetMemPool"); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_mutex);
  *pool_out = handle(*current_for(*location, type));
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuMemSetMemPool_v13000)(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  if (CUresult rc = check_location(location, type, "cuMemSetMemPool"); rc != CUDA_SUCCESS) return rc;
  if (type != CU_MEM_ALLOCATION_TYPE_MANAGED && !host_location(*location))
    return tally_entry_cuDeviceSetMemPool_v11020(0, pool);
  std::lock_guard<std::mutex> lock(g_mutex);
  MemoryPool* object = find_locked(pool, "cuMemSetMemPool");
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool fits = type == CU_MEM_ALLOCATION_TYPE_MANAGED ? object->managed() : object->host();
  if (!fits) {
    log_error("cuMemSetMemPool: the pool is not a %s pool (CUDA_ERROR_INVALID_VALUE)",
              type == CU_MEM_ALLOCATION_TYPE_MANAGED ? "managed" : "host");
    return CUDA_ERROR_INVALID_VALUE;
  }
  *current_for(*location, type) = object;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemPoolTrimTo_v11020)(CUmemoryPool pool, size_t minBytesToKeep) {
  (void)minBytesToKeep;  // a pool holds no freed memory: there is nothing to release
  return check_pool(pool, "cuMemPoolTrimTo");
}
